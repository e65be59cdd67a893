"""``specd serve --backend ...`` in front of real inference servers: llama-server's ``/infill``,
and ``/v1/completions`` on llama-server and on llama-cpp-python's server, all on the draft GGUF
(Qwen2.5-Coder-0.5B). The daemon runs as a subprocess over a real Unix socket; the same socket
flows as with the local engine (complete, stream, supersede, cancel, health, stats), and
``specd complete`` through it."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from specd.engine.endofcode import CodeEnd
from specd.engine.prompt import FIM_MIDDLE, FIM_PREFIX, FIM_SUFFIX, STOP_TOKENS
from specd.engine.suffix import SuffixGuard
from specd.engine.textstream import TextStream
from specd.bench.llamacpp_bin import infill_body
from tests.daemon_harness import first_delta, read_until_terminal, send, short_dir, wait_for
from specd.daemon.client import DaemonError
from tests.remote_servers import (CTX, RemoteDaemon, get, llama_cpp_python_server, llama_server, post,
                                  write_no_fim_gguf)

BACKENDS = ["llama-server", "openai@llama-server", "openai@llama-cpp-python"]
PROMPTS = [  # (prefix, suffix): short enough that no window cuts them
    ("def fibonacci(n):\n    ", "\n\nprint(fibonacci(10))\n"),
    ("import os\n\ndef read(path):\n    with open(path) as f:\n        ", "\n"),
    ("class Stack:\n    def __init__(self):\n        self.items = []\n\n    def push(self, x):\n        ",
     "\n\n    def pop(self):\n        return self.items.pop()\n"),
]
COUNTING = ", ".join(str(i) for i in range(1, 80)) + ", "  # greedy continues counting: a long stream


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    """The servers, started on first use and stopped at the module's end."""
    logs = tmp_path_factory.mktemp("servers")
    started: dict[str, object] = {}

    def get_server(kind: str):
        if kind not in started:
            started[kind] = (llama_server(logs / "llama-server.log") if kind == "llama-server"
                             else llama_cpp_python_server(logs / "llama-cpp-python.log"))
        return started[kind]

    yield get_server
    for server in started.values():
        server.stop()  # type: ignore[attr-defined]


def backend_of(kind: str, servers) -> tuple[str, object]:
    """``--backend`` for a test parameter, and the server behind it."""
    driver, _, where = kind.partition("@")
    server = servers(where or "llama-server")
    base = server.url if where == "llama-cpp-python" else server.url + ("/v1" if driver == "openai" else "")
    return f"{driver}:{base}", server


@pytest.fixture(scope="module", params=BACKENDS)
def remote(request, servers):
    backend, server = backend_of(request.param, servers)
    daemon = RemoteDaemon(short_dir() / "s.sock", backend).wait_ready()
    daemon.kind, daemon.server, daemon.backend = request.param, server, backend  # type: ignore[attr-defined]
    yield daemon
    assert daemon.stop() == 0, daemon.output()


def raw_greedy(daemon, prefix: str, suffix: str, max_tokens: int) -> str:
    """The server's own greedy text for the prompt, asked directly (no specd in between)."""
    server = daemon.server
    if daemon.kind == "llama-server":
        return post(server.url + "/infill", infill_body(prefix, suffix, max_tokens, cache_prompt=True))["content"]
    base = daemon.backend.split(":", 1)[1]
    body = {"prompt": FIM_PREFIX + prefix + FIM_SUFFIX + suffix + FIM_MIDDLE, "max_tokens": max_tokens,
            "temperature": 0.0, "stop": list(STOP_TOKENS)}
    body["model"] = get(base + "/models")["data"][0]["id"]
    return post(base + "/completions", body)["choices"][0]["text"]


def post_processed(raw: str, prefix: str, suffix: str) -> str:
    """What the engine's post-processing keeps of ``raw`` (the local path's rules)."""
    class Joined:
        decode = staticmethod("".join)

    return TextStream(Joined(), STOP_TOKENS, None, (SuffixGuard(suffix), CodeEnd(prefix))).finish([raw])  # type: ignore[arg-type]


def test_health_names_the_remote_server_and_no_local_models(remote) -> None:
    with remote.client() as c:
        health = c.call("health")
        stats = c.call("stats")
    assert health["status"] == "ok" and health["backend"]["ok"] is True
    assert health["engine"]["backend"] == remote.kind.split("@")[0]
    assert health["engine"]["url"] == remote.backend.split(":", 1)[1]
    if remote.kind == "llama-server":
        assert health["engine"]["max_len"] == CTX  # the server's context, as /props reports it
    assert "target_weight_bytes" not in stats["memory"]  # no model in this process


