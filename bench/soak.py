#!/usr/bin/env python
"""A seeded soak of one real daemon: what an editor, scripts and careless clients send it, mixed.

One ``specd serve`` (its defaults: the real pair, the default drafter) gets ``--ops`` operations
drawn at random from a seed, over the quality bench's real code in seven languages (its dev
split; nothing is scored here):

    greedy   a ``complete`` at temperature 0 in ``spec`` mode: half in a new file (prefix cut anywhere,
             short or long), half back in one of the last four (the cursor moved a little, as
             typing does: the prefix cache restores most of the prompt); suffix whole, cut or
             empty, any length, K fixed or auto, trees on or off, a stop string, a session; its
             ``target``-mode twin is sent some operations later
    sampled  temperature, top-p, top-k and a seed
    warm     a prompt cached ahead of its request
    profile  a greedy request answering with its timeline
    drop     a streamed request whose client hangs up after the first delta
    cancel   a streamed request cancelled by id after the first delta
    session  two requests of one session back to back (the first is superseded)
    parallel two or three clients at once, each a greedy request (twins recorded)
    bad      a malformed line or parameter: a clear error, and the connection still serves

The contract checked, through the daemon and whatever state the mix left in it (prefix cache,
continuation cache, the drafter's caches, K auto's curve): every greedy ``spec`` answer is its
``target`` twin's text; every well-formed request is answered (a cancelled one with the cancel
error); every malformed one gets the error code named below; the daemon never logs a traceback
and answers ``health`` at the end. Exit status 1 on any failure, each listed.

    python bench/soak.py --ops 300 --seed 1 --out bench/out/soak.json [-- SERVE FLAGS]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specd.bench.machine import machine_info
from specd.bench.tasks import Task, load_tasks, quality_tasks_path
from specd.daemon.client import Client, DaemonError
from specd.daemon.protocol import INVALID_PARAMS, INVALID_REQUEST, METHOD_NOT_FOUND, PARSE_ERROR
from specd.daemon.protocol import REQUEST_CANCELLED as CANCELLED

KINDS = {"greedy": 36, "sampled": 8, "warm": 6, "profile": 4, "drop": 8, "cancel": 8, "session": 6,
         "parallel": 8, "bad": 10}

# malformed input: (the raw line, the error code it must get)
BAD = [
    (b"{not json\n", PARSE_ERROR),
    (b'{"jsonrpc": "2.0", "id": 1, "method": "complete", "params": {"prefix": 1}}\n', INVALID_PARAMS),
    (b'{"jsonrpc": "2.0", "id": 1, "method": "complete", "params": {"suffix": "x"}}\n', INVALID_PARAMS),
    (b'{"jsonrpc": "2.0", "id": 1, "method": "complete", "params": {"prefix": "x", "max_tokens": 0}}\n',
     INVALID_PARAMS),
    (b'{"jsonrpc": "2.0", "id": 1, "method": "complete", "params": {"prefix": "x", "max_tokens": 10000000}}\n',
     INVALID_PARAMS),
    (b'{"jsonrpc": "2.0", "id": 1, "method": "complete", "params": {"prefix": "x", "temperature": -1}}\n',
     INVALID_PARAMS),
    (b'{"jsonrpc": "2.0", "id": 1, "method": "complete", "params": {"prefix": "x", "top_p": 0}}\n',
     INVALID_PARAMS),
    (b'{"jsonrpc": "2.0", "id": 1, "method": "complete", "params": {"prefix": "x", "mode": "fast"}}\n',
     INVALID_PARAMS),
    (b'{"jsonrpc": "2.0", "id": 1, "method": "complete", "params": {"prefix": "x", "stop": [""]}}\n',
     INVALID_PARAMS),
    (b'{"jsonrpc": "2.0", "id": 1, "method": "complete", "params": {"prefix": "x", "k": -3}}\n', INVALID_PARAMS),
    (b'{"jsonrpc": "2.0", "id": 1, "method": "complete", "params": {"prefix": "x", "bogus": 1}}\n',
     INVALID_PARAMS),
    (b'{"jsonrpc": "2.0", "id": 1, "method": "complete", "params": [1, 2]}\n', INVALID_PARAMS),
    (b'{"jsonrpc": "2.0", "id": 1, "method": "teleport"}\n', METHOD_NOT_FOUND),
    (b'{"jsonrpc": "1.0", "id": 1, "method": "health"}\n', INVALID_REQUEST),
    (b'{"jsonrpc": "2.0", "id": 1, "method": "complete", "params": {"prefix": "\\ud800"}}\n', INVALID_PARAMS),
    (b'{"jsonrpc": "2.0", "id": 1, "method": "cancel", "params": {}}\n', INVALID_PARAMS),
    (b'[]\n', INVALID_REQUEST),
]


@dataclass
class Soak:
    sock: str
    rng: random.Random
    tasks: list[Task]
    failures: list[str] = field(default_factory=list)
    twins: list[tuple[int, dict, str]] = field(default_factory=list)  # (due op, params, spec text)
    counts: dict[str, int] = field(default_factory=dict)
    open_files: list[Task] = field(default_factory=list)  # the last few files drawn, most recent first
    lock: threading.Lock = field(default_factory=threading.Lock)
    op: int = 0

    def fail(self, what: str) -> None:
        with self.lock:
            self.failures.append(f"op {self.op}: {what}")
        print(f"FAIL op {self.op}: {what}", flush=True)

    def client(self) -> Client:
        return Client(self.sock, timeout=600)

    # -- drawing requests --------------------------------------------------------------------

    def prompt(self) -> dict[str, Any]:
        if self.open_files and self.rng.random() < 0.5:  # back in a file already open: typing, or the
            t = self.rng.choice(self.open_files)        # cursor a little earlier (the prefix cache's case)
            cut = self.rng.randint(0, 80)
            prefix = t.prefix[: len(t.prefix) - cut] if self.rng.random() < 0.7 else t.prefix + t.expected[:cut]
            suffix = t.suffix
        else:
            t = self.rng.choice(self.tasks)
            self.open_files = [t, *self.open_files][:4]
            prefix, suffix = t.prefix, t.suffix
            r = self.rng.random()
            if r < 0.3:  # a short prefix: a new file, or a cursor near the top
                prefix = prefix[-self.rng.randint(1, 400):]
            elif r < 0.5:  # cut anywhere, mid-token
                prefix = prefix[self.rng.randint(0, max(0, len(prefix) - 1)):]
        s = self.rng.random()
        if s < 0.2:
            suffix = ""
        elif s < 0.4:
            suffix = suffix[: self.rng.randint(0, len(suffix))]
        params: dict[str, Any] = {"prefix": prefix, "suffix": suffix}
        if self.rng.random() < 0.3:
            params["session"] = f"{t.language}:{t.file}"
        return params

    def greedy_params(self) -> dict[str, Any]:
        p = self.prompt()
        p["temperature"] = 0
        p["max_tokens"] = self.rng.choice([1, 2, 5, 16, 16, 32, 32, 48, 64, 96])
        k = self.rng.choice([None, None, None, None, 0, 1, 2, 3, 5, 8])
        if k is not None:
            p["k"] = k
        tree = self.rng.choice([None, None, None, True, False])
        if tree is not None:
            p["tree"] = tree
        if self.rng.random() < 0.2:
            p["stop"] = [self.rng.choice(["\n", "\n\n", ")", ";", "}"])]
        return p

    # -- checks ------------------------------------------------------------------------------

    def greedy(self, c: Client, params: dict[str, Any] | None = None, later: int | None = None) -> None:
        """A greedy ``spec`` request; its twin is due ``later`` operations on (drawn here if None:
        parallel clients draw theirs before their threads start, so the seed alone decides)."""
        params = params or self.greedy_params()
        later = self.rng.randint(0, 6) if later is None else later
        try:
            r = c.call("complete", {**params, "mode": "spec"})
        except DaemonError as e:
            if e.code == CANCELLED and "session" in params:  # a parallel request of the same session
                return
            self.fail(f"greedy refused ({e}); params {_short(params)}")
            return
        with self.lock:
            self.twins.append((self.op + later, params, r["text"]))

    def twin(self, c: Client, params: dict[str, Any], text: str) -> None:
        try:
            r = c.call("complete", {**params, "mode": "target"})
        except DaemonError as e:
            self.fail(f"target twin refused ({e}); params {_short(params)}")
            return
        with self.lock:
            self.counts["twins"] = self.counts.get("twins", 0) + 1
        if r["text"] != text:
            self.fail(f"spec != target: {text!r} vs {r['text']!r}; params {_short(params)}")

    def run_op(self, c: Client, kind: str) -> Client:
        """One operation; returns the client to go on with (a new one where this one was closed)."""
        if kind == "greedy":
            self.greedy(c)
        elif kind == "profile":
            p = self.greedy_params()
            p["profile"] = True
            try:
                r = c.call("complete", {**p, "mode": "spec"})
                if "timeline" not in r:
                    self.fail(f"profile answer has no timeline: keys {sorted(r)}")
            except DaemonError as e:
                self.fail(f"profile refused ({e})")
        elif kind == "sampled":
            p = self.prompt()
            p.update(temperature=self.rng.choice([0.2, 0.7, 1.0, 1.5]), max_tokens=self.rng.choice([8, 32, 64]),
                     top_p=self.rng.choice([1.0, 0.95, 0.5]), top_k=self.rng.choice([0, 0, 5, 40]))
            if self.rng.random() < 0.7:
                p["seed"] = self.rng.randint(0, 2**31)
            try:
                r = c.call("complete", p)
                if not isinstance(r.get("text"), str):
                    self.fail(f"sampled answer without text: {r!r:.200}")
            except DaemonError as e:
                if not (e.code == CANCELLED and "session" in p):
                    self.fail(f"sampled refused ({e}); params {_short(p)}")
        elif kind == "warm":
            try:
                c.call("warm", self.prompt())
            except DaemonError as e:
                self.fail(f"warm refused ({e})")
        elif kind in ("drop", "cancel"):
            d = self.client()
            p = {**self.greedy_params(), "max_tokens": 64, "stream": True}
            p.pop("stop", None)
            p.pop("session", None)
            d.send_raw(_line(7, "complete", p))
            msg = d.read_message()  # a delta, or the answer when it ended at once
            if kind == "drop":
                d.close()
            else:
                d.send_raw(_line(None, "cancel", {"id": 7}))
                while msg.get("id") != 7:  # deltas carry no id
                    msg = d.read_message()
                err = msg.get("error")
                if err is not None and err.get("code") != CANCELLED:
                    self.fail(f"cancelled request answered {err}")
                d.close()
        elif kind == "session":
            p1, p2 = self.greedy_params(), self.greedy_params()
            p1["session"] = p2["session"] = "soak-session"
            p1["max_tokens"] = 96
            c.send_raw(_line(101, "complete", {**p1, "mode": "spec"}))
            c.send_raw(_line(102, "complete", {**p2, "mode": "spec"}))
            got: dict[int, dict] = {}
            while len(got) < 2:
                msg = c.read_message()
                if msg.get("id") in (101, 102):
                    got[msg["id"]] = msg
            first, second = got[101], got[102]
            if "error" in first and first["error"].get("code") != CANCELLED:
                self.fail(f"superseded request answered {first['error']}")
            if "error" in second:
                self.fail(f"the session's newer request refused: {second['error']}")
            else:
                with self.lock:
                    self.twins.append((self.op + 1, p2, second["result"]["text"]))
        elif kind == "parallel":
            n = self.rng.choice([2, 3])
            plist = [self.greedy_params() for _ in range(n)]
            for p in plist:
                p.pop("session", None)

            def one(p: dict[str, Any], later: int) -> None:
                with self.client() as cc:
                    self.greedy(cc, p, later)

            threads = [threading.Thread(target=one, args=(p, self.rng.randint(0, 6))) for p in plist]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        elif kind == "bad":
            raw, code = self.rng.choice(BAD)
            c.send_raw(raw)
            msg = c.read_message()
            got = (msg.get("error") or {}).get("code")
            if got != code:
                self.fail(f"malformed {raw[:80]!r}: wanted error {code}, got {msg!r:.200}")
            try:
                c.call("health")
            except (DaemonError, ConnectionError) as e:
                self.fail(f"the connection stopped serving after a malformed line: {e}")
                c.close()
                return self.client()
        return c

    def due_twins(self, c: Client, final: bool = False) -> None:
        with self.lock:
            due = [t for t in self.twins if final or t[0] <= self.op]
            self.twins = [t for t in self.twins if t not in due]
        for _, params, text in due:
            self.twin(c, params, text)


def _line(rid: int | None, method: str, params: dict[str, Any]) -> bytes:
    obj: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "params": params}
    if rid is not None:
        obj["id"] = rid
    return json.dumps(obj).encode() + b"\n"


def _short(p: dict[str, Any]) -> str:
    q = {k: (f"<{len(v)} chars ...{v[-40:]!r}>" if k in ("prefix", "suffix") else v) for k, v in p.items()}
    return json.dumps(q)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ops", type=int, default=300)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--split", default="dev", help="the quality tasks' split to draw code from (default: dev)")
    ap.add_argument("--out", type=Path, default=None, help="JSON summary (failures, counts, machine)")
    ap.add_argument("serve_args", nargs="*", help="extra `specd serve` flags (after --)")
    args = ap.parse_args()
    tasks = [t for t in load_tasks(quality_tasks_path()) if t.split == args.split]
    workdir = tempfile.mkdtemp(prefix="specd-soak-")
    sock, log = os.path.join(workdir, "s"), os.path.join(workdir, "log")
    proc = subprocess.Popen([sys.executable, "-m", "specd", "serve", "--socket", sock, *args.serve_args],
                            stdout=subprocess.DEVNULL, stderr=open(log, "wb"))
    t0 = time.monotonic()
    while not os.path.exists(sock):
        if proc.poll() is not None or time.monotonic() - t0 > 900:
            raise SystemExit(f"specd serve did not start (log: {log})")
        time.sleep(0.5)
    soak = Soak(sock, random.Random(args.seed), tasks)
    c = soak.client()
    c.call("health")
    kinds, weights = zip(*KINDS.items())
    started = time.monotonic()
    stats: dict[str, Any] = {}
    health: dict[str, Any] = {}
    try:
        for i in range(args.ops):
            soak.op = i
            kind = soak.rng.choices(kinds, weights)[0]
            soak.counts[kind] = soak.counts.get(kind, 0) + 1
            c = soak.run_op(c, kind)
            soak.due_twins(c)
            if i % 25 == 0:
                print(f"soak: op {i}/{args.ops}, {len(soak.failures)} failures, "
                      f"{time.monotonic() - started:.0f} s", flush=True)
        soak.due_twins(c, final=True)
        stats = c.call("stats")
        health = c.call("health")
    except (OSError, DaemonError, ValueError) as e:  # the daemon went away or answered nonsense
        soak.fail(f"the soak stopped: {type(e).__name__}: {e}")
    finally:
        c.close()
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
    if stats.get("requests", {}).get("failed"):
        soak.failures.append(f"the daemon counted {stats['requests']['failed']} model failures (log: {log})")
    text = Path(log).read_text(errors="replace")
    if "Traceback" in text:
        soak.failures.append(f"the daemon logged a traceback (log: {log})")
    if proc.returncode not in (0, -15):
        soak.failures.append(f"the daemon exited {proc.returncode} on SIGTERM (log: {log})")
    summary = {"command": " ".join(sys.argv), "seed": args.seed, "ops": args.ops, "counts": soak.counts,
               "failures": soak.failures, "seconds": round(time.monotonic() - started, 1), "log": log,
               "daemon_stats": stats, "health": health, "machine": machine_info()}
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(summary, indent=1))
    print(f"soak: {args.ops} ops ({', '.join(f'{k} {v}' for k, v in sorted(soak.counts.items()))}) in "
          f"{summary['seconds']} s; {len(soak.failures)} failures")
    for f in soak.failures:
        print("  " + f)
    return 1 if soak.failures else 0


if __name__ == "__main__":
    sys.exit(main())
