"""Engine properties on tiny models: greedy speculative output is the target's greedy output."""

from __future__ import annotations

import pytest
import torch

from specd.engine.drafters import ModelDrafter
from specd.engine.engine import (Cancelled, CompletionRequest, Engine, EngineConfig, RequestError,
                                 VocabularyMismatch)
from specd.engine.sampling import SamplingParams
from specd.engine.speculative import Decoding, generate
from tests.tiny import TINY_VOCAB, tiny_decoder, tiny_engine, tiny_tokenizer
from tests.toy import TableLM, table

PREFIX = "def add(a, b):\n    return "
SUFFIX = "\n\nprint(add(1, 2))\n"


def _both(engine: Engine, **kw):
    spec = engine.complete(CompletionRequest(PREFIX, SUFFIX, mode="spec", **kw))
    target = engine.complete(CompletionRequest(PREFIX, SUFFIX, mode="target", **kw))
    return spec, target


@pytest.mark.parametrize("k", [1, 2, 3, 4, 8])
def test_greedy_matches_target(k: int) -> None:
    engine = tiny_engine(k=k)
    spec, target = _both(engine, max_tokens=40)
    assert spec.tokens == target.tokens and spec.text == target.text
    assert spec.stats.mode == "spec" and target.stats.mode == "target"
    assert spec.stats.drafted > 0


def test_greedy_matches_target_when_every_draft_is_accepted() -> None:
    engine = tiny_engine(target_seed=0, draft_seed=0, k=4)  # the draft is the target
    spec, target = _both(engine, max_tokens=30)
    assert spec.tokens == target.tokens
    s = spec.stats
    assert s.accepted == s.drafted > 0 and s.acceptance_rate == 1.0
    assert s.mean_accepted_len == pytest.approx(1 + s.accepted / s.rounds)


def test_greedy_matches_target_when_no_draft_is_accepted() -> None:
    """A draft whose argmax is the target's argmin: every draft rejected, output unchanged."""
    t = table(64, 12, seed=5)
    target, draft = TableLM(t), TableLM(-t)
    plain, _ = generate(target, [1, 2, 3], Decoding(20))
    target.rollback(0)
    out, stats = generate(target, [1, 2, 3], Decoding(20), ModelDrafter(draft), k=4)
    assert out == plain
    assert stats.accepted == 0 and stats.drafted > 0 and stats.rounds == 20


def test_k_zero_is_target_only() -> None:
    engine = tiny_engine(k=0)
    spec, target = _both(engine, max_tokens=20)
    assert spec.tokens == target.tokens and spec.stats.drafted == 0


def test_stop_token_inside_an_accepted_draft() -> None:
    """The stop token lands inside a fully accepted round: output ends right before it."""
    t = table(64, 8, seed=7)
    t[6, :, 5] = 100.0  # whatever comes at position 6, the next token is 5 (the stop token)
    target, draft = TableLM(t), TableLM(t.clone())
    plain, pstats = generate(target, [1, 2], Decoding(30, stop_ids=frozenset({5})))
    target.rollback(0)
    out, stats = generate(target, [1, 2], Decoding(30, stop_ids=frozenset({5})), ModelDrafter(draft),
                          k=8)
    assert out == plain and len(out) == 5 and 5 not in out
    assert stats.stop_reason == pstats.stop_reason == "stop_token"


def test_max_tokens_reached_inside_a_round() -> None:
    engine = tiny_engine(target_seed=0, draft_seed=0, k=8)
    for n in (1, 3, 5, 9):
        spec, target = _both(engine, max_tokens=n)
        assert len(spec.tokens) == n and spec.tokens == target.tokens
        assert spec.stats.stop_reason == "max_tokens"


