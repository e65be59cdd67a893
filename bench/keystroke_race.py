#!/usr/bin/env python
"""A keystroke that reaches the model: specd's daemon beside llama-server, same run, requests alternating.

In Qwen's FIM order (prefix, suffix, middle) a key typed before the cursor changes the prompt's
prefix at its end, so every suffix token after it is computed again: the suffix window is the floor
of what a keystroke costs once the suggestion on screen no longer matches (keys typed along a
suggestion are answered from it by the LSP and never reach a model). This script measures that
cost where users feel it, through the daemon, on the quality bench's real sites (the whole text
around the cursor, as an editor sends it):

for each task every system first has the task's prompt cached (specd ``warm``, llama-server an
``/infill`` of ``n_predict`` 0 with ``cache_prompt``), then ``--keys`` keystrokes type the real
middle's next characters, one request each (greedy, ``--max-tokens`` new tokens; mid-line both stop
at the line end, as the quality bench and the LSP do), systems alternating which goes first. Per
keystroke: the client's wall time, the prompt tokens each server computed again (specd:
``prompt_tokens - prefill_reused``; llama-server: ``prompt_n``), and its prompt-side time.

Modes: ``specd`` (the daemon at its defaults, or with the flags after ``--``), ``llama``
(llama-server, llama.vscode's CPU settings, same GGUF), and ``--variant NAME="FLAGS"`` for more
daemons (``--variant w32="--max-suffix-tokens 32"``). Reported per mode: keystroke wall ms p50
[p10-p90], recomputed tokens p50, and each mode's p50 over llama-server's. Run it alone:

    python bench/keystroke_race.py --split dev --per-kind 1 --variant w32="--max-suffix-tokens 32" --out F.json
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from decode_race import Specd

from specd.bench.llamacpp_bin import LlamaServer, find_binaries
from specd.bench.machine import machine_info
from specd.bench.quality import specd_params, stop_for
from specd.bench.tasks import Task, load_tasks, quality_tasks_path
from specd.engine.config import DEFAULT_TARGET
from specd.models.pull import gguf_path
from specd.models.registry import PUBLISHED
from specd.percentile import percentile


def chosen_tasks(split: str, per_kind: int, keys: int) -> list[Task]:
    """The first ``per_kind`` tasks of each language and cursor kind in the split whose real middle
    has at least ``keys`` characters on its first line (every key types a real character of it)."""
    counts: dict[tuple[str, str], int] = {}
    out = []
    for t in load_tasks(quality_tasks_path()):
        if t.split != split or len(t.expected.split("\n", 1)[0]) < keys:
            continue
        if counts.get((t.language, t.cursor), 0) < per_kind:
            counts[(t.language, t.cursor)] = counts.get((t.language, t.cursor), 0) + 1
            out.append(t)
    return out


def specd_key(daemon: Specd, task: Task, prefix: str, max_tokens: int) -> dict[str, Any]:
    t0 = time.perf_counter()
    r = daemon.client.call("complete", {**specd_params(task, max_tokens), "prefix": prefix})
    wall = (time.perf_counter() - t0) * 1e3
    s = r["stats"]
    return {"wall_ms": round(wall, 2), "recomputed": s["prompt_tokens"] - s["prefill_reused"],
            "prompt_tokens": s["prompt_tokens"], "prompt_ms": round(s["prefill_ms"], 2),
            "tokens": s["new_tokens"], "text": r["text"]}


def llama_key(llama: LlamaServer, task: Task, prefix: str, max_tokens: int) -> dict[str, Any]:
    stop = stop_for(task)
    r = llama.infill(prefix, task.suffix, max_tokens, cache_prompt=True, extra={"stop": stop} if stop else None)
    return {"wall_ms": round(r.wall_ms, 2), "recomputed": r.prompt_n, "prompt_tokens": r.prompt_n + r.cache_n,
            "prompt_ms": round(r.prompt_ms, 2), "tokens": r.predicted_n, "text": r.text}


def start_llama(threads: int) -> LlamaServer:
    """llama-server on the default target's GGUF, llama.vscode's CPU settings (exits when not built)."""
    bins = find_binaries()
    if bins is None:
        raise SystemExit("no llama-server built: python -m specd.bench.llamacpp_build")
    return LlamaServer(bins, gguf_path(PUBLISHED[DEFAULT_TARGET]), threads).start()


def spread(values: list[float]) -> dict[str, float]:
    return {"p50": round(statistics.median(values), 1), "p10": round(percentile(values, 10), 1),
            "p90": round(percentile(values, 90), 1), "n": len(values)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--split", choices=("dev", "test"), default="dev")
    ap.add_argument("--per-kind", type=int, default=1, help="tasks of each language and cursor kind")
    ap.add_argument("--keys", type=int, default=4, help="keystrokes per task, each typing the real next character")
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--no-llama", action="store_true", help="specd's daemons only")
    ap.add_argument("--variant", action="append", default=[],
                    help='NAME="FLAGS", once per variant: one more daemon, with these extra `specd serve` flags')
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("specd_args", nargs="*", help="extra `specd serve` flags for every daemon (after --)")
    args = ap.parse_args()
    tasks = chosen_tasks(args.split, args.per_kind, args.keys)
    flags = {"specd": []}
    for v in args.variant:
        name, _, f = v.partition("=")
        if not name or name in flags or name == "llama":
            raise SystemExit(f"--variant: {v!r}: name it NAME=FLAGS, a name no other mode has")
        flags[name] = shlex.split(f)
    daemons = {m: Specd(["--threads", str(args.threads), *args.specd_args, *f]) for m, f in flags.items()}
    llama = None if args.no_llama else start_llama(args.threads)
    modes = [*daemons, *(["llama"] if llama is not None else [])]
    raw: list[dict[str, Any]] = []
    try:
        for i, t in enumerate(tasks):
            for d in daemons.values():
                d.client.call("warm", {"prefix": t.prefix, "suffix": t.suffix})
            if llama is not None:
                llama.infill(t.prefix, t.suffix, 0, cache_prompt=True)
            for j in range(1, args.keys + 1):
                prefix = t.prefix + t.expected[:j]
                order = modes if (i + j) % 2 == 0 else modes[::-1]
                for m in order:
                    r = (llama_key(llama, t, prefix, args.max_tokens) if m == "llama"
                         else specd_key(daemons[m], t, prefix, args.max_tokens))
                    raw.append({"task": t.id, "language": t.language, "cursor": t.cursor, "key": j, "mode": m, **r})
            last = [r for r in raw if r["task"] == t.id]
            print(f"{i + 1}/{len(tasks)} {t.id}: " + ", ".join(
                f"{m} {statistics.median(r['wall_ms'] for r in last if r['mode'] == m):.0f} ms "
                f"({statistics.median(r['recomputed'] for r in last if r['mode'] == m):.0f} tok)" for m in modes),
                flush=True)
    finally:
        for d in daemons.values():
            d.stop()
        if llama is not None:
            llama.stop()
    summary: dict[str, Any] = {}
    for m in modes:
        rows = [r for r in raw if r["mode"] == m]
        summary[m] = {"wall_ms": spread([r["wall_ms"] for r in rows]),
                      "recomputed_tokens": spread([r["recomputed"] for r in rows]),
                      "prompt_ms": spread([r["prompt_ms"] for r in rows]),
                      "new_tokens": spread([r["tokens"] for r in rows])}
    if llama is not None:
        base = summary["llama"]["wall_ms"]["p50"]
        for m in daemons:
            summary[m]["p50 / llama"] = round(summary[m]["wall_ms"]["p50"] / base, 3)
    doc = {"summary": summary, "command": " ".join(sys.argv), "machine": machine_info(),
           "tasks": [t.id for t in tasks], "raw": raw}
    print(json.dumps(summary, indent=1))
    if args.out:
        args.out.write_text(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
