"""Build specd/bench/data/tasks.jsonl, the bench tasks (shipped as package data): fill-in-the-middle
tasks cut from real code that no one here wrote.

Sources, all found on this machine: Python files of widely used PyPI packages installed in
site-packages, C headers from Debian -dev packages in /usr/include, and JavaScript from npm's own
sources under node's global modules. Each task records its provenance (package, version, file,
1-based line and column of the cursor), its category (boilerplate, logic, docs), the kind of cursor
(line_start, mid_line, block_start), the prefix and suffix windows, and the original middle.

Windows are cut at line boundaries and bounded in tokens of the default target's tokenizer, so a
prompt stays within ~300-800 tokens. Selection is seeded: the same machine gives the same tasks.

    python bench/build_tasks.py [--seed 1234] [--out specd/bench/data/tasks.jsonl]
"""

from __future__ import annotations

import argparse
import importlib.metadata as md
import json
import random
import re
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Iterator

from specd.models.registry import model_dir
from specd.engine.config import DEFAULT_TARGET

# the checkout's copy, which the package ships (specd.bench.tasks.default_tasks_path reads it)
TASKS_FILE = Path(__file__).resolve().parents[1] / "specd" / "bench" / "data" / "tasks.jsonl"
PY_PACKAGES = (
    "requests", "urllib3", "click", "Jinja2", "Flask", "Werkzeug", "rich", "attrs", "packaging",
    "PyYAML", "python-dateutil", "Pygments", "charset-normalizer", "python-dotenv", "jmespath",
    "gguf", "onnxruntime", "docutils", "idna",
)
C_HEADERS = ("zlib.h", "bzlib.h", "expat.h", "curses.h", "elf.h", "argp.h", "fcntl.h", "dirent.h")
JS_ROOT = Path("/usr/lib/node_modules/npm")

# (language, category, kind) -> how many tasks
QUOTAS: dict[tuple[str, str, str], int] = {
    ("python", "boilerplate", "imports"): 2,
    ("python", "boilerplate", "argparse"): 2,
    ("python", "boilerplate", "repetitive"): 2,
    ("python", "boilerplate", "closing"): 2,
    ("python", "logic", "block_body"): 4,
    ("python", "logic", "expression"): 3,
    ("python", "docs", "docstring"): 3,
    ("python", "docs", "comment"): 3,
    ("javascript", "boilerplate", "imports"): 1,
    ("javascript", "boilerplate", "repetitive"): 1,
    ("javascript", "boilerplate", "closing"): 1,
    ("javascript", "logic", "block_body"): 2,
    ("javascript", "logic", "expression"): 2,
    ("javascript", "docs", "comment"): 3,
    ("c", "boilerplate", "repetitive"): 2,
    ("c", "boilerplate", "closing"): 1,
    ("c", "docs", "comment"): 2,
}
MAX_PREFIX_TOKENS = 560
MAX_SUFFIX_TOKENS = 240
MIN_PROMPT_TOKENS = 300
MIDDLE_CHARS = (6, 260)
MAX_PER_PACKAGE = 3  # Python tasks per package: spread the suite over many authors


@dataclass(frozen=True)
class Source:
    language: str
    package: str
    version: str
    file: str  # path relative to the package root (site-packages, /usr/include, npm's folder)
    path: Path


@dataclass(frozen=True)
class Cut:
    """A candidate: the cursor at (line, col) in ``lines``; the middle spans to (end_line, end_col)."""

    category: str
    kind: str
    cursor: str  # line_start | mid_line | block_start
    line: int  # 0-based
    col: int
    end_line: int
    end_col: int


@dataclass(frozen=True)
class Task:
    id: str
    language: str
    category: str
    kind: str
    cursor: str
    package: str
    version: str
    file: str
    line: int  # 1-based
    column: int  # 0-based character offset in the line
    prefix: str
    suffix: str
    expected: str
    prefix_tokens: int
    suffix_tokens: int
    seed: int


# -- sources ----------------------------------------------------------------------------------

def python_sources() -> Iterator[Source]:
    for name in PY_PACKAGES:
        try:
            dist = md.distribution(name)
        except md.PackageNotFoundError:
            continue
        for f in dist.files or ():
            s = str(f)
            if not s.endswith(".py") or re.search(r"(^|/)(tests?|testing|_vendor|vendor)/", s):
                continue
            yield Source("python", dist.metadata["Name"], dist.version, s, Path(dist.locate_file(f)))


