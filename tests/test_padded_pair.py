"""Draft and target that share a tokenizer pair up whatever their padding (issue #25: Qwen2.5-Coder
7B+ pads to 152,064 rows, the 0.5B draft to 151,936); a real tokenizer difference is refused with
a message naming it. Models are written by the tests: tiny GGUF files and Hugging Face directories
with a BPE vocabulary, their padding rows heavy enough to win if they were ever allowed."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from specd.engine.engine import CompletionRequest, Engine, EngineConfig, VocabularyMismatch
from specd.engine.vocabulary import shared_vocabulary
from specd.models.loader import LoadedModel, load_model
from tests.padded_models import REAL, SPECIALS, hf_tokenizer, real_tokens, save_hf_model, write_gguf_model
from tests.tiny import tiny_decoder

PROMPTS = [("def add(a, b):\n    return ", "\n\nprint(add(1, 2))\n"), ("import os\n\n\ndef main():\n", "")]


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("SPECD_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path


def _load(path: Path) -> LoadedModel:
    return load_model(str(path), quant="bf16", max_len=512)


def _engine(target: LoadedModel, draft: LoadedModel, k: int = 4) -> Engine:
    return Engine(target.model, target.tokenizer, draft.model, draft.tokenizer, EngineConfig(k=k, max_len=512))


def _assert_exact(engine: Engine) -> None:
    """Greedy speculative text == target-only text; sampled text holds only real tokens."""
    drafted = 0
    for prefix, suffix in PROMPTS:
        spec = engine.complete(CompletionRequest(prefix, suffix, max_tokens=32, mode="spec"))
        target = engine.complete(CompletionRequest(prefix, suffix, max_tokens=32, mode="target"))
        assert spec.tokens == target.tokens and spec.text == target.text
        assert spec.tokens and max(spec.tokens) < REAL, spec.tokens
        drafted += spec.stats.drafted
        for seed in range(3):
            sampled = engine.complete(CompletionRequest(prefix, suffix, max_tokens=24, temperature=1.0, seed=seed))
            assert sampled.tokens and max(sampled.tokens) < REAL and "[PAD" not in sampled.text
    assert drafted > 0


@pytest.mark.parametrize("target_rows, draft_rows", [(300, 272), (272, 300), (272, 272)])
def test_padded_gguf_pair_runs_and_matches_target_only(cache: Path, target_rows: int, draft_rows: int) -> None:
    """The target padded further than the draft (the issue's case), the other way round (a padding
    row the draft proposed would be past the target's embedding), and equal."""
    target = _load(write_gguf_model(cache / "target.gguf", target_rows, seed=0))
    draft = _load(write_gguf_model(cache / "draft.gguf", draft_rows, seed=1))
    assert (target.model.vocab_size, draft.model.vocab_size) == (target_rows, draft_rows)
    _assert_exact(_engine(target, draft))


def test_padded_pair_in_the_default_modes(cache: Path) -> None:
    """The target on the GGUF kernels (quant mode gguf), the draft in INT4: the same."""
    from specd.models import kernels

    if kernels.unavailable() is not None:
        pytest.skip(str(kernels.unavailable()))
    target = load_model(str(write_gguf_model(cache / "target.gguf", 300, seed=0)), quant="gguf", max_len=512)
    draft = load_model(str(write_gguf_model(cache / "draft.gguf", 272, seed=1)), quant="int4", max_len=512)
    _assert_exact(_engine(target, draft))


def test_gguf_draft_with_a_hugging_face_target(cache: Path) -> None:
    """A padded Hugging Face directory (tokenizer.json holds only the real tokens) as the target,
    a GGUF draft whose tokenizer transformers builds from the file (with [PADn] entries)."""
    target = _load(save_hf_model(cache / "target-hf", rows=320, seed=0))
    draft = _load(write_gguf_model(cache / "draft.gguf", 272, seed=1))
    assert target.tokenizer.vocab_size == REAL and draft.tokenizer.vocab_size == 272
    _assert_exact(_engine(target, draft, k=3))


def test_a_different_token_text_is_refused(cache: Path) -> None:
    target = _load(write_gguf_model(cache / "target.gguf", 300, seed=0))
    tokens = real_tokens()
    tokens[100], tokens[101] = tokens[101], tokens[100]
    draft = _load(write_gguf_model(cache / "draft.gguf", 272, seed=1, tokens=tokens))
    with pytest.raises(VocabularyMismatch) as err:
        _engine(target, draft)
    message = str(err.value)
    assert "tokenizers differ" in message and "id 100" in message
    assert repr(tokens[100]) in message and repr(tokens[101]) in message, message


def test_a_different_fim_id_is_refused(cache: Path) -> None:
    target = _load(write_gguf_model(cache / "target.gguf", 300, seed=0))
    specials = list(SPECIALS)
    middle, suffix = specials.index("<|fim_middle|>"), specials.index("<|fim_suffix|>")
    specials[middle], specials[suffix] = specials[suffix], specials[middle]
    draft = _load(write_gguf_model(cache / "draft.gguf", 300, seed=1, specials=specials))
    fim_middle = target.tokenizer.token_id("<|fim_middle|>")
    with pytest.raises(VocabularyMismatch, match=rf"<\|fim_middle\|> is id {fim_middle} in the target and "
                                                 rf"id {draft.tokenizer.token_id('<|fim_middle|>')} in the draft"):
        _engine(target, draft)


def test_different_merges_are_refused() -> None:
    model = tiny_decoder(vocab=REAL, hidden=64)
    with pytest.raises(VocabularyMismatch, match=r"merges differ: the target has 1, the draft 0; at rank 0 the "
                                                 r"target merges 'Ġ' \+ 't', the draft nothing"):
        Engine(model, hf_tokenizer(), tiny_decoder(vocab=REAL, hidden=64), hf_tokenizer(merges=[]), EngineConfig())


def test_a_model_without_a_row_for_every_real_token_is_refused() -> None:
    tok = hf_tokenizer()
    with pytest.raises(VocabularyMismatch, match=rf"the draft has 200 token rows, too few for its tokenizer's "
                                                 rf"{REAL} real tokens"):
        Engine(tiny_decoder(vocab=300, hidden=64), tok, tiny_decoder(vocab=200, hidden=64), hf_tokenizer(),
               EngineConfig())


def test_the_shared_vocabulary_is_a_cut_to_the_real_ids() -> None:
    """Padding rows past the last real id are cut (no mask needed); a [PADn] placeholder inside
    the tokenizer is masked."""
    allowed = shared_vocabulary(hf_tokenizer(), 300, hf_tokenizer(), 272)
    assert allowed.shape == (REAL,) and bool(allowed.all())
    padded = hf_tokenizer()
    padded._tok.add_special_tokens(["[PAD266]", "<|extra|>"])  # a placeholder, then a real token
    allowed = shared_vocabulary(padded, 300)
    assert allowed.shape == (REAL + 2,) and allowed.tolist() == [True] * REAL + [False, True]
    assert shared_vocabulary(padded, REAL).shape == (REAL,)  # target alone: ids past its rows are not real to it
    assert torch.equal(shared_vocabulary(hf_tokenizer(), 272), torch.ones(REAL, dtype=torch.bool))


class _PaddedRows:
    """A real model seen with ``extra`` more output rows, as Qwen2.5-Coder 7B+ has over the 1.5B
    (152,064 vs 151,936): each padding logit is above the row's maximum, so it would win every
    argmax if it were ever allowed. Everything else is the model's own."""

    def __init__(self, model, extra: int) -> None:
        self._model, self._extra = model, extra

    def __getattr__(self, name: str):
        return getattr(self._model, name)

    @property
    def vocab_size(self) -> int:
        return self._model.vocab_size + self._extra

    @property
    def max_len(self) -> int:
        return self._model.max_len

    @property
    def cache_len(self) -> int:
        return self._model.cache_len

    def forward(self, tokens, positions=None, attn_mask=None, *, logits=True):
        out = self._model.forward(tokens, positions, attn_mask, logits=logits)
        if not logits or out.shape[-1] == 0:
            return out
        pad = out.max(dim=-1, keepdim=True).values + 10.0
        return torch.cat([out, pad.expand(*out.shape[:-1], self._extra)], dim=-1)


@pytest.mark.real_models
def test_the_real_pair_with_the_target_padded_as_7b(real_engine) -> None:
    """The pulled 1.5B target seen as the 7B is (128 more rows, its tokenizer with 128 more [PADn]
    entries) beside the 0.5B draft: accepted (the old check refused exactly this: "draft has
    151936 token rows, target 152064"), and greedy speculative text == target-only text."""
    import dataclasses

    from specd.models.tokenizer import Tokenizer

    base = real_engine.tokenizer
    rows = real_engine.target.vocab_size
    from tokenizers import Tokenizer as HFTokenizer

    inner = HFTokenizer.from_str(base._tok.to_str())
    inner.add_special_tokens([f"[PAD{rows + i}]" for i in range(128)])
    padded_tok = Tokenizer(inner)
    assert padded_tok.vocab_size == 152_064 and not padded_tok.identical(base)
    target = _PaddedRows(real_engine.target, 128)
    assert target.vocab_size == 152_064 and real_engine.draft.vocab_size == 151_936
    engine = Engine(target, padded_tok, real_engine.draft, base, dataclasses.replace(real_engine.config, k=4))
    real = len(base.real_token_ids())
    for prefix, suffix in (("def fibonacci(n):\n    ", "\n\nprint(fibonacci(10))\n"),
                           ("import argparse\n\n\ndef parse_args():\n    parser = argparse.ArgumentParser()\n", "")):
        spec = engine.complete(CompletionRequest(prefix, suffix, max_tokens=24, mode="spec"))
        plain = engine.complete(CompletionRequest(prefix, suffix, max_tokens=24, mode="target"))
        assert spec.tokens == plain.tokens and spec.text.strip()
        assert max(spec.tokens) < real and spec.stats.accepted > 0
    engine.reset()


def test_the_daemon_names_the_difference_and_exits(cache: Path, monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """``specd serve`` with a draft whose token text differs: one error line naming it, exit 2."""
    from specd.cli import main

    monkeypatch.setenv("XDG_CONFIG_HOME", str(cache / "no-config"))
    target = write_gguf_model(cache / "target.gguf", 300, seed=0)
    tokens = real_tokens()
    tokens[100], tokens[101] = tokens[101], tokens[100]
    draft = write_gguf_model(cache / "draft.gguf", 272, seed=1, tokens=tokens)
    args = ["serve", "--socket", str(cache / "specd.sock"), "--target", str(target), "--target-quant", "bf16",
            "--draft-quant", "bf16", "--max-len", "512", "--k", "2"]
    assert main([*args, "--draft", str(draft)]) == 2
    err = capsys.readouterr().err
    assert f"specd: error: draft and target tokenizers differ: the draft has {REAL} real tokens, the target {REAL}; " \
           f"id 100 is {tokens[100]!r} in the draft and {tokens[101]!r} in the target" in err, err
