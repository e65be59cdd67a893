#!/usr/bin/env python
"""Two builds of specd's GGUF kernels streaming the target's weights from memory, in one process,
taking turns: the one-row (decode) rate of each block format at the 1.5B target's shapes, 28
distinct copies per shape (far above the last-level cache, as a decode step reads them), on huge
pages as the daemon loads them. ``bench/kernel_ab.py`` cannot compare builds whose repacked
layouts differ (it shares one repacked copy); here each build repacks the same GGUF blocks with
its own ``gg_repack`` and runs its own ``gg_gemm``, and the script checks that both give the same
bits. ``--resident``: small slices that stay in L2, one thread, the arithmetic's own rate;
``--rows``: activation rows per call (a verification's). Per shape and build: the median over ``--rounds`` of the best of ``--reps`` passes, in GB/s
of the weights each build reads, and the per-round ratio of the rates (other ÷ installed). Run it
alone on the machine (its own rounds alternate the order):

    cp models/_kernels*.so /tmp/old.so   # before changing the kernels
    python setup.py build_ext --inplace --force
    python bench/gguf_stream.py --other /tmp/old.so
"""

from __future__ import annotations

import argparse
import ctypes
import statistics
import sys
import time
from pathlib import Path

import torch
from gguf import GGMLQuantizationType as T

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gguf_kernels import blocks  # noqa: E402  (random valid blocks of a format)

from specd.models import kernels  # noqa: E402
from specd.models.gguf_linear import X16  # noqa: E402
from specd.models.hugepages import HugePageArena  # noqa: E402

# (name, format, out rows, in features, copies): what one decode step of the 1.5B target streams
# per format and shape (gate and up fused, as the loader fuses them; half the down projections
# and the output head are Q6_K in the Q4_K_M file)
SHAPES = [("gate_up", T.Q4_K, 17920, 1536, 28), ("down", T.Q6_K, 1536, 8960, 14),
          ("head", T.Q6_K, 151936, 1536, 1)]
# --resident: slices of those shapes small enough to stay in a core's L2 (~0.5 MB), each run
# 200 times a pass on one thread: the arithmetic's own rate, without the memory's
RESIDENT = [("gate_up", T.Q4_K, 256, 1536, 200), ("down", T.Q6_K, 64, 8960, 200)]


# the entry points this script calls, declared as specd.models.kernels declares them (the other
# build is loaded without the loader's ABI check: a changed layout bumps the ABI version, and a
# build of the old layout is what this script compares against)
USED = ("gg_repack", "gg_quantize", "gg_gemm", "gg_row_bytes", "gg_act_bytes", "gg_simd", "specd_kernel_set_threads")


class Build:
    """One kernel library through ctypes: its own repacked copies and its gemm."""

    def __init__(self, path: str, lib: ctypes.CDLL | None = None) -> None:
        self.path = path
        if lib is None:
            lib = ctypes.CDLL(path)
            for name in USED:
                fn = getattr(lib, name)
                fn.argtypes, fn.restype = kernels._SIGNATURES[name]
        self.lib = lib

    def repack(self, arena: HugePageArena, qtype: int, raw: torch.Tensor, k: int) -> torch.Tensor:
        rows = raw.shape[0]
        out = arena.empty(rows * int(self.lib.gg_row_bytes(qtype | X16, k)))
        if self.lib.gg_repack(qtype, raw.data_ptr(), rows, k, out.data_ptr()) != 0:
            raise RuntimeError(f"{self.path} refused to repack a {qtype} weight")
        return out

    def gemm(self, qtype: int, w: torch.Tensor, rows: int, k: int, act: torch.Tensor, y: torch.Tensor) -> None:
        """y [n, rows] = the n activation rows in act times w (repacked) transposed"""
        self.lib.gg_gemm(qtype | X16, w.data_ptr(), rows, k, act.data_ptr(), y.shape[0], y.data_ptr(), rows)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--other", required=True, help="the other build's kernel library (.so)")
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--reps", type=int, default=3, help="passes per round and build (the best counts)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rows", type=int, default=1, help="activation rows per call (1: a decode step)")
    ap.add_argument("--resident", action="store_true",
                    help="weights that stay in L2, one thread: the arithmetic's rate (RESIDENT)")
    args = ap.parse_args()
    if args.resident:
        args.threads = 1
    torch.set_num_threads(args.threads)
    installed = kernels.kernel()
    builds = [Build(installed.path, installed.lib), Build(args.other)]
    for b in builds:
        b.lib.specd_kernel_set_threads(args.threads)
    print(f"installed {builds[0].path}\nother     {builds[1].path}\nthreads {args.threads}, "
          f"SIMD level {builds[0].lib.gg_simd()} / {builds[1].lib.gg_simd()}", flush=True)
    arena = HugePageArena()
    for name, qtype, rows, k, copies in RESIDENT if args.resident else SHAPES:
        raws = [blocks(qtype, rows, k, seed) for seed in range(1 if args.resident else copies)]
        packed = [[b.repack(arena, int(qtype), raw, k) for raw in raws] for b in builds]
        del raws
        n = args.rows
        x = torch.randn(n, k)
        act = torch.empty(n * int(builds[0].lib.gg_act_bytes(int(qtype), k)), dtype=torch.uint8)
        builds[0].lib.gg_quantize(int(qtype), x.data_ptr(), n, k, act.data_ptr())
        ys = [torch.empty(n, rows) for _ in builds]
        if args.resident:  # the one copy, called `copies` times a pass
            packed = [ws * copies for ws in packed]
        for b, w, y in zip(builds, packed, ys):
            b.gemm(int(qtype), w[0], rows, k, act, y)
        if not torch.equal(ys[0].view(torch.int32), ys[1].view(torch.int32)):
            raise SystemExit(f"{name}: the two builds give different bits")
        nbytes = [sum(w.numel() for w in ws) for ws in packed]  # read a pass (resident: again and again)
        rates: list[list[float]] = [[], []]
        for rnd in range(args.rounds):
            order = (0, 1) if rnd % 2 == 0 else (1, 0)
            for i in order:
                best = float("inf")
                for _ in range(args.reps):
                    t0 = time.perf_counter()
                    for w in packed[i]:
                        builds[i].gemm(int(qtype), w, rows, k, act, ys[i])
                    best = min(best, time.perf_counter() - t0)
                rates[i].append(nbytes[i] / best / 1e9)
        ratios = [o / s for s, o in zip(*rates)]
        med = [statistics.median(r) for r in rates]
        print(f"{name} ({qtype.name}, {rows}x{k}, {n} row(s), {'1 copy x ' if args.resident else ''}{copies} "
              f"{'calls' if args.resident else 'copies'}, {nbytes[0] / 1e6:.0f} MB a pass): installed "
              f"{med[0]:.1f} GB/s [{min(rates[0]):.1f}-{max(rates[0]):.1f}], other {med[1]:.1f} GB/s "
              f"[{min(rates[1]):.1f}-{max(rates[1]):.1f}]; other/installed per round median "
              f"{statistics.median(ratios):.3f} [{min(ratios):.3f}-{max(ratios):.3f}]", flush=True)
        del packed
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
