"""What the engine needs from a model runtime (the torch ``Decoder`` today, ONNX Runtime later)."""

from __future__ import annotations

from typing import Protocol

import torch

from specd.models.kv_cache import HiddenSink, HiddenStates, KVRows


class CausalLM(Protocol):
    """A decoder with its own KV cache.

    ``forward`` appends ``tokens`` (``[n]``) to the cache and returns float32 logits ``[n, V]``
    (none with ``logits=False``);
    ``rollback(length)`` forgets every position at and after ``length`` in O(1);
    ``common_prefix(tokens)`` counts the leading ``tokens`` already cached.
    """

    @property
    def vocab_size(self) -> int: ...

    @property
    def max_len(self) -> int: ...

    @property
    def cache_len(self) -> int: ...

    def forward(
        self,
        tokens: torch.Tensor,
        positions: torch.Tensor | None = None,
        attn_mask: torch.Tensor | None = None,
        *,
        logits: bool = True,
    ) -> torch.Tensor:
        """``logits=False``: fill the cache only (a prompt's prefill); the result is then empty
        (``[n, 0]``) or, where a runtime cannot skip the head, the logits, to be ignored."""
        ...

    def rollback(self, length: int) -> None: ...

    def keep(self, start: int, indices: torch.Tensor) -> None:
        """After a token-tree forward: keep positions ``start + indices`` (ascending) as
        ``start, start+1, ...`` and forget the rest."""
        ...

    def common_prefix(self, tokens: torch.Tensor) -> int: ...

    def last_hidden(self) -> HiddenStates | None:
        """The hidden states of the last forward that computed logits (what draft heads read), or
        None (none yet, the last forward only filled the cache, or a runtime that cannot tell)."""
        ...

    def watch_hidden(self, sink: HiddenSink | None) -> bool:
        """Call ``sink(start, states, context)`` with every forward's final-normed hidden states,
        a prefill's included (None: stop); False when this runtime cannot."""
        ...

    def kv_rows(self, start: int, end: int) -> KVRows:
        """A copy of cached positions ``start .. end-1`` (a prefix cache keeps it)."""
        ...

    def put_kv_rows(self, start: int, rows: KVRows, tokens: torch.Tensor) -> None:
        """Write a copy from :meth:`kv_rows` (computed from ``tokens``) at ``start`` (at most the
        cached length); the cache then ends after it."""
        ...

    def kv_bytes_per_token(self) -> int:
        """Bytes one cached position takes (and its copy)."""
        ...

    def describe(self) -> str:
        """What runs this model (runtime and kernel), for keys of measurements cached per runtime."""
        ...

    def resident_bytes(self) -> dict[str, int]:
        """Bytes held resident: ``weights`` and ``kv_cache`` (0 where a runtime cannot tell)."""
        ...

    def weight_bytes(self) -> dict[str, int]:
        """Resident weight bytes by kind (embedding, head, linear, norms and biases; empty where a
        runtime cannot tell); they sum to ``resident_bytes()["weights"]``."""
        ...
