"""``specd bench --scenario editor --quick`` on the tiny pair: the scenario runs through the
daemon's socket and the real ``specd lsp``, llama-server is skipped with a note (the tiny models
are no GGUF file), and the numbers are consistent (counts add up; timings are not checked)."""

from __future__ import annotations

import json
import time

from specd.bench.editor import goals, same_keys
from specd.bench.editor_script import KINDS, PRESETS, Key, quality, script
from specd.cli import main
from specd.percentile import percentile
from tests.lsp_tiny import ENGINE_FLAGS, tiny_dirs

OUTCOMES = ("shown", "empty", "superseded", "late", "error", "unanswered")


def test_the_script_has_every_kind_of_keystroke_and_four_files() -> None:
    keys = script(4, PRESETS["quick"])
    assert {k.file for k in keys} == {0, 1, 2, 3}
    assert {k.kind for k in keys} >= {"type", "pause", "open", "switch"}
    assert sum(k.accept_after for k in keys) == 1
    assert [k.kind for k in keys].count("open") == 4 and [k.kind for k in keys].count("switch") == 4
    assert all(isinstance(k, Key) for k in keys)


def test_quality_compares_the_first_line_with_content() -> None:
    assert quality("n + 1)\n    return x", "n + 1)\n    return y").exact
    assert quality("\n    return x", "\n    return x\n").exact  # the suggestion starts a new line
    q = quality("n + 2)", "n + 1)")
    assert not q.exact and 0.5 < q.similarity < 1.0
    assert not quality("", "x = 1").exact


def test_the_quick_editor_scenario_runs_and_its_counts_add_up(tmp_path) -> None:
    target, draft = tiny_dirs()
    rc = main(["bench", "--scenario", "editor", "--quick", "--target", str(target), "--draft", str(draft),
               *ENGINE_FLAGS, "--out", str(tmp_path)])
    assert rc == 0
    doc = json.loads((tmp_path / "results.json").read_text())
    assert (tmp_path / "report.md").read_text().startswith("# specd bench: editor scenario")
    assert set(doc["paths"]) == {"socket", "lsp"}
    assert any(n.startswith("llama-server: skipped") for n in doc["notes"])
    keys = len(script(4, PRESETS["quick"]))
    for path, r in doc["paths"].items():
        kinds = r["kinds"]
        accepts = kinds.get("accept", {}).get("n", 0)
        assert accepts <= 1
        assert r["keys"] == keys + accepts == kinds["all"]["n"] == len(r["records"])
        assert sum(k["n"] for name, k in kinds.items() if name != "all") == kinds["all"]["n"]
        assert set(kinds) - {"all"} <= set(KINDS)
        for name, k in kinds.items():
            assert sum(k[o] for o in OUTCOMES) == k["n"], (path, name, k)
            assert k["error"] == 0 and k["unanswered"] == 0, (path, name, r["records"])
            assert (k["p50_ms"] is None) == (k["shown"] == 0)
        for name in ("open", "switch", "pause"):  # waited for: answered, never superseded
            assert kinds[name]["superseded"] == 0 and kinds[name]["late"] == 0
        shown = [x for x in r["records"] if x["outcome"] == "shown"]
        assert all(x["latency_ms"] is not None and x["text"].strip() for x in shown)
        assert kinds["all"]["shown"] == len(shown)


def _record(kind: str, file: int, outcome: str, ms: float | None) -> dict:
    return {"kind": kind, "file": file, "outcome": outcome, "latency_ms": ms, "text": "", "error": ""}


def test_latency_goals_pair_the_keys_both_paths_showed() -> None:
    mine = [_record("open", 0, "shown", 1000.0), _record("type", 0, "shown", 2.0), _record("pause", 0, "shown", 400.0),
            _record("accept", 0, "shown", 300.0), _record("switch", 0, "empty", None), _record("pause", 0, "shown", 600.0)]
    theirs = [_record("open", 0, "shown", 2000.0), _record("type", 0, "superseded", None),
              _record("pause", 0, "shown", 1000.0), _record("switch", 0, "shown", 900.0),
              _record("pause", 0, "empty", None)]
    # typed along (theirs superseded), accepted (theirs never asked), switch (mine empty) and the
    # second pause (theirs empty) are not compared
    assert same_keys(mine, theirs) == ([1000.0, 400.0], [2000.0, 1000.0])
    results = {"lsp": {"kinds": {"all": {"p50_ms": 2.0, "p95_ms": 1000.0}}, "records": mine,
                       "phases": {"single_file_p50_ms": None, "four_files_p50_ms": None}},
               "llama-server": {"kinds": {"all": {"p50_ms": 1000.0, "p95_ms": 2000.0}}, "records": theirs}}
    paired = {k: v for k, v in goals(results).items() if "keys both paths showed" in k}
    assert len(paired) == 2 and all("over the 2 keys" in k for k in paired)
    p50 = next(v for k, v in paired.items() if k.startswith("lsp: p50"))
    p95 = next(v for k, v in paired.items() if k.startswith("lsp: p95"))
    # nearest rank (the daemon's definition): p50 of two is the lower, p95 the higher
    assert p50 == round(400.0 / 1000.0, 2) == round(percentile([1000.0, 400.0], 50) / percentile([2000.0, 1000.0], 50), 2)
    assert p95 == round(1000.0 / 2000.0, 2)


