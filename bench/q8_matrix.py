#!/usr/bin/env python
"""specd's INT8 kernel on one Qwen-1.5B MLP-sized matrix (8960 x 1536), cycling through 24
different matrices so the weights stream from memory as in a model: ms per matrix for n rows
(median of 3 rounds, rounds interleaved over n), plus the in-cache compute rate (one 2048 x 1536
matrix, cycles per 32-multiply block and row at the nominal clock).

    flock /tmp/specd-heavy.lock python bench/q8_matrix.py
"""
import statistics
import time

import torch

from specd.models.q8 import Q8Linear

ROWS = (1, 2, 3, 5, 9, 17, 64)
GHZ = 2.45  # this machine's nominal clock (/proc/cpuinfo)


def main() -> None:
    torch.set_num_threads(2)
    torch.manual_seed(0)
    k = 1536
    mats = [Q8Linear.from_float(torch.randn(8960, k)) for _ in range(24)]
    times: dict[int, list[float]] = {n: [] for n in ROWS}
    for _ in range(3):
        for n in ROWS:
            x = torch.randn(n, k)
            mats[0](x)
            t = time.perf_counter()
            for m in mats:
                m(x)
            times[n].append((time.perf_counter() - t) / len(mats) * 1e3)
    print("from memory, ms per 8960x1536 matrix:", " ".join(f"{n}:{statistics.median(times[n]):.3f}" for n in ROWS))
    hot = Q8Linear.from_float(torch.randn(2048, k))
    for n in (1, 4, 16):
        x = torch.randn(n, k)
        for _ in range(20):
            hot(x)
        t = time.perf_counter()
        for _ in range(200):
            hot(x)
        dt = (time.perf_counter() - t) / 200
        print(f"in cache, {n} rows: {dt * 1e6:.0f} us per call, "
              f"{dt * GHZ * 1e9 * torch.get_num_threads() / (2048 * k / 32 * n):.2f} thread-cycles per block-row")


if __name__ == "__main__":
    main()
