"""LSP positions: line breaks and column units in the negotiated position encoding.

LSP lines end at ``\\n``, ``\\r\\n`` or ``\\r``; a column counts UTF-16 code units unless the client
negotiated ``utf-8`` or ``utf-32``. Python strings index code points.
"""

from __future__ import annotations

import re

UTF8, UTF16, UTF32 = "utf-8", "utf-16", "utf-32"
ENCODINGS = (UTF8, UTF16, UTF32)
EOL = re.compile(r"\r\n|\r|\n")


def units(char: str, encoding: str) -> int:
    """Code units one code point takes."""
    if encoding == UTF32:
        return 1
    cp = ord(char)
    if encoding == UTF8:
        return 1 if cp < 0x80 else 2 if cp < 0x800 else 3 if cp < 0x10000 else 4
    return 2 if cp >= 0x10000 else 1


def column_to_index(line: str, column: int, encoding: str) -> int:
    """The code-point index of ``column`` in ``line`` (no line break); a column past the end
    means the end of the line, and one inside a code point means that code point's start."""
    if encoding == UTF32 or line.isascii():
        return min(column, len(line))
    count = 0
    for i, ch in enumerate(line):
        count += units(ch, encoding)
        if count > column:
            return i
    return len(line)


def index_to_column(line: str, index: int, encoding: str) -> int:
    """The column, in code units, of code-point ``index`` in ``line``."""
    head = line[:index]
    if encoding == UTF32 or head.isascii():
        return len(head)
    return sum(units(ch, encoding) for ch in head)


def line_start(text: str, line: int) -> int | None:
    """The offset where line ``line`` starts, or None past the last line."""
    if line < 0:
        return None
    if line == 0:
        return 0
    for n, m in enumerate(EOL.finditer(text), 1):
        if n == line:
            return m.end()
    return None


def line_end(text: str, start: int) -> int:
    """The offset of the line break ending the line that starts at ``start`` (or the text's end)."""
    m = EOL.search(text, start)
    return m.start() if m else len(text)


def cursor_line(text: str, line: int, character: int, encoding: str) -> tuple[int, int, int] | None:
    """Where the cursor at ``(line, character)`` is: its line's start and end offsets in ``text``
    and its code-point index in that line (a character past the line's end means its end), or
    None when the line is outside the text."""
    start = line_start(text, line)
    if start is None or character < 0:
        return None
    end = line_end(text, start)
    return start, end, column_to_index(text[start:end], character, encoding)
