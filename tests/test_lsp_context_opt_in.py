"""Repository context is opt-in (bench/RESULTS.md, session 8: on the line tasks' dev split it did
not improve the suggested line, and in the editor scenario the two cold prompts it made were the
p95): by default a completion's prompt carries only its own document; ``specd lsp --repo-context``
or the ``repoContext`` option sends the recently edited open documents before it."""

from __future__ import annotations

from specd.cli import build_parser
from specd.lsp.server import apply_options
from specd.lsp.settings import LspSettings
from specd.lsp.shaping import RequestShaper

OTHER = "def helper_from_the_other_file(x):\n    return x * 2\n"
MINE = "import os\n\ndef main():\n    value = \n"


def _params(settings: LspSettings) -> dict:
    shaper = RequestShaper(settings, root="/proj")
    shaper.open("file:///proj/other.py", OTHER, "python", "/proj/other.py")
    shaper.edit("file:///proj/other.py", OTHER, 1)
    shaper.open("file:///proj/main.py", MINE, "python", "/proj/main.py")
    params = shaper.params("file:///proj/main.py", 3, len("    value = "))
    assert params is not None
    return params


def test_by_default_a_prompt_carries_only_its_own_document() -> None:
    params = _params(LspSettings())
    assert "context" not in params
    assert "helper_from_the_other_file" not in "".join(str(v) for v in params.values())


def test_context_sends_the_other_open_document_when_asked() -> None:
    for settings in (apply_options(LspSettings(), {"repoContext": True}, print),
                     LspSettings(repo_context=build_parser().parse_args(["lsp", "--repo-context"]).repo_context)):
        params = _params(settings)
        assert "helper_from_the_other_file" in params["context"]


def test_the_lsp_command_line_follows_the_settings_default() -> None:
    assert build_parser().parse_args(["lsp"]).repo_context == LspSettings().repo_context
    assert build_parser().parse_args(["lsp", "--no-repo-context"]).repo_context is False
