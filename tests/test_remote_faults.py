"""The remote backend under faults: a streamed answer that stops before the server's end marker is
an error (-32603, "incomplete"), never a suggestion; a request is bounded by a total deadline as
well as the per-read timeout; a server that cannot be connected to costs requests no connect
timeouts; and through all of it each request ends in exactly one answer, the daemon serves other
sessions, and its counters add up.

The faults come from real processes on 127.0.0.1: ``tests/fault_server.py`` (a small server that
speaks llama-server's ``/infill`` and the OpenAI API and injects one fault per request, picked by
a marker in the prompt), a listening socket whose accept queue is full (connections time out),
and real inference servers killed mid-stream with SIGKILL and restarted on the same port
(llama-cpp-python's server, and llama-server where ``python -m specd.bench.llamacpp_build`` built
it)."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from specd.bench.llamacpp_bin import free_port
from specd.daemon.client import Client, DaemonError
from tests.daemon_harness import send, short_dir, stop_process, wait_for
from tests.remote_servers import RemoteDaemon, llama_cpp_python_server, llama_server

DRIVERS = ("llama-server", "openai")
READ_TIMEOUT_S = 2  # --remote-timeout for the fault server's daemons
DEADLINE_S = 4  # --remote-deadline for them: a trickle of a token every 0.5 s runs into it
BOUND_S = 60  # a bound against hangs, never a timing assertion
HEALTHY = {"prefix": "x = 0\ny = ", "max_tokens": 8}
HEALTHY_TEXT = "01234567"  # the fault server's eight tokens


class FaultServer:
    """``tests/fault_server.py`` as a process on a loopback port (a proxy in front of the real
    server at ``upstream``, when given); ``kill`` and ``start`` again keep the port (a server that
    dies and comes back)."""

    def __init__(self, upstream: str | None = None) -> None:
        self.port = free_port()
        self.upstream = upstream
        self.proc: subprocess.Popen | None = None

    def start(self) -> "FaultServer":
        extra = ["--upstream", self.upstream] if self.upstream else []
        self.proc = subprocess.Popen([sys.executable, str(Path(__file__).with_name("fault_server.py")), str(self.port),
                                      *extra], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line.strip() == "ready", line + self.proc.stdout.read()
        return self

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait()

    def stop(self) -> None:
        if self.proc is not None:
            stop_process(self.proc, 10)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log(self) -> list[dict]:
        with urllib.request.urlopen(self.url + "/fault/log", timeout=30) as r:
            return json.loads(r.read())


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory) -> Path:
    """A byte-level tokenizer with Qwen's FIM tokens: the windows' measure, no model pull needed."""
    from tests.tiny import tiny_tokenizer

    path = tmp_path_factory.mktemp("tok") / "tokenizer.json"
    tiny_tokenizer()._tok.save(str(path))
    return path


@pytest.fixture(scope="module")
def fault_server():
    server = FaultServer().start()
    yield server
    server.stop()


def base_url(driver: str, url: str) -> str:
    return f"{driver}:{url}" + ("/v1" if driver == "openai" else "")


@pytest.fixture(scope="module", params=DRIVERS)
def daemon(request, fault_server, tokenizer):
    d = RemoteDaemon(short_dir() / "s.sock", base_url(request.param, fault_server.url),
                     "--remote-tokenizer", str(tokenizer), "--remote-timeout", str(READ_TIMEOUT_S),
                     "--remote-deadline", str(DEADLINE_S), "--remote-retries", "1").wait_ready()
    d.driver = request.param  # type: ignore[attr-defined]
    d.sent = 0  # type: ignore[attr-defined]  # complete requests sent, for the counters
    yield d
    stats = d.stats()["requests"]
    # every request answered once: served, warmed, failed, cancelled or rejected, nothing left over
    assert sum(stats[k] for k in ("served", "warmed", "failed", "cancelled", "rejected")) == d.sent, stats
    assert stats["queued"] == stats["running"] == 0, stats
    assert d.stop() == 0, d.output()


def one_answer(client: Client, rid, then_id) -> tuple[list[str], dict]:
    """The deltas and the one terminal message of request ``rid``; then a ``stats`` request
    (id ``then_id``) is answered with nothing more for ``rid`` before it: exactly one answer."""
    deltas: list[str] = []
    while True:
        msg = client.read_message()
        if msg.get("method") == "complete/delta" and msg["params"]["id"] == rid:
            deltas.append(msg["params"]["text"])
        elif msg.get("id") == rid:
            break
    send(client, then_id, "stats")
    while True:
        after = client.read_message()
        assert after.get("id") != rid and after.get("params", {}).get("id") != rid, f"a second answer: {after}"
        if after.get("id") == then_id:
            return deltas, msg


# the fault, the drivers it applies to, and what the error says
FAULTS = [
    ("cut", DRIVERS, r"the server closed the stream after 5 tokens"),
    ("reset", DRIVERS, r"the server closed the stream after [0-5] tokens"),
    ("clean-eof", DRIVERS, r"the server closed the stream after 5 tokens without its end marker"),
    ("no-done", ("openai",), r"the server closed the stream after 5 tokens without its end marker "
                             r"\(a finish_reason, then data: \[DONE\]\)"),
    ("stall", DRIVERS, rf"no answer for {READ_TIMEOUT_S} s .*, after 5 tokens had streamed"),
    ("garbage", DRIVERS, r"malformed JSON.*oops.*, after 5 tokens had streamed"),
    ("trickle", DRIVERS, rf"no complete answer within {DEADLINE_S} s, the request's deadline"),
]


@pytest.mark.parametrize("mode,drivers,said", FAULTS, ids=[f[0] for f in FAULTS])
def test_a_fault_mid_stream_is_one_incomplete_error_and_other_sessions_are_served(
        daemon, fault_server, mode: str, drivers: tuple[str, ...], said: str) -> None:
    if daemon.driver not in drivers:
        pytest.skip(f"{mode} is a fault of the {'/'.join(drivers)} stream only")
    before = daemon.stats()["requests"]
    t0 = time.monotonic()
    with daemon.client() as faulty, daemon.client() as other:
        seen = len(fault_server.log())
        send(faulty, 1, "complete", {"prefix": f"x = 0  # FAULT={mode}\ny = ", "max_tokens": 400, "stream": True,
                                     "session": "faulty"})
        wait_for(lambda: any(e["mode"] == mode for e in fault_server.log()[seen:]), "the faulty request to reach "
                 "the server", timeout=BOUND_S)
        # another editor's session, sent while the faulty request runs: answered after it
        send(other, 1, "complete", {**HEALTHY, "session": "healthy"})
        daemon.sent += 2
        deltas, answer = one_answer(faulty, 1, 2)
        took = time.monotonic() - t0
        _, healthy = one_answer(other, 1, 2)
    assert "error" in answer, f"a faulty stream was answered as a suggestion: {answer}"
    error = answer["error"]
    assert error["code"] == -32603 and re.search(said, error["message"]), error
    assert "the answer is incomplete" in error["message"], error["message"]
    assert f"127.0.0.1:{fault_server.port}" in error["message"]
    data = error["data"]
    assert data["incomplete"] is True
    assert data["streamed_text"] == "".join(deltas)  # what streamed stays as it was, and is named
    assert ("0123456789" * 40).startswith(data["streamed_text"])
    assert took < BOUND_S
    assert healthy["result"]["text"] == HEALTHY_TEXT, healthy
    after = daemon.stats()["requests"]
    assert after["failed"] == before["failed"] + 1 and after["served"] == before["served"] + 1, (before, after)
    if mode in ("stall", "trickle"):  # specd hung up: the server stops generating for it
        wait_for(lambda: any(e["mode"] == mode and e["end"] == "client-closed" for e in fault_server.log()),
                 f"the fault server to see the {mode} request's connection close", timeout=BOUND_S)
    with daemon.client() as c:  # the failure is in health until a request succeeds again
        health = c.call("health")
        assert health["status"] == "ok", health  # the healthy request after it succeeded


def test_a_connection_closed_before_the_headers_is_retried_then_named(daemon, fault_server) -> None:
    with daemon.client() as c:
        send(c, 1, "complete", {"prefix": "x = 0  # FAULT=headers\ny = ", "max_tokens": 8, "stream": True})
        daemon.sent += 1
        deltas, answer = one_answer(c, 1, 2)
        health = c.call("health")
        send(c, 3, "complete", HEALTHY)
        daemon.sent += 1
        _, healthy = one_answer(c, 3, 4)
    error = answer["error"]
    assert error["code"] == -32603 and deltas == []
    assert "the connection broke before an answer" in error["message"] and "after 2 attempts" in error["message"]
    assert "incomplete" not in (error.get("data") or {})  # nothing had started
    assert health["status"] == "degraded"
    assert healthy["result"]["text"] == HEALTHY_TEXT
    tries = [e for e in fault_server.log() if e["mode"] == "headers"]
    assert len(tries) % 2 == 0 and tries  # one retry per request (--remote-retries 1)


def test_a_warm_under_a_fault_fails_once_and_a_good_warm_answers(daemon) -> None:
    with daemon.client() as c:
        send(c, 1, "warm", {"prefix": "x = 0  # FAULT=headers\ny = ", "session": "w"})
        _, failed = one_answer(c, 1, 2)
        send(c, 3, "warm", {"prefix": "x = 0\ny = ", "session": "w"})
        _, warmed = one_answer(c, 3, 4)
        daemon.sent += 2
    assert failed["error"]["code"] == -32603
    assert warmed["result"]["tokens"] >= 1


def test_the_deadline_bounds_a_trickle_that_the_read_timeout_never_ends(tmp_path, tokenizer, fault_server) -> None:
    """Without a deadline a trickling server keeps the request (and everyone queued behind it on
    the one worker) alive until max_tokens; with --remote-deadline 0 it would run 200 s here."""
    d = RemoteDaemon(short_dir() / "s.sock", base_url("llama-server", fault_server.url),
                     "--remote-tokenizer", str(tokenizer), "--remote-timeout", "30",
                     "--remote-deadline", "3").wait_ready()
    try:
        t0 = time.monotonic()
        with d.client() as c:
            with pytest.raises(DaemonError) as info:
                c.call("complete", {"prefix": "# FAULT=trickle\n", "max_tokens": 400})
        took = time.monotonic() - t0
        assert "no complete answer within 3 s" in info.value.message, info.value.message
        assert info.value.data["incomplete"] is True
        assert took < BOUND_S
    finally:
        assert d.stop() == 0, d.output()


def _full_accept_queue() -> tuple[socket.socket, socket.socket, int]:
    """A listening socket whose accept queue is full: a connect to it times out (as to a host
    that drops packets), where a closed port would refuse at once."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    filler = socket.create_connection(listener.getsockname(), timeout=5)
    return listener, filler, listener.getsockname()[1]


