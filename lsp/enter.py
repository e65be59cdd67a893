"""The document as it will be after Enter: what the server warms at a pause at a line's end.

In Qwen's FIM order (prefix, suffix, middle) a new line before the cursor changes the prompt's
prefix at its end, so every suffix token is computed again (1-1.5 s at the 256-token suffix window
on two cores). Enter alone costs nothing (token healing takes the line's last token and the
newline out, and the prompt stays the cached one), but the editor's indentation does. So at a pause
at the end of a line, the server can warm the prompt the line after Enter will ask for: the line's
break and its guessed indentation inserted at the cursor.

The guess is what editors do on Enter: keep the line's indentation, one level deeper after a line
that ends in an opener (``{``, ``(``, ``[``, or ``:``, Python's block). The level is a tab where the
document's indented lines mostly start with tabs, else the most common step by which an indented
line goes deeper than the line above it (4 spaces when there is none). Measured on the quality
bench's dev sites at a line start whose line above is not blank: the guess is the real
indentation at 64 of 76 (bench/RESULTS.md, session 33); most misses are closing lines (``}``,
``except``), which an editor indents only once they are typed.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

from specd.lsp.positions import EOL, cursor_line, index_to_column, line_start
from specd.lsp.window import Window, WindowLimits, cut_window

OPENERS = ("{", "(", "[", ":")
DEFAULT_LEVEL = "    "
_INDENT = re.compile(r"[ \t]*")


@dataclass(frozen=True)
class AfterEnter:
    """The document text after Enter at a line's end, and where the cursor then is."""

    text: str
    line: int
    character: int


def indent_level(text: str) -> str:
    """One indentation level of ``text`` (a tab, or a number of spaces)."""
    indents = [_INDENT.match(line).group() for line in EOL.split(text) if line.strip()]
    tabs = sum(i.startswith("\t") for i in indents)
    if tabs > sum(i.startswith(" ") for i in indents):
        return "\t"
    steps: Counter[int] = Counter()
    for above, below in zip(indents, indents[1:]):
        if len(below) > len(above) and below.startswith(above) and not below[len(above):].strip(" "):
            steps[len(below) - len(above)] += 1
    return " " * steps.most_common(1)[0][0] if steps else DEFAULT_LEVEL


def indent_after(line: str, context: str) -> str:
    """The indentation an editor gives the line after ``line`` (no line break) on Enter at its
    end; ``context`` is the text the level is read from (the lines around it)."""
    indent = _INDENT.match(line).group()
    return indent + indent_level(context) if line.rstrip().endswith(OPENERS) else indent


def after_enter(text: str, line: int, character: int, encoding: str, context_lines: int = 200) -> AfterEnter | None:
    """``text`` after Enter at ``(line, character)`` with the guessed indentation, or None where
    the cursor is not at the end of a line with text on it (a blank line's Enter changes only
    whitespace the prompt already ends in; Enter inside a line splits it, which is no new line)."""
    at = cursor_line(text, line, character, encoding)
    if at is None:
        return None
    start, end, index = at
    current = text[start:end]
    if index != len(current) or not current.strip():
        return None
    m = EOL.search(text)
    eol = m.group() if m else "\n"
    above = line_start(text, max(0, line - context_lines)) or 0
    indent = indent_after(current, text[above:end])
    return AfterEnter(text[:end] + eol + indent + text[end:], line + 1,
                      index_to_column(indent, len(indent), encoding))


def window_after_enter(text: str, line: int, character: int, encoding: str, limits: WindowLimits) -> Window | None:
    """The window the request of the line after Enter at ``(line, character)`` will have (what
    the server warms; None where :func:`after_enter` is), the indentation level read from the
    lines the prefix window holds."""
    enter = after_enter(text, line, character, encoding, limits.prefix_lines)
    if enter is None:
        return None
    return cut_window(enter.text, enter.line, enter.character, encoding, limits)
