"""A suggestion as the editor gets it: the text, the cursor, and the word before the cursor (which
a completion item replaces)."""

from __future__ import annotations

from dataclasses import dataclass

from specd.lsp.positions import index_to_column
from specd.lsp.window import Window


@dataclass(frozen=True)
class Suggestion:
    text: str  # to insert at the cursor
    line: int
    column: int  # the cursor, in the client's units
    word: str  # the identifier characters just before the cursor
    word_column: int  # where that word starts, in the client's units


def suggestion_at(window: Window, text: str, encoding: str) -> Suggestion:
    word = word_before(window.line_prefix)
    return Suggestion(text, window.line, window.column, word,
                      window.column - index_to_column(word, len(word), encoding))


def word_before(line_prefix: str) -> str:
    i = len(line_prefix)
    while i > 0 and (line_prefix[i - 1].isalnum() or line_prefix[i - 1] == "_"):
        i -= 1
    return line_prefix[i:]
