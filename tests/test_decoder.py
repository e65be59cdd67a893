"""The runtime's logits match transformers' Qwen2 on the same weights; the KV cache rolls back."""

from __future__ import annotations

import pytest
import torch

from tests.tiny import tiny_config, tiny_decoder, tiny_weights
from specd.models.decoder import Decoder


def _hf_model(config, weights):
    transformers = pytest.importorskip("transformers")
    hf_cfg = transformers.Qwen2Config(**{k: v for k, v in config.to_hf().items()
                                         if k not in ("architectures", "model_type")})
    model = transformers.Qwen2ForCausalLM(hf_cfg).eval()
    missing, unexpected = model.load_state_dict(weights, strict=False)
    assert not unexpected, unexpected
    assert all(m == "lm_head.weight" for m in missing), missing  # tied heads have no lm_head entry
    return model


@pytest.mark.parametrize("tie", [False, True])
def test_logits_match_transformers(tie: bool) -> None:
    config = tiny_config(tie=tie)
    weights = tiny_weights(config, seed=1)
    ours = Decoder(config, weights, compute_dtype=torch.float32, max_len=64)
    hf = _hf_model(config, weights)
    ids = torch.randint(0, config.vocab_size, (1, 12), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        ref = hf(ids).logits[0]
    # prompt in two chunks through the cache, then one token at a time
    out = torch.cat([ours.forward(ids[0, :5]), ours.forward(ids[0, 5:9]),
                     *[ours.forward(ids[0, i:i + 1]) for i in range(9, 12)]])
    torch.testing.assert_close(out, ref, atol=1e-4, rtol=1e-4)


def test_rollback_recomputes_identically() -> None:
    model = tiny_decoder(seed=3)
    ids = torch.arange(10) % model.vocab_size
    first = model.forward(ids)
    model.rollback(4)
    assert model.cache_len == 4
    again = model.forward(ids[4:])
    torch.testing.assert_close(again, first[4:], atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError):
        model.rollback(11)


def test_tree_mask_equals_separate_branches() -> None:
    """Two branches after a shared prefix, scored in one forward with a tree mask and explicit
    positions, give the same logits as each branch scored alone."""
    model = tiny_decoder(seed=4)
    prefix = torch.tensor([1, 2, 3])
    a, b = torch.tensor([7, 8]), torch.tensor([9])
    model.forward(prefix)
    la = model.forward(a)
    model.rollback(3)
    lb = model.forward(b)
    model.rollback(3)
    tokens = torch.cat([a, b])
    positions = torch.tensor([3, 4, 3])
    mask = torch.tensor([[1, 0, 0], [1, 1, 0], [0, 0, 1]], dtype=torch.bool)
    tree = model.forward(tokens, positions=positions, attn_mask=mask)
    torch.testing.assert_close(tree[:2], la, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(tree[2:], lb, atol=1e-5, rtol=1e-5)
    # keep branch b only: it becomes position 3 in the cache
    model.cache.keep(3, torch.tensor([2]))
    assert model.cache_len == 4 and int(model.cache.tokens[3]) == 9


@pytest.mark.parametrize("context", [8, 700])
def test_bf16_logits_do_not_depend_on_batch(context: int) -> None:
    """Batch invariance: a position's logits are bit-identical whether it is scored alone or with
    others (bf16 path). Greedy speculative == greedy target-only rests on this. At 700 cached
    positions one batched attention matmul over all rows broke it (logits moved by 0.16)."""
    model = tiny_decoder(seed=5, dtype=torch.bfloat16, hidden=64, heads=4, kv_heads=2, max_len=1024)
    ids = torch.randint(0, model.vocab_size, (context + 12,), generator=torch.Generator().manual_seed(6))
    model.forward(ids[:context])
    together = model.forward(ids[context:])
    model.rollback(context)
    alone = torch.cat([model.forward(ids[i:i + 1]) for i in range(context, context + 12)])
    assert torch.equal(together, alone)


def test_prefill_in_one_or_many_chunks_gives_identical_caches() -> None:
    """A warm request (cache reused, a few new tokens) computes what a cold one does, bit for bit."""
    model = tiny_decoder(seed=7, dtype=torch.bfloat16, hidden=64, heads=4, kv_heads=2, max_len=1024)
    ids = torch.randint(0, model.vocab_size, (640,), generator=torch.Generator().manual_seed(8))
    cold = model.forward(ids)[-1]
    model.rollback(0)
    model.forward(ids[:600])
    warm = model.forward(ids[600:])[-1]
    assert torch.equal(cold, warm)


def test_tree_rows_are_bit_identical_to_sequential_runs() -> None:
    """A long cached prefix, then a tree: root, chain c1 c2, and a sibling s of c1. Every row's
    logits equal, bit for bit, the logits of the same tokens fed one at a time along their branch."""
    model = tiny_decoder(seed=9, dtype=torch.bfloat16, hidden=64, heads=4, kv_heads=2, max_len=1024)
    prefix = torch.randint(0, model.vocab_size, (650,), generator=torch.Generator().manual_seed(10))
    root, c1, c2, sib = 11, 22, 33, 44
    model.forward(prefix)
    chain = torch.cat([model.forward(torch.tensor([t])) for t in (root, c1, c2)])
    model.rollback(650)
    branch = torch.cat([model.forward(torch.tensor([t])) for t in (root, sib)])
    model.rollback(650)
    mask = torch.tensor([[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [1, 0, 0, 1]], dtype=torch.bool)
    tree = model.forward(torch.tensor([root, c1, c2, sib]), positions=torch.tensor([650, 651, 652, 651]),
                         attn_mask=mask)
    assert torch.equal(tree[:3], chain)
    assert torch.equal(tree[3], branch[1])


def test_context_overflow_is_a_clear_error() -> None:
    model = tiny_decoder(max_len=8)
    with pytest.raises(ValueError, match="context full"):
        model.forward(torch.zeros(9, dtype=torch.long))


def test_common_prefix() -> None:
    model = tiny_decoder()
    model.forward(torch.tensor([1, 2, 3, 4]))
    assert model.cache.common_prefix(torch.tensor([1, 2, 9])) == 2
    assert model.cache.common_prefix(torch.tensor([1, 2, 3, 4, 5])) == 4
    assert model.cache.common_prefix(torch.tensor([5])) == 0
