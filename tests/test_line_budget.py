"""The line budget (llama.vim's t_max_predict_ms): past the budget a completion ends at a line end."""

from __future__ import annotations

import pytest

from specd.engine.line_budget import LineBudget
from specd.engine.textstream import TextStream
from specd.requests import CompletionRequest, RequestError
from tests.tiny import tiny_tokenizer

BLOCK = "if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n"


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_within_the_budget_lines_pass_and_past_it_the_next_line_end_cuts() -> None:
    clock = Clock()
    budget = LineBudget(100.0, clock)
    assert budget.cut("if n < 2:") is None  # the clock starts at the first round
    clock.now = 0.05
    assert budget.cut("if n < 2:\n        return n") is None  # this newline came within 100 ms
    clock.now = 0.2
    assert budget.cut("if n < 2:\n        return n\n    ret") == len("if n < 2:\n        return n")
    assert budget.cut(BLOCK, final=True) == len("if n < 2:\n        return n")  # a cut stays where it was


def test_budget_zero_keeps_the_first_line_and_an_empty_first_line_does_not_count() -> None:
    budget = LineBudget(0.0, Clock())
    assert budget.cut("\n    x = 1") is None  # the completion starts on a new line: not a line end
    assert budget.cut("\n    x = 1\n    y") == len("\n    x = 1")
    assert not LineBudget(None).active and LineBudget(0).active


def test_the_stream_sends_whole_lines_and_stops() -> None:
    tok = tiny_tokenizer()
    clock = Clock()
    deltas: list[str] = []
    stream = TextStream(tok, (), deltas.append, (LineBudget(0.0, clock),))
    ids = tok.encode(BLOCK)
    stopped = next(n for n in range(1, len(ids) + 1) if stream.update(ids[:n]))
    assert stream.finish(ids[:stopped]) == "if n < 2:" and "".join(deltas) == "if n < 2:"


@pytest.mark.parametrize("bad", [-1, "10", True])
def test_a_bad_budget_is_refused(bad) -> None:
    with pytest.raises(RequestError, match="line_budget_ms"):
        CompletionRequest(prefix="x", line_budget_ms=bad).validate(100)
    assert CompletionRequest(prefix="x", line_budget_ms=0).validate(100).line_budget_ms == 0


def test_the_engine_ends_a_block_at_its_first_line_with_budget_zero() -> None:
    """Greedy, so the budgeted answer is the unbudgeted one cut at its first line end (a prompt
    whose tiny-model answer has a line end is searched for, so the cut is exercised)."""
    from tests.tiny import tiny_engine

    engine = tiny_engine()
    for n in range(40):
        prefix = f"def f{n}(x):\n    y = x + {n}\n    "
        full = engine.complete(CompletionRequest(prefix=prefix, max_tokens=48, k=0))
        body = len(full.text) - len(full.text.lstrip())
        if "\n" in full.text[body:].rstrip("\n"):
            break
    else:
        pytest.fail("no prompt gave a multi-line answer")
    engine.forget_suggestion()
    cut = engine.complete(CompletionRequest(prefix=prefix, max_tokens=48, k=0, line_budget_ms=0))
    assert cut.text == full.text[: full.text.index("\n", body)]
    assert cut.stats.stop_reason == "line_budget" and len(cut.tokens) < len(full.tokens)


def test_the_lsp_sends_its_budget_with_multi_line_requests_only() -> None:
    from specd.lsp.server import apply_options
    from specd.lsp.settings import LspSettings
    from specd.lsp.shaping import completion_request
    from specd.lsp.window import Window

    warnings: list[str] = []
    settings = apply_options(LspSettings(), {"lineBudgetMs": 250}, warnings.append)
    assert settings.line_budget_ms == 250 and not warnings
    assert apply_options(settings, {"lineBudgetMs": None}, warnings.append).line_budget_ms is None
    assert apply_options(settings, {"lineBudgetMs": -1}, warnings.append).line_budget_ms == 250 and warnings
    at_line_start = Window("def f():\n    ", "\n", "    ", "", 1, 4)
    mid_line = Window("def f():\n    x = g(", ")\n", "    x = g(", ")", 1, 10)
    assert completion_request(at_line_start, settings).line_budget_ms == 250
    req = completion_request(mid_line, settings)
    assert req.line_budget_ms is None and req.stop == ("\n",)
