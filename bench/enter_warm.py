#!/usr/bin/env python
"""Enter at the end of a line, with and without the LSP's warm of the line after Enter.

The quality bench's line-start and block sites are where a user has just pressed Enter: the text
before the cursor ends in a line break and the new line's indentation. Before that key the document
held the line above with the cursor at its end, and the same text after it. For each such site
whose line above has text (``--split``; ``--per-kind`` per language and cursor kind):

1. every system has the prompt before Enter cached (specd ``warm``; llama-server an ``/infill``
   of ``n_predict`` 0), as the requests typed on that line leave it;
2. ``enter``, a second daemon, also warms what ``specd lsp`` warms at a pause there
   (``specd.lsp.enter``: the document after Enter with the guessed indentation);
3. the Enter request: the real site's prompt, as ``specd lsp`` shapes it (``completion_request``,
   with ``--max-tokens``), timed at the client; systems alternate which goes first.

Then the price of the warm for a user who does not press Enter (``--key-after-ms``): in both
daemons the prompt before Enter is cached again; ``enter`` starts its warm of the line after Enter,
and after that many ms both daemons get a request at the line's end (the editor asking again, a
key that leaves the prompt as it is), timed. Its prompt is cached, so it costs its decode, plus,
in ``enter``, the wait for the warm's prefill chunk in flight to end (the daemon preempts a warm
between chunks); ``specd``'s runs after it, alone. A key that changes the line makes every suffix token be computed again (~1.5 s
at the default windows), with or without a warm; this is the part the warm adds to it.

Reported: the Enter request's wall ms p50 [p10-p90] per mode, with the guess right and wrong, the
warm's own ms, and the line-end request's ms per mode. Run it alone:

    python bench/enter_warm.py --split test --per-kind 2 --out F.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

from decode_race import Specd
from keystroke_race import spread, start_llama

from specd.bench.machine import machine_info
from specd.bench.tasks import Task, load_tasks, quality_tasks_path
from specd.daemon.client import Client, DaemonError
from specd.lsp.daemon_backend import warm_params
from specd.lsp.enter import window_after_enter
from specd.lsp.settings import LspSettings
from specd.lsp.shaping import completion_request, request_params
from specd.lsp.window import Window, cut_window
from specd.requests import CompletionRequest

SESSION = "enter-bench"
ENCODING = "utf-16"


def chosen_tasks(split: str, per_kind: int) -> list[Task]:
    """Line-start and block sites of ``split`` whose line above the cursor has text, the first
    ``per_kind`` of each language and cursor kind (0: all)."""
    counts: dict[tuple[str, str], int] = {}
    out = []
    for t in load_tasks(quality_tasks_path()):
        if t.split != split or t.cursor == "mid_line" or "\n" not in t.prefix:
            continue
        if not t.prefix.rsplit("\n", 1)[0].rsplit("\n", 1)[-1].strip():
            continue
        key = (t.language, t.cursor)
        if per_kind and counts.get(key, 0) >= per_kind:
            continue
        counts[key] = counts.get(key, 0) + 1
        out.append(t)
    return out


def request_at(window: Window | None, settings: LspSettings, max_tokens: int) -> CompletionRequest:
    """The request ``specd lsp`` sends at ``window``, with ``max_tokens``."""
    if window is None:
        raise ValueError("no window there")
    return dataclasses.replace(completion_request(window, settings), max_tokens=max_tokens)


def timed_call(client: Client, method: str, params: dict[str, Any]) -> tuple[float, dict[str, Any]]:
    t0 = time.perf_counter()
    r = client.call(method, params)
    return (time.perf_counter() - t0) * 1e3, r


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--split", choices=("dev", "test"), default="dev")
    ap.add_argument("--per-kind", type=int, default=2, help="tasks of each language and cursor kind (0: all)")
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--key-after-ms", type=float, default=150.0,
                    help="when the key typed on comes after the warm of the line after Enter starts")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--no-llama", action="store_true")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    settings = LspSettings()
    tasks = chosen_tasks(args.split, args.per_kind)
    daemons = {m: Specd(["--threads", str(args.threads)]) for m in ("specd", "enter")}
    llama = None if args.no_llama else start_llama(args.threads)
    modes = [*daemons, *(["llama"] if llama is not None else [])]
    raw: list[dict[str, Any]] = []
    try:
        for i, t in enumerate(tasks):
            before = t.prefix.rsplit("\n", 1)[0]
            line = before.count("\n")
            column = len(before) - (before.rfind("\n") + 1)
            doc = before + t.suffix  # the document before Enter, the cursor at the end of `line`
            real = t.prefix + t.suffix
            last = t.prefix.rsplit("\n", 1)[1]
            a = request_at(cut_window(doc, line, column, ENCODING, settings.window), settings, args.max_tokens)
            b = request_at(cut_window(real, line + 1, len(last), ENCODING, settings.window), settings, args.max_tokens)
            guess = request_at(window_after_enter(doc, line, column, ENCODING, settings.window), settings,
                               args.max_tokens)
            right = guess.prefix == b.prefix
            row: dict[str, Any] = {"task": t.id, "language": t.language, "cursor": t.cursor, "guess_right": right}
            for d in daemons.values():
                d.client.call("warm", warm_params(a, SESSION))
            if llama is not None:
                llama.infill(a.prefix, a.suffix, 0, cache_prompt=True)
            row["warm_ms"], _ = timed_call(daemons["enter"].client, "warm", warm_params(guess, SESSION))
            for m in (modes if i % 2 == 0 else modes[::-1]):
                if m == "llama":
                    r = llama.infill(b.prefix, b.suffix, args.max_tokens, cache_prompt=True)
                    row[m] = {"wall_ms": round(r.wall_ms, 2), "recomputed": r.prompt_n}
                else:
                    wall, r = timed_call(daemons[m].client, "complete", request_params(b, SESSION))
                    s = r["stats"]
                    row[m] = {"wall_ms": round(wall, 2), "recomputed": s["prompt_tokens"] - s["prefill_reused"]}
            # a request at the line's end instead of Enter, with the warm of the line after Enter in flight
            # in `enter`; `specd`'s after it, alone (two daemons computing at once would share the cores)
            for d in daemons.values():
                d.client.call("warm", warm_params(a, SESSION))
            warm_client = Client(daemons["enter"].sock, timeout=900)
            try:
                warming = threading.Thread(target=_quiet, args=(warm_client, guess))
                warming.start()
                time.sleep(args.key_after_ms / 1e3)
                row["key_enter_ms"], _ = timed_call(daemons["enter"].client, "complete", request_params(a, SESSION))
                warming.join()
            finally:
                warm_client.close()
            row["key_specd_ms"], _ = timed_call(daemons["specd"].client, "complete", request_params(a, SESSION))
            raw.append(row)
            print(f"{i + 1}/{len(tasks)} {t.id}: guess {'right' if right else 'wrong'}, warm {row['warm_ms']:.0f} ms; "
                  + ", ".join(f"{m} {row[m]['wall_ms']:.0f} ms ({row[m]['recomputed']} tok)" for m in modes)
                  + f"; a request at the line's end: specd {row['key_specd_ms']:.0f}, enter {row['key_enter_ms']:.0f} ms", flush=True)
    finally:
        for d in daemons.values():
            d.stop()
        if llama is not None:
            llama.stop()
    summary: dict[str, Any] = {"tasks": len(raw), "guess_right": sum(r["guess_right"] for r in raw),
                               "warm_ms": spread([r["warm_ms"] for r in raw])}
    for m in modes:
        summary[m] = {"enter_ms": spread([r[m]["wall_ms"] for r in raw])}
        for right in (True, False):
            rows = [r[m]["wall_ms"] for r in raw if r["guess_right"] is right]
            if rows:
                summary[m]["enter_ms_guess_" + ("right" if right else "wrong")] = spread(rows)
    for m in daemons:
        summary[m]["line_end_request_ms"] = spread([r[f"key_{m}_ms"] for r in raw])
    if llama is not None:
        base = summary["llama"]["enter_ms"]["p50"]
        for m in daemons:
            summary[m]["enter p50 / llama"] = round(summary[m]["enter_ms"]["p50"] / base, 3)
    doc = {"summary": summary, "command": " ".join(sys.argv), "machine": machine_info(),
           "tasks": [r["task"] for r in raw], "raw": raw}
    print(json.dumps(summary, indent=1))
    if args.out:
        args.out.write_text(json.dumps(doc, indent=1))
    return 0


def _quiet(client: Client, request: CompletionRequest) -> None:
    """A warm that a completion preempts ends in an error: that is the expected end here."""
    try:
        client.call("warm", warm_params(request, SESSION))
    except DaemonError:
        pass


if __name__ == "__main__":
    sys.exit(main())
