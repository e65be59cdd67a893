"""The draft's prompt window (``draft_prompt_tokens``): the draft reads the text nearest the
cursor, the target the whole prompt; the output stays the target's, and the draft's caches stay
consistent while the window slides."""

from __future__ import annotations

import pytest
import torch

from specd.engine.config import EngineConfig, PromptWindows
from specd.engine.draft_window import DraftWindow, WindowedDrafter
from specd.engine.drafters import ModelDrafter
from specd.engine.policy import FixedK
from specd.engine.prompt import PromptBuilder
from specd.engine.sampling import SamplingParams
from specd.engine.speculative import Decoding, generate
from specd.requests import CompletionRequest
from specd.schema import ConfigError, from_table
from tests.test_sampling import _chi2_pvalue
from tests.toy import TableLM, exact_joint, table
from tests.tiny import tiny_engine, tiny_tokenizer

SOURCE = "".join(f"def f{i}(x):\n    return x * {i} + {i % 3}\n" for i in range(14))  # ~400 byte tokens
SUFFIX = "\nprint(f3(2))\n"
CONTEXT = "<|repo_name|>demo\n<|file_sep|>util.py\ndef helper(a):\n    return a\n<|file_sep|>main.py\n"
WINDOW = 96
SMALL = PromptWindows(max_prefix_tokens=400, max_suffix_tokens=24, max_context_tokens=200)


def _builder() -> PromptBuilder:
    return PromptBuilder(tiny_tokenizer(), SMALL)


def _window(builder: PromptBuilder, limit: int = WINDOW) -> DraftWindow:
    return DraftWindow(limit, builder.fim, builder.tokenizer)


def test_draft_prompt_keeps_the_fim_structure_nearest_the_cursor() -> None:
    builder = _builder()
    p, s, m = builder.fim
    prompt = builder.build(SOURCE, SUFFIX, CONTEXT)
    draft = _window(builder).cut(prompt)
    assert len(draft.tokens) <= WINDOW < len(prompt)
    assert draft.tokens[0] == p and draft.tokens.count(p) == 1
    tail = prompt[prompt.index(s):]  # <|fim_suffix|>{suffix}<|fim_middle|>
    assert draft.tokens[-len(tail):] == tail
    target_prefix = prompt[prompt.index(p) + 1 : prompt.index(s)]
    draft_prefix = draft.tokens[1 : -len(tail)]
    assert draft_prefix and target_prefix[-len(draft_prefix):] == draft_prefix  # the text nearest the cursor
    assert builder.markers["<|file_sep|>"] not in draft.tokens  # the repository context went first
    assert builder.tokenizer.decode([target_prefix[-len(draft_prefix) - 1]]) == "\n"  # cut at a line start
    assert draft.view(prompt + [7, 8]) == draft.tokens + [7, 8]


def test_the_context_is_dropped_before_any_prefix_text() -> None:
    builder = _builder()
    prompt = builder.build(SOURCE[:150], SUFFIX, CONTEXT)
    bare = builder.build(SOURCE[:150], SUFFIX)
    assert len(bare) < len(prompt)
    draft = _window(builder, len(bare)).cut(prompt)
    assert draft.tokens == bare and draft.shift == len(prompt) - len(bare)


@pytest.mark.parametrize("limit", [0, 10_000])
def test_a_prompt_that_fits_is_the_draft_prompt(limit: int) -> None:
    builder = _builder()
    prompt = builder.build(SOURCE, SUFFIX, CONTEXT)
    draft = _window(builder, limit).cut(prompt)
    assert draft.tokens == prompt and draft.shift == 0


def test_the_draft_window_start_holds_while_typing() -> None:
    """Typing moves the window's start once per quarter window (a step), not per keystroke."""
    builder = _builder()
    window = _window(builder)
    typed = "def g(y):\n    return [y, y + 1, y * 2, y ** 3, -y, y // 2, y % 5]\n" * 2
    tail = len(builder.build("", SUFFIX)) - 1  # <|fim_suffix|>{suffix}<|fim_middle|>
    starts = []
    for n in range(len(typed) + 1):
        prefix = SOURCE[:200] + typed[:n]
        draft = window.cut(builder.build(prefix, SUFFIX))
        starts.append(len(prefix) - (len(draft.tokens) - 1 - tail))  # byte tokens: a document offset
    moves = sum(a != b for a, b in zip(starts, starts[1:]))
    assert 0 < moves <= len(typed) // window.step + 1


def _spec_and_target(**config):
    spec = tiny_engine(target_seed=0, draft_seed=0, draft_prompt_tokens=WINDOW, windows=SMALL, **config)
    target = tiny_engine(target_seed=0, draft_seed=None, windows=SMALL, **{k: v for k, v in config.items()
                                                                       if k not in ("drafter", "tree")})
    return spec, target


@pytest.mark.parametrize("config", [dict(k=3), dict(k=4, drafter="both"), dict(k=3, tree="on")],
                         ids=["chain", "ngram-and-model", "tree"])
