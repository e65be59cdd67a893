#!/usr/bin/env python
"""Measure the LSP post-processing rules (``specd.lsp.postprocess``) on the bench tasks.

Input: a ``specd bench`` run's ``results.json`` (the raw completions of one mode, greedy) and the
task file (each task's original middle, ``expected``). For every rule set — none, all, all but one,
each alone — the script post-processes every completion as the LSP would and scores what an editor
would insert against what the file really had:

- **kept**: characters of the suggestion that match the original from the start (what the user
  accepts), as a share of the original middle;
- **junk**: characters after the first mismatch (what the user must delete or ignore);
- **exact**: suggestions equal to the original middle (trailing whitespace ignored);
- **empty**: suggestions emptied by the rules.

A rule helps if it lowers junk without lowering kept.

    python bench/postprocess_rules.py bench/out/suite/results.json --mode target
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from pathlib import Path

from specd.bench.tasks import load_tasks
from specd.lsp.postprocess import Rules, postprocess

RULES = [f.name for f in dataclasses.fields(Rules)]


def score(suggestion: str, expected: str) -> tuple[int, int]:
    """(kept, junk): the common prefix length, and the characters after it."""
    n = len(os.path.commonprefix([suggestion, expected]))
    return n, len(suggestion) - n


def evaluate(items: list[tuple[str, str, str, str]], rules: Rules) -> dict:
    kept, junk, exact, empty, total = 0, 0, 0, 0, 0
    for raw, prefix, suffix, expected in items:
        line_prefix = prefix.rsplit("\n", 1)[-1]
        line_suffix = suffix.split("\n", 1)[0]
        out = postprocess(raw, line_prefix, line_suffix, suffix, rules)
        k, j = score(out, expected)
        kept, junk, total = kept + k, junk + j, total + len(expected)
        exact += out.rstrip() == expected.rstrip()
        empty += not out.strip()
    return {"kept_share": kept / max(total, 1), "junk_chars": junk / len(items),
            "exact": exact, "empty": empty}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results", type=Path)
    ap.add_argument("--mode", default="target", help="whose completions to use (default target)")
    ap.add_argument("--tasks-file", type=Path, default=None)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    doc = json.loads(args.results.read_text())
    tasks = {t.id: t for t in load_tasks(args.tasks_file)}
    seen: dict[str, str] = {}
    for run in doc["runs"]:
        if run["mode"] == args.mode and run["task"] in tasks:
            seen.setdefault(run["task"], run["text"])  # greedy: every repetition wrote the same
    if not seen:
        print(f"no runs of mode {args.mode!r} in {args.results}", file=sys.stderr)
        return 2
    items = [(text, tasks[t].prefix, tasks[t].suffix, tasks[t].expected) for t, text in seen.items()]
    off = Rules(**{r: False for r in RULES})
    sets = {"none": off, "all": Rules()}
    for r in RULES:
        sets[f"all but {r}"] = dataclasses.replace(Rules(), **{r: False})
        sets[f"only {r}"] = dataclasses.replace(off, **{r: True})
    table = {name: evaluate(items, rules) for name, rules in sets.items()}
    if args.json:
        print(json.dumps({"tasks": len(items), "mode": args.mode, "results": table}, indent=1))
        return 0
    print(f"{len(items)} tasks, completions of mode {args.mode} from {args.results}")
    print("| rules | kept (share of original) | junk chars / task | exact | emptied |")
    print("|---|---|---|---|---|")
    for name, row in table.items():
        print(f"| {name} | {row['kept_share']:.3f} | {row['junk_chars']:.1f} | {row['exact']} | {row['empty']} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
