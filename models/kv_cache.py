"""A preallocated KV cache: appending writes at ``length``; rollback moves ``length`` back (O(1)).

Rows can be copied out (:meth:`KVCache.rows`) and written back (:meth:`KVCache.put_rows`): a
prefix cache above the runtime keeps such copies of earlier prompts and restores them instead of
recomputing them. The copies are opaque to it (:class:`KVRows`): only the cache knows its layout.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

import torch

from specd.models.hugepages import HugePageArena, huge_pages_enabled
from specd.models.modes import KV_CACHES
from specd.models.profile import PhaseClock


def kv_dtype(kv_cache: str) -> torch.dtype:
    """The element of a cache whose layers run in C, for the setting ``kv_cache`` (``KV_CACHES``);
    ValueError naming the choices for anything else."""
    if kv_cache not in KV_CACHES:
        raise ValueError(f"KV cache {kv_cache!r}: use one of {', '.join(KV_CACHES)}")
    return torch.float16 if kv_cache == "f16" else torch.float32


@dataclass(frozen=True)
class KVRows:
    """A copy of some consecutive positions' keys and values, in the layout of the cache that made
    it (torch tensors or numpy arrays); ``nbytes``: the memory it holds."""

    k: Any
    v: Any
    length: int

    @property
    def nbytes(self) -> int:
        return int(self.k.nbytes + self.v.nbytes)


class KVCache:
    """Keys and values for every layer, plus the token ids they were computed from.

    Shapes: ``k``/``v`` ``[layers, kv_heads, capacity, head_dim]``; ``tokens`` ``[capacity]``.
    Only positions ``< length`` are valid. The token ids let a caller find the longest prefix a new
    prompt shares with what is cached (KV reuse across requests).
    """

    def __init__(
        self,
        num_layers: int,
        num_kv_heads: int,
        head_dim: int,
        capacity: int,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str = "cpu",
    ) -> None:
        shape = (num_layers, num_kv_heads, capacity, head_dim)
        self.k = _zeros(shape, dtype, device)
        self.v = _zeros(shape, dtype, device)
        self.tokens = torch.full((capacity,), -1, dtype=torch.long)
        self.capacity = capacity
        self.length = 0

    def rollback(self, length: int) -> None:
        """Forget every position at and after ``length``."""
        if not 0 <= length <= self.length:
            raise ValueError(f"cannot roll back to {length}: cache holds {self.length} positions")
        self.length = length

    def keep(self, start: int, indices: torch.Tensor) -> None:
        """Compact: keep positions ``start + indices`` (ascending) as ``start, start+1, ...``.

        Used after tree verification, where the accepted path is scattered among the branches.
        """
        n = int(indices.numel())
        src = indices.to(torch.long) + start
        self.k[:, :, start : start + n] = self.k[:, :, src]
        self.v[:, :, start : start + n] = self.v[:, :, src]
        self.tokens[start : start + n] = self.tokens[src.cpu()]
        self.length = start + n

    def common_prefix(self, tokens: torch.Tensor) -> int:
        """Number of leading ``tokens`` already cached."""
        return common_prefix(self.tokens, self.length, tokens)

    def rows(self, start: int, end: int) -> KVRows:
        """A copy of positions ``start .. end-1`` (all cached)."""
        check_rows(start, end, self.length)
        return KVRows(self.k[:, :, start:end].clone(), self.v[:, :, start:end].clone(), end - start)

    def put_rows(self, start: int, rows: KVRows, tokens: torch.Tensor) -> None:
        """Write ``rows`` (computed from ``tokens``) at positions ``start ..``; the cache then holds
        exactly ``start + rows.length`` positions. ``start`` may not be past the cached length."""
        end = check_put(start, rows, tokens, self.length, self.capacity)
        self.k[:, :, start:end] = rows.k
        self.v[:, :, start:end] = rows.v
        self.tokens[start:end] = tokens.cpu()
        self.length = end

    def bytes_per_token(self) -> int:
        """Bytes one position's keys and values take (in the cache, and in a copy of it)."""
        return (self.k.nbytes + self.v.nbytes) // self.capacity

    def nbytes(self) -> int:
        return self.k.nbytes + self.v.nbytes


def _zeros(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device | str) -> torch.Tensor:
    """A zero tensor; on the CPU on 2 MiB pages where the OS offers them (``hugepages``): each
    decode step reads every cached key and value of every layer (17 MB a token at 600 tokens for
    the 1.5B target in float16, 34 MB in float32), and on 4 KiB pages that read runs at a fraction of the bandwidth."""
    if torch.device(device).type != "cpu" or not huge_pages_enabled():
        return torch.zeros(shape, dtype=dtype, device=device)
    count = math.prod(shape)
    mem = HugePageArena().empty(count * torch.empty(0, dtype=dtype).element_size())
    return mem.view(dtype).view(shape).zero_()


def check_rows(start: int, end: int, length: int) -> None:
    if not 0 <= start <= end <= length:
        raise ValueError(f"rows {start} .. {end - 1}: the cache holds {length} positions")