def _dpkg_owner(path: Path) -> tuple[str, str] | None:
    try:
        owner = subprocess.run(["dpkg", "-S", str(path)], capture_output=True, text=True, timeout=20)
        pkg = owner.stdout.split(":", 1)[0].strip()
        ver = subprocess.run(["dpkg-query", "-W", "-f=${Version}", pkg], capture_output=True, text=True,
                             timeout=20).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return (pkg, ver) if owner.returncode == 0 and pkg and ver else None


def c_sources() -> Iterator[Source]:
    for name in C_HEADERS:
        path = Path("/usr/include") / name
        if path.is_file() and (owner := _dpkg_owner(path)):
            yield Source("c", owner[0], owner[1], name, path)


def js_sources() -> Iterator[Source]:
    manifest = JS_ROOT / "package.json"
    if not manifest.is_file():
        return
    version = json.loads(manifest.read_text())["version"]
    for path in sorted((JS_ROOT / "lib").rglob("*.js")):
        yield Source("javascript", "npm", version, str(path.relative_to(JS_ROOT)), path)


# -- candidate cuts ---------------------------------------------------------------------------

def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _balanced(text: str) -> bool:
    return all(text.count(a) == text.count(b) for a, b in ("()", "[]", "{}"))


def _head(line: str, n: int = 12) -> str:
    s = line.strip()
    return re.split(r"[\s(=]", s, 1)[0][:n] if s else ""


def _repetitive(lines: list[str], i: int) -> bool:
    """Line i continues a run of at least two lines that start the same way at the same indent."""
    if i < 2 or not lines[i].strip():
        return False
    h = _head(lines[i])
    return bool(h) and all(_head(lines[j]) == h and _indent(lines[j]) == _indent(lines[i])
                           for j in (i - 1, i - 2))


def _block_body(lines: list[str], i: int, max_lines: int = 3) -> int | None:
    """Lines i+1.. that are indented deeper than line i: the end (exclusive) of up to max_lines."""
    base = _indent(lines[i])
    end = i + 1
    while end < len(lines) and end - i <= max_lines and lines[end].strip() and _indent(lines[end]) > base:
        end += 1
    return end if end > i + 1 else None


def _line_cut(category: str, kind: str, i: int, line: str, cursor: str = "line_start") -> Cut:
    return Cut(category, kind, cursor, i, 0 if cursor == "line_start" else _indent(line), i, len(line))


def _mid(category: str, kind: str, i: int, line: str, pattern: str) -> Cut | None:
    m = re.search(pattern, line)
    if m is None or len(line) - m.end() < MIDDLE_CHARS[0]:
        return None
    return Cut(category, kind, "mid_line", i, m.end(), i, len(line))


def python_cuts(lines: list[str]) -> Iterator[Cut]:
    for i, line in enumerate(lines):
        s = line.strip()
        if re.match(r"(import|from)\s+\w", line) and i >= 1 and re.match(r"(import|from)\s", lines[i - 1]):
            yield _line_cut("boilerplate", "imports", i, line)
        if re.search(r"\.(add_argument|add_option|option|argument)\(", s) and _balanced(s):
            yield _line_cut("boilerplate", "argparse", i, line, "block_start" if _indent(line) else "line_start")
        if _repetitive(lines, i) and _balanced(s) and re.search(r"\w\(", s) and not s.startswith(("#", "@")):
            yield _line_cut("boilerplate", "repetitive", i, line)  # a run of similar calls
        if re.fullmatch(r"[)\]}]+[,:]?", s) and i >= 1 and lines[i - 1].strip():
            yield Cut("boilerplate", "closing", "line_start", i - 1, 0, i, len(line))  # last item + closer
        if re.match(r"(def|if|for|while|with|elif|else|try|except)\b.*:$", s) and not s.startswith("def __"):
            j = i + 1
            if j < len(lines) and lines[j].strip().startswith(('"""', "'''")):
                continue  # docstrings are their own category
            end = _block_body(lines, i)
            if end is not None and _balanced("\n".join(lines[i + 1:end])):
                yield Cut("logic", "block_body", "block_start", i + 1, 0, end - 1, len(lines[end - 1]))
        if _indent(line) and re.match(r"(return\s|if\s|elif\s|while\s|\w+(\.\w+)*\s*=[^=])", s) and _balanced(s):
            if (c := _mid("logic", "expression", i, line, r"^\s*(return\s|if\s|elif\s|while\s|[\w.]+\s*=\s*)")):
                yield c
        if re.match(r'("""|\'\'\')\S', s) and i >= 1 and lines[i - 1].rstrip().endswith(":"):
            yield _mid("docs", "docstring", i, line, r'^\s*("""|\'\'\')') or _line_cut("docs", "docstring", i, line)
        if s.startswith("# ") and len(s) > 20 and not s.startswith(("# -*-", "# type:", "# noqa", "# pragma")):
            yield _mid("docs", "comment", i, line, r"^\s*# ") or _line_cut("docs", "comment", i, line)


