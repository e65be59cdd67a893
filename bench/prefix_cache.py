#!/usr/bin/env python
"""Files edited in turn, through the engine's prefix cache, on the configured pair.

Scenarios, each a sequence of greedy requests (prefix = a real file up to the cursor, suffix = the
rest; each visit types the file's next character at its cursor):

- ``single``: one file, every request in it;
- ``turns``: ``--files`` files visited in turn, with the prefix cache (the configured budget);
- ``turns-off``: the same with the prefix cache off (``prefix_cache_mb = 0``: only the live cache).

Latency is the engine's ``total_ms`` (prefill + decode) per request; the first visit to each file
(cold) is left out of the percentiles. Then: one cold prefill of a file's prompt for several chunk
sizes (``--chunks``), and the time to restore the prompt from the cache after another file took the
live caches.

    flock /tmp/specd-cpu.lock python bench/prefix_cache.py --rounds 4
    python bench/prefix_cache.py --target DIR --draft DIR    # tiny or local models
"""

from __future__ import annotations

import argparse
import json
import statistics
import sysconfig
import time
from pathlib import Path

from specd.app import build_engine
from specd.engine.config import EngineConfig
from specd.requests import CompletionRequest

FILES = ("argparse.py", "json/decoder.py", "textwrap.py", "dataclasses.py", "csv.py", "shlex.py")


def cursor_texts(n: int) -> list[str]:
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    return [(stdlib / name).read_text() for name in FILES[:n]]


def scenario(engine, texts: list[str], order: list[int], cursor: int, max_tokens: int) -> list[tuple[int, float]]:
    """(file, total_ms) per request; each visit advances that file's cursor by one character."""
    typed = [0] * len(texts)
    out = []
    for i in order:
        text = texts[i]
        at = min(len(text) - 1, cursor + typed[i])
        typed[i] += 1
        done = engine.complete(CompletionRequest(text[:at], text[at:], max_tokens=max_tokens))
        out.append((i, done.stats.total_ms))
    return out


def warm_p50(rows: list[tuple[int, float]]) -> float:
    seen: set[int] = set()
    warm = []
    for i, ms in rows:
        if i in seen:
            warm.append(ms)
        seen.add(i)
    return statistics.median(warm)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", default=EngineConfig.target)
    ap.add_argument("--draft", default=EngineConfig.draft)
    ap.add_argument("--files", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--cursor", type=int, default=12000, help="character offset of the cursor in each file")
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--chunks", default="64,128,256,4096")
    ap.add_argument("--no-off", action="store_true", help="skip the turns-off scenario (every visit cold: slow)")
    ap.add_argument("--block", type=int, default=EngineConfig.prefix_block_tokens)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    config = EngineConfig(target=args.target, draft=args.draft, prefix_block_tokens=args.block)
    engine = build_engine(config)
    texts = cursor_texts(args.files)
    report: dict = {"config": {k: getattr(args, k) for k in ("target", "draft", "files", "rounds", "cursor", "max_tokens")}}
    per_token = {"target": engine.target.kv_bytes_per_token(),
                 "draft": engine.draft.kv_bytes_per_token() if engine.draft is not None else 0}
    report["kv_bytes_per_token"] = per_token
    print("KV bytes per token:", per_token)

    rounds = args.rounds
    single = scenario(engine, texts[:1], [0] * (rounds * args.files), args.cursor, args.max_tokens)
    engine.reset()
    order = [i for _ in range(rounds) for i in range(args.files)]
    turns = scenario(engine, texts, order, args.cursor, args.max_tokens)
    cache = engine.prefix_cache.report() if engine.prefix_cache is not None else {}
    engine.reset()
    # a cold prefill of one prompt per chunk size, then a restore from the prefix cache
    request = CompletionRequest(texts[0][: args.cursor], texts[0][args.cursor :])
    other = CompletionRequest(texts[1][: args.cursor], texts[1][args.cursor :])
    prefill = {}
    for chunk in [int(c) for c in args.chunks.split(",") if c]:
        engine.config = engine.config.replace(prefill_chunk_tokens=chunk)
        times = []
        for _ in range(2):
            engine.reset()
            t0 = time.perf_counter()
            tokens = engine.warm(request)
            times.append((time.perf_counter() - t0) * 1e3)
        prefill[chunk] = min(times)
    engine.config = engine.config.replace(prefill_chunk_tokens=config.prefill_chunk_tokens)
    restore = []
    for _ in range(3 if prefill else 0):
        engine.warm(other)
        t0 = time.perf_counter()
        engine.warm(request)
        restore.append((time.perf_counter() - t0) * 1e3)
    report["cold_prefill_ms_by_chunk"] = prefill
    if prefill:
        report["prompt_tokens"] = tokens
        report["restore_ms"] = statistics.median(restore)
        print(f"cold prefill of {tokens} tokens (both models), ms by chunk size: {prefill}")
        print(f"restore of the same prompt from the prefix cache: {report['restore_ms']:.1f} ms (median of 3)")

    report["p50_ms"] = {"single": warm_p50(single), "turns": warm_p50(turns)}
    if not args.no_off:
        del engine  # the same pair without the prefix cache (the live caches only, as before it)
        engine = build_engine(config.replace(prefix_cache_mb=0))
        report["p50_ms"]["turns-off"] = warm_p50(scenario(engine, texts, order, args.cursor, args.max_tokens))
    report["prefix_cache"] = cache
    print("p50 total_ms (first visit of each file left out):", report["p50_ms"])
    for name in ("turns", "turns-off"):
        if name in report["p50_ms"]:
            print(f"{name} / single: {report['p50_ms'][name] / report['p50_ms']['single']:.2f}x")
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
