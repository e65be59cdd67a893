"""The draft's sub-vocabulary head: frequent tokens only, zero probability elsewhere, output
still exactly the target's."""

from __future__ import annotations

import torch

from specd.app import build_engine
from specd.engine.engine import CompletionRequest, EngineConfig
from specd.models import subvocab
from specd.models.loader import load_model
from tests.tiny import save_tiny_model, tiny_tokenizer


def test_ranking_counts_real_text(tmp_path) -> None:
    src = tmp_path / "a.py"
    src.write_text("aaaa bb a\n")
    ranked = subvocab.rank_tokens(tiny_tokenizer(), [src])
    tok = tiny_tokenizer()
    a, b = tok.encode("a")[0], tok.encode("b")[0]
    specials = [tok.token_id("<|endoftext|>"), tok.token_id("<|fim_middle|>")]
    assert all(s in ranked[:9] for s in specials)  # stop/FIM tokens always kept
    assert ranked.index(a) < ranked.index(b)


def test_subvocab_head_gives_minus_inf_outside(tmp_path) -> None:
    d = save_tiny_model(tmp_path / "d", seed=1)
    src = tmp_path / "code.py"
    src.write_text("def f(x):\n    return x + 1\n" * 20)
    subvocab.build(d, tiny_tokenizer(), [src])
    full = load_model(str(d), quant="bf16", max_len=64).model
    sub = load_model(str(d), quant="bf16", max_len=64, head_vocab=30).model
    rows = sub.head_rows
    assert rows is not None and len(rows) == 30
    ids = torch.tensor([1, 2, 3])
    a, b = full.forward(ids), sub.forward(ids)
    outside = torch.ones(a.shape[-1], dtype=torch.bool)
    outside[rows] = False
    assert torch.isinf(b[:, outside]).all() and bool((b[:, outside] < 0).all())
    assert torch.equal(a[:, rows], b[:, rows])


def test_greedy_and_sampling_with_subvocab_draft(tmp_path) -> None:
    t, d = save_tiny_model(tmp_path / "t", seed=0), save_tiny_model(tmp_path / "d", seed=1)
    src = tmp_path / "code.py"
    src.write_text("for i in range(10):\n    print(i)\n" * 20)
    subvocab.build(d, tiny_tokenizer(), [src])
    engine = build_engine(EngineConfig(target=str(t), draft=str(d), max_len=256, draft_head_vocab=24))
    spec = engine.complete(CompletionRequest("for i in ", max_tokens=24, k=3))
    plain = engine.complete(CompletionRequest("for i in ", max_tokens=24, mode="target"))
    assert spec.tokens == plain.tokens
    sampled = engine.complete(CompletionRequest("for i in ", max_tokens=24, k=3, temperature=1.0, seed=1))
    assert len(sampled.tokens) > 0  # tokens outside the draft head come out as recovered/bonus
