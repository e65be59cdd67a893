"""Repository context is sent only with other files' text: never the header alone."""

from __future__ import annotations

from specd.lsp.context import ContextLimits, OtherFile, repo_context


def test_no_other_file_means_no_context() -> None:
    assert repo_context("proj", "src/main.py", [], ContextLimits()) == ""


def test_other_files_without_text_mean_no_context() -> None:
    blank = [OtherFile("a.py", "\n\n   \n", 0), OtherFile("b.py", "", 0)]
    assert repo_context("proj", "src/main.py", blank, ContextLimits()) == ""


def test_one_other_file_brings_the_header_and_the_current_path() -> None:
    ctx = repo_context("proj", "src/main.py", [OtherFile("src/util.py", "def f():\n    return 1\n", 0)],
                       ContextLimits())
    assert ctx == "<|repo_name|>proj\n<|file_sep|>src/util.py\ndef f():\n    return 1\n<|file_sep|>src/main.py\n"
