"""A user's own repository as a corpus for draft heads (``specd heads train --repo PATH``).

Which files: those git tracks (``git ls-files``: ``.gitignore`` is honoured) when ``PATH`` is in a
git work tree, else every file under it outside hidden, vendored and build directories
(``SKIP_DIRS``), and never vendored code (``VENDORED``); of those, source files by extension (``LANGUAGES``), between 1 byte and
``corpus.MAX_FILE_BYTES``, UTF-8, not minified (``MAX_MEAN_LINE`` characters a line at most).

Held out: ``HELD_OUT_PERCENT`` of the files by a hash of their path in the repository (and at least
one file when there are two or more), never trained on; the fine-tuned head is judged and kept by
its figures on them. A repository is small beside the general corpus, so each file gives up to
``WINDOWS_PER_FILE`` windows (each with its own cursor in the FIM layout; the data takes every
file's first window before any second one: ``specd.heads.data.repo_schedule``).
"""

from __future__ import annotations

import hashlib
import random
import subprocess
from pathlib import Path

from specd.heads.corpus import MAX_FILE_BYTES, CorpusFile, read

LANGUAGES = {
    ".py": "python", ".pyi": "python",
    ".c": "c", ".h": "c",
    ".cc": "cpp", ".cpp": "cpp", ".cxx": "cpp", ".hh": "cpp", ".hpp": "cpp", ".hxx": "cpp",
    ".js": "javascript", ".mjs": "javascript", ".cjs": "javascript", ".jsx": "javascript",
    ".ts": "typescript", ".tsx": "typescript", ".mts": "typescript", ".cts": "typescript",
    ".go": "go", ".rs": "rust", ".java": "java", ".kt": "kotlin", ".scala": "scala", ".cs": "csharp",
    ".swift": "swift", ".rb": "ruby", ".php": "php", ".lua": "lua", ".sh": "shell", ".bash": "shell",
    ".zig": "zig", ".hs": "haskell", ".ml": "ocaml", ".ex": "elixir", ".exs": "elixir", ".dart": "dart",
    ".sql": "sql", ".vue": "vue", ".svelte": "svelte",
}
VENDORED = {"node_modules", "vendor", "_vendor", "third_party", "site-packages"}  # someone else's code, even when tracked
SKIP_DIRS = VENDORED | {"__pycache__", "venv", "build", "dist", "target"}  # and hidden ones: without git
HELD_OUT_PERCENT = 10
WINDOWS_PER_FILE = 8
MAX_MEAN_LINE = 300  # characters: longer means minified or generated


class RepoError(ValueError):
    """The path is not a repository with source files to train on."""


def _tracked(root: Path) -> list[Path] | None:
    """The files git tracks under ``root`` (None when ``root`` is not in a git work tree)."""
    try:
        out = subprocess.run(["git", "-C", str(root), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                             check=True, capture_output=True, timeout=120).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return [root / name for name in out.decode("utf-8", "surrogateescape").split("\0") if name]


def _walked(root: Path) -> list[Path]:
    out = []
    stack = [root]
    while stack:
        d = stack.pop()
        try:
            entries = sorted(d.iterdir())
        except OSError:
            continue
        for e in entries:
            if e.is_symlink():
                continue
            if e.is_dir():
                if e.name not in SKIP_DIRS and not e.name.startswith("."):
                    stack.append(e)
            elif e.is_file():
                out.append(e)
    return out


def name_of(root: Path) -> str:
    """A short, stable name for the repository at ``root``: its directory's name and a hash of its
    absolute path (two checkouts with one name do not share data)."""
    root = root.resolve()
    return f"{root.name or 'root'}-{hashlib.sha256(str(root).encode()).hexdigest()[:8]}"


def _held_out(rel: str) -> bool:
    return int(hashlib.sha256(rel.encode()).hexdigest(), 16) % 100 < HELD_OUT_PERCENT


def files(root: Path, seed: int = 0) -> dict[str, list[CorpusFile]]:
    """The repository's source files by language, each list in a seeded shuffled order (see the
    module docstring). RepoError when there are none."""
    root = root.expanduser().resolve()
    if not root.is_dir():
        raise RepoError(f"{root}: not a directory")
    found = _tracked(root)
    if found is None:
        found = _walked(root)
    picked: list[tuple[str, Path, str]] = []
    for path in found:
        rel = path.relative_to(root).as_posix()
        language = LANGUAGES.get(path.suffix.lower())
        if language is None or ".min." in path.name or any(part in VENDORED for part in Path(rel).parts[:-1]):
            continue
        try:
            size = path.stat().st_size
        except OSError:
            continue
        if not 0 < size <= MAX_FILE_BYTES:
            continue
        text = read(CorpusFile(language, path, rel))
        if not text or len(text) / max(1, text.count("\n") + 1) > MAX_MEAN_LINE:
            continue
        picked.append((language, path, rel))
    held = {rel for _, _, rel in picked if _held_out(rel)}
    if not held and len(picked) >= 2:  # a small repository still keeps one file to judge by
        held = {min((rel for _, _, rel in picked), key=lambda r: hashlib.sha256(r.encode()).hexdigest())}
    out: dict[str, list[CorpusFile]] = {}
    for language, path, rel in picked:
        out.setdefault(language, []).append(CorpusFile(language, path, f"repo:{rel}", held_out=rel in held))
    if not out:
        raise RepoError(f"{root}: no source files to train on (looked for {', '.join(sorted(set(LANGUAGES.values())))})")
    for language, lst in out.items():
        random.Random(f"{seed}:{language}").shuffle(lst)
    return out



def fingerprint(found: dict[str, list[CorpusFile]]) -> str:
    """A hash of the repository's files as a run would read them (names, held-out marks, contents)."""
    h = hashlib.sha256()
    for f in sorted((f for lst in found.values() for f in lst), key=lambda f: f.name):
        h.update(f"{f.name}\0{f.validation}\0".encode())
        h.update(hashlib.sha256(f.path.read_bytes()).digest())
    return h.hexdigest()

