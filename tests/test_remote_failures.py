"""A remote backend whose server is wrong: unreachable, silent, answering malformed JSON or HTTP
errors. Each request gets a clear error naming what is wrong, ``health`` says so, nothing crashes,
and the daemon serves other connections on. The servers here are real sockets: a port nothing
listens on, a listening socket that never answers, a small HTTP server that sends broken JSON."""

from __future__ import annotations

import http.server
import json
import socket
import subprocess
import sys
import threading
import time

import pytest

from specd.bench.llamacpp_bin import free_port
from specd.daemon.client import DaemonError
from tests.daemon_harness import env_for, short_dir
from tests.remote_servers import RemoteDaemon

HEAVY = ("torch", "numpy")


def _call_error(daemon: RemoteDaemon, params: dict) -> DaemonError:
    with daemon.client() as c:
        with pytest.raises(DaemonError) as info:
            c.call("complete", params)
    return info.value


def _still_serving(daemon: RemoteDaemon) -> dict:
    """Another connection is answered: stats counts the failures; health says degraded."""
    with daemon.client() as c:
        stats = c.call("stats")
        health = c.call("health")
    assert daemon.proc.poll() is None
    return {"stats": stats, "health": health}


def test_a_server_that_is_down_fails_each_request_clearly_and_health_says_so() -> None:
    port = free_port()  # nothing listens here
    daemon = RemoteDaemon(short_dir() / "s.sock", f"openai:http://127.0.0.1:{port}/v1", "--remote-retries", "2").wait_ready()
    try:
        for _ in range(2):
            e = _call_error(daemon, {"prefix": "def f():\n    ", "max_tokens": 8})
            assert e.code == -32603
            assert f"127.0.0.1:{port}" in e.message and "connection refused" in e.message
            assert "after 3 attempts" in e.message  # bounded retries
        seen = _still_serving(daemon)
        assert seen["stats"]["requests"]["failed"] == 2
        assert seen["health"]["status"] == "degraded" and "connection refused" in seen["health"]["backend"]["error"]
    finally:
        assert daemon.stop() == 0, daemon.output()
    assert "serving anyway" in daemon.output()  # said at start, and started


def test_a_silent_server_times_out_per_request() -> None:
    listener = socket.socket()  # accepts connections (the kernel's backlog) and never answers
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    port = listener.getsockname()[1]
    daemon = RemoteDaemon(short_dir() / "s.sock", f"llama-server:http://127.0.0.1:{port}",
                          "--remote-timeout", "1", "--remote-retries", "0").wait_ready()
    try:
        t0 = time.monotonic()
        e = _call_error(daemon, {"prefix": "def f():\n    ", "max_tokens": 8})
        took = time.monotonic() - t0
        assert e.code == -32603 and "no answer for 1 s" in e.message, e.message
        assert took < 30  # a bound against hanging, not a timing assertion
        assert _still_serving(daemon)["health"]["status"] == "degraded"
    finally:
        assert daemon.stop() == 0, daemon.output()
        listener.close()


class _Broken(http.server.BaseHTTPRequestHandler):
    """Answers every request 200 with a body that is not JSON."""

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        body = b'{"data": [oops'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _answer

    def log_message(self, *args) -> None:
        pass


def test_malformed_json_is_named() -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Broken)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    daemon = RemoteDaemon(short_dir() / "s.sock", f"openai:http://127.0.0.1:{server.server_port}/v1").wait_ready()
    try:
        e = _call_error(daemon, {"prefix": "x = ", "max_tokens": 4})
        assert e.code == -32603 and "malformed JSON" in e.message and "oops" in e.message
        assert _still_serving(daemon)["health"]["status"] == "degraded"
    finally:
        assert daemon.stop() == 0, daemon.output()
        server.shutdown()


@pytest.mark.parametrize("backend,why", [
    ("ftp://example.com", "unknown backend"),
    ("vllm:http://localhost:8000", "unknown backend"),
    ("openai:localhost:8000", "scheme must be http or https"),
    ("llama-server:http://:8080", "names no host"),
    ("openai:http://h:99999/v1", "bad URL"),
])
def test_a_bad_backend_is_refused_at_start(backend: str, why: str) -> None:
    d = short_dir()
    proc = subprocess.run([sys.executable, "-m", "specd", "serve", "--socket", str(d / "s.sock"), "--backend", backend],
                          capture_output=True, text=True, timeout=60, env=env_for(d))
    assert proc.returncode == 2
    assert why in proc.stderr and "backend" in proc.stderr, proc.stderr


def test_serving_a_remote_backend_imports_no_torch_and_hides_the_api_key() -> None:
    port = free_port()
    sock = short_dir() / "s.sock"
    key = "sk-secret-test-key-123"
    proc = subprocess.Popen([sys.executable, "-X", "importtime", "-m", "specd", "serve", "--socket", str(sock),
                             "--backend", f"openai:http://127.0.0.1:{port}/v1", "--remote-retries", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env_for(sock.parent) | {"SPECD_REMOTE_API_KEY": key})
    from specd.daemon.client import Client
    from specd.daemon.listener import is_listening

    try:
        deadline = time.monotonic() + 120
        while not is_listening(sock):
            assert proc.poll() is None and time.monotonic() < deadline, "the daemon did not start"
            time.sleep(0.05)
        with Client(sock, timeout=30) as c:
            health = c.call("health")
            with pytest.raises(DaemonError) as info:
                c.call("complete", {"prefix": "x = ", "max_tokens": 4})
    finally:
        proc.terminate()
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err[-3000:]
    heavy = [ln for ln in err.splitlines() if ln.startswith("import time:")
             and ln.rsplit("|", 1)[-1].strip().split(".")[0] in HEAVY]
    assert heavy == []
    for text in (json.dumps(health), info.value.message, out, err):
        assert key not in text
