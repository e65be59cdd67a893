"""Prompt layouts: ``psm`` (the whole prefix before the suffix) and ``psm-line`` (the cursor line's
typed text after ``<|fim_middle|>``), on the tiny models."""

from __future__ import annotations

import pytest

from specd.engine.config import EngineConfig
from specd.engine.engine import CompletionRequest
from specd.engine.prompt import PromptBuilder, PromptWindows
from specd.schema import ConfigError, from_table
from tests.tiny import tiny_engine, tiny_tokenizer

BEFORE = "import os\n\ndef main(argv):\n    parser = make_parser()\n"
LINE = "    parser.add_argument('--verbose', action='store_true')"
SUFFIX = "\n    return parser.parse_args(argv)\n"


def _builder(layout: str, **windows) -> PromptBuilder:
    windows.setdefault("max_suffix_tokens", 64)  # the tiny tokenizer: a token per byte
    return PromptBuilder(tiny_tokenizer(), PromptWindows(prompt_layout=layout, **windows))


def _before_middle(ids: list[int], builder: PromptBuilder) -> list[int]:
    return ids[: ids.index(builder.fim[2]) + 1]


def test_psm_line_keeps_every_token_up_to_the_middle_while_typing_within_a_line() -> None:
    builder = _builder("psm-line")
    heads = {tuple(_before_middle(builder.build(BEFORE + LINE[:n], SUFFIX), builder))
             for n in range(len(LINE) + 1)}
    assert len(heads) == 1
    # psm moves its prefix's end at every keystroke: the suffix after it changes position
    psm = _builder("psm")
    assert len({tuple(_before_middle(psm.build(BEFORE + LINE[:n], SUFFIX), psm)) for n in range(10, 20)}) == 10


def test_psm_line_puts_the_typed_text_after_the_middle_token() -> None:
    builder = _builder("psm-line")
    tok = builder.tokenizer
    typed = LINE[:20]
    text = tok.decode(builder.build(BEFORE + typed, SUFFIX))
    assert text == f"<|fim_prefix|>{BEFORE}<|fim_suffix|>{SUFFIX}<|fim_middle|>{typed}"


def test_layouts_agree_at_a_line_start() -> None:
    """Nothing typed on the cursor line: both layouts give the same tokens."""
    for prefix in (BEFORE, "", "x = 1\n\n"):
        assert _builder("psm").build(prefix, SUFFIX) == _builder("psm-line").build(prefix, SUFFIX)


def test_psm_line_suffix_keeps_the_rest_of_the_cursor_line() -> None:
    builder = _builder("psm-line")
    text = builder.tokenizer.decode(builder.build(BEFORE + "    f(a, ", "b)\n    return 1\n"))
    assert "<|fim_suffix|>b)\n    return 1\n<|fim_middle|>    f(a, " in text


def test_psm_line_windows_the_prefix_as_psm_does() -> None:
    """The prefix window is cut the same way; only the split at the cursor line differs."""
    prefix = "".join(f"value_{i} = compute({i})\n" for i in range(40)) + "total = sum(val"
    line, psm = _builder("psm-line", max_prefix_tokens=120), _builder("psm", max_prefix_tokens=120)
    tok = line.tokenizer
    a, b = tok.decode(line.build(prefix, "\n")), tok.decode(psm.build(prefix, "\n"))
    assert a.split("<|fim_suffix|>")[0] == b.split("<|fim_suffix|>")[0][: -len("total = sum(val")]
    assert a.endswith("<|fim_middle|>total = sum(val")
    assert len(line.build(prefix, "\n")) == len(psm.build(prefix, "\n"))


def test_unknown_layout_is_refused_naming_the_choices() -> None:
    with pytest.raises(ConfigError, match="engine.prompt_layout: must be one of psm, psm-line"):
        from_table(EngineConfig, "engine", {"prompt_layout": "spm"})
    with pytest.raises(ValueError, match="psm-line"):
        _builder("spm")
    assert from_table(EngineConfig, "engine", {"prompt_layout": "psm-line"}).windows.prompt_layout == "psm-line"


@pytest.mark.parametrize("k", [1, 3])
def test_greedy_speculative_equals_target_in_psm_line(k: int) -> None:
    engine = tiny_engine(k=k, windows=PromptWindows(prompt_layout="psm-line"))
    for n in (6, 15, 30):
        request = dict(prefix=BEFORE + LINE[:n], suffix=SUFFIX, max_tokens=24)
        spec = engine.complete(CompletionRequest(mode="spec", **request))
        target = engine.complete(CompletionRequest(mode="target", **request))
        assert spec.tokens == target.tokens and spec.text == target.text
        assert spec.stats.drafted > 0


def test_typing_within_a_line_recomputes_only_the_typed_tail_in_psm_line() -> None:
    """Through the engine's KV reuse: a keystroke in psm-line computes a few tokens of the typed
    text; in psm it computes the suffix again as well."""
    computed = {}
    for layout in ("psm", "psm-line"):
        engine = tiny_engine(k=2, windows=PromptWindows(prompt_layout=layout, max_suffix_tokens=64))
        costs = []
        for n in range(10, 20):
            engine.forget_suggestion()
            s = engine.complete(CompletionRequest(BEFORE + LINE[:n], SUFFIX, max_tokens=4)).stats
            costs.append(s.prompt_tokens - s.prefill_reused)
        computed[layout] = costs[1:]
    assert max(computed["psm-line"]) <= 2  # the byte tokenizer: the new character (+ the token fed last)
    assert min(computed["psm"]) >= len(SUFFIX)