def test_sampling_is_seeded_and_reproducible() -> None:
    engine = tiny_engine(k=3)
    a = engine.complete(CompletionRequest(PREFIX, max_tokens=20, temperature=0.8, seed=42))
    b = engine.complete(CompletionRequest(PREFIX, max_tokens=20, temperature=0.8, seed=42))
    others = [engine.complete(CompletionRequest(PREFIX, max_tokens=20, temperature=0.8, seed=s)).tokens
              for s in range(43, 53)]
    assert a.tokens == b.tokens and any(o != a.tokens for o in others)


def test_vocabulary_mismatch_is_refused() -> None:
    target = tiny_decoder(vocab=TINY_VOCAB, hidden=64)
    draft = tiny_decoder(vocab=TINY_VOCAB + 3, hidden=64)
    with pytest.raises(VocabularyMismatch, match=rf"{TINY_VOCAB + 3}.*{TINY_VOCAB}"):
        Engine(target, tiny_tokenizer(), draft, tiny_tokenizer(extra=3), EngineConfig())
    same_size = tiny_decoder(vocab=TINY_VOCAB, hidden=64)
    other = tiny_tokenizer()
    other._tok.add_tokens(["zzz"])  # one more token
    with pytest.raises(VocabularyMismatch, match="tokenizers differ"):
        Engine(target, tiny_tokenizer(), same_size, other, EngineConfig())


def test_stop_strings_and_streaming() -> None:
    engine = tiny_engine(k=4)
    full = engine.complete(CompletionRequest(PREFIX, max_tokens=40))
    assert len(full.text) > 6
    stop = full.text[3:5]
    deltas: list[str] = []
    cut = engine.complete(CompletionRequest(PREFIX, max_tokens=40, stop=(stop,)), on_delta=deltas.append)
    assert cut.text == full.text[: full.text.find(stop)]
    assert "".join(deltas) == cut.text
    assert cut.stats.stop_reason == "stop_string"


def test_cancellation_between_rounds() -> None:
    engine = tiny_engine(k=2)
    calls = []

    def cancelled() -> bool:
        calls.append(1)
        return len(calls) >= 3

    with pytest.raises(Cancelled):
        engine.complete(CompletionRequest(PREFIX, max_tokens=100), cancelled=cancelled)
    assert len(calls) == 3
    # the engine serves the next request normally, with the same result as a fresh engine
    again = engine.complete(CompletionRequest(PREFIX, SUFFIX, max_tokens=20))
    fresh = tiny_engine(k=2).complete(CompletionRequest(PREFIX, SUFFIX, max_tokens=20))
    assert again.tokens == fresh.tokens


def test_kv_reuse_equals_cold() -> None:
    engine = tiny_engine(k=3)
    first = engine.complete(CompletionRequest(PREFIX, SUFFIX, max_tokens=16))
    typed = engine.complete(CompletionRequest(PREFIX + "a", SUFFIX, max_tokens=16))
    assert typed.stats.prefill_reused > 0
    cold = tiny_engine(k=3).complete(CompletionRequest(PREFIX + "a", SUFFIX, max_tokens=16))
    assert typed.tokens == cold.tokens
    assert first.stats.prefill_reused == 0


@pytest.mark.parametrize("bad, field", [
    (dict(prefix="", suffix=""), "prefix"),
    (dict(max_tokens=0), "max_tokens"),
    (dict(max_tokens=-5), "max_tokens"),
    (dict(max_tokens=10**9), "max_tokens"),
    (dict(temperature=-1.0), "temperature"),
    (dict(top_p=1.5), "top_p"),
    (dict(mode="fast"), "mode"),
    (dict(k=-1), "k"),
    (dict(seed=-3), "seed"),
    (dict(stop=("",)), "stop"),
])
def test_bad_requests_name_the_field(bad: dict, field: str) -> None:
    engine = tiny_engine()
    req = dict(prefix="x = 1\n")
    req.update(bad)
    with pytest.raises(RequestError) as e:
        engine.complete(CompletionRequest(**req))
    assert e.value.field == field


