#!/usr/bin/env python
"""A model's one-token step against its bandwidth floor, paired in time: on a shared host the
memory's rate and the step's time both move within minutes (bench/RESULTS.md, session 17: the
best-of-five bandwidth read 30 to 65 GB/s within an hour), so a step timed in one minute and a
floor measured in another give a ratio that is mostly noise. Each round here measures the read
bandwidth (``specd.models.bandwidth.read_bandwidth``, best of 3 passes) and right after it the
median of 15 one-token steps after ``--context`` cached tokens (each rolled back), and takes
their ratio:

    ratio = step / (step bytes / bandwidth)      (step bytes: ``specd.models.step_bytes``)

Reported: the per-round ratios' median, p10 and p90, beside the steps and rates. The model is
loaded as the daemon loads it (``specd.app.load_target`` / ``load_draft``). Run it alone:

    python bench/step_floor.py draft --rounds 12
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from specd.app import load_draft, load_target
from specd.engine.config import EngineConfig
from specd.models.bandwidth import read_bandwidth
from specd.models.step_bytes import step_bytes


def _quantiles(values: list[float]) -> str:
    v = sorted(values)
    return f"{statistics.median(v):.3f} [p10 {v[len(v) // 10]:.3f}, p90 {v[(len(v) * 9) // 10]:.3f}]"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("role", choices=["target", "draft"])
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--steps", type=int, default=15)
    ap.add_argument("--context", type=int, default=600)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    model = (load_target if args.role == "target" else load_draft)(EngineConfig()).model  # as the daemon loads it
    nbytes = step_bytes(model.weight_bytes())
    print(f"{args.role}: {model.describe()}, {nbytes / 1e6:.0f} MB a step, context {args.context}, "
          f"threads {torch.get_num_threads()}", flush=True)
    model.forward(torch.arange(1000, 1000 + args.context))
    ratios, steps, rates = [], [], []
    for rnd in range(args.rounds):
        gbs = read_bandwidth(repeats=3).gbs
        times = []
        for s in range(args.steps):
            t0 = time.perf_counter()
            model.forward(torch.tensor([5 + s % 7]))
            times.append((time.perf_counter() - t0) * 1e3)
            model.rollback(args.context)
        step = statistics.median(times)
        floor = nbytes / (gbs * 1e9) * 1e3
        ratios.append(step / floor)
        steps.append(step)
        rates.append(gbs)
        print(f"round {rnd + 1}: {gbs:.1f} GB/s, floor {floor:.2f} ms, step {step:.2f} ms, ratio {step / floor:.3f}",
              flush=True)
    print(f"{args.role}: step/floor {_quantiles(ratios)}; step ms {_quantiles(steps)}; GB/s {_quantiles(rates)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
