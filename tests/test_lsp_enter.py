"""The document after Enter that the LSP warms at a pause at a line's end (``specd.lsp.enter``):
the editor's indentation guessed, the line break and the cursor where an editor puts them."""

from __future__ import annotations

import pytest

from specd.lsp.enter import AfterEnter, after_enter, indent_after, indent_level

PY = "def f(x):\n    if x:\n        return 1\n    y = 2\n"


def test_the_line_after_keeps_the_lines_indentation() -> None:
    assert after_enter(PY, 3, 9, "utf-16") == AfterEnter(PY[:-1] + "\n    " + "\n", 4, 4)


def test_after_a_line_that_opens_a_block_the_next_is_one_level_deeper() -> None:
    assert after_enter(PY, 1, 9, "utf-16") == AfterEnter(PY.replace("if x:\n", "if x:\n        \n"), 2, 8)


@pytest.mark.parametrize("text,level", [
    ("int f() {\n\treturn 0;\n}\n", "\t"),  # tabs
    ("a:\n  b:\n    c\n  d\n", "  "),  # two spaces
    ("x = 1\ny = 2\n", "    "),  # nothing indented: four spaces
    ("f(a,\n       b)\ng:\n    h\nk:\n    m\n", "    "),  # the most common step wins over an alignment
])
def test_the_level_is_the_documents_own(text: str, level: str) -> None:
    assert indent_level(text) == level


@pytest.mark.parametrize("line,expected", [
    ("\tif (x) {", "\t\t"), ("\tcall(", "\t\t"), ("\tcall(a,", "\t"), ("\titems = [", "\t\t"), ("\tx = 1;", "\t"), ("}", ""),
])
def test_openers_deepen_other_lines_keep(line: str, expected: str) -> None:
    assert indent_after(line, "a {\n\tb\n}\n") == expected


@pytest.mark.parametrize("line,character", [
    (3, 4),  # inside "    y = 2": Enter splits the line, no new line to warm
    (4, 0),  # the empty last line
])
def test_no_line_after_enter_inside_a_line_or_on_a_blank_one(line: int, character: int) -> None:
    assert after_enter(PY, line, character, "utf-16") is None


def test_blank_lines_with_only_indentation_are_not_lines_with_text() -> None:
    assert after_enter("def f():\n    \n", 1, 4, "utf-16") is None


def test_the_documents_line_break_is_kept() -> None:
    text = "a {\r\n  b\r\n}\r\n"
    got = after_enter(text, 1, 3, "utf-16")
    assert got == AfterEnter("a {\r\n  b\r\n  \r\n}\r\n", 2, 2)


def test_a_column_in_utf16_units_at_the_lines_end() -> None:
    text = "s = '😀'\n"  # the emoji is two UTF-16 units: the line's end is column 8
    assert after_enter(text, 0, 8, "utf-16") == AfterEnter("s = '😀'\n\n", 1, 0)
    assert after_enter(text, 0, 7, "utf-16") is None  # inside the line
