#!/usr/bin/env python
"""Microbenchmark of specd's GGUF-native linears (models/csrc/gguf_*.c) on the target's
shapes: per block format and row count, the median time of one linear over random valid blocks,
for each SIMD level the CPU has (gg_set_simd), and the summed time of one decoder layer's
linears. Run under the shared CPU lock:

    flock /tmp/specd-cpu.lock python bench/gguf_kernels.py --rows 1,5,9,64
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType as T

from specd.models import kernels
from specd.models.gguf_linear import GgufLinear, simd_levels

# the 1.5B target's per-layer linears: (name, type, out rows, in features)
LAYER = [("qkv", T.Q4_K, 2048, 1536), ("o", T.Q4_K, 1536, 1536), ("gate_up", T.Q4_K, 17920, 1536),
         ("down", T.Q6_K, 1536, 8960)]


def blocks(qtype: T, rows: int, k: int, seed: int) -> torch.Tensor:
    rng = np.random.default_rng(seed)
    elements, size = GGML_QUANT_SIZES[qtype]
    raw = rng.integers(0, 256, size=(rows, k // elements, size), dtype=np.uint8)
    d = (rng.random((rows, k // elements)) * 0.02).astype(np.float16).view(np.uint8).reshape(rows, -1, 2)
    off = {T.Q4_K: [0, 2], T.Q6_K: [208]}.get(qtype, [0])
    for o in off:
        raw[..., o : o + 2] = d
    return torch.from_numpy(raw.reshape(rows, -1))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", default="1,5,9,64")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--levels", default="2,3", help="SIMD levels to time (0 scalar, 2 AVX2, 3 AVX-512)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    lib = kernels.kernel().lib
    lins = [(name, GgufLinear.from_blocks(name, int(t), blocks(t, N, k, i), k)) for i, (name, t, N, k) in enumerate(LAYER)]
    for level in [int(v) for v in args.levels.split(",") if int(v) in simd_levels()]:
        got = lib.gg_set_simd(level)
        for n in [int(r) for r in args.rows.split(",")]:
            per = {}
            for name, lin in lins:
                x = torch.randn(n, lin.in_features)
                lin(x)
                ts = []
                for _ in range(args.reps):
                    t0 = time.perf_counter()
                    lin(x)
                    ts.append(time.perf_counter() - t0)
                per[name] = statistics.median(ts) * 1e3
            total = sum(per.values())
            print(f"simd {got} n={n:3d}: layer {total:7.3f} ms (x28 = {28 * total:6.1f} ms)  "
                  + "  ".join(f"{k} {v:.3f}" for k, v in per.items()), flush=True)
    lib.gg_set_simd(simd_levels()[-1])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
