#!/usr/bin/env python
"""A cold FIM request of ~800 prompt tokens, specd (both models) vs llama-server, on the same
prompt: specd's own FIM prompt (windows --prefix-tokens, --suffix-tokens) sent to llama-server as token ids
through ``/completion`` (so both compute exactly the same tokens), greedy, --max-tokens new
tokens, every request cold (specd: both caches reset; llama-server: slot erased, no prompt
cache). End-to-end wall time per request, the two systems alternating, medians over tasks. The
tasks: the suite's longest prompts at this window (--most of those reaching --min-tokens).

    flock /tmp/specd-cpu.lock python bench/cold_same_prompt.py --prefix-tokens 1024 --suffix-tokens 256 --min-tokens 700
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import time

from specd.app import build_engine
from specd.bench.llamacpp_bin import LlamaServer, find_binaries, unavailable_note
from specd.bench.tasks import load_tasks, select_tasks
from specd.engine.config import EngineConfig, PromptWindows
from specd.models.pull import gguf_path
from specd.models.registry import PUBLISHED
from specd.engine.config import DEFAULT_TARGET
from specd.requests import CompletionRequest


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prefix-tokens", type=int, default=768)
    ap.add_argument("--suffix-tokens", type=int, default=32)
    ap.add_argument("--min-tokens", type=int, default=700, help="use tasks whose prompt has at least this many")
    ap.add_argument("--tasks", default=None, help="task filter (as `specd bench --tasks`)")
    ap.add_argument("--most", type=int, default=6, help="at most this many tasks, the longest prompts first")
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--reps", type=int, default=1)
    args = ap.parse_args(argv)
    bins = find_binaries()
    if bins is None:
        print(unavailable_note(), file=sys.stderr)
        return 2
    config = dataclasses.replace(EngineConfig(), windows=PromptWindows(max_prefix_tokens=args.prefix_tokens,
                                                                                  max_suffix_tokens=args.suffix_tokens))
    engine = build_engine(config)
    prompts = [(t, engine.prompts.build(t.prefix, t.suffix)) for t in select_tasks(load_tasks(), args.tasks)]
    chosen = sorted((p for p in prompts if len(p[1]) >= args.min_tokens), key=lambda p: -len(p[1]))[: args.most]
    if not chosen:
        longest = sorted((len(ids) for _, ids in prompts), reverse=True)[:5]
        print(f"no task reaches {args.min_tokens} prompt tokens at a {args.prefix_tokens}-token window "
              f"(longest: {longest})", file=sys.stderr)
        return 2
    rows = []
    with LlamaServer(bins, gguf_path(PUBLISHED[DEFAULT_TARGET]), threads=config.threads or 2, ctx=4096) as server:
        for rep in range(args.reps):
            for i, (task, ids) in enumerate(chosen):
                times = {}
                for system in (("specd", "llama") if (i + rep) % 2 == 0 else ("llama", "specd")):
                    if system == "specd":
                        engine.reset()
                        t0 = time.perf_counter()
                        out = engine.complete(CompletionRequest(task.prefix, task.suffix, max_tokens=args.max_tokens))
                        times["specd"] = (time.perf_counter() - t0) * 1e3
                        times["specd_prefill"] = out.stats.prefill_ms
                    else:
                        server.erase_slot()
                        t0 = time.perf_counter()
                        data = server.post("/completion", {"prompt": ids, "n_predict": args.max_tokens,
                                                            "temperature": 0.0, "top_k": 1, "cache_prompt": False,
                                                            "samplers": ["top_k"]}, timeout=600)
                        times["llama"] = (time.perf_counter() - t0) * 1e3
                        times["llama_prefill"] = float(data.get("timings", {}).get("prompt_ms", 0.0))
                rows.append((task.id, len(ids), times))
                print(f"{task.id}: {len(ids)} prompt tokens: specd {times['specd']:,.0f} ms (prefill "
                      f"{times['specd_prefill']:,.0f}), llama-server {times['llama']:,.0f} ms (prefill "
                      f"{times['llama_prefill']:,.0f}), ratio {times['specd'] / times['llama']:.2f}", flush=True)
    med = {k: statistics.median(r[2][k] for r in rows) for k in ("specd", "llama", "specd_prefill", "llama_prefill")}
    ratios = [r[2]["specd"] / r[2]["llama"] for r in rows]
    print(f"{len(rows)} requests, prompt tokens median {statistics.median(r[1] for r in rows):.0f}: end to end "
          f"specd {med['specd']:,.0f} ms vs llama-server {med['llama']:,.0f} ms (ratio of medians "
          f"{med['specd'] / med['llama']:.2f}, median ratio {statistics.median(ratios):.2f}); prefill "
          f"{med['specd_prefill']:,.0f} vs {med['llama_prefill']:,.0f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
