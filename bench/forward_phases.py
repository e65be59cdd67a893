#!/usr/bin/env python
"""Where one forward's time goes, by row count: the default target (or draft) as the daemon's
runtime loads it, a --context-token prompt cached, then forwards over n new tokens (each rolled
back), the n order alternating, medians of --rounds after two warm-up rounds. Per n: the wall
time and the kernels' phases (specd.models.profile: linears, attention, the rest of the layers,
the output head, the team's wait). To compare two builds, run it alternately from two checkouts,
each with its own built extension. Run it alone on the machine:

    python bench/forward_phases.py target --sizes 1,2,4,6
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from specd.app import load_draft, load_target
from specd.engine.config import EngineConfig
from specd.engine.timeline import model_phases
from specd.models.profile import PhaseClock

SHOWN = ("matmul", "attention", "layer_other", "head", "team_wait", "preempted")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("role", choices=["target", "draft"])
    ap.add_argument("--sizes", default="1,2,4,6")
    ap.add_argument("--context", type=int, default=600)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    model = (load_target if args.role == "target" else load_draft)(EngineConfig()).model  # as the daemon loads it
    print(f"{args.role}: {model.describe()}, context {args.context}, threads {torch.get_num_threads()}")
    sizes = [int(s) for s in args.sizes.split(",")]
    model.forward(torch.arange(1000, 1000 + args.context))
    runs: dict[int, list[dict[str, float]]] = {n: [] for n in sizes}
    for rnd in range(args.rounds + 2):
        for n in sizes if rnd % 2 else sizes[::-1]:
            clock = PhaseClock()
            model.profile(clock)
            t0 = time.perf_counter()
            model.forward(torch.arange(5, 5 + n))
            wall = (time.perf_counter() - t0) * 1e3
            model.profile(None)
            model.rollback(args.context)
            if rnd >= 2:
                runs[n].append({"wall": wall, **model_phases(clock.take())})
    for n in sizes:
        med = {k: statistics.median(r.get(k, 0.0) for r in runs[n]) for k in ("wall", *SHOWN)}
        print(f"n={n}: forward {med['wall']:.2f} ms  " + "  ".join(f"{k} {med[k]:.2f}" for k in SHOWN), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