def test_prompt_over_context_is_refused() -> None:
    from specd.engine.prompt import PromptWindows

    # a prefix window wider than the context (the default window, 384, would cut the prompt)
    engine = tiny_engine(max_len=512, windows=PromptWindows(max_prefix_tokens=1024))
    with pytest.raises(RequestError, match="exceeds the context"):
        engine.complete(CompletionRequest("x" * 500, max_tokens=100))


def test_prompt_windows_bound_the_prompt() -> None:
    from specd.engine.prompt import PromptWindows
    engine = tiny_engine(windows=PromptWindows(max_prefix_tokens=40, max_suffix_tokens=20))
    prefix = "".join(f"line {i}\n" for i in range(100))
    suffix = "".join(f"after {i}\n" for i in range(100))
    ids = engine.prompts.build(prefix, suffix)
    assert len(ids) <= 40 + 20 + 3
    text = engine.tokenizer.decode(ids)
    assert "line 99\n<|fim_suffix|>after 0\n" in text and text.startswith("<|fim_prefix|>line ")


def test_the_suffix_window_is_the_mid_line_one_where_text_precedes_the_cursor() -> None:
    """A key typed within a line makes the whole suffix window be computed again: there the window
    is ``mid_line_suffix_tokens``. After indentation only (a line start, an empty line in a block)
    it is ``max_suffix_tokens``, where what follows tells the model which block to write."""
    from specd.engine.prompt import PromptWindows
    windows = PromptWindows(max_prefix_tokens=40, max_suffix_tokens=60, mid_line_suffix_tokens=20)
    engine = tiny_engine(windows=windows)
    fim_suffix = engine.tokenizer.token_id("<|fim_suffix|>")
    suffix = "".join(f"after {i}\n" for i in range(100))  # 8-9 tokens a line (the byte tokenizer)

    def suffix_tokens(prefix: str) -> int:
        ids = engine.prompts.build(prefix, suffix)
        return len(ids) - ids.index(fim_suffix) - 2  # less <|fim_suffix|> and <|fim_middle|>

    for line_start in ("x = 1\n", "x = 1\n    ", "\t\t", ""):
        assert 60 - 9 <= suffix_tokens(line_start) <= 60
    for mid_line in ("x = 1\n    ret", "x = 1\n    return (", "r"):
        assert 20 - 9 <= suffix_tokens(mid_line) <= 20
    # the mid-line window never widens the suffix window; 0 (the default) is the suffix window itself
    assert PromptWindows(max_suffix_tokens=16, mid_line_suffix_tokens=256).suffix_tokens("x = (") == 16
    assert PromptWindows(max_suffix_tokens=48).suffix_tokens("x = (") == 48


def test_prefix_window_start_holds_while_typing() -> None:
    """Typing one character at a time past the window's size keeps the prompt's start (so the
    cached KV of the whole prompt) for a quarter window at a time. A window cut anew at every
    keystroke would move its start at every line typed (~25 characters here)."""
    from specd.engine.prompt import PromptWindows
    engine = tiny_engine(windows=PromptWindows(max_prefix_tokens=200, max_suffix_tokens=20))
    text = "".join(f"value_{i} = compute({i})\n" for i in range(40))
    starts = []
    for n in range(len(text) - 150, len(text)):  # the byte tokenizer: one token per character
        ids = engine.prompts.build(text[:n], "\n")
        assert len(ids) <= 200 + 20 + 3
        starts.append(engine.tokenizer.decode(ids[1:]).split("\n", 1)[0])
    changes = sum(a != b for a, b in zip(starts, starts[1:]))
    assert 1 <= changes <= 150 // 50 + 1  # in 50-token steps, not once per line (6 lines typed)


def test_special_token_text_in_the_file_is_not_a_control_token() -> None:
    engine = tiny_engine()
    ids = engine.prompts.build("a = '<|fim_suffix|>'\n", "")
    assert ids.count(engine.tokenizer.token_id("<|fim_suffix|>")) == 1
