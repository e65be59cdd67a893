"""A prefix cache shared by every request and session: KV blocks of earlier prompts.

Each model keeps one live KV cache (``specd.models.kv_cache``), which holds only the latest
sequence: two files edited in turn would evict each other. This cache keeps copies of the keys and
values of earlier prompts, in blocks of ``block_tokens`` positions. A block is keyed by a hash chain
(as vLLM's automatic prefix caching): its key digests its parent block's key and its own token ids,
so a key names the block's whole prefix, and a block is only reused after the same tokens at the
same positions. A request restores the longest run of cached blocks its prompt starts with and
computes only the rest.

Blocks are copies (``CausalLM.kv_rows``): their layout belongs to the runtime, this module only
counts their bytes. The budget bounds all blocks of all models together; the least recently used
block goes first. A request touches its chain from the deepest block to the first, so within a
chain the deeper blocks are always older and are evicted before the blocks they extend (a chain is
cut from its end, never from its start).

Exactness: a restored row is a copy of a row computed earlier from the same tokens at the same
positions; with batch-invariant kernels (every target path, see the README) it is bit for bit the
row a cold prefill computes (tested).
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from dataclasses import dataclass

import torch

from specd.models.kv_cache import KVRows


@dataclass(frozen=True)
class Block:
    start: int  # the first position it holds
    tokens: torch.Tensor  # [block_tokens] the ids its rows were computed from
    rows: KVRows


@dataclass
class PrefixCacheStats:
    hit_tokens: int = 0  # prompt positions restored from the cache
    live_tokens: int = 0  # prompt positions still in the model's live cache
    computed_tokens: int = 0  # prompt positions computed
    stored_blocks: int = 0
    evicted_blocks: int = 0


class PrefixCache:
    """Blocks of several models (named by ``model``, e.g. "target", "draft") under one budget."""

    def __init__(self, budget_bytes: int, block_tokens: int) -> None:
        if block_tokens < 1:
            raise ValueError(f"block_tokens must be positive, got {block_tokens}")
        self.budget_bytes = budget_bytes
        self.block_tokens = block_tokens
        self._blocks: OrderedDict[tuple[str, bytes], Block] = OrderedDict()  # least recently used first
        self.used_bytes = 0
        self.stats = PrefixCacheStats()

    def __len__(self) -> int:
        return len(self._blocks)

    def keys(self, tokens: torch.Tensor) -> list[bytes]:
        """The chain keys of the full blocks of ``tokens`` (``[n]``), first block first."""
        b = self.block_tokens
        ids = tokens.to(torch.int64).cpu().numpy()
        keys, parent = [], b""
        for start in range(0, len(ids) - b + 1, b):
            parent = hashlib.blake2b(parent + ids[start : start + b].tobytes(), digest_size=16).digest()
            keys.append(parent)
        return keys

    def lookup(self, model: str, keys: list[bytes], tokens: torch.Tensor) -> list[Block]:
        """The longest run of cached blocks ``tokens`` starts with (their ids checked, so a hash
        collision cannot pass for a hit); marks them used."""
        found: list[Block] = []
        for i, key in enumerate(keys):
            block = self._blocks.get((model, key))
            if block is None or not torch.equal(block.tokens, tokens[i * self.block_tokens : (i + 1) * self.block_tokens].cpu()):
                break
            found.append(block)
        self.touch(model, keys[: len(found)])
        return found

    def has(self, model: str, key: bytes) -> bool:
        return (model, key) in self._blocks

    def add(self, model: str, key: bytes, block: Block) -> None:
        """Store ``block`` as the most recently used, evicting the least recently used blocks
        while the budget is exceeded. A block larger than the whole budget is not stored."""
        if (model, key) in self._blocks or block.rows.nbytes > self.budget_bytes:
            return
        self._blocks[(model, key)] = block
        self.used_bytes += block.rows.nbytes
        self.stats.stored_blocks += 1
        while self.used_bytes > self.budget_bytes:
            _, old = self._blocks.popitem(last=False)
            self.used_bytes -= old.rows.nbytes
            self.stats.evicted_blocks += 1

    def touch(self, model: str, keys: list[bytes]) -> None:
        """Mark a chain used: its first block becomes the most recently used, its last the least
        of them (evicted first)."""
        for key in reversed(keys):
            if (model, key) in self._blocks:
                self._blocks.move_to_end((model, key))

    def clear(self) -> None:
        self._blocks.clear()
        self.used_bytes = 0

    def report(self) -> dict[str, int]:
        """The counters ``stats`` reports (bytes, blocks, tokens restored vs computed)."""
        s = self.stats
        return {"prefix_cache_bytes": self.used_bytes, "prefix_cache_budget_bytes": self.budget_bytes,
                "prefix_cache_blocks": len(self._blocks), "prefix_cache_block_tokens": self.block_tokens,
                "prefix_cache_hit_tokens": s.hit_tokens, "prefix_cache_live_tokens": s.live_tokens,
                "prefix_cache_computed_tokens": s.computed_tokens, "prefix_cache_evicted_blocks": s.evicted_blocks}


def block_bytes(bytes_per_token: int, tokens: int, block_tokens: int) -> int:
    """Bytes of the blocks that hold ``tokens`` positions (whole blocks)."""
    return (tokens // block_tokens) * block_tokens * bytes_per_token

