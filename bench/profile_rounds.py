#!/usr/bin/env python
"""A `specd bench --profile` run's speculative rounds grouped by how many tokens they drafted:
per group the rounds, their drafts' acceptance, the median draft and verify time, the tokens a round
made and the milliseconds it took per token (pooled: the group's time ÷ its tokens). A round of
0 drafts is a target step. What this shows: which rounds pay (a round pays when its ms per token is
below a target step's). Then, per mode, the median over requests of the time until the first N
tokens were out (the rounds' time, prefill excluded): what a short completion waits.

    python bench/profile_rounds.py OUT/results.json [OUT2/results.json ...]
"""

from __future__ import annotations

import json
import statistics
import sys
from collections import defaultdict


def rounds_by_drafts(results: dict, mode: str = "spec") -> dict[int, dict]:
    """{drafted: figures} over every timed round of ``mode``'s requests."""
    groups: dict[int, list[dict]] = defaultdict(list)
    for run in results["runs"]:
        if run["mode"] == mode:
            for r in run["timeline"]["rounds"]:
                groups[r["drafted"]].append(r)
    out = {}
    for drafted, rounds in sorted(groups.items()):
        tokens = sum(r["tokens"] for r in rounds)
        ms = sum(r["ms"] for r in rounds)
        out[drafted] = {
            "rounds": len(rounds),
            "acceptance": round(sum(r["accepted"] for r in rounds) / max(1, drafted * len(rounds)), 3),
            "draft_ms": round(statistics.median(r["phases"].get("draft", 0.0) for r in rounds), 2),
            "verify_ms": round(statistics.median(r["phases"].get("verify", 0.0) for r in rounds), 2),
            "tokens_per_round": round(tokens / len(rounds), 3),
            "ms_per_token": round(ms / tokens, 2),
        }
    return out


def time_to_tokens(results: dict, mode: str, n: int) -> float | None:
    """Median over ``mode``'s requests that made ``n`` tokens of the rounds' milliseconds until
    the ``n``-th token was out."""
    times = []
    for run in results["runs"]:
        if run["mode"] != mode:
            continue
        ms = tokens = 0
        for r in run["timeline"]["rounds"]:
            ms, tokens = ms + r["ms"], tokens + r["tokens"]
            if tokens >= n:
                times.append(ms)
                break
    return round(statistics.median(times), 1) if times else None


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__)
        return 2
    for path in argv:
        results = json.load(open(path))
        groups = rounds_by_drafts(results)
        tokens = sum(g["rounds"] * g["tokens_per_round"] for g in groups.values())
        ms = sum(g["rounds"] * g["tokens_per_round"] * g["ms_per_token"] for g in groups.values())
        print(json.dumps({"results": path, "by_drafts": groups, "rounds": sum(g["rounds"] for g in groups.values()),
                          "tokens": round(tokens), "ms_per_token": round(ms / tokens, 2) if tokens else None,
                          "ms_to_n_tokens": {mode: {n: time_to_tokens(results, mode, n) for n in (2, 4, 8, 16)}
                                             for mode in ("spec", "target")}}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
