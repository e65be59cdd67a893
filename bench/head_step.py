#!/usr/bin/env python
"""The EAGLE head's draft step in one process, as the daemon loads the shipped head: the layer
through specd's fused C decoder layer (``fused``) against the same INT8 matrices run by torch
ops (``torch``), alternating in blocks, each step one row after ``--context`` cached rows plus the
output head, as K auto times it (``specd.app.head_step``).

``--evict MB`` reads that many megabytes of other memory before every step, as the target's
forward does between two rounds in the daemon (its ~0.9 GB leave none of the head's ~46 MB in
cache): the step then pays its weights' read from memory, as it does there.

    python bench/head_step.py --blocks 6 --steps 40 [--evict 256]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from specd.app import head_step, load_heads
from specd.engine.config import EngineConfig
from specd.models.eagle import EagleHead


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--context", type=int, default=512)
    ap.add_argument("--blocks", type=int, default=6, help="alternating blocks per path")
    ap.add_argument("--steps", type=int, default=40, help="timed steps per block")
    ap.add_argument("--evict", type=int, default=0, help="MB read before each step (0: none)")
    args = ap.parse_args()
    fused = load_heads(EngineConfig())
    if not isinstance(fused, EagleHead):
        raise SystemExit("the shipped heads are not an EAGLE head")
    plain = fused.with_vocabulary(fused.head, fused.ids)
    plain.fused = False
    steps = {"fused": head_step(fused, args.context), "torch": head_step(plain, args.context)}
    if fused._layer is None or plain._layer is not None:
        raise SystemExit("the fused C layer is not available here (specd's kernels are not built)")
    other = torch.ones((args.evict << 20) // 4) if args.evict else None
    times: dict[str, list[float]] = {name: [] for name in steps}
    for name, step in steps.items():  # warm-up
        for _ in range(5):
            step()
    for b in range(args.blocks):
        for name in (list(steps) if b % 2 == 0 else list(steps)[::-1]):
            for _ in range(args.steps):
                if other is not None:
                    float(other.sum())
                t0 = time.perf_counter()
                steps[name]()
                times[name].append((time.perf_counter() - t0) * 1e3)
    out = {}
    for name, ts in times.items():
        ts = sorted(ts)
        out[name] = {"median_ms": round(statistics.median(ts), 3), "p10_ms": round(ts[len(ts) // 10], 3),
                     "p90_ms": round(ts[len(ts) * 9 // 10], 3), "steps": len(ts)}
    out["fused / torch"] = round(out["fused"]["median_ms"] / out["torch"]["median_ms"], 3)
    print(json.dumps({"context": args.context, "evict_mb": args.evict, "head_mb": round(fused.nbytes() / 1e6, 1),
                      **out}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
