#!/usr/bin/env python
"""How often the end-of-code rule (``specd.engine.endofcode.CodeEnd``) would cut correct code.

Two sources of correct completions, no model needed:

- the bench suite's tasks: each task's original middle after its prefix;
- real source files installed on this machine (site-packages: Python, C/C++ headers and sources,
  JavaScript): at seeded random line starts, the next ``--lines`` lines of the file after the text
  before them.

A cut is a false stop: the rule would have ended a completion that the file shows to be right.

    python bench/end_of_code.py --files 3000
"""

from __future__ import annotations

import argparse
import random
import site
import sys
from collections import Counter
from pathlib import Path

from specd.bench.tasks import load_tasks
from specd.engine.endofcode import CodeEnd

EXTENSIONS = {".py": "python", ".c": "c", ".h": "c", ".cpp": "c++", ".hpp": "c++", ".js": "javascript",
              ".ts": "typescript", ".rs": "rust", ".go": "go"}


def source_files(limit: int, rng: random.Random) -> list[Path]:
    roots = [Path(p) for p in site.getsitepackages()]
    found = [p for root in roots for p in root.rglob("*") if p.suffix in EXTENSIONS and p.is_file()]
    rng.shuffle(found)
    return found[:limit]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", type=int, default=3000, help="source files to sample")
    ap.add_argument("--cursors", type=int, default=5, help="cursor positions per file")
    ap.add_argument("--lines", type=int, default=20, help="lines of correct completion per cursor")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    rng = random.Random(args.seed)

    suite_cuts = [t.id for t in load_tasks() if CodeEnd(t.prefix).cut(t.expected, final=True) is not None]
    print(f"bench suite: {len(load_tasks())} tasks, {len(suite_cuts)} cut {suite_cuts}")

    checked: Counter[str] = Counter()
    cut: Counter[str] = Counter()
    off: Counter[str] = Counter()
    examples: list[str] = []
    for path in source_files(args.files, rng):
        try:
            lines = path.read_text(encoding="utf-8").split("\n")
        except (UnicodeDecodeError, OSError):
            continue
        if len(lines) < 3:
            continue
        lang = EXTENSIONS[path.suffix]
        for _ in range(args.cursors):
            at = rng.randrange(1, len(lines))
            prefix = "\n".join(lines[:at]) + "\n"
            middle = "\n".join(lines[at:at + args.lines])
            guard = CodeEnd(prefix)
            checked[lang] += 1
            if not guard.active:
                off[lang] += 1
            elif (i := guard.cut(middle, final=True)) is not None:
                cut[lang] += 1
                if len(examples) < 5:
                    examples.append(f"{path}:{at + 1 + middle[:i].count(chr(10))}")
    total, total_cut = sum(checked.values()), sum(cut.values())
    print(f"real files: {total} completions of {args.lines} lines, {total_cut} cut "
          f"({100 * total_cut / max(total, 1):.3f} %), rule off (fence in prefix) for {sum(off.values())}")
    for lang in sorted(checked):
        print(f"  {lang:11s} {checked[lang]:6d} checked  {cut[lang]:3d} cut  {off[lang]:4d} off")
    for e in examples:
        print(f"  cut at {e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
