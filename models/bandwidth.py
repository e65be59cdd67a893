"""This machine's memory read bandwidth, measured in-process: the rate a memory-bound decode step
can at best stream its weights at (``specd models info`` divides each model's bytes per step,
:func:`specd.models.step_bytes.step_bytes`, by it for the step's floor)."""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

PROBE_BYTES = 512 << 20  # far above any last-level cache (32 MiB on the 2-core bench machine)


@dataclass(frozen=True)
class Bandwidth:
    """``gbs``: the best read rate in GB/s (1e9 bytes a second); ``how``: how it was measured."""

    gbs: float
    how: str


def read_bandwidth(nbytes: int = PROBE_BYTES, repeats: int = 5) -> Bandwidth:
    """Stream an int64 buffer of ``nbytes`` (allocated and written once, so every page is
    resident) through ``torch.sum`` ``repeats`` times on torch's intra-op threads
    (``torch.set_num_threads``) and return the **best** rate. Best, not median: every disturbance
    (another process on the cores, the thread pool waking on the first pass, a page fault) only
    slows a pass down, never speeds one up, so the fastest pass is the nearest to what the memory
    system delivers, and a floor computed from it stays a lower bound on the step time. int64
    because torch sums it at the memory's rate (a float32 sum is a few percent slower; int32 and
    uint8 are widened to int64 element by element, far below it). About 0.3 s for 512 MiB at
    ~30 GB/s, the allocation included. On a shared host (a VM) the rate follows the other tenants'
    memory traffic from one run to the next: the 2-core bench VM read 29-35 GB/s in most runs
    (shared/tools/bw.c: 29-31), once 52."""
    x = torch.ones(max(1, nbytes // 8), dtype=torch.int64)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        x.sum()
        best = min(best, time.perf_counter() - start)
    threads = torch.get_num_threads()
    return Bandwidth(x.nbytes / best / 1e9,
                     f"best of {repeats} torch.sum passes over {x.nbytes >> 20} MiB (int64), {threads} threads")
