"""Weight memory on transparent huge pages.

A decode step streams every weight byte once (about 0.9 GB for the 1.5B target). On 4 KiB pages
that is ~230,000 pages a step: the hardware prefetchers stop at each page boundary and the TLB
misses on every page, so the kernels' throughput depends on how the OS happened to lay the
process's pages out (bench/RESULTS.md, session 9: the step's spread from one process to the next).
On 2 MiB pages the same bytes are ~450 pages.

``HugePageArena`` hands out uint8 tensors carved from anonymous mappings that are 2 MiB aligned
and advised ``MADV_HUGEPAGE`` (which is what the kernel's ``madvise`` THP mode, the common
default, waits for). Where the OS has no THP (or not Linux) the memory is ordinary pages: the
arena changes where bytes live, never their values.
"""

from __future__ import annotations

import mmap
import os
from typing import Callable

import torch

HUGE_PAGE = 2 << 20
_ALIGN = 64  # every tensor starts on a cache line (the kernels' loads are unaligned-safe anyway)


def _thp_mode() -> str:
    """The kernel's THP mode (``always`` / ``madvise`` / ``never``), or ``unknown``."""
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
            text = f.read()
    except OSError:
        return "unknown"
    start, end = text.find("["), text.find("]")
    return text[start + 1 : end] if 0 <= start < end else "unknown"


def huge_pages_enabled() -> bool:
    """Whether weights go to huge-page arenas: on where the OS offers THP, unless the environment
    variable SPECD_HUGEPAGES=0 turns it off (A/B runs)."""
    return os.environ.get("SPECD_HUGEPAGES", "1") != "0" and hasattr(mmap, "MADV_HUGEPAGE") \
        and _thp_mode() in ("always", "madvise")


def weight_memory() -> Callable[[int], torch.Tensor] | None:
    """Where one model's repacked weights go: a new arena's ``empty`` where huge pages are on
    (``huge_pages_enabled``), else None (the kernels' linears then use ``torch.empty``)."""
    return HugePageArena().empty if huge_pages_enabled() else None


class HugePageArena:
    """A bump allocator over 2 MiB-aligned anonymous mappings of ``chunk`` bytes (or one mapping
    of exactly the request, for larger ones), each advised ``MADV_HUGEPAGE``. Memory is released
    when every tensor carved from a mapping is gone (the tensors keep their mapping alive)."""

    def __init__(self, chunk: int = 64 << 20) -> None:
        self.chunk = -(-chunk // HUGE_PAGE) * HUGE_PAGE
        self._map: mmap.mmap | None = None
        self._base = 0  # offset of the aligned start inside self._map
        self._used = 0  # bytes handed out from the aligned start
        self._size = 0  # usable bytes from the aligned start
        self.mapped = 0  # bytes mapped in all (for reports)

    def _new_map(self, size: int) -> tuple[mmap.mmap, int]:
        """A mapping with ``size`` usable bytes starting on a 2 MiB boundary: (map, offset)."""
        mm = mmap.mmap(-1, size + HUGE_PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        address = torch.frombuffer(mm, dtype=torch.uint8, count=1).data_ptr()
        offset = -address % HUGE_PAGE
        if hasattr(mmap, "MADV_HUGEPAGE"):
            try:
                mm.madvise(mmap.MADV_HUGEPAGE, offset, size)
            except OSError:
                pass  # no THP here: ordinary pages, the same bytes
        self.mapped += size + HUGE_PAGE
        return mm, offset

    def empty(self, nbytes: int) -> torch.Tensor:
        """A new uint8 tensor of ``nbytes`` (contents undefined, as ``torch.empty``)."""
        if nbytes <= 0:
            return torch.empty(0, dtype=torch.uint8)
        need = -(-nbytes // _ALIGN) * _ALIGN
        if need > self.chunk // 2:  # a large tensor: a mapping of its own, whole huge pages
            size = -(-need // HUGE_PAGE) * HUGE_PAGE
            mm, offset = self._new_map(size)
            return torch.frombuffer(mm, dtype=torch.uint8, count=nbytes, offset=offset)
        if self._map is None or self._used + need > self._size:
            self._map, self._base = self._new_map(self.chunk)
            self._used, self._size = 0, self.chunk
        out = torch.frombuffer(self._map, dtype=torch.uint8, count=nbytes, offset=self._base + self._used)
        self._used += need
        return out
