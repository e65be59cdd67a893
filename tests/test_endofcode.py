"""A completion ends where it leaves code for a markdown fence (and the prose after it)."""

from __future__ import annotations

from specd.engine.endofcode import CodeEnd
from specd.engine.textstream import TextStream
from tests.tiny import tiny_tokenizer

CHATTY = "if n < 2:\n        return n\n    return fibonacci(n - 1) + fibonacci(n - 2)\n```\n\nIn this code, the function"


def test_a_fence_ends_the_completion_before_its_line() -> None:
    guard = CodeEnd("def fibonacci(n):\n    ")
    cut = guard.cut(CHATTY, final=True)
    assert CHATTY[:cut] == "if n < 2:\n        return n\n    return fibonacci(n - 1) + fibonacci(n - 2)"
    assert guard.cut("```python\nprint(1)\n", final=True) == 0
    assert guard.cut("x = 1\n~~~\n", final=True) == 5


def test_code_without_a_fence_is_never_cut() -> None:
    guard = CodeEnd("def f():\n    ")
    for text in ["return 1\n", "s = '```'\n", "    ```\n", "x = `a`\n", "# ``` in a comment\n"]:
        assert guard.cut(text, final=True) is None, text


def test_a_prefix_that_holds_a_fence_turns_the_rule_off() -> None:
    guard = CodeEnd('def f():\n    """Example:\n\n```\nf()\n```\n"""\n')
    assert not guard.active and guard.cut("x\n```\n", final=True) is None
    assert not CodeEnd("# Title\n\n~~~sh\nls\n~~~\n").active


def test_stream_never_sends_the_fence() -> None:
    tok = tiny_tokenizer()
    deltas: list[str] = []
    stream = TextStream(tok, (), deltas.append, (CodeEnd("def fibonacci(n):\n    "),))
    ids = tok.encode(CHATTY)
    stopped_at = None
    for n in range(1, len(ids) + 1):
        if stream.update(ids[:n]):
            stopped_at = n
            break
    assert stopped_at is not None and stopped_at < len(ids)  # generation stops at the fence
    text = stream.finish(ids[:stopped_at])
    assert text.endswith("fibonacci(n - 2)") and "`" not in "".join(deltas)
    assert "".join(deltas) == text
