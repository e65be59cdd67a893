#!/usr/bin/env python
"""What a line budget (llama.vim's ``t_max_predict_ms``; specd's ``line_budget_ms``) would cost and
save, simulated over a quality run's answers (``specd bench --scenario quality``'s results.json).

specd's answers at line and block starts are cut as the budget would cut them: at the first line
end after ``budget / ms_per_token`` tokens (the clock starts at the first token). ``ms_per_token``
is the slope of request time over new tokens across the run's specd answers (least squares).
Printed per budget: mean accepted characters at line-start and block sites, and the mean tokens
(and decode ms) a multi-line answer then generates.

    python bench/quality_budget.py bench/out/quality-test/results.json
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from specd.bench.quality import accepted_chars, shown
from specd.bench.tasks import load_tasks, quality_tasks_path
from specd.lsp.postprocess import postprocess
from specd.models.loader import resolve
from specd.engine.config import DEFAULT_TARGET
from specd.models.tokenizer import Tokenizer


def slope(answers: list[dict]) -> float:
    xs, ys = [a["tokens"] for a in answers], [a["ms"] for a in answers]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results", type=Path)
    ap.add_argument("--budgets", default="0,250,500,1000,2000,none")
    args = ap.parse_args()
    doc = json.loads(args.results.read_text())
    tasks = {t.id: t for t in load_tasks(quality_tasks_path())}
    tok = Tokenizer.from_file(resolve(DEFAULT_TARGET).directory / "tokenizer.json")
    mine = [a for a in doc["answers"] if a["system"] == "specd"]
    per_token = slope(mine)
    print(f"specd: {per_token:.1f} ms a token (slope over {len(mine)} answers)")
    multi = [a for a in mine if a["kind"] != "mid_line"]
    for b in args.budgets.split(","):
        budget = None if b == "none" else float(b)
        acc: dict[str, list[int]] = {"line_start": [], "block": []}
        made = []
        for a in multi:
            t, text = tasks[a["task"]], a["text"]
            ids = tok.encode(text)
            n = len(ids)
            if budget is not None:
                within = len(tok.decode(ids[: int(budget / per_token) + 1]))
                body = len(text) - len(text.lstrip())
                nl = text.find("\n", max(within - 1, body))
                if nl >= 0:
                    text = text[:nl]
                    n = len(tok.encode(text))
            made.append(n)
            acc[a["kind"]].append(accepted_chars(shown(t, text, postprocess), t.expected))
        print(f"budget {b:>5}: accepted chars line start {statistics.fmean(acc['line_start']):5.1f}, "
              f"block {statistics.fmean(acc['block']):5.1f}; tokens {statistics.fmean(made):5.1f} "
              f"(~{statistics.fmean(made) * per_token:5.0f} ms of decode)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
