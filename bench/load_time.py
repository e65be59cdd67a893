#!/usr/bin/env python
"""Load time of each model of a pair, each load in a fresh process (the files in the page cache,
the process cold): ``load_model`` alone, imports excluded. Prints each run and the medians.

    flock /tmp/specd-cpu.lock python bench/load_time.py --runs 5
    flock /tmp/specd-cpu.lock python bench/load_time.py --runs 3 --draft-quant int8
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

CHILD = """
import json, sys, time
from specd.models.loader import load_model
from specd.models.memory import peak_rss_bytes, rss_bytes
spec, quant, head = sys.argv[1], sys.argv[2], int(sys.argv[3])
t0 = time.perf_counter()
m = load_model(spec, quant=quant, head_vocab=head, max_len=2048)
print(json.dumps({"load_s": time.perf_counter() - t0, "rss": rss_bytes(), "peak_rss": peak_rss_bytes()}))
"""


def main() -> int:
    from specd.engine.config import DEFAULT_DRAFT, DEFAULT_TARGET

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--target", default=DEFAULT_TARGET)
    ap.add_argument("--target-quant", default="auto")
    ap.add_argument("--draft", default=DEFAULT_DRAFT)
    ap.add_argument("--draft-quant", default="int4")
    ap.add_argument("--draft-head-vocab", type=int, default=65536)
    args = ap.parse_args()
    for role, spec, quant, head in (("target", args.target, args.target_quant, 0),
                                    ("draft", args.draft, args.draft_quant, args.draft_head_vocab)):
        rows = []
        for i in range(args.runs):
            out = subprocess.run([sys.executable, "-c", CHILD, spec, quant, str(head)], capture_output=True, text=True)
            if out.returncode != 0:
                print(out.stderr[-3000:], file=sys.stderr)
                return 1
            rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
            print(json.dumps({"role": role, "model": spec, "quant": quant, "run": i + 1, **rows[-1]}), flush=True)
        print(f"{role} {spec} ({quant}): median load {statistics.median(r['load_s'] for r in rows):.2f} s, "
              f"RSS after load {statistics.median(r['rss'] for r in rows) / 1e9:.3f} GB, "
              f"peak {statistics.median(r['peak_rss'] for r in rows) / 1e9:.3f} GB", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
