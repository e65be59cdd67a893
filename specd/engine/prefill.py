"""Prefill: bring one model's live KV cache up to a context, in chunks, through the prefix cache.

What the live cache already holds is kept; then the longest run of the prefix cache's blocks the
context starts with is restored (only where it goes further than the live cache); the rest is
computed in chunks of ``chunk`` tokens from where the reuse ends (a short recompute is one
forward; the target's kernels are batch-invariant, so how the rows are grouped changes no number).
After each chunk the newly completed full blocks are stored, so
the work of a prefill that is stopped between chunks (cancelled, preempted) is kept, and
``between_chunks`` is called while work remains: it stops the prefill by raising.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from specd.engine.prefix_cache import Block, PrefixCache
from specd.models.protocol import CausalLM


@dataclass(frozen=True)
class Prefilled:
    live: int  # positions kept from the live cache
    restored: int  # positions copied from the prefix cache (beyond the live ones)
    computed: int  # positions computed

    @property
    def reused(self) -> int:
        return self.live + self.restored


def prefill(model: CausalLM, name: str, context: torch.Tensor, cache: PrefixCache | None, chunk: int,
            between_chunks: Callable[[], None] | None = None) -> Prefilled:
    """Bring ``model``'s cache to exactly ``context`` (``[n]`` token ids). ``name`` keys the
    model's blocks in ``cache`` (None: no prefix cache, the live cache only)."""
    n = int(context.numel())
    live = model.common_prefix(context)
    keys = cache.keys(context) if cache is not None else []
    pos, restored = live, 0
    if cache is not None:
        blocks = cache.lookup(name, keys, context)
        b = cache.block_tokens
        if len(blocks) * b > live:
            first = live // b  # rows before the block holding position ``live`` stay as they are
            model.rollback(first * b)
            for block in blocks[first:]:
                model.put_kv_rows(block.start, block.rows, block.tokens)
            pos = len(blocks) * b
            restored = pos - live
    model.rollback(pos)
    start = pos
    try:
        _store(model, name, context, cache, keys, pos)
        while pos < n:
            end = min(n, pos + chunk)
            model.forward(context[pos:end], logits=False)  # the cache only: no output head
            pos = end
            _store(model, name, context, cache, keys, pos)
            if pos < n and between_chunks is not None:
                between_chunks()
    finally:
        if cache is not None:
            cache.touch(name, keys[: pos // cache.block_tokens])
            cache.stats.live_tokens += live
            cache.stats.hit_tokens += restored
            cache.stats.computed_tokens += pos - start
    return Prefilled(live, restored, pos - start)


def _store(model: CausalLM, name: str, context: torch.Tensor, cache: PrefixCache | None, keys: list[bytes],
           upto: int) -> None:
    """Store the full blocks of ``context[:upto]`` the cache lacks (the model's cache holds them)."""
    if cache is None:
        return
    b = cache.block_tokens
    for i in range(upto // b):
        if not cache.has(name, keys[i]):
            start = i * b
            cache.add(name, keys[i], Block(start, context[start : start + b].clone(), model.kv_rows(start, start + b)))