def test_an_unreachable_server_costs_requests_no_connect_timeouts(tokenizer) -> None:
    listener, filler, port = _full_accept_queue()
    connect_s = 5
    try:
        probe = socket.socket()
        probe.settimeout(0.5)
        with pytest.raises(OSError):  # the setup holds: connecting times out
            probe.connect(("127.0.0.1", port))
        probe.close()
        d = RemoteDaemon(short_dir() / "s.sock", f"llama-server:http://127.0.0.1:{port}",
                         "--remote-tokenizer", str(tokenizer), "--remote-connect-timeout", str(connect_s),
                         "--remote-retries", "1").wait_ready()  # its start check waits the timeouts once
        try:
            took = []
            with d.client() as c:
                for _ in range(3):
                    t0 = time.monotonic()
                    with pytest.raises(DaemonError) as info:
                        c.call("complete", {"prefix": "x = ", "max_tokens": 4})
                    took.append(time.monotonic() - t0)
                    assert info.value.code == -32603 and "cannot connect: timed out" in info.value.message
                    assert "cannot be reached (for" in info.value.message, info.value.message
                health = c.call("health")
                stats = c.call("stats")
            # each request would otherwise wait 2 x 5 s of connect timeouts; they fail at once
            assert max(took) < connect_s / 2, took
            assert health["status"] == "degraded" and health["backend"]["unreachable_s"] >= 0
            assert stats["requests"]["failed"] == 3
        finally:
            assert d.stop() == 0, d.output()
    finally:
        filler.close()
        listener.close()


