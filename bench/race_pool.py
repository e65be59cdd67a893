#!/usr/bin/env python
"""Decode races pooled across runs: what the goals of issues 24 and 26 measure over many hours.

One ``bench/decode_race.py`` run gives ratios of medians over ~13 counted tasks, and its figure
moves by ~10 % with the host's hour (bench/RESULTS.md, sessions 31–35). This script reads several
runs' JSON (the same task file: it refuses runs whose commands name different task files, unless
``--mixed``) and reports:

- per run: its ratios of medians, as ``decode_race.py`` printed them;
- over runs: the median, the lowest and the highest of each ratio, and how many runs meet the goal;
- per task pair (both systems' slopes from the same run, the same task, minutes apart): the median
  of all runs' per-task ratios, with a 90 % interval from resampling whole runs (a run's tasks
  share its hour, so runs, not tasks, are the independent draws).

    python bench/race_pool.py ~/.cache/specd/heads/qwen2.5-coder-1.5b/s3[1-5]/race-*.json
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
from pathlib import Path

from specd.percentile import percentile

# (ratio name in decode_race.py's summary, numerator mode, denominator mode, goal, goal holds when)
RATIOS = (("target / llama", "target", "llama", 0.9, "<="),
          ("spec / llama", "spec", "llama", 0.5, "<="),
          ("target / spec (speedup)", "target", "spec", 1.8, ">="))


def task_file(summary: dict) -> str:
    """The task file a run raced (the command's last argument that is not an option's value)."""
    words = summary.get("command", "").split()
    files = [w for i, w in enumerate(words) if w.endswith(".jsonl") and not words[i - 1].startswith("--")]
    return files[-1] if files else "?"


def meets(value: float, goal: float, how: str) -> bool:
    return value <= goal if how == "<=" else value >= goal


def pairs(run: dict, num: str, den: str) -> list[float]:
    """Per counted task, ``num``'s slope over ``den``'s."""
    return [r[f"{num}_ms_per_token"] / r[f"{den}_ms_per_token"] for r in run["raw"]
            if r.get("counted") and f"{num}_ms_per_token" in r and f"{den}_ms_per_token" in r]


def pooled_interval(runs: list[dict], num: str, den: str, draws: int,
                    rng: random.Random) -> tuple[float, float, float, int]:
    """The median of every run's per-task ratios, its 5th and 95th percentiles over ``draws``
    resamplings of whole runs, and how many ratios there are."""
    per_run = [pairs(r, num, den) for r in runs]
    every = [x for p in per_run for x in p]
    medians = []
    for _ in range(draws):
        sample = [x for p in rng.choices(per_run, k=len(per_run)) for x in p]
        medians.append(statistics.median(sample))
    medians.sort()
    return statistics.median(every), percentile(medians, 5), percentile(medians, 95), len(every)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", type=Path, nargs="+", help="decode_race.py --out files")
    ap.add_argument("--mixed", action="store_true", help="pool runs of different task files")
    ap.add_argument("--draws", type=int, default=2000, help="resamplings for the interval")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=None, help="write the pooled figures as JSON")
    args = ap.parse_args()
    runs = [json.loads(p.read_text()) | {"path": str(p)} for p in args.runs]
    files = {task_file(r["summary"]) for r in runs}
    if len(files) > 1 and not args.mixed:
        print(f"runs of different task files ({', '.join(sorted(files))}): pass --mixed to pool them", file=sys.stderr)
        return 2
    print(f"{len(runs)} runs of {', '.join(sorted(files))}")
    print("run | " + " | ".join(name for name, *_ in RATIOS) + " | llama-server ms a token | counted")
    for r in runs:
        s = r["summary"]
        print(f"{r['path']} | " + " | ".join(f"{s.get(name, float('nan')):.3f}" for name, *_ in RATIOS)
              + f" | {s['modes']['llama']['ms_per_token_median']:.2f} | {s['counted']}")
    rng = random.Random(args.seed)
    pooled = {"runs": [r["path"] for r in runs], "task_files": sorted(files), "ratios": {}}
    for name, num, den, goal, how in RATIOS:
        values = [r["summary"][name] for r in runs if name in r["summary"]]
        if not values:
            continue
        med, lo, hi, n_pairs = pooled_interval(runs, num, den, args.draws, rng)
        n_met = sum(meets(v, goal, how) for v in values)
        pooled["ratios"][name] = {"goal": f"{how} {goal}", "runs": len(values), "runs_meeting": n_met,
                                  "run_median": round(statistics.median(values), 3), "run_min": min(values),
                                  "run_max": max(values), "per_task_median": round(med, 3),
                                  "per_task_90pct": [round(lo, 3), round(hi, 3)],
                                  "per_task_pairs": n_pairs}
        p = pooled["ratios"][name]
        print(f"{name} (goal {how} {goal}): runs' ratios median {p['run_median']} [{p['run_min']}–{p['run_max']}], "
              f"{n_met} of {len(values)} runs meet it; per task median {p['per_task_median']} "
              f"(90 % by runs {p['per_task_90pct'][0]}–{p['per_task_90pct'][1]}, {p['per_task_pairs']} pairs)")
    if args.out:
        args.out.write_text(json.dumps(pooled, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
