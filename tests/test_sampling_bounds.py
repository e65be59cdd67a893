"""Sampling never leaves the tokenizer's real vocabulary, and extreme temperatures either act as
greedy (tiny ones) or are refused with a clear range (huge ones)."""

from __future__ import annotations

import pytest
import torch

from specd.engine.engine import CompletionRequest, Engine, EngineConfig, RequestError
from specd.engine.sampling import GREEDY_BELOW, MAX_TEMPERATURE, SamplingParams, restrict, warp
from tests.tiny import SPECIALS, TINY_VOCAB, tiny_decoder, tiny_tokenizer

PADS = 10  # tokenizer entries named [PADn], as GGUF conversions write them
ROWS = TINY_VOCAB + PADS + 30  # ... and embedding rows past the tokenizer's last id


def padded_engine(k: int = 4) -> Engine:
    """Tiny models whose padding rows would win every argmax and most samples if allowed."""
    from tokenizers import Tokenizer as HFTokenizer

    from specd.models.tokenizer import Tokenizer

    models = []
    for seed in (0, 1):
        m = tiny_decoder(seed=seed, dtype=torch.float32, vocab=ROWS, hidden=64, max_len=512)
        m.lm_head.weight[256:TINY_VOCAB] *= 0.01  # rarely stop
        m.lm_head.weight[TINY_VOCAB:] *= 20.0  # the padding rows dominate the raw logits
        models.append(m)
    inner: HFTokenizer = tiny_tokenizer()._tok
    inner.add_special_tokens([f"[PAD{TINY_VOCAB + i}]" for i in range(PADS)])
    tok = Tokenizer(inner)
    assert tok.vocab_size == TINY_VOCAB + PADS and len(SPECIALS) == TINY_VOCAB - 256
    return Engine(models[0], tok, models[1], tok, EngineConfig(k=k, max_len=512))


def test_real_token_ids_exclude_placeholders() -> None:
    tok = padded_engine().tokenizer
    assert tok.real_token_ids() == list(range(TINY_VOCAB))


@pytest.mark.parametrize("temperature, mode", [(0.0, "spec"), (0.0, "target"), (1.0, "spec"), (50.0, "spec"),
                                               (MAX_TEMPERATURE, "target")])
def test_padding_rows_are_never_produced(temperature: float, mode: str) -> None:
    engine = padded_engine()
    for seed in range(3):
        c = engine.complete(CompletionRequest(prefix="def f(x):\n", max_tokens=24, temperature=temperature,
                                              seed=seed, mode=mode))
        assert c.tokens and max(c.tokens) < TINY_VOCAB, c.tokens
        assert "[PAD" not in c.text


@pytest.mark.parametrize("temperature", [1e-38, 1e-30, 1e-8, GREEDY_BELOW / 2])
def test_an_underflowing_temperature_is_greedy(temperature: float) -> None:
    engine = padded_engine()
    greedy = engine.complete(CompletionRequest(prefix="import os\n", max_tokens=16)).text
    engine.reset()
    tiny = engine.complete(CompletionRequest(prefix="import os\n", max_tokens=16, temperature=temperature, seed=5))
    assert tiny.text == greedy


@pytest.mark.parametrize("temperature", [MAX_TEMPERATURE * 1.01, 1e308, float("inf"), float("nan"), -1e-9])
def test_an_out_of_range_temperature_is_refused_naming_the_range(temperature: float) -> None:
    with pytest.raises(RequestError) as err:
        CompletionRequest(prefix="x", temperature=temperature).validate(512)
    assert err.value.field == "temperature" and f"[0, {MAX_TEMPERATURE:g}]" in str(err.value)


def test_warp_never_overflows_and_respects_the_allowed_ids() -> None:
    logits = torch.tensor([[3.0, 1.0, 9.0, -2.0]])
    allowed = torch.tensor([True, True, False, True])
    for t in (1e-3, 0.5, 1.0, MAX_TEMPERATURE):
        p = warp(logits, SamplingParams(t, allowed=allowed))
        assert torch.isfinite(p).all() and p[0, 2] == 0 and abs(float(p.sum()) - 1) < 1e-6
    assert int(restrict(logits, SamplingParams(allowed=allowed)).argmax()) == 0
    # a model with more rows than the allowed row covers: the extra rows are outside
    wide = torch.tensor([[0.0, 0.0, 0.0, 0.0, 50.0]])
    assert int(restrict(wide, SamplingParams(allowed=allowed)).argmax()) in (0, 1, 3)