def test_a_server_killed_and_restarted_fails_fast_while_down_and_serves_again(tokenizer) -> None:
    server = FaultServer().start()
    d = RemoteDaemon(short_dir() / "s.sock", base_url("llama-server", server.url),
                     "--remote-tokenizer", str(tokenizer)).wait_ready()
    try:
        with d.client() as c:
            assert c.call("complete", HEALTHY)["text"] == HEALTHY_TEXT
            server.kill()
            errors = []
            for _ in range(3):
                with pytest.raises(DaemonError) as info:
                    c.call("complete", HEALTHY)
                errors.append(info.value.message)
            assert all("connection refused" in m and f"127.0.0.1:{server.port}" in m for m in errors), errors
            assert c.call("health")["status"] == "degraded"
            server.start()  # the same port
            wait_for(lambda: c.call("health")["status"] == "ok", "health to see the server back", timeout=BOUND_S)
            assert c.call("complete", HEALTHY)["text"] == HEALTHY_TEXT
            requests = c.call("stats")["requests"]
        assert (requests["served"], requests["failed"]) == (2, 3), requests
    finally:
        assert d.stop() == 0, d.output()
        server.stop()


# -- real inference servers, killed mid-stream ------------------------------------------------------
COUNTING = ", ".join(str(i) for i in range(1, 80)) + ", "  # greedy continues counting: a long stream
REAL = ["openai@llama-cpp-python", "llama-server", "openai@llama-server"]


