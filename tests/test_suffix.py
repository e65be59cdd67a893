"""The engine stops where the completion starts repeating the suffix, and only there."""

from __future__ import annotations

from specd.engine.suffix import SuffixGuard


def test_repeated_next_line_is_cut_with_its_newline() -> None:
    guard = SuffixGuard("\n    return result\n")
    text = "    result = compute(x)\n    return result\n"
    i = guard.cut(text)
    assert i is not None and text[:i] == "    result = compute(x)"
    # completion + suffix reads as the file would
    assert text[:i] + "\n    return result\n" == "    result = compute(x)\n    return result\n"


def test_unfinished_line_is_not_judged_until_final() -> None:
    guard = SuffixGuard("\nreturn value\n")
    assert guard.cut("x = 1\nreturn value") is None  # may still grow into "return values"
    assert guard.cut("x = 1\nreturn value", final=True) == len("x = 1")
    assert guard.may_grow_into_match("x = 1\nreturn va")
    assert guard.may_grow_into_match("x = 1\n    ")
    assert not guard.may_grow_into_match("x = 1\nprint(")


def test_first_line_is_never_a_repeat_of_the_next_line() -> None:
    # the cursor line itself may legitimately equal the line after it
    guard = SuffixGuard("\nfoo()\n")
    assert guard.cut("foo()\nbar()\n") is None


def test_short_next_line_needs_its_follower() -> None:
    guard = SuffixGuard("\n}\n\nint main(void) {\n")
    inner_close = "if (x) {\n    y();\n}\nreturn 0;\n"
    assert guard.cut(inner_close) is None  # "}" closes the completion's own block
    repeat = "    y();\n}\n\nint main(void) {\n"
    i = guard.cut(repeat)
    assert i is not None and repeat[:i] == "    y();"


def test_rest_of_cursor_line_reproduced() -> None:
    guard = SuffixGuard("):\n        pass\n")
    text = "self, key, value):\n        self.data[key] = value\n"
    i = guard.cut(text)
    assert i is not None and text[:i] == "self, key, value"
    assert guard.cut("self, key") is None  # still on the first line


def test_no_suffix_no_guard() -> None:
    assert not SuffixGuard("").active
    assert SuffixGuard("").cut("anything\nat all\n", final=True) is None


def test_stream_never_sends_the_repeated_line() -> None:
    """Through the engine's text stream (the piece ``Engine.complete`` uses): token by token, the
    deltas add up to the cut text, and the repeated line is never sent."""
    from specd.engine.textstream import TextStream
    from tests.tiny import tiny_tokenizer

    tok = tiny_tokenizer()
    suffix = "\n    return total\n"
    deltas: list[str] = []
    stream = TextStream(tok, (), deltas.append, (SuffixGuard(suffix),))
    ids = tok.encode("    total += x\n    return total\n    print(1)\n")
    stopped_at = None
    for n in range(1, len(ids) + 1):
        if stream.update(ids[:n]):
            stopped_at = n
            break
    assert stopped_at is not None  # generation stops as soon as the repeated line is complete
    text = stream.finish(ids[:stopped_at])
    assert text == "    total += x"
    assert "".join(deltas) == text


def test_tokens_past_a_stop_are_not_returned() -> None:
    """Speculative rounds emit several tokens at once; when a stop (here the suffix guard) cuts
    the text, the tokens returned end where the text ends, in every mode."""
    from specd.engine.engine import _covering
    from tests.tiny import tiny_tokenizer

    tok = tiny_tokenizer()
    ids = tok.encode("    total += x\n    return total\n    print(1)\n")
    assert tok.decode(_covering(tok, ids, "    total += x")) == "    total += x"
    assert _covering(tok, ids, "") == []
