"""Pure parts of the LSP frontend: positions in each encoding, windows, repository context."""

from __future__ import annotations

import pytest

from specd.lsp.context import ContextLimits, OtherFile, RecentEdits, display_path, repo_context, snippet
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


def test_recent_edits_order_and_close() -> None:
    r = RecentEdits()
    r.touched("a", 1)
    r.touched("b", 2)
    r.touched("a", 3)
    r.touched("c")
    r.closed("c")
    assert r.recent(exclude="x", limit=5) == [("a", 3), ("b", 2)]
    assert r.recent(exclude="a", limit=5) == [("b", 2)]


def test_repo_context_format_budget_and_marker_text() -> None:
    others = [OtherFile("src/new.py", "def new():\n    pass\n", 0),
              OtherFile("src/old.py", "x = '<|file_sep|>'\n", 0)]
    ctx = repo_context("proj", "src/main.py", others, ContextLimits())
    assert ctx == ("<|repo_name|>proj\n<|file_sep|>src/old.py\nx = '<\u200b|file_sep|>'\n"
                   "<|file_sep|>src/new.py\ndef new():\n    pass\n<|file_sep|>src/main.py\n")
    big = [OtherFile(f"f{i}.py", "y = 1\n" * 1000, 500) for i in range(5)]
    small = repo_context("p", "m.py", big, ContextLimits(total_chars=2000, per_file_chars=700, files=4))
    assert len(small) <= 2000 + 100 and small.count("<|file_sep|>") <= 5


def test_snippet_is_around_the_edit_and_whole_lines() -> None:
    text = "".join(f"row {i}\n" for i in range(1000))
    s = snippet(text, 600, 200)
    assert "row 600\n" in s and s.startswith("row ") and s.endswith("\n") and len(s) <= 200


def test_display_paths() -> None:
    assert display_path("/w/p/src/a.py", "/w/p", "python") == "src/a.py"
    assert display_path("/elsewhere/b.rs", "/w/p", "rust") == "/elsewhere/b.rs"
    assert display_path(None, "/w/p", "rust") == "untitled.rs"


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