class _SlowInfill:
    """An ``/infill`` server on a free loopback port: each request answered ``content`` after
    ``delay_s``; it records the bodies and whether two requests were ever in flight at once."""

    def __init__(self, content: str, delay_s: float) -> None:
        import http.server
        import threading

        outer = self
        self.bodies: list[dict] = []
        self.in_flight = 0
        self.most_in_flight = 0
        lock = threading.Lock()

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with lock:
                    outer.bodies.append({"path": self.path, **body})
                    outer.in_flight += 1
                    outer.most_in_flight = max(outer.most_in_flight, outer.in_flight)
                time.sleep(delay_s)
                data = json.dumps({"content": content}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                with lock:
                    outer.in_flight -= 1

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _typing_against(server: _SlowInfill, keys: str):
    """Type ``keys`` after ``def f():\n    `` through the llama-server driver, each key asked at
    once (no waiting for the previous answer); the answers and the driver. Closes ``server``."""
    import asyncio
    from types import SimpleNamespace

    from specd.bench.editor import LlamaDriver
    from specd.bench.editor_script import EditorFile
    from specd.lsp.settings import LspSettings
    from specd.lsp.shaping import RequestShaper

    text = "def f():\n    \n"
    f = EditorFile("file:///bench/m.py", "m.py", "python", text, len(text) - 1, "")
    driver = LlamaDriver(SimpleNamespace(url=server.url), RequestShaper(LspSettings(max_tokens=8)), 8)

    async def typing():
        await driver.open(f, text)
        asked = [driver.ask(f, text, (1, 4))]
        while not server.bodies:
            await asyncio.sleep(0.01)
        now = text
        for i, ch in enumerate(keys):
            now = now[:13 + i] + ch + now[13 + i:]
            await driver.change(f, (1, 4 + i), (1, 4 + i), ch, now)
            asked.append(driver.ask(f, now, (1, 5 + i)))
        return [await a for a in asked]

    try:
        return asyncio.run(typing()), driver
    finally:
        server.close()


def test_the_llama_server_path_asks_as_llama_vim_does() -> None:
    """One request at a time, none aborted; keys typed while it is in flight wait, and the key
    whose typed text starts the answer is served from it (llama.vim's look-back), with no second
    request; the line before the cursor goes in ``prompt``."""
    server = _SlowInfill("return 1\n", delay_s=0.5)
    answers, driver = _typing_against(server, "re")
    assert [a.status for a in answers] == ["superseded", "superseded", "shown"]
    assert answers[-1].text == "turn 1"  # "re" typed: the rest of the cached answer
    assert server.most_in_flight == 1 and driver.requests == 1 and len(server.bodies) == 1
    body = server.bodies[0]
    assert body["path"] == "/infill"
    assert body["input_prefix"] == "def f():\n" and body["prompt"] == "    " and body["input_suffix"] == "\n"
    assert body["n_indent"] == 4 and body["t_max_predict_ms"] == 250
    assert body["n_predict"] == 8 and body["cache_prompt"] is True


def test_the_llama_server_path_asks_again_where_the_cache_has_nothing() -> None:
    """A typed key the cached answer does not start with is sent once the server is free; the
    key it superseded is never sent."""
    server = _SlowInfill("pass\n", delay_s=0.3)
    answers, driver = _typing_against(server, "xy")
    assert [a.status for a in answers] == ["superseded", "superseded", "shown"]
    assert server.most_in_flight == 1 and driver.requests == 2
    assert [b["prompt"] for b in server.bodies] == ["    ", "    xy"]
