#!/usr/bin/env python
"""Two runtimes of one model side by side in one process, interleaved: T(n) for n new tokens
after a 300-token context, each (runtime, n) measured once per round, median and min over the
rounds. Interleaving cancels the machine's drift, which on this shared 2-core machine is larger
than the difference between runtimes measured one after the other (bench/backend_speed.py).

    flock /tmp/specd-heavy.lock python bench/backend_ab.py target:int8 torch,ort --rounds 9
"""
import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from specd.models.loader import load_model

SIZES = (1, 2, 3, 5, 9, 17)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", help="role:quant, e.g. target:int8")
    ap.add_argument("backends", help="comma-separated runtimes, e.g. torch,ort")
    ap.add_argument("--rounds", type=int, default=9)
    args = ap.parse_args()
    torch.set_num_threads(2)
    role, quant = args.model.split(":")
    spec = "qwen2.5-coder-1.5b" if role == "target" else "qwen2.5-coder-0.5b"
    models = {b: load_model(spec, quant=quant, max_len=1024, backend=b, threads=2) for b in args.backends.split(",")}
    ids = next(iter(models.values())).tokenizer.encode(Path(json.__file__).read_text())
    for m in models.values():
        m.model.forward(torch.tensor(ids[:300]))
    times: dict[tuple[str, int], list[float]] = {(b, n): [] for b in models for n in SIZES}
    for _ in range(args.rounds):
        for n in SIZES:
            for b, m in models.items():
                t = time.perf_counter()
                m.model.forward(torch.tensor(ids[300 : 300 + n]))
                times[(b, n)].append((time.perf_counter() - t) * 1e3)
                m.model.rollback(300)
    for b in models:
        med = {n: statistics.median(times[(b, n)]) for n in SIZES}
        print(json.dumps({"model": args.model, "backend": b, "rounds": args.rounds,
                          "median_ms": {n: round(v, 1) for n, v in med.items()},
                          "min_ms": {n: round(min(times[(b, n)]), 1) for n in SIZES},
                          "t5_over_t1": round(med[5] / med[1], 2)}), flush=True)


if __name__ == "__main__":
    main()