def _start_real(where: str, log: Path, port: int | None = None):
    if where == "llama-cpp-python":
        return llama_cpp_python_server(log, port=port)
    if port is None:
        return llama_server(log)
    import specd.bench.llamacpp_bin as bin_module

    real = bin_module.free_port
    bin_module.free_port = lambda: port  # LlamaServer picks its port itself: the old one again
    try:
        return llama_server(log)
    finally:
        bin_module.free_port = real


@pytest.mark.parametrize("kind", REAL)
def test_a_real_server_killed_mid_stream_is_an_incomplete_error_not_a_suggestion(kind: str, tmp_path) -> None:
    driver, _, where = kind.partition("@")
    where = where or "llama-server"
    log = tmp_path / "server.log"
    server = _start_real(where, log)
    base = server.url if where == "llama-cpp-python" else server.url + ("/v1" if driver == "openai" else "")
    d = RemoteDaemon(short_dir() / "s.sock", f"{driver}:{base}").wait_ready()
    try:
        with d.client() as c:
            send(c, 1, "complete", {"prefix": COUNTING, "max_tokens": 400, "stream": True})
            deltas: list[str] = []
            while len(deltas) < 5:
                msg = c.read_message()
                assert msg.get("id") != 1, f"the request ended before five deltas: {msg}"
                if msg.get("method") == "complete/delta":
                    deltas.append(msg["params"]["text"])
            os.kill(server.proc.pid, signal.SIGKILL)
            more, answer = one_answer(c, 1, 2)
            deltas += more
            health = c.call("health")
            with pytest.raises(DaemonError) as down:
                c.call("complete", {"prefix": "def add(a, b):\n    ", "max_tokens": 8})
        error = answer.get("error")
        assert error is not None, f"a killed server's stream was answered as a suggestion: {answer}"
        assert error["code"] == -32603 and "the server closed the stream after" in error["message"], error
        assert "the answer is incomplete" in error["message"]
        assert error["data"]["incomplete"] is True and error["data"]["streamed_text"] == "".join(deltas)
        assert error["data"]["streamed_tokens"] >= 5
        assert health["status"] == "degraded"
        assert "connection refused" in down.value.message, down.value.message
        server.stop()
        server = _start_real(where, log, port=server.port)  # back, on the same port
        with d.client() as c:
            wait_for(lambda: c.call("health")["status"] == "ok", "health to see the server back", timeout=BOUND_S)
            out = c.call("complete", {"prefix": "def add(a, b):\n    ", "max_tokens": 8})
            requests = c.call("stats")["requests"]
        assert out["stats"]["mode"] == "remote"
        assert (requests["served"], requests["failed"]) == (1, 2), requests
    finally:
        assert d.stop() == 0, d.output()
        server.stop()


# -- the same faults with a real inference server behind them -------------------------------------
REAL_READ_TIMEOUT_S = 5
REAL_DEADLINE_S = 8
REAL_FAULTS = [  # the fault, and what the error says (a real server's events may carry no text)
    ("cut", r"the server closed the stream after \d+ tokens"),
    ("garbage", r"malformed JSON.*oops.*, after \d+ tokens had streamed"),
    ("stall", rf"no answer for {REAL_READ_TIMEOUT_S} s .*, after \d+ tokens had streamed"),
    ("trickle", rf"no complete answer within {REAL_DEADLINE_S} s, the request's deadline"),
    ("headers", r"the connection broke before an answer.*after 2 attempts"),
]