def js_cuts(lines: list[str]) -> Iterator[Cut]:
    for i, line in enumerate(lines):
        s = line.strip()
        if re.match(r"const .*=\s*require\(", s) and i >= 1 and "require(" in lines[i - 1]:
            yield _line_cut("boilerplate", "imports", i, line)
        if _repetitive(lines, i) and _balanced(s) and not s.startswith(("//", "*", "const", "}")):
            yield _line_cut("boilerplate", "repetitive", i, line)
        if re.fullmatch(r"[)\]}]+[,;)]*", s) and i >= 1 and lines[i - 1].strip() and _indent(line) > 0:
            yield Cut("boilerplate", "closing", "line_start", i - 1, 0, i, len(line))
        if s.endswith("{") and re.match(r"(if|for|while|else|try|catch|async|function|\w+\s*\(.*\)\s*\{)", s):
            end = _block_body(lines, i)
            if end is not None and _balanced("\n".join(lines[i + 1:end])):
                yield Cut("logic", "block_body", "block_start", i + 1, 0, end - 1, len(lines[end - 1]))
        if _indent(line) and re.match(r"(return\s|const\s|let\s|if\s*\()", s) and _balanced(s):
            if (c := _mid("logic", "expression", i, line, r"^\s*(return\s|(const|let)\s+[\w{}, ]+\s*=\s*|if\s*\()")):
                yield c
        if re.match(r"(//|\*) \w", s) and len(s) > 24:
            yield _mid("docs", "comment", i, line, r"^\s*(//|\*) ") or _line_cut("docs", "comment", i, line)


def c_cuts(lines: list[str]) -> Iterator[Cut]:
    for i, line in enumerate(lines):
        s = line.strip()
        if _repetitive(lines, i) and _balanced(s) and (s.startswith("#") or s.endswith((";", ","))):
            yield _line_cut("boilerplate", "repetitive", i, line)
        if (s.startswith("#endif") or re.fullmatch(r"}\s*\w*\s*;", s)) and i >= 1 and lines[i - 1].strip():
            yield Cut("boilerplate", "closing", "line_start", i - 1, 0, i, len(line))
        if re.match(r"(/\*|\*) \w", s) and len(s) > 24:
            yield _mid("docs", "comment", i, line, r"^\s*(/\*|\*) ") or _line_cut("docs", "comment", i, line)


CUTTERS: dict[str, Callable[[list[str]], Iterator[Cut]]] = {
    "python": python_cuts, "javascript": js_cuts, "c": c_cuts,
}


# -- windows ----------------------------------------------------------------------------------

class Counter:
    """Token counts with the default target's tokenizer (or ~3.5 characters per token without)."""

    def __init__(self, tokenizer_json: Path | None) -> None:
        self.tok = None
        if tokenizer_json is not None and tokenizer_json.exists():
            from tokenizers import Tokenizer

            self.tok = Tokenizer.from_file(str(tokenizer_json))

    def __call__(self, text: str) -> int:
        return len(self.tok.encode(text).ids) if self.tok else int(len(text) / 3.5) + 1