@pytest.mark.parametrize("prefix,suffix", PROMPTS)
def test_text_is_the_servers_greedy_text_post_processed_like_local(remote, prefix: str, suffix: str) -> None:
    with remote.client() as c:
        deltas: list[str] = []
        out = c.call("complete", {"prefix": prefix, "suffix": suffix, "max_tokens": 24, "stream": True},
                     on_delta=deltas.append)
    raw = raw_greedy(remote, prefix, suffix, 24)
    assert out["text"] == post_processed(raw, prefix, suffix)
    assert "".join(deltas) == out["text"]  # what streamed is what was returned
    assert out["stats"]["mode"] == "remote" and out["stats"]["new_tokens"] > 0


def test_request_stop_strings_end_the_text(remote) -> None:
    prefix, suffix = PROMPTS[2]
    with remote.client() as c:
        whole = c.call("complete", {"prefix": prefix, "suffix": suffix, "max_tokens": 24})["text"]
        assert "\n" in whole, "the prompt should give a multi-line completion"
        cut = c.call("complete", {"prefix": prefix, "suffix": suffix, "max_tokens": 24, "stop": ["\n"]})
    assert cut["text"] == whole.split("\n", 1)[0]


def _established(pid: int, port: int) -> int:
    """TCP connections of process ``pid`` in state ESTABLISHED to loopback ``port`` (/proc)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = fd.readlink().as_posix()
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            if f[9] in inodes and f[3] == "01" and int(f[2].rsplit(":", 1)[1], 16) == port:
                count += 1
    return count


def test_a_superseded_request_closes_its_http_stream_at_once(remote) -> None:
    port = remote.server.port
    with remote.client() as c:
        send(c, 1, "complete", {"prefix": COUNTING, "max_tokens": 3000, "stream": True, "session": "ed"})
        first_delta(c, 1)
        assert _established(remote.proc.pid, port) == 1  # the stream is open
        t0 = time.monotonic()
        send(c, 2, "complete", {"prefix": "def add(a, b):\n    ", "max_tokens": 8, "session": "ed"})
        _, superseded = read_until_terminal(c, 1)
        assert superseded["error"]["code"] == -32800 and "superseded" in superseded["error"]["message"]
        _, answered = read_until_terminal(c, 2)
        took = time.monotonic() - t0
    assert "result" in answered, answered
    wait_for(lambda: _established(remote.proc.pid, port) == 0, "the daemon to hold no connection to the server",
             timeout=10)
    # the server stopped generating: the 3000-token stream (over a minute on this model and
    # machine) did not hold the server's one slot while the next request ran
    assert took < 30, f"the next request waited {took:.1f} s"
    if remote.kind == "llama-server":
        slots = get(remote.server.url + "/slots")
        assert not any(s.get("is_processing") for s in slots)


def test_a_cancelled_request_closes_its_http_stream(remote) -> None:
    port = remote.server.port
    with remote.client() as c:
        send(c, 1, "complete", {"prefix": COUNTING, "max_tokens": 3000, "stream": True})
        first_delta(c, 1)
        send(c, 2, "cancel", {"id": 1})
        _, ended = read_until_terminal(c, 1)
        assert ended["error"]["code"] == -32800
        wait_for(lambda: _established(remote.proc.pid, port) == 0, "the HTTP stream to close", timeout=5)
        out = c.call("complete", {"prefix": "def add(a, b):\n    ", "max_tokens": 8})
    assert isinstance(out["text"], str)


def test_specd_complete_uses_the_remote_daemon_and_imports_no_torch(remote) -> None:
    prefix, suffix = PROMPTS[0]
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "specd", "complete", "--socket", str(remote.socket),
         "--prefix", prefix, "--suffix", suffix, "--max-tokens", "24", "--json"],
        capture_output=True, text=True, timeout=300, env=remote_env(remote))
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    assert out["stats"]["mode"] == "remote"  # served by the daemon's remote backend, not in-process
    with remote.client() as c:
        assert out["text"] == c.call("complete", {"prefix": prefix, "suffix": suffix, "max_tokens": 24})["text"]
    heavy = [ln for ln in proc.stderr.splitlines() if ln.startswith("import time:")
             and ln.rsplit("|", 1)[-1].strip().split(".")[0] in ("torch", "numpy")]
    assert heavy == []


def remote_env(daemon) -> dict[str, str]:
    from tests.daemon_harness import env_for

    return env_for(daemon.socket.parent)


@pytest.mark.parametrize("kind", BACKENDS)
def test_a_model_without_fim_tokens_is_named_and_the_daemon_serves_on(kind: str, tmp_path) -> None:
    model = write_no_fim_gguf(tmp_path / "no-fim.gguf")
    driver, _, where = kind.partition("@")
    where = where or "llama-server"
    server = (llama_server(tmp_path / "server.log", model) if where == "llama-server"
              else llama_cpp_python_server(tmp_path / "server.log", model))
    try:
        base = server.url if where == "llama-cpp-python" else server.url + ("/v1" if driver == "openai" else "")
        daemon = RemoteDaemon(short_dir() / "s.sock", f"{driver}:{base}").wait_ready()
        try:
            with daemon.client() as c:
                with pytest.raises(DaemonError) as info:
                    c.call("complete", {"prefix": "def f():\n    ", "max_tokens": 8})
                health = c.call("health")
                stats = c.call("stats")
            message = info.value.message
            assert info.value.code == -32603
            if driver == "openai":
                assert "has no FIM tokens" in message, message
            else:  # llama-server refuses /infill itself, and says why
                assert "/infill" in message and "not supported by this model" in message, message
            assert health["status"] == "degraded" and stats["requests"]["failed"] == 1
        finally:
            assert daemon.stop() == 0, daemon.output()
        assert "no FIM tokens" in daemon.output() or driver != "openai"  # said at start too
    finally:
        server.stop()


def test_the_api_key_reaches_the_server_and_is_never_shown(tmp_path) -> None:
    key = "sk-team-" + "7f3a9c"
    try:
        server = llama_cpp_python_server(tmp_path / "server.log", extra=("--api_key", key))
        base = server.url
    except pytest.skip.Exception:
        server = llama_server(tmp_path / "server.log", extra=("--api-key", key))
        base = server.url + "/v1"
    try:
        without = RemoteDaemon(short_dir() / "s.sock", f"openai:{base}").wait_ready()
        try:
            with without.client() as c:
                with pytest.raises(DaemonError) as info:
                    c.call("complete", {"prefix": "x = ", "max_tokens": 4})
            assert "HTTP 401" in info.value.message, info.value.message
        finally:
            without.stop()
        keyed = RemoteDaemon(short_dir() / "s.sock", f"openai:{base}", "--remote-api-key-env", "TEAM_KEY",
                             env={"TEAM_KEY": key}).wait_ready()
        try:
            with keyed.client() as c:
                out = c.call("complete", {"prefix": "def add(a, b):\n    ", "max_tokens": 8})
                health = c.call("health")
        finally:
            keyed.stop()
        assert out["stats"]["mode"] == "remote"
        assert key not in json.dumps(health) and key not in keyed.output()
    finally:
        server.stop()


def test_warms_land_where_the_completions_go_on_a_multi_slot_llama_server(tmp_path) -> None:
    """llama-server with several slots: a ``warm`` carries no ``id_slot``, and llama-server puts
    the completion that follows in the slot whose cached prompt shares the longest prefix with it
    (its LCP-similarity slot choice), so each session's completion reuses its own warm even when
    the sessions' warms and completions interleave. (Pinning sessions to slots with ``id_slot``
    gains nothing here, and each developer's daemon pinning on its own would queue developers
    behind one another's slot while others idle.)"""
    server = llama_server(tmp_path / "server.log", extra=("-np", "3"))
    try:
        daemon = RemoteDaemon(short_dir() / "s.sock", f"llama-server:{server.url}").wait_ready()
        try:
            files = ["".join(f"def f{i}_{j}(x):\n    return x * {j} + {i}\n\n" for j in range(12)) for i in range(3)]
            with daemon.client() as c:
                warmed = [c.call("warm", {"prefix": f"# module {i}\n" + text, "session": f"s{i}"})["tokens"]
                          for i, text in enumerate(files)]
                outs = [c.call("complete", {"prefix": f"# module {i}\n" + text + "def", "max_tokens": 4,
                                            "session": f"s{i}"})["stats"] for i, text in enumerate(files)]
            slots = get(server.url + "/slots")
        finally:
            assert daemon.stop() == 0, daemon.output()
    finally:
        server.stop()
    assert len(slots) == 3
    for tokens, stats in zip(warmed, outs):
        assert tokens > 100
        # all of the warmed prompt but its last token or two (the typed "def" changes the tail)
        assert stats["prefill_reused"] >= tokens - 4, (warmed, outs)
