#!/usr/bin/env python
"""Fill-in-the-middle tasks at editor contexts for ``../shared/tools/race.py`` (specd's daemon vs
llama-server, same run) and ``bench/decode_race.py``: JSONL of ``{"id", "split", "prefix",
"suffix", "expected"}``, 3,000 characters before the cursor and 400 after (what race.py sends),
the cursor at the start of a code line inside an indented block, ``expected`` that line.

Sources, named here and nowhere else, split by package so the two never share a file:
  dev  (to choose settings on): the standard library's ``email``, ``json``, ``asyncio`` and
       ``http`` packages of the interpreter that runs this script;
  test (to report on): the installed ``rich``, ``click``, ``jinja2`` and ``pygments`` packages.
Deterministic for a seed and the installed files.

With ``--repo PATH`` the tasks come from a repository's held-out Python files instead (those
``specd heads train --repo PATH`` never trains on, ``specd.heads.repo``), ``--split`` naming them:
how a head fine-tuned on the repository drafts on its code.

    python bench/race_tasks.py --repo ~/src/project --split repo --count 24 --out /tmp/race-repo.jsonl

    python bench/race_tasks.py --split test --count 16 --out /tmp/race-test.jsonl

Sessions 17-21 raced ordinary code only: ``--count 150 --seed 47 --drop
lexers,unicode,formatters,styles,mappings,emoji --keep 32`` (pygments' lexer and style tables are
boilerplate on which any drafter shines).
"""

from __future__ import annotations

import argparse
import importlib
import json
import random
import sysconfig
from pathlib import Path

PREFIX_CHARS, SUFFIX_CHARS = 3000, 400
SOURCES = {
    "dev": [("stdlib", p) for p in ("email", "json", "asyncio", "http")],
    "test": [("site", p) for p in ("rich", "click", "jinja2", "pygments")],
}


def package_dir(kind: str, name: str) -> Path:
    if kind == "stdlib":
        return Path(sysconfig.get_paths()["stdlib"]) / name
    return Path(importlib.import_module(name).__file__).parent


def cursor_lines(text: str) -> list[int]:
    """Offsets of line starts that make a fair task: an indented code line (not a comment or a
    blank line, 12..100 characters) with a full prefix and suffix window around it."""
    out, at = [], 0
    for line in text.splitlines(keepends=True):
        body = line.strip()
        if (line.startswith(("    ", "\t")) and 12 <= len(body) <= 100 and not body.startswith(("#", '"""', "'''"))
                and PREFIX_CHARS <= at and at + len(line) + SUFFIX_CHARS <= len(text)):
            out.append(at)
        at += len(line)
    return out


def held_out_files(root: Path) -> list[Path]:
    """The Python files of the repository at ``root`` that repository fine-tuning holds out."""
    from specd.heads import repo

    return sorted(f.path for f in repo.files(root).get("python", []) if f.validation)


def build(split: str, count: int, seed: int, root: Path | None = None) -> list[dict]:
    rng = random.Random(seed)
    if root is not None:
        files = held_out_files(root)
    else:
        files = sorted(f for kind, name in SOURCES[split] for f in package_dir(kind, name).rglob("*.py"))
    rng.shuffle(files)
    tasks = []
    for f in files:  # one task per file, as an editor opens one file at a time
        text = f.read_text(encoding="utf-8", errors="replace")
        starts = cursor_lines(text)
        if not starts:
            continue
        at = rng.choice(starts)
        end = text.index("\n", at)
        indent = len(text[at:end]) - len(text[at:end].lstrip())
        # the cursor after the line's indentation, as an editor leaves it on a new line
        cur = at + indent
        package = (root.name if root is not None else
                   next(name for kind, name in SOURCES[split] if f.is_relative_to(package_dir(kind, name))))
        # the fields of specd.bench.tasks.Task too, so `specd bench --tasks-file` reads this file
        tasks.append({"id": f"{split}-{f.parent.name}-{f.stem}-{len(tasks)}", "split": split,
                      "file": str(f), "prefix": text[cur - PREFIX_CHARS : cur],
                      "suffix": text[end : end + SUFFIX_CHARS], "expected": text[cur:end],
                      "language": "python", "category": "logic", "kind": "block_body", "cursor": "line_start",
                      "package": package, "version": "installed",
                      "line": text.count("\n", 0, at) + 1, "column": indent})
        if len(tasks) == count:
            break
    return tasks


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--split", required=True, help=f"{' or '.join(sorted(SOURCES))}; with --repo, a name for its tasks")
    ap.add_argument("--repo", type=Path, help="tasks from this repository's held-out Python files")
    ap.add_argument("--count", type=int, default=16)
    ap.add_argument("--seed", type=int, default=24)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--drop", default="", help="comma list: leave out the tasks whose id holds any of these words")
    ap.add_argument("--keep", type=int, default=0, help="then keep the first N (0: all)")
    args = ap.parse_args()
    if args.repo is None and args.split not in SOURCES:
        raise SystemExit(f"--split: one of {', '.join(sorted(SOURCES))} (or pass --repo)")
    tasks = build(args.split, args.count, args.seed, args.repo.expanduser().resolve() if args.repo else None)
    words = [w for w in args.drop.split(",") if w]
    tasks = [t for t in tasks if not any(w in t["id"] for w in words)]
    tasks = tasks[: args.keep] if args.keep else tasks
    args.out.write_text("".join(json.dumps(t) + "\n" for t in tasks))
    print(f"{len(tasks)} {args.split} tasks -> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