def window(lines: list[str], cut: Cut, count: Counter) -> tuple[str, str, str] | None:
    """(prefix, middle, suffix) with whole lines trimmed off the far ends to fit the bounds."""
    head = "".join(l + "\n" for l in lines[: cut.line]) + lines[cut.line][: cut.col]
    if cut.line == cut.end_line:
        middle = lines[cut.line][cut.col: cut.end_col]
    else:
        middle = lines[cut.line][cut.col:] + "\n" + "".join(l + "\n" for l in lines[cut.line + 1: cut.end_line])
        middle += lines[cut.end_line][: cut.end_col]
    tail_lines = [lines[cut.end_line][cut.end_col:]] + lines[cut.end_line + 1:]
    if len(middle) > MIDDLE_CHARS[1] or len(middle.strip()) < MIDDLE_CHARS[0]:
        return None
    head_lines = head.split("\n")  # the last element is the partial cursor line
    while len(head_lines) > 1 and count("\n".join(head_lines)) > MAX_PREFIX_TOKENS:
        head_lines = head_lines[max(1, len(head_lines) // 10):]
    prefix = "\n".join(head_lines)
    while len(tail_lines) > 1 and count("\n".join(tail_lines)) > MAX_SUFFIX_TOKENS:
        tail_lines = tail_lines[: -max(1, len(tail_lines) // 10)]
    suffix = "\n".join(tail_lines) + "\n"
    if count(prefix) > MAX_PREFIX_TOKENS or count(prefix) + count(suffix) < MIN_PROMPT_TOKENS:
        return None
    return prefix, middle, suffix


# -- selection --------------------------------------------------------------------------------

def build(seed: int, count: Counter) -> list[Task]:
    rng = random.Random(seed)
    sources = [*python_sources(), *js_sources(), *c_sources()]
    by_key: dict[tuple[str, str, str], list[tuple[Source, list[str], Cut]]] = {k: [] for k in QUOTAS}
    for src in sources:
        try:
            text = src.path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        lines = text.split("\n")
        if len(lines) < 80 or re.search(r"(?i)generated|do not edit", "\n".join(lines[:8])):
            continue  # short files and generated code
        for cut in CUTTERS[src.language](lines):
            key = (src.language, cut.category, cut.kind)
            if key in by_key:
                by_key[key].append((src, lines, cut))
    tasks: list[Task] = []
    used_files: dict[str, int] = {}
    used_packages: dict[str, int] = {}
    for key, quota in QUOTAS.items():
        pool = by_key[key]
        rng.shuffle(pool)
        taken = 0
        for src, lines, cut in pool:
            if taken == quota:
                break
            file_key = f"{src.package}/{src.file}"
            if used_files.get(file_key, 0) >= (2 if src.language == "c" else 1):
                continue
            if src.language == "python" and used_packages.get(src.package, 0) >= MAX_PER_PACKAGE:
                continue
            w = window(lines, cut, count)
            if w is None:
                continue
            prefix, middle, suffix = w
            used_files[file_key] = used_files.get(file_key, 0) + 1
            used_packages[src.package] = used_packages.get(src.package, 0) + 1
            taken += 1
            lang, cat, kind = key
            tasks.append(Task(
                id=f"{lang[:2]}-{cat[:5]}-{kind}-{taken}", language=lang, category=cat, kind=kind,
                cursor=cut.cursor, package=src.package, version=src.version, file=src.file,
                line=cut.line + 1, column=cut.col, prefix=prefix, suffix=suffix, expected=middle,
                prefix_tokens=count(prefix), suffix_tokens=count(suffix), seed=seed,
            ))
        if taken < quota:
            print(f"note: {key}: found {taken} of {quota} tasks", file=sys.stderr)
    return tasks


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--out", type=Path, default=TASKS_FILE)
    ap.add_argument("--tokenizer", type=Path, default=model_dir(DEFAULT_TARGET) / "converted" / "tokenizer.json")
    args = ap.parse_args()
    count = Counter(args.tokenizer)
    if count.tok is None:
        print(f"note: {args.tokenizer} missing: token counts estimated from characters", file=sys.stderr)
    tasks = build(args.seed, count)
    args.out.write_text("".join(json.dumps(asdict(t), ensure_ascii=False) + "\n" for t in tasks))
    cats: dict[str, int] = {}
    for t in tasks:
        cats[f"{t.language}/{t.category}"] = cats.get(f"{t.language}/{t.category}", 0) + 1
    print(f"wrote {len(tasks)} tasks to {args.out}: {cats}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
