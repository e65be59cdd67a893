#!/usr/bin/env python
"""Prompt lookup's drafts by match length, on the target's own greedy continuations.

Per FIM task (``bench/race_tasks.py``'s JSONL), the engine answers greedily with the target alone;
the sequence a drafter would see is the prompt (as the engine builds it, token healing's cut
included) followed by that answer. At every position of the answer where prompt lookup
(``specd.engine.ngram.find``) finds the sequence's tail earlier, its next ``1 .. --cap`` tokens are
judged against the answer: accepted drafts are the longest prefix that matches. Reported per match
length (the tail's tokens found, 2 to 4): positions, the first draft's rate, mean accepted drafts
at each cap, and with ``--curve`` (T(1), T(2), ... ms: a target forward over n rows, as
``specd bench --profile`` prints the daemon's) the ms a token each cap would cost in a lookup
round, T(k + 1) / (1 + accepted), and the cap that costs least. No timing here: greedy answers and
lookup are deterministic, so the counts are exact.

    python bench/lookup_matches.py TASKS.jsonl --curve 33,33,33,34.3,39.4,44.5,49.5,57.4,65.3
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from specd.app import build_engine
from specd.bench.machine import machine_info
from specd.engine.config import EngineConfig
from specd.engine.engine import CompletionRequest
from specd.engine.healing import Healer
from specd.engine.ngram import find


def accepted(drafts: list[int], answer: list[int]) -> int:
    """How many of ``drafts`` match ``answer`` from its start."""
    return len(os.path.commonprefix([drafts, answer]))


def tally(full: list[int], start: int, cap: int, counts: dict[int, list[int]]) -> None:
    """Add every answer position (``full[start:]``) where lookup finds a match to ``counts``: per
    match length, [positions, accepted drafts at cap 1, at cap 2, ...]."""
    for p in range(start, len(full)):
        n, j = find(full[:p])
        if n == 0:
            continue
        drafts, answer = full[j + n : j + n + cap], full[p:]
        a = accepted(drafts, answer)  # at cap k: min(a, k)
        row = counts.setdefault(n, [0] * (cap + 1))
        row[0] += 1
        for k in range(1, cap + 1):
            row[k] += min(a, k)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("tasks", type=Path, help="FIM tasks JSONL (prefix, suffix)")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--cap", type=int, default=8, help="the most lookup drafts judged at a position")
    ap.add_argument("--curve", default="", help="T(1),T(2),... ms of a target forward over n rows")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    curve = [float(x) for x in args.curve.split(",")] if args.curve else []
    if curve and len(curve) < args.cap + 1:
        ap.error(f"--curve needs T(1) .. T({args.cap + 1})")
    engine = build_engine(EngineConfig(threads=args.threads))
    healer = (Healer(engine.tokenizer, engine.config.token_healing, engine.prompts.stop_ids)
              if engine.config.token_healing != "off" else None)
    counts: dict[int, list[int]] = {}
    tasks = [json.loads(line) for line in args.tasks.read_text().splitlines() if line.strip()]
    answered = 0
    for t in tasks:
        prompt, _ = engine.prompts.build_healed(t["prefix"], t["suffix"], healer.cut if healer else None)
        c = engine.complete(CompletionRequest(t["prefix"], t["suffix"], max_tokens=args.max_tokens,
                                              temperature=0, mode="target"))
        tally(prompt + list(c.tokens), len(prompt), args.cap, counts)
        answered += len(c.tokens)
    table = {}
    for n in sorted(counts):
        row = counts[n]
        mean = [round(row[k] / row[0], 3) for k in range(1, args.cap + 1)]
        table[n] = {"positions": row[0], "first_draft": mean[0], "accepted_at_cap": mean}
        if curve:
            ms = [round(curve[k] / (1 + mean[k - 1]), 2) for k in range(1, args.cap + 1)]
            table[n] |= {"ms_per_token_at_cap": ms, "best_cap": 1 + ms.index(min(ms))}
    summary = {"machine": machine_info(), "command": " ".join(sys.argv), "tasks": len(tasks),
               "answer_tokens": answered, "by_match_length": table}
    print(json.dumps(summary, indent=1))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(summary, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
