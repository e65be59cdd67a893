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


def rounds(results: dict, mode: str = "spec") -> list[dict]:
    """Every timed round of ``mode``'s requests."""
    return [r for run in results["runs"] if run["mode"] == mode for r in run["timeline"]["rounds"]]


def rounds_by_drafts(results: dict, mode: str = "spec") -> dict[int, dict]:
    """{drafted: figures} over every timed round of ``mode``'s requests."""
    groups: dict[int, list[dict]] = defaultdict(list)
    for r in rounds(results, mode):
        groups[r["drafted"]].append(r)
    out = {}
    for drafted, group in sorted(groups.items()):
        tokens = sum(r["tokens"] for r in group)
        ms = sum(r["ms"] for r in group)
        out[drafted] = {
            "rounds": len(group),
            "acceptance": round(sum(r["accepted"] for r in group) / max(1, drafted * len(group)), 3),
            "draft_ms": round(statistics.median(r["phases"].get("draft", 0.0) for r in group), 2),
            "verify_ms": round(statistics.median(r["phases"].get("verify", 0.0) for r in group), 2),
            "tokens_per_round": round(tokens / len(group), 3),
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
        spec = rounds(results)
        tokens, ms = sum(r["tokens"] for r in spec), sum(r["ms"] for r in spec)
        print(json.dumps({"results": path, "by_drafts": rounds_by_drafts(results), "rounds": len(spec),
                          "tokens": tokens, "ms_per_token": round(ms / tokens, 2) if tokens else None,
                          "ms_to_n_tokens": {mode: {n: time_to_tokens(results, mode, n) for n in (2, 4, 8, 16)}
                                             for mode in ("spec", "target")}}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
