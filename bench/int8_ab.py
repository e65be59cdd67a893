#!/usr/bin/env python
"""specd's INT8 kernel (``Q8Linear``, ``models/csrc/int_linear.c``: AVX2 only) against the GGUF
kernels' Q8_0 path (``GgufLinear`` of the same numbers as Q8_0 blocks: AVX-512 VNNI where the CPU
has it) on the shipped EAGLE head's matrices, random weights, calls alternating, ``--evict`` MB
read before every call (the daemon's target forward leaves none of the head's bytes in cache).
Prints each matrix's median time and read rate per path, the sum, and the largest relative
difference of their outputs (0: the same bits).

    python bench/int8_ab.py --rows 1,3 --reps 40 --evict 256
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
from gguf import GGMLQuantizationType

from specd.models.gguf_linear import GgufLinear
from specd.models.int_linear import Q8Linear, q8_0_blocks

Q8_0 = int(GGMLQuantizationType.Q8_0)
# the shipped head (models/data/heads/qwen2.5-coder-1.5b.safetensors): [out, in] as the draft step runs them
SHAPES = {"fc": (1536, 3072), "qkv": (2048, 1536), "o": (1536, 1536), "gate_up": (6144, 1536),
          "down": (1536, 3072), "head": (12288, 1536)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", default="1,3")
    ap.add_argument("--reps", type=int, default=40)
    ap.add_argument("--evict", type=int, default=256, help="MB read before every call (0: none)")
    args = ap.parse_args()
    torch.manual_seed(0)
    other = torch.ones((args.evict << 20) // 4) if args.evict else None
    out: dict = {"evict_mb": args.evict, "reps": args.reps, "rows": {}}
    for rows in (int(r) for r in args.rows.split(",")):
        per: dict = {}
        for name, (n, k) in SHAPES.items():
            w = torch.randn(n, k) * 0.02
            paths = {"int8": Q8Linear.from_float(w)}
            paths["q8_0"] = GgufLinear.from_blocks(name, Q8_0, q8_0_blocks(paths["int8"].packed, k), k, repack=False)
            x = torch.randn(rows, k)
            ref = paths["int8"](x)
            diff = float((ref - paths["q8_0"](x)).abs().max() / ref.abs().max())
            ts: dict[str, list[float]] = {p: [] for p in paths}
            for rep in range(args.reps):
                for p in (list(paths) if rep % 2 == 0 else list(paths)[::-1]):
                    if other is not None:
                        float(other.sum())
                    t0 = time.perf_counter()
                    paths[p](x)
                    ts[p].append((time.perf_counter() - t0) * 1e3)
            mb = paths["int8"].packed.numel() / 1e6
            per[name] = {"mb": round(mb, 2), "rel_diff": diff,
                         **{p: {"median_ms": round(statistics.median(v), 3),
                                "gb_s": round(mb / statistics.median(v), 1)} for p, v in ts.items()}}
            print(f"rows {rows} {name:8s} {mb:5.1f} MB " + "  ".join(
                f"{p} {per[name][p]['median_ms']:.3f} ms ({per[name][p]['gb_s']} GB/s)" for p in paths)
                + f"  rel diff {diff:.1e}", flush=True)
        per["total_ms"] = {p: round(sum(v[p]["median_ms"] for v in per.values()), 3) for p in paths}
        out["rows"][rows] = per
        print(f"rows {rows} total " + ", ".join(f"{p} {v} ms" for p, v in per["total_ms"].items()), flush=True)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
