"""Another document's part of the repository context stays as it was while its edits stay near the
line it was taken at, so typing in one file does not change the prompt's start in another (the
daemon's cached prompt for it survives a switch); a far edit or an old copy refreshes it."""

from __future__ import annotations

from specd.lsp.context import ContextLimits
from specd.lsp.settings import LspSettings
from specd.lsp.shaping import RequestShaper

A, B = "file:///proj/a.py", "file:///proj/b.py"
A_TEXT = "".join(f"def a{i}():\n    return {i}\n\n" for i in range(40))
B_TEXT = "import os\n\n\ndef main():\n    \n"


def shaper(**limits: object) -> tuple[RequestShaper, list[float]]:
    clock = [0.0]
    s = RequestShaper(LspSettings(repo_context=True, context=ContextLimits(**limits)), root="/proj")
    s.frozen.clock = lambda: clock[0]
    s.open(A, A_TEXT, "python", "/proj/a.py")
    s.open(B, B_TEXT, "python", "/proj/b.py")
    return s, clock


def edit_a(s: RequestShaper, text: str, line: int, insert: str) -> str:
    lines = text.split("\n")
    lines[line] += insert
    text = "\n".join(lines)
    s.edit(A, text, line)
    return text


def context_of_b(s: RequestShaper) -> str:
    params = s.params(B, 4, 4)
    assert params is not None
    return params["context"]


def test_typing_near_the_last_edit_of_another_file_keeps_the_context() -> None:
    s, _ = shaper()
    text = edit_a(s, A_TEXT, 30, "  # x")
    first = context_of_b(s)
    assert "# x" in first
    text = edit_a(s, text, 31, "  # typed on")
    assert context_of_b(s) == first  # near: the same prompt start


def test_a_far_edit_or_an_old_copy_refreshes_it() -> None:
    s, clock = shaper()
    text = edit_a(s, A_TEXT, 30, "  # x")
    first = context_of_b(s)
    text = edit_a(s, text, 90, "  # far away")
    far = context_of_b(s)
    assert far != first and "# far away" in far
    text = edit_a(s, text, 91, "  # near again")
    assert context_of_b(s) == far
    clock[0] += ContextLimits().max_age_s + 1
    assert "# near again" in context_of_b(s)
