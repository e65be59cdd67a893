"""Repository context from recently edited open documents, in Qwen's repository format.

``<|repo_name|>{name}\\n<|file_sep|>{path}\\n{snippet}\\n…<|file_sep|>{current path}\\n`` goes before
the FIM block (the engine turns the two markers into control tokens). Each other document gives
the lines around its last edit; the most recently edited come last (nearest the cursor); the
whole stays within a character budget.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Callable

from specd.lsp.positions import EOL, line_start

REPO_NAME, FILE_SEP = "<|repo_name|>", "<|file_sep|>"
_NEUTRAL = {REPO_NAME: "<\u200b|repo_name|>", FILE_SEP: "<\u200b|file_sep|>"}
EXTENSIONS = {
    "python": "py", "javascript": "js", "typescript": "ts", "typescriptreact": "tsx", "javascriptreact": "jsx",
    "rust": "rs", "go": "go", "c": "c", "cpp": "cpp", "java": "java", "lua": "lua", "ruby": "rb",
    "shellscript": "sh", "sh": "sh", "bash": "sh", "markdown": "md", "json": "json", "yaml": "yaml",
    "toml": "toml", "html": "html", "css": "css", "csharp": "cs", "kotlin": "kt", "swift": "swift",
    "php": "php", "sql": "sql", "haskell": "hs", "elixir": "ex", "zig": "zig", "scala": "scala",
}


@dataclass(frozen=True)
class ContextLimits:
    total_chars: int = 4000
    per_file_chars: int = 1500
    files: int = 4
    # another document's part of the context stays as it was while its edits stay this near the
    # line it was taken at (and for at most max_age_s): typing there does not change the prompt's
    # start, so the daemon's cached prompt survives a switch between files
    near_lines: int = 10
    max_age_s: float = 120.0


@dataclass
class _Edit:
    order: int
    line: int  # line of the last change (0 when opened)


@dataclass
class RecentEdits:
    """Which open documents were edited, in which order, and where."""

    _edits: dict[str, _Edit] = field(default_factory=dict)
    _clock: itertools.count = field(default_factory=itertools.count)

    def touched(self, uri: str, line: int = 0) -> None:
        self._edits[uri] = _Edit(next(self._clock), line)

    def closed(self, uri: str) -> None:
        self._edits.pop(uri, None)

    def recent(self, exclude: str, limit: int) -> list[tuple[str, int]]:
        """(uri, last edited line), most recent first, without ``exclude``."""
        items = sorted(((u, e) for u, e in self._edits.items() if u != exclude), key=lambda x: -x[1].order)
        return [(u, e.line) for u, e in items[:limit]]


@dataclass
class _Frozen:
    text: str
    line: int
    taken: float


class FrozenOthers:
    """Per (document, other document): the other's text and edit line as last put in the document's
    context, returned again while the other's edits stay near that line and the copy is young."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._views: dict[tuple[str, str], _Frozen] = {}

    def view(self, doc: str, other: str, text: str, line: int, limits: ContextLimits) -> tuple[str, int]:
        now = self.clock()
        kept = self._views.get((doc, other))
        if kept is not None and abs(line - kept.line) <= limits.near_lines and now - kept.taken <= limits.max_age_s:
            return kept.text, kept.line
        self._views[(doc, other)] = _Frozen(text, line, now)
        return text, line

    def closed(self, uri: str) -> None:
        for key in [k for k in self._views if uri in k]:
            del self._views[key]


def neutralise(text: str) -> str:
    """Marker text inside a file must stay text."""
    for marker, neutral in _NEUTRAL.items():
        text = text.replace(marker, neutral)
    return text


def display_path(path: str | None, root: str | None, language: str | None) -> str:
    """The path the model sees: relative to the workspace root when inside it; an untitled
    buffer gets a name whose extension tells the language."""
    if not path:
        return f"untitled.{EXTENSIONS.get(language or '', 'txt')}"
    p = PurePosixPath(path)
    if root:
        try:
            return str(p.relative_to(PurePosixPath(root)))
        except ValueError:
            pass
    return str(p)


def snippet(text: str, line: int, max_chars: int) -> str:
    """The lines around ``line`` that fit ``max_chars`` (the whole text when it fits)."""
    if len(text) <= max_chars:
        return text
    start = line_start(text, line)
    centre = start if start is not None else len(text)
    lo = max(0, centre - max_chars // 2)
    chunk = text[lo:lo + max_chars]
    if lo > 0 and (first := EOL.search(chunk)):
        chunk = chunk[first.end():]
    if lo + max_chars < len(text):
        ends = [m.end() for m in EOL.finditer(chunk)]
        if ends:
            chunk = chunk[: ends[-1]]
    return chunk


@dataclass(frozen=True)
class OtherFile:
    path: str
    text: str
    line: int


def file_header(repo: str, current_path: str) -> str:
    """The repository format's header alone: the repository's and the current file's names."""
    return f"{REPO_NAME}{neutralise(repo)}\n{FILE_SEP}{neutralise(current_path)}\n"


def repo_context(repo: str, current_path: str, others: list[OtherFile], limits: ContextLimits) -> str:
    """The context string; ``others`` most recent first (they are written oldest first); empty
    when no other file has text to show."""
    parts: list[str] = []
    budget = limits.total_chars
    for other in others[: limits.files]:
        body = snippet(other.text, other.line, min(limits.per_file_chars, budget))
        if not body.strip():
            continue
        part = f"{FILE_SEP}{neutralise(other.path)}\n{neutralise(body)}"
        if not part.endswith("\n"):
            part += "\n"
        if len(part) > budget:
            break
        budget -= len(part)
        parts.append(part)
    if not parts:  # the header alone (repository and file names) tells the model nothing it can use
        return ""
    head = f"{REPO_NAME}{neutralise(repo)}\n"
    return head + "".join(reversed(parts)) + f"{FILE_SEP}{neutralise(current_path)}\n"
