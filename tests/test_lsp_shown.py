"""The shown-suggestion cache: the rest of a suggestion while the user types along it, else None."""

from __future__ import annotations

from specd.lsp.shown import ShownSuggestions
from specd.lsp.window import cut_window

DOC = "def add(a, b):\n    \n\nprint(add(1, 2))\n"
RAW = "return a + b\n"


def window(text: str, line: int, character: int):
    w = cut_window(text, line, character, "utf-16")
    assert w is not None
    return w


def typed(n: int) -> tuple[str, int]:
    return DOC.replace("\n    \n", "\n    " + RAW[:n] + "\n", 1), 4 + n


def test_typing_along_returns_the_rest() -> None:
    shown = ShownSuggestions()
    shown.remember("a", window(DOC, 1, 4), RAW)
    for n in (1, 5, len("return a + b")):
        text, col = typed(n)
        assert shown.along("a", window(text, 1, col)) == RAW[n:]


def test_departing_or_editing_after_the_cursor_misses() -> None:
    shown = ShownSuggestions()
    shown.remember("a", window(DOC, 1, 4), RAW)
    departed = DOC.replace("\n    \n", "\n    x\n", 1)
    assert shown.along("a", window(departed, 1, 5)) is None
    suffix_edited = DOC.replace("print(add(1, 2))", "print(add(1, 3))")
    text = suffix_edited.replace("\n    \n", "\n    r\n", 1)
    assert shown.along("a", window(text, 1, 5)) is None
    assert shown.along("a", window(DOC, 1, 4)) is None  # nothing typed: ask again
    assert shown.along("b", window(typed(1)[0], 1, 5)) is None  # another document


def test_least_recently_used_documents_are_dropped() -> None:
    shown = ShownSuggestions(size=2)
    for uri in ("a", "b", "c"):
        shown.remember(uri, window(DOC, 1, 4), RAW)
    text, col = typed(1)
    assert shown.along("a", window(text, 1, col)) is None
    assert shown.along("c", window(text, 1, col)) == RAW[1:]
    shown.forget("c")
    assert shown.along("c", window(text, 1, col)) is None
