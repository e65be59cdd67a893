#!/usr/bin/env python
"""Daemon load and keystroke benchmark.

Load run: N clients x M requests on one ``specd serve``, a random share of them cancelled (some
by ``cancel``, some by supersession within a client's session, some by disconnecting). Checks that
every request gets exactly one terminal response (none lost, none doubled); reports latency p50/p95
of the served ones and the daemon's RSS before and after.

Keystroke run: a real file typed character by character, one greedy request per keystroke (prefix =
text before the cursor, suffix = the text after it), against a daemon with KV reuse and
continuation and one started with ``--no-reuse``; checks the outputs are identical and reports the
latency of each.

    python bench/daemon_load.py --target DIR --draft DIR       # tiny or local models
    flock /tmp/specd-heavy.lock python bench/daemon_load.py    # the default pair

Engine flags after ``--`` go to ``specd serve`` unchanged (e.g. ``-- --threads 2``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from specd.daemon.client import AsyncClient, Client, DaemonError
from specd.daemon.listener import is_listening
from specd.percentile import percentile

REPO = Path(__file__).resolve().parents[1]
CANCELLED = -32800


class Daemon:
    def __init__(self, serve_args: list[str], no_reuse: bool) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="sdb-", dir="/tmp"))
        self.socket = self.dir / "s.sock"
        args = [sys.executable, "-m", "specd", "serve", "--socket", str(self.socket), *serve_args]
        if no_reuse:
            args.append("--no-reuse")
        self.log = open(self.dir / "daemon.log", "wb")
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 600
        while not is_listening(self.socket):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"daemon did not start:\n{(self.dir / 'daemon.log').read_text()}")
            time.sleep(0.1)

    def call(self, method: str) -> dict:
        with Client(self.socket) as c:
            return c.call(method)

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(120)
        self.log.close()


def snippets(text: str, rng: random.Random, n: int) -> list[tuple[str, str]]:
    out = []
    for _ in range(n):
        cut = rng.randrange(40, max(41, len(text) - 40))
        out.append((text[max(0, cut - 600):cut], text[cut:cut + 200]))
    return out


async def load_run(daemon: Daemon, text: str, args: argparse.Namespace) -> dict:
    rng = random.Random(args.seed)
    rss_before = daemon.call("stats")["memory"]["rss_bytes"]
    outcomes = {"served": 0, "cancelled": 0, "error": 0}
    latencies: list[float] = []
    issued = 0
    problems: list[str] = []

    async def client(ci: int) -> None:
        nonlocal issued
        c = await AsyncClient.connect(daemon.socket)
        crng = random.Random(rng.random())
        pending: list[tuple[int, asyncio.Future, float]] = []
        for prefix, suffix in snippets(text, crng, args.requests):
            params = {"prefix": prefix, "suffix": suffix, "max_tokens": args.max_tokens,
                      "stream": crng.random() < 0.5}
            if crng.random() < 0.3:
                params["session"] = f"client-{ci}"  # a newer request supersedes the older
            rid, fut = c.start("complete", params)
            issued += 1
            pending.append((rid, fut, time.perf_counter()))
            if crng.random() < args.cancel_rate:
                await asyncio.sleep(crng.random() * 0.05)
                c.notify_cancel(rid)
            if crng.random() < 0.5:  # sometimes wait for the answer before typing on
                await asyncio.wait([fut])
        for rid, fut, t0 in pending:
            try:
                msg = await asyncio.wait_for(fut, args.timeout)
            except asyncio.TimeoutError:
                problems.append(f"client {ci} request {rid}: no answer within {args.timeout}s (lost)")
                continue
            if "result" in msg:
                outcomes["served"] += 1
                latencies.append((time.perf_counter() - t0) * 1e3)
            elif msg["error"]["code"] == CANCELLED:
                outcomes["cancelled"] += 1
            else:
                outcomes["error"] += 1
                problems.append(f"client {ci} request {rid}: {msg['error']}")
        await asyncio.sleep(0.2)  # let any (wrong) second answer arrive before counting
        doubled = {rid: n for rid, n in c.answers.items() if n != 1}
        if doubled:
            problems.append(f"client {ci}: ids answered more than once: {doubled}")
        await c.close()

    t0 = time.perf_counter()
    await asyncio.gather(*(client(i) for i in range(args.clients)))
    wall = time.perf_counter() - t0
    stats = daemon.call("stats")
    answered = sum(outcomes.values())
    return {
        "clients": args.clients, "requests": issued, "answered": answered, "lost": issued - answered,
        **outcomes, "problems": problems, "wall_s": round(wall, 2),
        "latency_ms": {"p50": round(percentile(latencies, 50), 1), "p95": round(percentile(latencies, 95), 1)},
        "rss_mb": {"before": round(rss_before / 2**20, 1), "after": round(stats["memory"]["rss_bytes"] / 2**20, 1)},
        "daemon_stats": stats,
    }


def keystroke_run(daemon: Daemon, text: str, args: argparse.Namespace) -> dict:
    start = args.keystroke_start
    texts, latencies = [], []
    before = daemon.call("stats")
    with Client(daemon.socket) as c:
        for i in range(start, min(len(text), start + args.keystrokes)):
            params = {"prefix": text[:i], "suffix": text[i:i + args.suffix_chars], "max_tokens": args.max_tokens,
                      "session": "editor"}
            t0 = time.perf_counter()
            texts.append(c.call("complete", params)["text"])
            latencies.append((time.perf_counter() - t0) * 1e3)
    after = daemon.call("stats")
    reused = after["prefill_tokens"]["reused"] - before["prefill_tokens"]["reused"]
    computed = after["prefill_tokens"]["computed"] - before["prefill_tokens"]["computed"]
    return {
        "keystrokes": len(latencies),
        "latency_ms": {"p50": round(percentile(latencies, 50), 1), "p95": round(percentile(latencies, 95), 1),
                       "mean": round(sum(latencies) / max(1, len(latencies)), 1)},
        "prefill_tokens": {"reused": reused, "computed": computed},
        "continuations": after["continuations"]["requests"] - before["continuations"]["requests"],
        "texts": texts,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", help="target model (default: the daemon's default)")
    ap.add_argument("--draft", help="draft model")
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--requests", type=int, default=20, help="per client")
    ap.add_argument("--cancel-rate", type=float, default=0.3)
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--timeout", type=float, default=600, help="seconds a request may take before it counts as lost")
    ap.add_argument("--file", type=Path, default=REPO / "specd" / "engine" / "engine.py", help="the file typed")
    ap.add_argument("--keystrokes", type=int, default=80)
    ap.add_argument("--keystroke-start", type=int, default=1200, help="character offset where typing starts")
    ap.add_argument("--suffix-chars", type=int, default=400)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--skip-load", action="store_true")
    ap.add_argument("--skip-cold", action="store_true", help="no keystroke run on a daemon without reuse")
    ap.add_argument("--json", type=Path, help="write the full results here")
    ap.add_argument("serve_args", nargs="*", help="after --: more `specd serve` flags")
    args = ap.parse_args()
    serve = list(args.serve_args)
    if args.target:
        serve += ["--target", args.target]
    if args.draft:
        serve += ["--draft", args.draft]
    text = args.file.read_text(encoding="utf-8")
    args.keystroke_start = min(args.keystroke_start, max(1, len(text) - args.keystrokes))

    results: dict = {"serve_args": serve, "file": str(args.file)}
    warm = Daemon(serve, no_reuse=False)
    try:
        if not args.skip_load:
            results["load"] = load = asyncio.run(load_run(warm, text, args))
            print(f"load: {load['clients']} clients, {load['requests']} requests -> {load['served']} served, "
                  f"{load['cancelled']} cancelled, {load['error']} errors, {load['lost']} lost; "
                  f"p50 {load['latency_ms']['p50']} ms, p95 {load['latency_ms']['p95']} ms; "
                  f"RSS {load['rss_mb']['before']} -> {load['rss_mb']['after']} MB; {load['wall_s']} s")
            for p in load["problems"]:
                print(f"  problem: {p}")
        results["keystroke_reuse"] = ks_warm = keystroke_run(warm, text, args)
    finally:
        warm.stop()
    runs = [("with reuse", ks_warm)]
    same = True
    if not args.skip_cold:
        cold = Daemon(serve, no_reuse=True)
        try:
            results["keystroke_cold"] = ks_cold = keystroke_run(cold, text, args)
        finally:
            cold.stop()
        same = ks_warm["texts"] == ks_cold["texts"]
        results["keystroke_outputs_identical"] = same
        runs.append(("cold", ks_cold))
    for name, r in runs:
        print(f"keystrokes {name}: {r['keystrokes']} requests, p50 {r['latency_ms']['p50']} ms, "
              f"p95 {r['latency_ms']['p95']} ms, mean {r['latency_ms']['mean']} ms; prefill reused "
              f"{r['prefill_tokens']['reused']} / computed {r['prefill_tokens']['computed']} tokens; "
              f"continuations {r['continuations']}")
    if not args.skip_cold:
        print(f"keystroke outputs identical with and without reuse: {same}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    ok = same and (args.skip_load or (not results["load"]["problems"] and results["load"]["lost"] == 0))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