def test_greedy_spec_with_a_draft_window_is_target_only(config: dict) -> None:
    """The draft (the target's own weights, reading a shorter prompt) is sometimes right, sometimes
    not; the text is the target's either way, and the draft's cache holds only its window."""
    spec, target = _spec_and_target(**config)
    accepted = 0
    for context in ("", CONTEXT):
        request = CompletionRequest(SOURCE, SUFFIX, context=context, max_tokens=24, temperature=0.0)
        got = spec.complete(request)
        assert got.text == target.complete(request).text
        assert got.tokens == target.complete(request).tokens
        assert got.stats.prompt_tokens > WINDOW
        assert spec.draft.cache_len <= WINDOW + 24 + 8  # its window, the output, a round's drafts
        accepted += got.stats.accepted
    assert accepted > 0


def test_keystrokes_and_warm_reuse_the_draft_window_and_stay_exact() -> None:
    spec, target = _spec_and_target(k=3)
    prefix = SOURCE
    first = CompletionRequest(prefix, SUFFIX, max_tokens=6, temperature=0.0)
    assert spec.warm(first) == len(spec.prompts.build(prefix, SUFFIX)) - 1
    draft_prompt = spec.draft_window.cut(spec.prompts.build(prefix, SUFFIX)).tokens
    assert spec.draft.cache_len == len(draft_prompt) - 1
    assert spec.draft.common_prefix(torch.tensor(draft_prompt[:-1])) == len(draft_prompt) - 1
    tail = len(spec.prompts.build("", SUFFIX)) - 1
    kept = []
    for ch in "def h(z):\n    return z + 1\n":
        prefix += ch
        request = CompletionRequest(prefix, SUFFIX, max_tokens=6, temperature=0.0)
        upcoming = spec.draft_window.cut(spec.prompts.build(prefix, SUFFIX)).tokens
        # the draft cache already holds the new window up to the typed text, unless the window's
        # start moved (at most once a step)
        kept.append(spec.draft.common_prefix(torch.tensor(upcoming[:-1])) >= len(upcoming) - 1 - tail - 2)
        got = spec.complete(request)
        assert got.text == target.complete(request).text
    assert sum(kept) >= len(kept) - 2


def test_typing_along_a_suggestion_with_a_draft_window_stays_exact() -> None:
    """The rest of the last suggestion is offered as free drafts (the draft model idle), then the
    draft model takes over from its window, behind by those tokens."""
    spec, target = _spec_and_target(k=3)
    shown = spec.complete(CompletionRequest(SOURCE, SUFFIX, max_tokens=16, temperature=0.0)).text
    assert len(shown) >= 4
    request = CompletionRequest(SOURCE + shown[:2], SUFFIX, max_tokens=16, temperature=0.0)
    got = spec.complete(request)
    assert got.lookahead > 0  # the lookahead drafts were used
    assert got.text == target.complete(request).text


def test_the_prefix_cache_restores_the_draft_window_of_a_file_edited_before() -> None:
    spec, target = _spec_and_target(k=3, prefix_cache_mb=64, prefix_block_tokens=16)
    other = "".join(f"class C{i}:\n    value = {i}\n" for i in range(25))
    a = CompletionRequest(SOURCE, SUFFIX, max_tokens=8, temperature=0.0)
    b = CompletionRequest(other, "\n", max_tokens=8, temperature=0.0)
    spec.complete(a)
    spec.complete(b)
    before = spec.prefix_cache.stats.computed_tokens
    got = spec.complete(a)
    # both models restore their blocks (the draft's keyed by its own window's tokens): each computes
    # at most its last partial block again
    assert spec.prefix_cache.stats.computed_tokens - before <= 2 * 16
    assert got.stats.prefill_reused > 0
    assert got.text == target.complete(a).text


def test_a_draft_window_too_small_for_the_suffix_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"engine\.draft_prompt_tokens: must be >= 0"):
        from_table(EngineConfig, "engine", {"draft_prompt_tokens": -1})
    assert from_table(EngineConfig, "engine", {"draft_prompt_tokens": 256}).draft_prompt_tokens == 256
    with pytest.raises(ConfigError, match=r"engine\.draft_prompt_tokens: 30 leaves no room .* at least 43\b"):
        tiny_engine(draft_prompt_tokens=30, windows=PromptWindows(max_suffix_tokens=24))


@pytest.mark.slow
def test_sampled_output_with_a_draft_window_follows_the_target() -> None:
    """The draft reads a shorter prompt (so other positions of its table): the rejection rule still
    gives the target's joint distribution of the next three tokens."""
    vocab, n_new, samples = 3, 3, 12_000
    prompt = [1, 2, 0, 2, 1]
    tgt, drf = TableLM(table(16, vocab, seed=11)), TableLM(table(16, vocab, seed=12, scale=1.0))
    exact = exact_joint(tgt, prompt, n_new)
    counts = torch.zeros_like(exact)
    g = torch.Generator().manual_seed(3)
    window = DraftWindow(3, None, tiny_tokenizer())
    params = SamplingParams(temperature=1.0)
    for _ in range(samples):
        drafter = WindowedDrafter(ModelDrafter(drf), window.cut(prompt))
        out, _ = generate(tgt, prompt, Decoding(n_new, params, generator=g), drafter, k=FixedK(2))
        counts[tuple(out)] += 1
    assert drf.cache_len <= 3 + n_new + 2
    assert _chi2_pvalue(counts.flatten(), exact.flatten() * samples) > 1e-4
