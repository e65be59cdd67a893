"""The bytes one decode step must read from memory: what bounds a memory-bound step from below."""

from __future__ import annotations

from collections.abc import Mapping


def step_bytes(weights: Mapping[str, int]) -> int:
    """Bytes one decode step (one token) reads, from a model's ``weight_bytes()`` (resident bytes
    by kind): every linear layer of every decoder layer, plus the output head as held (a
    sub-vocabulary draft head is a copy of its rows only, and counts those). Not the embedding (a
    token reads one of its rows) nor the norms and biases (a few KiB). A tied head held as the
    embedding itself is reported as ``head`` 0: the step then reads the whole embedding as its
    head, and it counts. 0 where the runtime cannot tell its bytes (an empty ``weights``)."""
    head = weights.get("head", 0) or weights.get("embedding", 0)
    return int(weights.get("linear", 0) + head) if weights else 0
