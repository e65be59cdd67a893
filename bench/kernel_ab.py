#!/usr/bin/env python
"""Two builds of specd's kernel library in one process, taking turns on one model: the installed
build and ``--other`` (a copy of another build's ``_kernels*.so``, the same ABI). The model loads
as the daemon runs it; its decoder layers run through each build's ``q8_layer`` in turn (the
weights, the output head and the KV cache's element are shared; each build has a cache of its
own), a ``--context``-token prompt cached, then forwards over n new tokens, each rolled back.
Per n and build: medians of ``--rounds`` (after two warm-up rounds) of the forward's wall time
and the layers' phases, and the per-round ratio other ÷ installed. Both builds share one moment
of the host, which separate processes do not (session 36: the same build's one-token step took
31 ms in one process and 49 ms in the next, a minute apart). Both builds must give the same
bits: the script checks the logits of every timed forward. Run it alone on the machine:

    cp models/_kernels*.so /tmp/old.so   # before rebuilding
    python setup.py build_ext --inplace --force
    python bench/kernel_ab.py target --other /tmp/old.so --sizes 1,4 --context 900
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time

import torch

from specd.app import load_draft, load_target
from specd.engine.config import EngineConfig
from specd.engine.timeline import model_phases
from specd.models import kernels
from specd.models.kv_cache import KVCache
from specd.models.profile import PhaseClock

SHOWN = ("matmul", "attention", "layer_other", "head", "team_wait")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("role", choices=["target", "draft"])
    ap.add_argument("--other", required=True, help="the other build's kernel library (.so)")
    ap.add_argument("--sizes", default="1,4")
    ap.add_argument("--context", type=int, default=900)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    model = (load_target if args.role == "target" else load_draft)(EngineConfig()).model
    if model.fused is None:
        raise SystemExit(f"{model.describe()}: its layers do not run in C")
    other = copy.copy(model.fused)
    other.kernel = kernels._Kernel(args.other)
    c, cap, dtype = model.config, model.cache.capacity, model.cache.k.dtype
    builds = {"installed": (model.fused, model.cache),
              "other": (other, KVCache(c.num_layers, c.num_kv_heads, c.head_dim, cap, dtype))}
    print(f"{args.role}: {model.describe()}, KV {dtype}, context {args.context}, threads {torch.get_num_threads()}; "
          f"other: {args.other}")
    for fused, cache in builds.values():
        model.fused, model.cache = fused, cache
        model.forward(torch.arange(1000, 1000 + args.context))
    sizes = [int(s) for s in args.sizes.split(",")]
    runs: dict[tuple[str, int], list[dict[str, float]]] = {(b, n): [] for b in builds for n in sizes}
    for rnd in range(args.rounds + 2):
        for n in sizes if rnd % 2 else sizes[::-1]:
            logits = {}
            for name in builds if rnd % 2 else list(builds)[::-1]:
                model.fused, model.cache = builds[name]
                clock = PhaseClock()
                model.profile(clock)
                t0 = time.perf_counter()
                logits[name] = model.forward(torch.arange(5, 5 + n))
                wall = (time.perf_counter() - t0) * 1e3
                model.profile(None)
                model.rollback(args.context)
                if rnd >= 2:
                    runs[name, n].append({"wall": wall, **model_phases(clock.take())})
            if not torch.equal(logits["installed"], logits["other"]):
                raise SystemExit(f"round {rnd}, n={n}: the two builds' logits differ")
    for n in sizes:
        for name in builds:
            med = {k: statistics.median(r.get(k, 0.0) for r in runs[name, n]) for k in ("wall", *SHOWN)}
            print(f"n={n} {name}: forward {med['wall']:.2f} ms  " + "  ".join(f"{k} {med[k]:.2f}" for k in SHOWN))
        for key in ("wall", "attention"):
            ratio = [o[key] / i[key] for o, i in zip(runs["other", n], runs["installed", n])]
            print(f"n={n}: {key} other / installed, median over rounds {statistics.median(ratio):.3f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
