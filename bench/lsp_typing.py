"""Replay the typing of a real file through ``specd lsp`` and measure keystroke-to-suggestion
latency (p50/p95).

The document opens with a stretch of the file removed; the stretch is then typed back one
character at a time: each keystroke is a ``didChange`` followed by an inline-completion request,
as an editor sends them. With ``--interval-ms 0`` every keystroke waits for its suggestion (pure
latency); with a positive interval keystrokes come at that pace and a suggestion still pending at
the next keystroke is superseded (it counts as dropped).

    python bench/lsp_typing.py --tiny                       # tiny random models, in-process
    flock /tmp/specd-heavy.lock python bench/lsp_typing.py  # the default pair (through the daemon)
    python bench/lsp_typing.py --file some.py --start-line 40 --chars 200 -- --in-process --draft none
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from specd.bench.lsp_client import StdioLspClient
from specd.percentile import percentile

ROOT = Path(__file__).resolve().parent.parent


def utf16_len(s: str) -> int:
    return len(s.encode("utf-16-le")) // 2


async def replay(server: list[str], text: str, start: int, typed: str, interval_s: float, uri: str,
                 max_tokens: int) -> dict[str, Any]:
    proc = await asyncio.create_subprocess_exec(*server, stdin=asyncio.subprocess.PIPE,
                                                stdout=asyncio.subprocess.PIPE, limit=64 << 20)
    client = StdioLspClient(proc)
    init = await client.request("initialize", {"processId": None, "rootUri": ROOT.as_uri(), "capabilities": {},
                                               "initializationOptions": {"maxTokens": max_tokens}})
    assert "result" in init, init
    client.notify("initialized", {})
    doc = text[:start] + text[start + len(typed):]
    client.notify("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "python", "version": 1,
                                                            "text": doc}})
    warm = await client.request("textDocument/inlineCompletion", _params(uri, doc, start))  # load, first prefill
    assert "result" in warm, warm
    latencies: list[float] = []
    shown = dropped = 0
    cursor, version = start, 1
    waiting: list[tuple[float, asyncio.Future[dict[str, Any]]]] = []
    for ch in typed:
        line = doc.count("\n", 0, cursor)
        col = utf16_len(doc[doc.rfind("\n", 0, cursor) + 1:cursor])
        version += 1
        client.notify("textDocument/didChange", {
            "textDocument": {"uri": uri, "version": version},
            "contentChanges": [{"range": {"start": {"line": line, "character": col},
                                          "end": {"line": line, "character": col}}, "text": ch}]})
        doc = doc[:cursor] + ch + doc[cursor:]
        cursor += 1
        sent = time.perf_counter()
        fut = client.request("textDocument/inlineCompletion", _params(uri, doc, cursor))
        if interval_s <= 0:
            msg = await fut
            latencies.append((time.perf_counter() - sent) * 1e3)
            shown += bool(msg.get("result", {}).get("items"))
        else:
            waiting.append((sent, fut))
            fut.add_done_callback(lambda f, s=sent: latencies.append((time.perf_counter() - s) * 1e3)
                                  if f.result().get("result", {}).get("items") else None)
            await asyncio.sleep(interval_s)
    for _, fut in waiting:
        msg = await fut
        if msg.get("result", {}).get("items"):
            shown += 1
        else:
            dropped += 1
    await client.request("shutdown", None)
    client.notify("exit", None)
    await proc.wait()
    return {
        "keystrokes": len(typed), "suggestions_shown": shown, "superseded_or_empty": dropped if interval_s > 0
        else len(typed) - shown, "interval_ms": interval_s * 1e3,
        "p50_ms": round(percentile(latencies, 50), 1) if latencies else None,
        "p95_ms": round(percentile(latencies, 95), 1) if latencies else None,
        "mean_ms": round(statistics.fmean(latencies), 1) if latencies else None, "max_tokens": max_tokens,
        "server": server, "log_tail": client.logs[-3:],
    }


def _params(uri: str, doc: str, cursor: int) -> dict[str, Any]:
    line = doc.count("\n", 0, cursor)
    col = utf16_len(doc[doc.rfind("\n", 0, cursor) + 1:cursor])
    return {"textDocument": {"uri": uri}, "position": {"line": line, "character": col},
            "context": {"triggerKind": 2}}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--file", type=Path, default=ROOT / "specd" / "engine" / "prompt.py")
    p.add_argument("--start-line", type=int, default=40, help="the typed stretch starts at this line (0-based)")
    p.add_argument("--chars", type=int, default=120, help="characters to type")
    p.add_argument("--interval-ms", type=float, default=0.0, help="typing pace; 0: wait for each suggestion")
    p.add_argument("--max-tokens", type=int, default=32)
    p.add_argument("--tiny", action="store_true", help="tiny random models, in-process (tests/lsp_tiny.py)")
    p.add_argument("--json", type=Path, help="write the result here too")
    p.add_argument("server_args", nargs="*", help="after --: extra `specd lsp` flags")
    args = p.parse_args(argv)
    text = args.file.read_text(encoding="utf-8")
    lines = text.splitlines(keepends=True)
    start = sum(len(x) for x in lines[: args.start_line])
    typed = text[start:start + args.chars]
    if args.tiny:
        server = [sys.executable, str(ROOT / "tests" / "lsp_tiny.py"), "--in-process", *args.server_args]
    else:
        server = [sys.executable, "-m", "specd", "lsp", *args.server_args]
    result = asyncio.run(replay(server, text, start, typed, args.interval_ms / 1e3, args.file.resolve().as_uri(),
                                args.max_tokens))
    result["file"] = str(args.file)
    print(f"{result['keystrokes']} keystrokes, {result['suggestions_shown']} suggestions shown: "
          f"keystroke-to-suggestion p50 {result['p50_ms']} ms, p95 {result['p95_ms']} ms")
    print(json.dumps(result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
