#!/usr/bin/env python
"""The default draft's costs in one process, as the daemon loads it (INT4, the 65,536-token head,
a 4,096-token cache): a 400-token cold prefill (best of 2), then 60 one-token steps and 20
four-token forwards after those 400 cached tokens, each rolled back; medians. To compare two
builds, run it alternately from two checkouts (each with its own built extension), e.g. under
``flock /tmp/specd-cpu.lock``:

    python bench/draft_steps.py --label new
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from specd.app import load_draft
from specd.engine.config import EngineConfig


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--label", default="draft")
    ap.add_argument("--quant", default="int4")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    m = load_draft(EngineConfig(draft_quant=args.quant)).model  # as the daemon loads it
    ctx = 400
    prefill = []
    for _ in range(2):
        m.rollback(0)
        t0 = time.perf_counter()
        m.forward(torch.arange(1000, 1000 + ctx))
        prefill.append(time.perf_counter() - t0)

    def timed(n: int, reps: int) -> list[float]:
        out = []
        for r in range(reps):
            t0 = time.perf_counter()
            m.forward(torch.arange(5 + r % 7, 5 + r % 7 + n))
            out.append((time.perf_counter() - t0) * 1e3)
            m.rollback(ctx)
        return sorted(out)

    one, four = timed(1, 60), timed(4, 20)
    print(f"{args.label}: {m.describe()}; step median {statistics.median(one):.2f} ms (p10 {one[6]:.2f}, "
          f"p90 {one[54]:.2f}), T(4) {statistics.median(four):.2f} ms, 400-token prefill {min(prefill):.3f} s",
          flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
