"""A prompt's prefill skips the output head (``forward(..., logits=False)``): the cache it leaves is
the one a scoring forward leaves, bit for bit, and the next token's logits are the same."""

from __future__ import annotations

import torch

from tests.tiny import tiny_decoder


def test_a_prefill_without_logits_leaves_the_same_cache() -> None:
    prompt = torch.randint(0, 60, (37,), generator=torch.Generator().manual_seed(3))
    scored, filled = tiny_decoder(seed=0), tiny_decoder(seed=0)
    scored.forward(prompt[:-1])
    out = filled.forward(prompt[:-1], logits=False)
    assert out.shape == (36, 0)
    assert filled.cache_len == scored.cache_len == 36
    assert torch.equal(filled.cache.k[:, :, :36], scored.cache.k[:, :, :36])
    assert torch.equal(filled.cache.v[:, :, :36], scored.cache.v[:, :, :36])
    assert torch.equal(filled.cache.tokens[:36], scored.cache.tokens[:36])
    assert torch.equal(filled.forward(prompt[-1:]), scored.forward(prompt[-1:]))