@pytest.fixture(scope="module", params=REAL)
def behind_proxy(request, tmp_path_factory):
    """A real server, the fault proxy in front of it, and a daemon in front of the proxy."""
    driver, _, where = request.param.partition("@")
    where = where or "llama-server"
    server = _start_real(where, tmp_path_factory.mktemp("real") / "server.log")
    proxy = FaultServer(upstream=server.url.removesuffix("/v1")).start()
    base = proxy.url + ("/v1" if driver == "openai" else "")
    d = RemoteDaemon(short_dir() / "s.sock", f"{driver}:{base}", "--remote-timeout", str(REAL_READ_TIMEOUT_S),
                     "--remote-deadline", str(REAL_DEADLINE_S), "--remote-retries", "1").wait_ready()
    d.server, d.proxy, d.sent = server, proxy, 0  # type: ignore[attr-defined]
    yield d
    try:
        requests = d.stats()["requests"]
        assert sum(requests[k] for k in ("served", "warmed", "failed", "cancelled", "rejected")) == d.sent, requests
        assert requests["queued"] == requests["running"] == 0, requests
        assert d.stop() == 0, d.output()
    finally:
        proxy.stop()
        server.stop()


@pytest.mark.parametrize("mode,said", REAL_FAULTS, ids=[f[0] for f in REAL_FAULTS])
def test_a_real_servers_stream_faulted_mid_way_is_one_incomplete_error(behind_proxy, mode: str, said: str) -> None:
    d = behind_proxy
    healthy_prompt = {"prefix": "def add(a, b):\n    ", "max_tokens": 8}
    with d.client() as faulty, d.client() as other:
        seen = len(d.proxy.log())
        send(faulty, 1, "complete", {"prefix": f"# FAULT={mode}\nx = [1, 2, 3, 4, 5, 6, 7, 8", "max_tokens": 200,
                                     "stream": True, "session": "faulty"})
        wait_for(lambda: any(e["mode"] == mode for e in d.proxy.log()[seen:]), "the faulty request to reach the proxy",
                 timeout=BOUND_S)
        send(other, 1, "complete", {**healthy_prompt, "session": "healthy"})
        d.sent += 2
        deltas, answer = one_answer(faulty, 1, 2)
        _, healthy = one_answer(other, 1, 2)
    error = answer.get("error")
    assert error is not None, f"a faulted stream was answered as a suggestion: {answer}"
    assert error["code"] == -32603 and re.search(said, error["message"]), error
    if mode != "headers":
        assert "the answer is incomplete" in error["message"]
        assert error["data"]["incomplete"] is True and error["data"]["streamed_text"] == "".join(deltas)
    assert isinstance(healthy["result"]["text"], str) and healthy["result"]["stats"]["mode"] == "remote", healthy


def test_a_real_server_stopped_mid_stream_times_out_and_serves_on_when_it_resumes(behind_proxy) -> None:
    """The server process itself stalls (SIGSTOP): the per-read timeout ends the request."""
    d = behind_proxy
    with d.client() as c:
        send(c, 1, "complete", {"prefix": COUNTING, "max_tokens": 400, "stream": True})
        d.sent += 1
        while True:
            msg = c.read_message()
            assert msg.get("id") != 1, f"the request ended before streaming: {msg}"
            if msg.get("method") == "complete/delta":
                break
        os.kill(d.server.proc.pid, signal.SIGSTOP)
        try:
            _, answer = one_answer(c, 1, 2)
        finally:
            os.kill(d.server.proc.pid, signal.SIGCONT)
        out = c.call("complete", {"prefix": "def add(a, b):\n    ", "max_tokens": 8})
        d.sent += 1
    error = answer["error"]
    # the read timeout ends it, or the deadline where the prompt's processing took the difference
    assert error["code"] == -32603 and re.search(rf"no answer for {REAL_READ_TIMEOUT_S} s|no complete answer within "
                                                 rf"{REAL_DEADLINE_S} s", error["message"]), error
    assert error["data"]["incomplete"] is True
    assert out["stats"]["mode"] == "remote"
