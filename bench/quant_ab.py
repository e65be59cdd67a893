#!/usr/bin/env python
"""Interleaved A/B of one model's step under several quant modes, in one process.

Each mode's model is loaded once; after a shared 200-token context, forwards over n = 1 and 4 new
tokens alternate between the modes (the order flips every round, so the machine's drift touches
all alike) and each is rolled back so every step sees the same context. Medians after 2 warm-up
rounds; resident weight bytes per kind.

    python bench/quant_ab.py target int8,gguf
    python bench/quant_ab.py draft int4,gguf --head-vocab 65536
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch

from specd.models.loader import load_model
from specd.engine.config import DEFAULT_DRAFT, DEFAULT_TARGET


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("role", choices=["target", "draft"])
    ap.add_argument("quants", help="comma-separated quant modes, e.g. int8,gguf")
    ap.add_argument("--head-vocab", type=int, default=0, help="sub-vocabulary head (drafts)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=12)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    spec = DEFAULT_TARGET if args.role == "target" else DEFAULT_DRAFT
    models = {q: load_model(spec, quant=q, max_len=1024, head_vocab=args.head_vocab).model
              for q in args.quants.split(",")}
    for q, m in models.items():
        print(f"{q}: {m.describe()}, weights MB {({k: v >> 20 for k, v in m.weight_bytes().items()})}")
    context = 200
    for m in models.values():
        m.forward(torch.arange(1000, 1000 + context))
    sizes = (1, 4)
    times: dict[tuple[str, int], list[float]] = {(q, n): [] for q in models for n in sizes}
    with torch.inference_mode():
        for rnd in range(args.rounds):
            order = list(models.items()) if rnd % 2 == 0 else list(reversed(models.items()))
            for n in sizes:
                for q, m in order:
                    t0 = time.perf_counter()
                    m.forward(torch.arange(5, 5 + n))
                    times[(q, n)].append((time.perf_counter() - t0) * 1e3)
                    m.rollback(context)
    for (q, n), ts in times.items():
        ts = ts[2:]
        print(f"{q:5s} n={n}: median {statistics.median(ts):6.1f} ms  min {min(ts):6.1f}  max {max(ts):6.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
