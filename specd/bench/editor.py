"""``specd bench --scenario editor``: real files typed key by key through the daemon's socket
(the requests ``specd lsp`` would send), through the real ``specd lsp`` over stdio (its debounce,
prewarming, typed-along cache and request-ahead included), and through llama-server's ``/infill``
with llama.vscode's CPU settings when its binaries are built, asked as llama.vim asks it (its answer
cache and look-back, one request at a time); the same script, timings and text windows for each.
Keys come at a typing pace (open loop): a suggestion is *shown* when it is non-empty and arrives
before the next key; an older request is superseded by the next key (the daemon's session, the
server's own rule; llama.vim's client sends nothing while a request is in flight and never aborts
one). After an open, a file switch, a pause and an accept the bench waits for the answer. The script is in
:mod:`specd.bench.editor_script`.

The bench imports neither the LSP server nor the daemon (layers): the command line hands it the
request shaper (``specd.lsp.shaping.RequestShaper``), the daemon's own client
(``specd.daemon.client.AsyncClient.connect``) and the commands that start them. Daemons are started
by :mod:`specd.bench.daemon_process`, ``specd lsp`` is talked to by the bench's LSP client
(:mod:`specd.bench.lsp_client`) and llama-server by specd's HTTP client (``specd.remote.http``, the
remote backends' own, whose cancel closes the connection).
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Protocol

from specd.bench.daemon_process import Connect, DaemonClient, DaemonProcess, call, request
from specd.bench.editor_script import (KINDS, WAITED, EditorFile, Key, Preset, key_kind, quality)
from specd.bench.llamacpp_bin import SERVER_ARGS, LlamaServer, find_binaries, infill_body, unavailable_note
from specd.bench.lsp_client import StdioLspClient
from specd.percentile import percentile
from specd.remote.errors import RemoteError
from specd.remote.http import HttpClient, HttpSettings
from specd.remote.spec import RemoteSpec

PATHS = ("socket", "lsp", "llama-server")
WAIT_S = 60.0  # longest wait for a waited answer
LLAMA_THREADS = 2  # llama.vscode's CPU setting (-t 2)


class Shaper(Protocol):
    """What ``specd lsp`` would send and show (``specd.lsp.shaping.RequestShaper``)."""

    def open(self, uri: str, text: str) -> None: ...

    def edit(self, uri: str, text: str) -> None: ...

    def window(self, uri: str, line: int, character: int) -> Any: ...

    def params(self, uri: str, line: int, character: int) -> dict[str, Any] | None: ...

    def display(self, raw: str, uri: str, line: int, character: int) -> str: ...


@dataclass(frozen=True)
class EditorBench:
    files: tuple[EditorFile, ...]
    keys: tuple[Key, ...]
    preset: Preset
    shaper: Callable[[int], Shaper]  # max_tokens -> a fresh shaper
    serve_argv: Callable[[Path], list[str]]  # socket -> the `specd serve` command
    lsp_argv: Callable[[Path], list[str]]  # socket -> the `specd lsp` command (no autostart)
    connect: Connect  # socket -> the daemon's client (specd.daemon.client.AsyncClient.connect)
    gguf: Path | None  # the target as GGUF, for llama-server
    paths: tuple[str, ...] = PATHS
    log_dir: Path | None = None
    log: Callable[[str], None] | None = None  # a line per waited answer (progress)


@dataclass
class Answer:
    status: str  # shown | empty | superseded | error
    text: str = ""
    at: float = 0.0  # perf_counter when it arrived
    error: str = ""


@dataclass
class Record:
    kind: str
    file: int
    sent: float
    next_sent: float | None = None
    answer: Answer | None = None
    real_rest: str | None = None  # the real text after the cursor (None: not comparable)

    def outcome(self) -> str:
        a = self.answer
        if a is None:
            return "unanswered"
        if a.status == "shown" and self.next_sent is not None and a.at > self.next_sent:
            return "late"  # arrived after the next key: never on screen
        return a.status

    def latency_ms(self) -> float | None:
        return (self.answer.at - self.sent) * 1e3 if self.outcome() == "shown" and self.answer else None


def utf16(s: str) -> int:
    return len(s.encode("utf-16-le")) // 2


def position(text: str, index: int) -> tuple[int, int]:
    line = text.count("\n", 0, index)
    return line, utf16(text[text.rfind("\n", 0, index) + 1:index])


# -- drivers ---------------------------------------------------------------------------------------

class Driver(Protocol):
    name: str

    async def open(self, f: EditorFile, text: str) -> None: ...

    async def change(self, f: EditorFile, start: tuple[int, int], end: tuple[int, int], insert: str,
                     new_text: str) -> None: ...

    def ask(self, f: EditorFile, text: str, at: tuple[int, int]) -> asyncio.Task[Answer]: ...

    async def close(self) -> dict[str, Any]: ...


class SocketDriver:
    name = "socket"

    def __init__(self, client: DaemonClient, shaper: Shaper) -> None:
        self.client, self.shaper = client, shaper

    async def open(self, f: EditorFile, text: str) -> None:
        self.shaper.open(f.uri, text)

    async def change(self, f, start, end, insert, new_text) -> None:
        self.shaper.edit(f.uri, new_text)

    def ask(self, f: EditorFile, text: str, at: tuple[int, int]) -> asyncio.Task[Answer]:
        return asyncio.ensure_future(self._ask(f, at))

    async def _ask(self, f: EditorFile, at: tuple[int, int]) -> Answer:
        params = self.shaper.params(f.uri, *at)
        if params is None:
            return Answer("empty", at=time.perf_counter())
        msg = await request(self.client, "complete", params)
        now = time.perf_counter()
        if "error" in msg:
            code = msg["error"].get("code")
            return Answer("superseded" if code == -32800 else "error", at=now, error=str(msg["error"])[:200])
        shown = self.shaper.display(str(msg["result"]["text"]), f.uri, *at)
        return Answer("shown" if shown else "empty", shown, now)

    async def close(self) -> dict[str, Any]:
        stats = await call(self.client, "stats")
        await self.client.close()
        return {"daemon_requests": stats.get("requests", {})}


class LspDriver:
    name = "lsp"

    def __init__(self, client: StdioLspClient) -> None:
        self.client = client
        self.versions: dict[str, int] = {}

    async def open(self, f: EditorFile, text: str) -> None:
        self.versions[f.uri] = 1
        self.client.notify("textDocument/didOpen", {"textDocument": {
            "uri": f.uri, "languageId": f.language, "version": 1, "text": text}})

    async def change(self, f, start, end, insert, new_text) -> None:
        self.versions[f.uri] += 1
        self.client.notify("textDocument/didChange", {
            "textDocument": {"uri": f.uri, "version": self.versions[f.uri]},
            "contentChanges": [{"range": {"start": {"line": start[0], "character": start[1]},
                                          "end": {"line": end[0], "character": end[1]}}, "text": insert}]})

    def ask(self, f: EditorFile, text: str, at: tuple[int, int]) -> asyncio.Task[Answer]:
        fut = self.client.request("textDocument/inlineCompletion", {
            "textDocument": {"uri": f.uri}, "position": {"line": at[0], "character": at[1]},
            "context": {"triggerKind": 2}})
        return asyncio.ensure_future(self._answer(fut))

    async def _answer(self, fut: asyncio.Future[dict[str, Any]]) -> Answer:
        msg = await fut
        now = time.perf_counter()
        if "error" in msg:
            return Answer("error", at=now, error=str(msg["error"])[:200])
        items = (msg.get("result") or {}).get("items") or []
        text = str(items[0].get("insertText", "")) if items else ""
        return Answer("shown" if text.strip() else "empty", text, now)

    async def close(self) -> dict[str, Any]:
        logs = self.client.logs[-5:]
        await self.client.close()
        return {"lsp_log_tail": logs}


# llama.vim's client rules (ggml-org/llama.vim, autoload/llama.vim: llama#fim, s:fim_try_hint)
LOOK_BACK = 128  # characters typed since a cached answer that may still be served from it
RETRY_S = 0.1  # a key held back by the request in flight tries again this often (llama.vim's timer)
T_MAX_PREDICT_MS = 250  # llama.vim's limit for a request at a new position (its follow-ups get more)


class LlamaDriver:
    """``/infill`` asked as llama.vim asks it, with the same text windows (and stop rule) as specd's
    requests and ``cache_prompt`` on:

    - the text before the cursor on its line goes in ``prompt``, the lines before it in
      ``input_prefix``, the rest in ``input_suffix``; ``n_indent`` is the line's indentation and
      ``t_max_predict_ms`` 250;
    - every answer is cached by its (text before the cursor, suffix); a key is answered from the
      cache at once, without a request, when its own text is there or when a cached answer starts
      with the up to 128 characters typed since (the look-back: the rest is shown);
    - no request while one is in flight: a key waits (trying again every 100 ms and when the
      answer in flight arrives: it may cover the key through the look-back); a newer key
      supersedes it. A request once sent is never aborted.
    """

    name = "llama-server"

    def __init__(self, server: LlamaServer, shaper: Shaper, max_tokens: int) -> None:
        self.server, self.shaper, self.max_tokens = server, shaper, max_tokens
        self.http = HttpClient(RemoteSpec("llama-server", server.url), HttpSettings(timeout_s=WAIT_S, retries=0))
        self.cache: dict[tuple[str, str], str] = {}  # (text before the cursor, suffix) -> the server's content
        self.requests = 0  # sent to the server
        self._busy = False  # a request is in flight
        self._answered = asyncio.Event()  # set (and replaced) when an answer arrives
        self._newest = 0  # the newest key's number

    async def open(self, f: EditorFile, text: str) -> None:
        self.shaper.open(f.uri, text)

    async def change(self, f, start, end, insert, new_text) -> None:
        self.shaper.edit(f.uri, new_text)

    def ask(self, f: EditorFile, text: str, at: tuple[int, int]) -> asyncio.Task[Answer]:
        self._newest += 1
        return asyncio.ensure_future(self._ask(f, at, self._newest))

    def cached(self, before: str, suffix: str) -> str | None:
        """The answer the cache holds for this cursor (llama.vim's look-back included), or None."""
        exact = self.cache.get((before, suffix))
        if exact is not None:
            return exact
        best: str | None = None
        for n in range(1, min(LOOK_BACK, len(before)) + 1):
            content = self.cache.get((before[:-n], suffix))
            if content is not None and len(content) > n and content.startswith(before[-n:]):
                if best is None or len(content) - n > len(best):
                    best = content[n:]
        return best

    async def _ask(self, f: EditorFile, at: tuple[int, int], n: int) -> Answer:
        w = self.shaper.window(f.uri, *at)
        params = self.shaper.params(f.uri, *at)
        if w is None or params is None:
            return Answer("empty", at=time.perf_counter())
        while True:
            hit = self.cached(w.prefix, w.suffix)
            if hit is not None:
                return self._show(hit, f, at)
            if n != self._newest:
                return Answer("superseded", at=time.perf_counter())
            if not self._busy:
                break
            answered = self._answered
            try:
                await asyncio.wait_for(answered.wait(), RETRY_S)
            except asyncio.TimeoutError:
                pass
        cut = w.prefix.rfind("\n") + 1
        line = w.prefix[cut:]
        body = infill_body(w.prefix[:cut], w.suffix, self.max_tokens, cache_prompt=True,
                           t_max_predict_ms=T_MAX_PREDICT_MS,
                           extra={"prompt": line, "n_indent": len(line) - len(line.lstrip(" \t")),
                                  "stop": params.get("stop") or []})
        self._busy = True
        self.requests += 1
        try:
            data = await asyncio.to_thread(self.http.post_json, "/infill", body, lambda: False)
        except (RemoteError, OSError, ValueError) as e:
            return Answer("error", at=time.perf_counter(), error=str(e)[:200])
        finally:
            self._busy = False
            self._answered.set()
            self._answered = asyncio.Event()
        content = str(data.get("content", ""))
        if content:  # llama.vim keeps no empty answer
            self.cache[(w.prefix, w.suffix)] = content
        if n != self._newest:  # the cursor moved on: shown only there, through the cache
            return Answer("superseded", at=time.perf_counter())
        return self._show(content, f, at)

    def _show(self, raw: str, f: EditorFile, at: tuple[int, int]) -> Answer:
        shown = self.shaper.display(raw, f.uri, *at)
        return Answer("shown" if shown else "empty", shown, time.perf_counter())

    async def close(self) -> dict[str, Any]:
        return {"llama_server_requests": self.requests, "llama_server_cached_answers": len(self.cache)}


# -- one pass of the script ------------------------------------------------------------------------

async def play(driver: Driver, bench: EditorBench) -> list[Record]:
    files, preset = bench.files, bench.preset
    texts = [f.opened_text for f in files]
    opened: set[int] = set()
    records: list[Record] = []
    previous: Record | None = None
    tasks: list[tuple[Record, asyncio.Task[Answer]]] = []

    def sent(record: Record, task: asyncio.Task[Answer]) -> None:
        nonlocal previous
        if previous is not None and previous.next_sent is None:
            previous.next_sent = record.sent
        previous = record
        records.append(record)
        tasks.append((record, task))

    for n, key in enumerate(bench.keys):
        f = files[key.file]
        if key.file not in opened:
            await driver.open(f, texts[key.file])
            opened.add(key.file)
            await asyncio.sleep(preset.idle_s)
        if key.pause_before_s:
            await asyncio.sleep(key.pause_before_s)
        char = f.typed[key.offset]
        cursor = f.start + key.offset
        text = texts[key.file]
        at = position(text, cursor)
        new_text = text[:cursor] + char + text[cursor:]
        texts[key.file] = new_text
        await driver.change(f, at, at, char, new_text)
        after = position(new_text, cursor + 1)
        record = Record(key_kind(key, char), key.file, time.perf_counter(),
                        real_rest=f.original[cursor + 1:])
        task = driver.ask(f, new_text, after)
        sent(record, task)
        last_of_visit = n + 1 == len(bench.keys) or bench.keys[n + 1].file != key.file
        if key.kind in WAITED or last_of_visit or key.accept_after:
            await _settle(record, task)
            if bench.log is not None:
                ms = record.latency_ms()
                bench.log(f"{driver.name}: key {n + 1}/{len(bench.keys)} ({record.kind}, file {key.file}): "
                          f"{record.outcome()}" + (f" in {ms:.0f} ms" if ms is not None else ""))
            if key.accept_after and record.answer is not None and record.answer.status == "shown":
                await _accept(driver, f, texts, key.file, cursor + 1, record.answer.text, sent)
        else:
            await asyncio.sleep(preset.gap_s)
    for record, task in tasks:
        await _settle(record, task)
    return records


async def _settle(record: Record, task: asyncio.Task[Answer]) -> None:
    if record.answer is not None:
        return
    try:
        record.answer = await asyncio.wait_for(asyncio.shield(task), WAIT_S)
    except asyncio.TimeoutError:
        record.answer = Answer("error", at=time.perf_counter(), error=f"no answer in {WAIT_S:.0f} s")
    except (ConnectionError, OSError) as e:
        record.answer = Answer("error", at=time.perf_counter(), error=str(e)[:200])


async def _accept(driver: Driver, f: EditorFile, texts: list[str], i: int, cursor: int, shown: str,
                  sent: Callable[[Record, asyncio.Task[Answer]], None]) -> None:
    """The user accepts ``shown`` at ``cursor``; the editor asks again at once; then the bench
    takes the text back out (unmeasured) so the file goes on as written."""
    text = texts[i]
    at = position(text, cursor)
    accepted = text[:cursor] + shown + text[cursor:]
    await driver.change(f, at, at, shown, accepted)
    end = cursor + len(shown)
    real = f.original[f.start + (cursor - f.start):]
    record = Record("accept", i, time.perf_counter(),
                    real_rest=f.original[cursor + len(shown):] if real.startswith(shown) else None)
    task = driver.ask(f, accepted, position(accepted, end))
    sent(record, task)
    await _settle(record, task)
    await driver.change(f, at, position(accepted, end), "", text)


# -- one path --------------------------------------------------------------------------------------

async def run_path(path: str, bench: EditorBench, notes: list[str]) -> tuple[list[Record], dict[str, Any]] | None:
    with tempfile.TemporaryDirectory(prefix="sde-", dir="/tmp") as d:  # AF_UNIX paths stay short
        sock = Path(d) / "s.sock"
        log = bench.log_dir / f"{path}-daemon.log" if bench.log_dir else None
        if path == "llama-server":
            bins = find_binaries()
            if bins is None:
                notes.append(f"llama-server: skipped, {unavailable_note()}")
                return None
            if bench.gguf is None or not bench.gguf.is_file():
                notes.append("llama-server: skipped, the target is not a GGUF file (use a published name)")
                return None
            server = LlamaServer(bins, bench.gguf, LLAMA_THREADS, ctx=4096,
                                 log_path=bench.log_dir / "llama-server.log" if bench.log_dir else None)
            await asyncio.get_running_loop().run_in_executor(None, server.start)
            try:
                driver: Driver = LlamaDriver(server, bench.shaper(bench.preset.max_tokens), bench.preset.max_tokens)
                records = await play(driver, bench)
                extra = {"command": " ".join(server.command()[1:]).replace(str(bench.gguf), bench.gguf.name)}
            finally:
                server.stop()
            return records, extra
        daemon = DaemonProcess(bench.serve_argv(sock), sock, log, bench.connect)
        try:
            client = await daemon.start()
            if path == "socket":
                driver = SocketDriver(client, bench.shaper(bench.preset.max_tokens))
            else:
                lsp = await StdioLspClient.start(bench.lsp_argv(sock))
                init = await asyncio.wait_for(lsp.request("initialize", {
                    "processId": os.getpid(), "rootUri": "file:///bench", "capabilities": {},
                    "initializationOptions": {"maxTokens": bench.preset.max_tokens}}), 120)
                if "result" not in init:
                    raise RuntimeError(f"specd lsp refused initialize: {init}")
                lsp.notify("initialized", {})
                driver = LspDriver(lsp)
            records = await play(driver, bench)
            extra = await driver.close()
            if path == "lsp":
                extra["daemon_requests"] = (await call(client, "stats")).get("requests", {})
            await client.close()
        finally:
            daemon.stop()
        return records, extra


# -- numbers ---------------------------------------------------------------------------------------

def _pct(values: list[float], q: float) -> float | None:
    """The nearest-rank ``q``-th percentile (:mod:`specd.percentile`, the daemon's), rounded; None
    for no values."""
    return round(percentile(values, q), 1) if values else None


def summarize(records: list[Record]) -> dict[str, Any]:
    out: dict[str, Any] = {"keys": len(records), "kinds": {}}
    for kind in (*KINDS, "all"):
        rs = [r for r in records if kind == "all" or r.kind == kind]
        if not rs:
            continue
        outcomes = [r.outcome() for r in rs]
        lat = [x for r in rs if (x := r.latency_ms()) is not None]
        scored = [quality(r.answer.text, r.real_rest) for r in rs
                  if r.outcome() == "shown" and r.answer is not None and r.real_rest is not None]
        out["kinds"][kind] = {
            "n": len(rs), **{o: outcomes.count(o) for o in ("shown", "empty", "superseded", "late", "error",
                                                              "unanswered")},
            "p50_ms": _pct(lat, 50), "p95_ms": _pct(lat, 95),
            "exact_line": round(sum(q.exact for q in scored) / len(scored), 3) if scored else None,
            "similarity": round(statistics.fmean(q.similarity for q in scored), 3) if scored else None,
        }
    return out


def phases(records: list[Record], keys: tuple[Key, ...], n_files: int) -> dict[str, Any]:
    """Typing p50 in the first file before any switch vs. once the files are edited in turn."""
    typing = ("type", "newline")
    first_switch = next((i for i, r in enumerate(records) if r.kind == "switch"), len(records))
    single = [x for r in records[:first_switch] if r.file == 0 and r.kind in typing and (x := r.latency_ms()) is not None]
    rotating = [x for r in records[first_switch:] if r.kind in typing and (x := r.latency_ms()) is not None]
    return {"single_file_p50_ms": _pct(single, 50), "four_files_p50_ms": _pct(rotating, 50),
            "single_file_n": len(single), "four_files_n": len(rotating), "files": n_files}


async def run_editor(bench: EditorBench, progress: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """Every path in turn; ``progress`` gets the document so far after each one."""
    notes: list[str] = []
    results: dict[str, Any] = {}
    for path in bench.paths:
        if progress is not None:
            progress(_document(bench, results, notes))
        try:
            got = await run_path(path, bench, notes)
        except (OSError, RuntimeError, TimeoutError, asyncio.TimeoutError, ConnectionError) as e:
            notes.append(f"{path}: failed, {type(e).__name__}: {e}")  # the other paths still run
            continue
        if got is None:
            continue
        records, extra = got
        results[path] = {**summarize(records), "phases": phases(records, bench.keys, len(bench.files)), **extra,
                         "records": [{"kind": r.kind, "file": r.file, "outcome": r.outcome(),
                                      "latency_ms": None if (x := r.latency_ms()) is None else round(x, 1),
                                      "text": r.answer.text if r.answer else "",
                                      "error": r.answer.error if r.answer else ""} for r in records]}
    return _document(bench, results, notes)


def _document(bench: EditorBench, results: dict[str, Any], notes: list[str]) -> dict[str, Any]:
    return {"scenario": "editor", "preset": asdict(bench.preset),
            "files": [{"uri": f.uri, "path": f.path, "typed": f.typed} for f in bench.files],
            "llama_server_args": ["-t", str(LLAMA_THREADS), *SERVER_ARGS, "cache_prompt: true"],
            "paths": results, "goals": goals(results), "notes": notes}


def goals(results: dict[str, Any]) -> dict[str, Any]:
    """The issue's targets, where the numbers exist: ratios of p50/p95 to llama-server's."""
    out: dict[str, Any] = {}
    llama = results.get("llama-server", {}).get("kinds", {})
    for path in ("lsp", "socket"):
        mine = results.get(path)
        if mine is None:
            continue
        ph = mine["phases"]
        if ph["single_file_p50_ms"] and ph["four_files_p50_ms"]:
            out[f"{path}: four files p50 / single file p50 (<= 1.5)"] = round(
                ph["four_files_p50_ms"] / ph["single_file_p50_ms"], 2)
        if not llama:
            continue
        for kind, stat, bound in (("all", "p50_ms", 0.5), ("all", "p95_ms", 1.0), ("open", "p50_ms", 1.0)):
            a, b = mine["kinds"].get(kind, {}).get(stat), llama.get(kind, {}).get(stat)
            if a and b:
                out[f"{path}: {kind} {stat} / llama-server's (<= {bound})"] = round(a / b, 2)
        # "all" compares different keys: specd's typing keys are answered from the suggestion on
        # screen, llama-server's superseded by the next key; the same keys, shown on both paths:
        mine_ms, llama_ms = same_keys(mine.get("records", []), results["llama-server"].get("records", []))
        for q, stat, bound in ((50, "p50", 0.5), (95, "p95", 1.0)):
            a, b = _pct(mine_ms, q), _pct(llama_ms, q)
            if a and b:
                out[f"{path}: {stat} over the {len(mine_ms)} keys both paths showed / llama-server's (<= {bound})"] = \
                    round(a / b, 2)
    return out


def same_keys(mine: list[dict[str, Any]], theirs: list[dict[str, Any]]) -> tuple[list[float], list[float]]:
    """Latencies of the keys both paths answered with a suggestion shown, paired: a key is its
    kind, its file and how many keys of that kind and file came before it (an accept is asked
    only where a suggestion was shown, so the record lists need not line up)."""
    def keyed(records: list[dict[str, Any]]) -> dict[tuple[str, int, int], float | None]:
        seen: dict[tuple[str, int], int] = {}
        out: dict[tuple[str, int, int], float | None] = {}
        for r in records:
            n = seen.get((r["kind"], r["file"]), 0)
            seen[(r["kind"], r["file"])] = n + 1
            out[(r["kind"], r["file"], n)] = r["latency_ms"] if r["outcome"] == "shown" else None
        return out
    a, b = keyed(mine), keyed(theirs)
    pairs = [(a[k], b[k]) for k in a if k in b and a[k] is not None and b[k] is not None]
    return [x for x, _ in pairs], [y for _, y in pairs]


def markdown(doc: dict[str, Any]) -> str:
    lines = ["# specd bench: editor scenario", "",
             f"Preset: {json.dumps(doc['preset'])}", "",
             "Files (typed back from their task cursor): " + ", ".join(f"`{f['path']}`" for f in doc["files"]), "",
             "| path | kind | n | shown | empty | superseded | late | error | p50 ms | p95 ms | exact line | similarity |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for path, r in doc["paths"].items():
        for kind, k in r["kinds"].items():
            lines.append(f"| {path} | {kind} | {k['n']} | {k['shown']} | {k['empty']} | {k['superseded']} | "
                         f"{k['late']} | {k['error']} | {_f(k['p50_ms'])} | {_f(k['p95_ms'])} | "
                         f"{_f(k['exact_line'])} | {_f(k['similarity'])} |")
    lines += ["", "| path | single-file typing p50 ms (n) | four files typing p50 ms (n) |", "|---|---|---|"]
    for path, r in doc["paths"].items():
        ph = r["phases"]
        lines.append(f"| {path} | {_f(ph['single_file_p50_ms'])} ({ph['single_file_n']}) | "
                     f"{_f(ph['four_files_p50_ms'])} ({ph['four_files_n']}) |")
    if doc["goals"]:
        lines += ["", "Goals:", ""] + [f"- {k}: {v}" for k, v in doc["goals"].items()]
    if doc["notes"]:
        lines += [""] + [f"Note: {n}" for n in doc["notes"]]
    return "\n".join(lines) + "\n"


def _f(x: Any) -> str:
    return "–" if x is None else str(x)
