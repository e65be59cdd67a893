#!/usr/bin/env python
"""One GGUF-native model's step times per SIMD level of specd's kernels, in one process: after a
shared 200-token context, forwards over n new tokens (each rolled back), interleaved between the
levels (the order flips every round), then a cold prefill of --prefill tokens per level. Medians
after a warm-up round, and per timing the process's CPU time over wall time (2.0 = both cores
busy). Run under the shared CPU lock:

    flock /tmp/specd-cpu.lock python bench/gguf_steps.py target --sizes 1,5,9 --prefill 512
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch

from specd.models.gguf_linear import SIMD_LEVELS, simd_level, simd_levels
from specd.models.loader import load_model
from specd.engine.config import DEFAULT_DRAFT, DEFAULT_TARGET


def timed(fn) -> tuple[float, float]:
    """(wall ms, CPU time / wall time) of one call."""
    c0, t0 = sum(os.times()[:2]), time.perf_counter()
    fn()
    wall = time.perf_counter() - t0
    return wall * 1e3, (sum(os.times()[:2]) - c0) / wall


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("role", choices=["target", "draft"])
    ap.add_argument("--sizes", default="1,5,9")
    ap.add_argument("--levels", default="2,3", help="SIMD levels (0 scalar, 2 AVX2, 3 AVX-512)")
    ap.add_argument("--prefill", type=int, default=512, help="cold prefill length (0: none)")
    ap.add_argument("--prefill-reps", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=8)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    spec = DEFAULT_TARGET if args.role == "target" else DEFAULT_DRAFT
    model = load_model(spec, quant="gguf", max_len=args.prefill + 256 if args.prefill else 512).model
    print(f"{args.role}: {model.describe()}, threads {torch.get_num_threads()}", flush=True)
    levels = [v for v in (int(s) for s in args.levels.split(",")) if v in simd_levels()]
    sizes = [int(s) for s in args.sizes.split(",")]
    context = 200
    model.forward(torch.arange(1000, 1000 + context))
    times: dict[tuple[int, int], list[tuple[float, float]]] = {(lv, n): [] for lv in levels for n in sizes}
    for rnd in range(args.rounds + 1):
        for lv in levels if rnd % 2 == 0 else reversed(levels):
            with simd_level(lv):
                for n in sizes:
                    t = timed(lambda: model.forward(torch.arange(5, 5 + n)))
                    model.rollback(context)
                    if rnd:
                        times[(lv, n)].append(t)
    for (lv, n), ts in times.items():
        walls = [w for w, _ in ts]
        print(f"{SIMD_LEVELS[lv]:6s} T({n}) median {statistics.median(walls):6.1f} ms  min {min(walls):6.1f}  "
              f"cpu/wall {statistics.median(c for _, c in ts):.2f}", flush=True)
    if args.prefill:
        prompt = torch.randint(100, 20000, (args.prefill,), generator=torch.Generator().manual_seed(0))
        for lv in levels:
            with simd_level(lv):
                runs = []
                for _ in range(args.prefill_reps):
                    model.rollback(0)
                    runs.append(timed(lambda: model.forward(prompt)))
                wall = statistics.median(w for w, _ in runs)
                print(f"{SIMD_LEVELS[lv]:6s} prefill {args.prefill}: {wall / 1e3:6.2f} s  "
                      f"{args.prefill / wall * 1e3:6.1f} tokens/s  cpu/wall {statistics.median(c for _, c in runs):.2f}",
                      flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
