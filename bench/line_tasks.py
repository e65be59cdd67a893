"""Single-line completion tasks cut from real installed source (for bench/prompt_layout.py).

A task is a cursor inside a code line (after at least 3 characters of its text, before at least 4
more): the typed part of the line stays in the prefix, the target is the rest of the line. Files
come from packages the 36-task bench suite (``specd/bench/data/tasks.jsonl``) never used: pygls,
lsprotocol, attrs and some standard-library packages (Python), and npm's bundled dependencies
(JavaScript; the suite's JavaScript comes from npm's own ``lib/``). Deterministic for a seed and
the installed files; the first ``dev`` tasks are the development split, the rest are reported.
"""

from __future__ import annotations

import random
import sysconfig
from dataclasses import dataclass
from pathlib import Path

PREFIX_CHARS = 16000  # enough for a 2048-token prefix window
SUFFIX_CHARS = 4000
COMMENT_STARTS = ("#", "//", "*", "/*", '"""', "'''")


@dataclass(frozen=True)
class LineTask:
    id: str
    language: str
    file: str
    line: int  # 0-based
    column: int
    prefix: str
    suffix: str
    target: str  # the rest of the cursor line
    split: str  # dev | test
    before: str  # the whole text before the cursor line (for context and typing simulation)
    after: str  # the text after the cursor line's end (starts with "\n" unless at the file's end)

    @property
    def line_text(self) -> str:
        return self.prefix.rsplit("\n", 1)[-1] + self.target


def _sources() -> list[tuple[str, list[Path]]]:
    site = Path(sysconfig.get_paths()["purelib"])
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    py: list[Path] = []
    for root in [site / "pygls", site / "lsprotocol", site / "attr", site / "cattrs",
                 stdlib / "email", stdlib / "logging", stdlib / "asyncio", stdlib / "http", stdlib / "importlib"]:
        if root.is_dir():
            py += sorted(p for p in root.rglob("*.py") if "test" not in p.name and p.stat().st_size > 3000)
    nm = Path("/usr/lib/node_modules/npm/node_modules")
    js: list[Path] = []
    for name in ["@npmcli/arborist/lib", "pacote/lib", "cacache/lib", "node-gyp/lib", "minimatch/dist/commonjs",
                 "semver", "npm-registry-fetch/lib", "make-fetch-happen/lib", "@sigstore/sign/dist"]:
        root = nm / name
        if root.is_dir():
            js += sorted(p for p in root.rglob("*.js") if p.stat().st_size > 3000 and ".min." not in p.name)
    return [("python", py), ("javascript", js)]


def _candidates(text: str) -> list[int]:
    lines = text.split("\n")
    out = []
    for i, line in enumerate(lines):
        body = line.strip()
        if 16 <= len(body) <= 100 and not body.startswith(COMMENT_STARTS) and i >= 5:
            out.append(i)
    return out


def build_line_tasks(per_language: int = 30, dev: int = 10, seed: int = 16) -> list[LineTask]:
    """``per_language`` tasks for each language, from distinct files; the first ``dev`` of each
    language form the dev split."""
    rng = random.Random(seed)
    tasks: list[LineTask] = []
    for language, files in _sources():
        files = list(files)
        rng.shuffle(files)
        n = 0
        for path in files:
            if n >= per_language:
                break
            try:
                text = path.read_text(encoding="utf-8")
            except (UnicodeDecodeError, OSError):
                continue
            cands = _candidates(text)
            if not cands:
                continue
            i = rng.choice(cands)
            lines = text.split("\n")
            line = lines[i].rstrip()
            indent = len(line) - len(line.lstrip())
            lo, hi = indent + 3, len(line) - 4
            if hi <= lo:
                continue
            col = rng.randint(lo, hi)
            before = "\n".join(lines[:i]) + "\n"
            after = "\n" + "\n".join(lines[i + 1 :]) if i + 1 < len(lines) else ""
            tasks.append(LineTask(
                id=f"{language[:2]}-{n:02d}", language=language, file=str(path), line=i, column=col,
                prefix=(before + line[:col])[-PREFIX_CHARS:], suffix=(line[col:] + after)[:SUFFIX_CHARS],
                target=line[col:], split="dev" if n < dev else "test",
                before=before[-PREFIX_CHARS:], after=after[:SUFFIX_CHARS]))
            n += 1
    return tasks


if __name__ == "__main__":
    for t in build_line_tasks():
        print(t.id, t.split, t.file, t.line, t.column, repr(t.line_text[: t.column]), "|", repr(t.target))
