#!/usr/bin/env python
"""Where one forward's time goes, by row count: the default target (or draft) as the daemon's
runtime loads it, a --context-token prompt cached, then forwards over n new tokens (each rolled
back), the n order alternating, medians of --rounds after two warm-up rounds. Per n: the wall
time and the kernels' phases (specd.models.profile: linears, attention, the rest of the layers,
the output head, the team's wait). To compare two builds, run it alternately from two checkouts,
each with its own built extension; to compare KV cache elements, name them all (--kv-cache
f16,f32: one model, a cache each, taking turns); to compare the kernels' SIMD levels, name them
(--simd avx2,avx512: the same weights and cache, the level switched before each forward, taking
turns in every round). Run it alone on the machine:

    python bench/forward_phases.py target --sizes 1,2,4,6
    python bench/forward_phases.py target --sizes 1,5 --simd avx2,avx512
"""

from __future__ import annotations

import argparse
import statistics
import time
from contextlib import nullcontext

import torch

from specd.app import load_draft, load_target
from specd.engine.config import EngineConfig
from specd.engine.timeline import model_phases
from specd.models.decoder import Decoder
from specd.models.fused_layers import FusedLayers
from specd.models.gguf_linear import SIMD_LEVELS, simd_level, simd_levels
from specd.models.kv_cache import KVCache, kv_dtype
from specd.models.modes import DEFAULT_KV_CACHE, KV_CACHES
from specd.models.profile import PhaseClock

SHOWN = ("matmul", "attention", "layer_other", "head", "team_wait", "preempted")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("role", choices=["target", "draft"])
    ap.add_argument("--sizes", default="1,2,4,6")
    ap.add_argument("--context", type=int, default=600)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--kv-cache", default=DEFAULT_KV_CACHE,
                    help=f"the KV cache's element (engine.kv_cache: {', '.join(KV_CACHES)}), or several, comma "
                         f"separated: the same weights with one cache each, taking turns in every round")
    ap.add_argument("--simd", default="",
                    help=f"the kernels' SIMD levels to take turns at ({', '.join(SIMD_LEVELS.values())}), comma "
                         f"separated; default: the level they run (the best, or SPECD_GG_SIMD's cap)")
    args = ap.parse_args()
    kinds = args.kv_cache.split(",")
    if not kinds or any(k not in KV_CACHES for k in kinds):
        ap.error(f"--kv-cache: one or more of {', '.join(KV_CACHES)}, got {args.kv_cache!r}")
    by_name = {name: level for level, name in SIMD_LEVELS.items()}
    names = args.simd.split(",") if args.simd else []
    if any(name not in by_name for name in names):
        ap.error(f"--simd: one or more of {', '.join(SIMD_LEVELS.values())}, got {args.simd!r}")
    levels: list[int | None] = [by_name[name] for name in names] or [None]  # None: the level the kernels run
    if names and any(level not in simd_levels() for level in levels):
        ap.error(f"--simd: this CPU and build run {', '.join(SIMD_LEVELS[v] for v in simd_levels())}")
    torch.set_num_threads(args.threads)
    config = EngineConfig(kv_cache=kinds[0])
    model = (load_target if args.role == "target" else load_draft)(config).model  # as the daemon loads it
    print(f"{args.role}: {model.describe()}, context {args.context}, threads {torch.get_num_threads()}")
    variants = {kind: _with_cache(model, kind) for kind in kinds}  # (fused layers, cache) per kind
    sizes = [int(s) for s in args.sizes.split(",")]
    for fused, cache in variants.values():
        model.fused, model.cache = fused, cache
        model.forward(torch.arange(1000, 1000 + args.context))
    turns = [(kind, level) for kind in kinds for level in levels]  # what takes turns in a round
    label = {t: f"kv {t[0]}" + (f" {SIMD_LEVELS[t[1]]}" if t[1] is not None else "") for t in turns}
    runs: dict[tuple[tuple[str, int | None], int], list[dict[str, float]]] = {(t, n): [] for t in turns for n in sizes}
    for rnd in range(args.rounds + 2):
        for n in sizes if rnd % 2 else sizes[::-1]:
            for turn in turns if rnd % 2 else turns[::-1]:
                model.fused, model.cache = variants[turn[0]]
                with simd_level(turn[1]) if turn[1] is not None else nullcontext():
                    clock = PhaseClock()
                    model.profile(clock)
                    t0 = time.perf_counter()
                    model.forward(torch.arange(5, 5 + n))
                    wall = (time.perf_counter() - t0) * 1e3
                    model.profile(None)
                model.rollback(args.context)
                if rnd >= 2:
                    runs[turn, n].append({"wall": wall, **model_phases(clock.take())})
    for n in sizes:
        for turn in turns:
            med = {k: statistics.median(r.get(k, 0.0) for r in runs[turn, n]) for k in ("wall", *SHOWN)}
            print(f"n={n} {label[turn]}: forward {med['wall']:.2f} ms  "
                  + "  ".join(f"{k} {med[k]:.2f}" for k in SHOWN), flush=True)
        for turn in turns[1:]:  # per round, against the first (the two ran side by side)
            ratio = [a["wall"] / b["wall"] for a, b in zip(runs[turn, n], runs[turns[0], n])]
            print(f"n={n}: forward {label[turn]} / {label[turns[0]]}, median over rounds {statistics.median(ratio):.3f}")
    return 0


def _with_cache(model: Decoder, kind: str) -> tuple[FusedLayers | None, KVCache]:
    """``model``'s layers over a new KV cache of element ``kind`` (its weights shared)."""
    dtype = kv_dtype(kind) if model.fused is not None else torch.float32  # (the Python loop keeps float32)
    if model.cache.k.dtype == dtype:
        return model.fused, model.cache
    c, cap = model.config, model.cache.capacity
    fused = None if model.fused is None else FusedLayers(c, model.layers, cap, kv_dtype=dtype)
    return fused, KVCache(c.num_layers, c.num_kv_heads, c.head_dim, cap, dtype)


if __name__ == "__main__":
    raise SystemExit(main())
