"""Pure parts of the LSP frontend: positions in each encoding, windows."""

from __future__ import annotations

import pytest

from specd.lsp.positions import UTF8, UTF16, UTF32, column_to_index, index_to_column, line_start
from specd.lsp.window import WindowLimits, cut_window

LINE = "a = 'é😀x'"  # é: 2 UTF-8 units, 1 UTF-16; 😀: 4 UTF-8, 2 UTF-16, 1 code point


@pytest.mark.parametrize("encoding, column, index", [
    (UTF16, 6, 6), (UTF16, 8, 7), (UTF16, 9, 8), (UTF8, 7, 6), (UTF8, 11, 7), (UTF8, 12, 8),
    (UTF32, 7, 7), (UTF32, 8, 8), (UTF16, 99, len(LINE)),
])
def test_columns_in_each_encoding(encoding: str, column: int, index: int) -> None:
    assert column_to_index(LINE, column, encoding) == index
    if column <= index_to_column(LINE, len(LINE), encoding):
        assert index_to_column(LINE, index, encoding) == column


def test_inside_a_surrogate_pair_means_the_code_point_start() -> None:
    assert column_to_index(LINE, 7, UTF16) == 6  # between the two UTF-16 halves of 😀


def test_lines_end_at_lf_crlf_and_cr() -> None:
    text = "a\r\nb\rc\nd"
    assert [line_start(text, i) for i in range(5)] == [0, 3, 5, 7, None]


def test_window_around_a_non_ascii_cursor() -> None:
    text = f"import os\n{LINE}\nprint(1)\n"
    w = cut_window(text, 1, 8, UTF16)  # after 😀
    assert w is not None
    assert w.prefix == "import os\na = 'é😀" and w.suffix == "x'\nprint(1)\n"
    assert (w.line_prefix, w.line_suffix, w.column) == ("a = 'é😀", "x'", 8)


def test_window_outside_the_document_is_none_and_past_the_line_end_clamps() -> None:
    assert cut_window("a\nb", 5, 0, UTF16) is None
    assert cut_window("a\nb", 0, -1, UTF16) is None
    w = cut_window("ab\ncd", 0, 40, UTF16)
    assert w is not None and w.prefix == "ab" and w.column == 2
    assert cut_window("a\n", 1, 0, UTF16) is not None  # the empty last line exists


def test_windows_are_bounded_and_cut_at_line_boundaries() -> None:
    text = "".join(f"line {i}\n" for i in range(10000))
    cursor_line = 5000
    w = cut_window(text, cursor_line, 3, UTF16, WindowLimits(prefix_chars=500, prefix_lines=20,
                                                              suffix_chars=300, suffix_lines=5))
    assert w is not None
    assert len(w.prefix) <= 500 and w.prefix.count("\n") <= 20 and w.prefix.startswith("line ")
    assert w.prefix.endswith("line 4999\nlin")
    assert len(w.suffix) <= 300 and w.suffix.endswith("\n") and w.suffix.count("\n") <= 6


def test_prefix_window_start_holds_while_typing() -> None:
    """Typing on, line after line, moves the window's first line in quarter-window steps only:
    the daemon keeps its cached KV for the prompt between those steps."""
    limits = WindowLimits(prefix_lines=40, prefix_chars=100_000)
    text = "".join(f"line_{i} = {i}\n" for i in range(100))
    starts = []
    for line in range(60, 90):
        w = cut_window(text, line, 3, UTF16, limits)
        assert w is not None and w.prefix.count("\n") < limits.prefix_lines
        starts.append(w.prefix.split("\n", 1)[0])
    assert len(set(starts)) <= 4  # 30 lines typed, 10-line steps
