#!/usr/bin/env python
"""Per-mode summary of a `specd bench` run's results.json: per-task decode speedup against the
target-only mode of the same run (median of the target's runs ÷ median of the mode's runs on a
task), then over tasks the median, geometric mean, mean, pooled (total decode time ratio), worst
task, geometric means per category and per language, acceptance and accepted length.

    python bench/summarize.py bench/out/s4-full/results.json
"""
import json
import math
import statistics
import sys


def main() -> None:
    runs = json.load(open(sys.argv[1]))["runs"]
    by: dict[tuple[str, str], list[dict]] = {}
    for m in runs:
        by.setdefault((m["task"], m["mode"]), []).append(m)
    tasks = sorted({t for t, _ in by})
    modes = sorted({mode for _, mode in by} - {"target"})
    category = {m["task"]: m["category"] for m in runs}

    def med(task: str, mode: str) -> float:
        return statistics.median(x["decode_ms_per_token"] for x in by[(task, mode)])

    def geo(values) -> float:
        values = list(values)
        return math.exp(sum(map(math.log, values)) / len(values))

    for mode in modes:
        sp = {t: med(t, "target") / med(t, mode) for t in tasks}
        decode = lambda t, md: sum(x["total_ms"] - x["prefill_ms"] for x in by[(t, md)])  # noqa: E731
        pooled = sum(decode(t, "target") for t in tasks) / sum(decode(t, mode) for t in tasks)
        worst = min(sp, key=sp.get)
        drafted = sum(x["drafted"] for t in tasks for x in by[(t, mode)])
        accepted = sum(x["accepted"] for t in tasks for x in by[(t, mode)])
        rounds = sum(x["rounds"] for t in tasks for x in by[(t, mode)])
        print(json.dumps({
            "mode": mode, "tasks": len(tasks),
            "median": round(statistics.median(sp.values()), 3), "geomean": round(geo(sp.values()), 3),
            "mean": round(statistics.mean(sp.values()), 3), "pooled": round(pooled, 3),
            "worst": [worst, round(sp[worst], 2)],
            "category": {c: round(geo(sp[t] for t in tasks if category[t] == c), 2)
                         for c in sorted(set(category.values()))},
            "language": {lang: round(geo(sp[t] for t in tasks if t.split("-")[0] == lang), 2)
                         for lang in sorted({t.split("-")[0] for t in tasks})},
            "ms_per_token_median": round(statistics.median(x["decode_ms_per_token"] for t in tasks
                                                           for x in by[(t, mode)]), 1),
            "acceptance": round(accepted / drafted, 3) if drafted else None,
            "accepted_length": round(1 + accepted / rounds, 2) if rounds else None,
        }))


if __name__ == "__main__":
    main()
