"""Bench tasks: fill-in-the-middle cuts of real code, stored as JSON lines with provenance."""

from __future__ import annotations

import fnmatch
import gzip
import importlib.resources
import json
from dataclasses import dataclass, fields
from pathlib import Path

from specd.bench.errors import BenchError

QUICK_TASKS = ("py-boile-argparse-1", "py-logic-block_body-2", "py-docs-comment-2")


@dataclass(frozen=True)
class Task:
    id: str
    language: str
    category: str  # boilerplate | logic | docs
    kind: str  # imports, argparse, repetitive, closing, block_body, expression, docstring, comment
    cursor: str  # line_start | mid_line | block_start
    package: str
    version: str
    file: str
    line: int
    column: int
    prefix: str
    suffix: str
    expected: str  # the original middle, for reference
    prefix_tokens: int = 0
    suffix_tokens: int = 0
    seed: int = 0
    split: str = ""  # dev (settings are chosen on it) | test (figures are reported on it) | "" (no split)

    def provenance(self) -> str:
        return f"{self.package} {self.version} {self.file}:{self.line}"


def default_tasks_path() -> Path:
    """The bench tasks shipped as package data (``specd/bench/data/tasks.jsonl``, which
    ``bench/build_tasks.py`` writes): found in an editable checkout and in an installed wheel."""
    return Path(str(importlib.resources.files("specd.bench").joinpath("data", "tasks.jsonl")))


def quality_tasks_path() -> Path:
    """The quality scenario's tasks (``specd/bench/data/quality.jsonl.gz``, which
    ``bench/quality_tasks.py`` writes): seven languages, a dev and a test split."""
    return Path(str(importlib.resources.files("specd.bench").joinpath("data", "quality.jsonl.gz")))


def load_tasks(path: Path | None = None) -> list[Task]:
    if path is None:
        path = default_tasks_path()
        if not path.is_file():
            raise BenchError(
                f"task file {path} not found: this specd install lacks its bench tasks (package data); "
                "reinstall specd, or pass --tasks-file; `python bench/build_tasks.py` rebuilds them"
            )
    elif not path.is_file():
        raise BenchError(
            f"task file {path} not found: pass an existing --tasks-file, or omit it for the bundled tasks; "
            "`python bench/build_tasks.py --out FILE` builds a task file"
        )
    names = {f.name for f in fields(Task)}
    tasks = []
    raw_text = (gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()).decode("utf-8")
    for n, line in enumerate(raw_text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            raw = json.loads(line)
            tasks.append(Task(**{k: v for k, v in raw.items() if k in names}))
        except (json.JSONDecodeError, TypeError) as e:
            raise BenchError(f"{path}:{n}: not a task ({e})") from e
    if not tasks:
        raise BenchError(f"task file {path} holds no tasks")
    return tasks


def select_tasks(tasks: list[Task], spec: str | None) -> list[Task]:
    """``spec``: comma-separated ids, id globs (``py-*``), categories, languages or kinds; the
    union, in file order. None or empty: all tasks."""
    if not spec:
        return list(tasks)
    wanted = [s.strip() for s in spec.split(",") if s.strip()]

    def hits(task: Task, w: str) -> bool:
        return w in (task.id, task.category, task.language, task.kind, task.cursor, task.split) or fnmatch.fnmatch(task.id, w)

    for w in wanted:
        if not any(hits(t, w) for t in tasks):
            cats = sorted({t.category for t in tasks})
            langs = sorted({t.language for t in tasks})
            raise BenchError(
                f"--tasks {w!r} matches no task: use task ids (e.g. {tasks[0].id}), globs such as "
                f"'py-*', categories ({', '.join(cats)}) or languages ({', '.join(langs)})"
            )
    chosen = [t for t in tasks if any(hits(t, w) for w in wanted)]
    if not chosen:
        raise BenchError(f"--tasks {spec!r} selects an empty task set")
    return chosen


def quick_tasks(tasks: list[Task]) -> list[Task]:
    """One task per category for ``--quick``: the fixed list, else the first of each category."""
    by_id = {t.id: t for t in tasks}
    chosen = [by_id[i] for i in QUICK_TASKS if i in by_id]
    if len(chosen) < len(QUICK_TASKS):
        seen: set[str] = set()
        chosen = [t for t in tasks if not (t.category in seen or seen.add(t.category))]
    return chosen
