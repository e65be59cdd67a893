#!/usr/bin/env python
"""The draft's prompt window (``draft_prompt_tokens``) measured on the real pair, in-process.

For each task the target's prompt is prefilled once, untimed; then, for each draft window and each
K, the draft's cache is emptied and one greedy speculative completion runs: the target reuses its
live cache (every engine here shares the loaded models), so the request's prefill is the draft's
cold prefill of its own window. Reported per window: the draft prompt's tokens, its cold prefill
ms, acceptance (accepted / drafted), tokens per round (1 + accepted / rounds) and decode ms per
token. Greedy text must be the same for every window (the target's): a difference fails the run.

    flock /tmp/specd-cpu.lock python bench/draft_window.py --tasks python --slice 0:10 \\
        --windows 0,512,256,128 --k auto,4 --max-tokens 32 --json bench/out/s8/dw-py-a.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from specd.app import build_engine, step_costs
from specd.bench.measurement import decode_ms_per_token
from specd.bench.machine import git_commit
from specd.bench.tasks import load_tasks, select_tasks
from specd.engine.config import EngineConfig, parse_k
from specd.engine.engine import Engine
from specd.requests import CompletionRequest


def _engines(base: Engine, windows: list[int], ks: list[int | str]) -> dict[tuple[int, int | str], Engine]:
    """One engine per (window, K) over the models ``base`` loaded (no prefix cache: the draft's
    prefill is always cold)."""
    costs = step_costs(base.config, base.target, base.draft) if "auto" in ks else None
    return {(w, k): Engine(base.target, base.tokenizer, base.draft, base.tokenizer,
                           base.config.replace(draft_prompt_tokens=w, k=k, prefix_cache_mb=0), costs=costs)
            for w in windows for k in ks}


def run(args: argparse.Namespace) -> list[dict]:
    windows = [int(w) for w in args.windows.split(",")]
    ks = [parse_k(k) for k in args.k.split(",")]
    lo, hi = (int(x) if x else None for x in args.slice.split(":"))
    tasks = select_tasks(load_tasks(), args.tasks)[lo:hi]
    base = build_engine(EngineConfig(prefix_cache_mb=0))
    engines = _engines(base, windows, ks)
    rows = []
    for task in tasks:
        request = CompletionRequest(prefix=task.prefix, suffix=task.suffix, max_tokens=args.max_tokens,
                                    temperature=0.0)
        base.reset()  # the target's prompt, untimed (each engine below reuses its live cache)
        base.complete(CompletionRequest(prefix=task.prefix, suffix=task.suffix, max_tokens=1, mode="target"))
        texts = {}
        for (w, k), engine in engines.items():
            engine.forget_suggestion()
            engine.draft.rollback(0)  # the draft's prefill is cold
            c = engine.complete(request)
            s = c.stats
            draft_tokens = len(engine.draft_window.cut(engine.prompts.build(task.prefix, task.suffix)).tokens)
            texts[(w, k)] = c.text
            row = {"task": task.id, "window": w, "k": k, "prompt_tokens": s.prompt_tokens,
                   "draft_prompt_tokens": draft_tokens, "draft_prefill_ms": round(s.prefill_ms, 1),
                   "target_reused": s.prefill_reused, "new_tokens": s.new_tokens, "rounds": s.rounds,
                   "drafted": s.drafted, "accepted": s.accepted,
                   "decode_ms_per_token": round(decode_ms_per_token(s.total_ms, s.prefill_ms, s.ttft_ms,
                                                                    s.new_tokens), 2)}
            rows.append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
        if len(set(texts.values())) != 1:
            raise SystemExit(f"{task.id}: greedy text differs between windows: {texts}")
    return rows


def summarize(rows: list[dict]) -> str:
    out = ["| window | K | draft prompt tokens (median) | draft cold prefill ms (median) | acceptance | "
           "tokens/round | decode ms/token (median) | tasks |", "|---|---|---|---|---|---|---|---|"]
    keys = sorted({(r["window"], str(r["k"])) for r in rows}, key=lambda x: (x[1], -x[0] if x[0] else -10**9))
    for w, k in keys:
        sel = [r for r in rows if r["window"] == w and str(r["k"]) == k]
        drafted, accepted, rounds = (sum(r[f] for r in sel) for f in ("drafted", "accepted", "rounds"))
        out.append(f"| {w or 'full'} | {k} | {statistics.median(r['draft_prompt_tokens'] for r in sel):.0f} | "
                   f"{statistics.median(r['draft_prefill_ms'] for r in sel):.0f} | "
                   f"{100 * accepted / max(1, drafted):.1f} % | {1 + accepted / max(1, rounds):.2f} | "
                   f"{statistics.median(r['decode_ms_per_token'] for r in sel):.1f} | {len(sel)} |")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", default="python", help="the bench suite's --tasks selection")
    ap.add_argument("--slice", default=":", help="a slice of the selected tasks, e.g. 0:10")
    ap.add_argument("--windows", default="0,512,256,128", help="draft_prompt_tokens values (0: full)")
    ap.add_argument("--k", default="auto,4")
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--json", type=Path, help="write the rows (and the commit) here")
    ap.add_argument("--summarize", type=Path, nargs="*", help="only print the table of these JSON files")
    args = ap.parse_args()
    if args.summarize:
        rows = [r for p in args.summarize for r in json.loads(p.read_text())["rows"]]
    else:
        rows = run(args)
        if args.json:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps({"commit": git_commit(Path(__file__).resolve().parent.parent), "argv": sys.argv, "rows": rows}, indent=1))
    print(summarize(rows))


if __name__ == "__main__":
    main()