def check_put(start: int, rows: KVRows, tokens: torch.Tensor, length: int, capacity: int) -> int:
    """The end of a write of ``rows`` at ``start``, once it is known to be valid."""
    end = start + rows.length
    if int(tokens.numel()) != rows.length:
        raise ValueError(f"{rows.length} rows but {int(tokens.numel())} token ids")
    if not 0 <= start <= length or end > capacity:
        raise ValueError(f"cannot write rows {start} .. {end - 1}: the cache holds {length} of {capacity} positions")
    return end


def common_prefix(cached: torch.Tensor, length: int, tokens: torch.Tensor) -> int:
    """Number of leading ``tokens`` equal to the first ``length`` ids in ``cached``."""
    n = min(length, int(tokens.numel()))
    if n == 0:
        return 0
    same = cached[:n] == tokens[:n].cpu()
    if bool(same.all()):
        return n
    return int(torch.argmin(same.to(torch.int8)).item())


HiddenSink = Callable[[int, torch.Tensor, torch.Tensor], None]


@dataclass(frozen=True)
class HiddenStates:
    """A forward's final-normed hidden states (the output head's input): ``states`` ``[n, H]``,
    row ``i`` for the forward's token ``i``, fed at cache slot ``start + i``."""

    start: int
    states: torch.Tensor


class CacheOwner:
    """The cache-control half of the ``CausalLM`` protocol, for a runtime holding ``self.cache``
    (a ``KVCache`` or anything with its ``length`` / ``rollback`` / ``keep`` / ``common_prefix``)."""

    cache: KVCache
    clock: PhaseClock | None = None  # set through profile()
    hidden: HiddenStates | None = None  # the last forward's, where the runtime keeps them
    hidden_sink: HiddenSink | None = None  # see watch_hidden
    SINKS_HIDDEN = False  # whether forward calls hidden_sink

    def last_hidden(self) -> HiddenStates | None:
        return self.hidden

    def watch_hidden(self, sink: HiddenSink | None) -> bool:
        """Call ``sink(start, states, context)`` after every forward from now on (None: stop), a
        prefill's included: ``states`` ``[n, H]`` the final-normed hidden states of positions
        ``start ..``, ``context`` ``[start + n]`` the tokens they were computed from. Returns
        whether this runtime can (``SINKS_HIDDEN``; the torch ``Decoder`` can)."""
        if not self.SINKS_HIDDEN:
            return False
        self.hidden_sink = sink
        return True

    def profile(self, clock: PhaseClock | None) -> None:
        """Add each forward's phase seconds to ``clock`` from now on (None: stop); see
        ``specd.models.profile``."""
        self.clock = clock

    @property
    def cache_len(self) -> int:
        return self.cache.length

    def rollback(self, length: int) -> None:
        self.cache.rollback(length)
        if self.hidden is not None and length <= self.hidden.start:
            self.hidden = None  # none of its rows is cached any more

    def keep(self, start: int, indices: torch.Tensor) -> None:
        """After a token-tree forward: keep positions ``start + indices`` (ascending) as
        ``start, start+1, ...``. The forward's hidden states are compacted alike (they were in
        tree order), and a watching sink is handed the kept rows as their positions' own."""
        self.cache.keep(start, indices)
        h, self.hidden = self.hidden, None
        if h is None or h.start > start:
            return
        rows = indices.to(torch.long).cpu() + (start - h.start)  # [m]: the kept rows of h.states
        if rows.numel() and int(rows.max()) >= h.states.shape[0]:
            return
        kept = h.states[rows]  # [m, H]
        self.hidden = HiddenStates(h.start, torch.cat([h.states[: start - h.start], kept]))
        if self.hidden_sink is not None and kept.shape[0]:
            self.hidden_sink(start, kept, self.cache.tokens[: start + kept.shape[0]])

    def reset(self) -> None:
        self.rollback(0)

    def common_prefix(self, tokens: torch.Tensor) -> int:
        return self.cache.common_prefix(tokens)

    def kv_rows(self, start: int, end: int) -> KVRows:
        """A copy of cached positions ``start .. end-1`` (keys, values), for :meth:`put_kv_rows`."""
        return self.cache.rows(start, end)

    def put_kv_rows(self, start: int, rows: KVRows, tokens: torch.Tensor) -> None:
        """Write ``rows`` (a copy from :meth:`kv_rows` of a model with the same weights, computed
        from ``tokens``) at ``start``; the cache then ends after them."""
        self.cache.put_rows(start, rows, tokens)
        self.hidden = None

    def kv_bytes_per_token(self) -> int:
        return self.cache.bytes_per_token()

    def weight_bytes(self) -> dict[str, int]:
        """Resident weight bytes by kind (runtimes override)."""
        return {}

    def resident_bytes(self) -> dict[str, int]:
        """Bytes held resident: ``weights`` (all kinds) and ``kv_cache``."""
        return {"weights": int(sum(self.weight_bytes().values())), "kv_cache": int(self.cache.nbytes())}
