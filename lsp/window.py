"""The text around the cursor: bounded prefix and suffix windows, cut at line boundaries.

Windows are bounded by characters and by lines before the engine applies its token windows, so a
request never carries a whole large file.
"""

from __future__ import annotations

from dataclasses import dataclass

from specd.lsp.positions import EOL, cursor_line, index_to_column, line_start


@dataclass(frozen=True)
class WindowLimits:
    prefix_chars: int = 8000
    prefix_lines: int = 200
    suffix_chars: int = 2000
    suffix_lines: int = 60


@dataclass(frozen=True)
class Window:
    prefix: str  # text before the cursor (bounded)
    suffix: str  # text after the cursor (bounded)
    line_prefix: str  # the cursor line up to the cursor
    line_suffix: str  # the cursor line after the cursor
    line: int  # cursor line
    column: int  # cursor column in the client's units (clamped to the line's end)


def cut_window(text: str, line: int, character: int, encoding: str,
               limits: WindowLimits = WindowLimits()) -> Window | None:
    """The window around ``(line, character)``; None when the line is outside the document.
    A character past the end of its line means the line's end (as LSP says)."""
    at = cursor_line(text, line, character, encoding)
    if at is None:
        return None
    start, end, index = at
    current = text[start:end]
    cursor = start + index
    # the first line kept moves in steps of a quarter of prefix_lines, so that typing on (and
    # adding lines) keeps the prompt's start, and the daemon's cached KV for it, unchanged
    step = max(1, limits.prefix_lines // 4)
    first = -(-max(0, line - limits.prefix_lines + 1) // step) * step
    lo = max(line_start(text, first) or 0, cursor - limits.prefix_chars)
    prefix = _tail(text[lo:cursor], limits.prefix_lines, cut=lo > 0 and text[lo - 1] not in "\r\n")
    suffix = _head(text[cursor:cursor + limits.suffix_chars], limits.suffix_lines,
                   cut=len(text) - cursor > limits.suffix_chars)
    return Window(prefix, suffix, current[:index], current[index:], line,
                  index_to_column(current, index, encoding))


def _tail(chunk: str, max_lines: int, cut: bool) -> str:
    """The last ``max_lines`` lines of ``chunk``; when anything was cut, from a line start."""
    breaks = [m.end() for m in EOL.finditer(chunk)]
    if len(breaks) >= max_lines:
        return chunk[breaks[-max_lines]:]
    if cut and breaks:
        return chunk[breaks[0]:]
    return chunk


def _head(chunk: str, max_lines: int, cut: bool) -> str:
    """The first ``max_lines`` lines of ``chunk``; when anything was cut, up to a line end."""
    ends = [m.end() for m in EOL.finditer(chunk)]
    if len(ends) > max_lines:
        return chunk[:ends[max_lines]]
    if cut and ends:
        return chunk[:ends[-1]]
    return chunk
