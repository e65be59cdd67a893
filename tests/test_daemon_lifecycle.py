"""Starting and stopping ``specd serve``: stale sockets, a second daemon, SIGTERM drain, a second
signal, and ``specd complete --socket`` (each test runs its own daemon subprocess)."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys

import pytest

from specd.daemon import protocol as rpc
from specd.daemon.listener import is_listening
from tests.daemon_harness import (ENGINE_FLAGS, LONG_PREFIX, LONG_TOKENS, Daemon, env_for, first_delta,
                                  read_until_terminal, send, short_dir, tiny_pair)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    return tiny_pair(tmp_path_factory.mktemp("tiny"))


def test_second_daemon_is_refused(models) -> None:
    sock = short_dir() / "s.sock"
    first = Daemon(sock, *models).wait_ready()
    try:
        second = subprocess.run(
            [sys.executable, "-m", "specd", "serve", "--socket", str(sock), "--target", str(models[0]),
             "--draft", str(models[1]), *ENGINE_FLAGS], capture_output=True, text=True, timeout=120,
            env=env_for(sock.parent))
        assert second.returncode == 2
        assert "already" in second.stderr and str(sock) in second.stderr and "Traceback" not in second.stderr
        with first.client() as c:  # the first one is untouched
            assert c.call("health")["status"] == "ok"
    finally:
        assert first.stop() == 0


def test_restart_over_a_stale_socket(models) -> None:
    sock = short_dir() / "s.sock"
    crashed = Daemon(sock, *models).wait_ready()
    crashed.signal(signal.SIGKILL)
    crashed.proc.wait()
    crashed.log.close()
    assert sock.exists() and not is_listening(sock)  # left behind by the dead daemon
    again = Daemon(sock, *models).wait_ready()
    try:
        with again.client() as c:
            assert c.call("complete", {"prefix": "x = ", "max_tokens": 3})["text"]
    finally:
        assert again.stop() == 0
    assert not sock.exists()


def test_a_non_socket_file_is_not_removed(models) -> None:
    sock = short_dir() / "s.sock"
    sock.write_text("precious")
    proc = subprocess.run(
        [sys.executable, "-m", "specd", "serve", "--socket", str(sock), "--target", str(models[0]),
         "--draft", str(models[1]), *ENGINE_FLAGS], capture_output=True, text=True, timeout=120,
        env=env_for(sock.parent))
    assert proc.returncode == 2 and "not a socket" in proc.stderr
    assert sock.read_text() == "precious"


def test_sigterm_lets_in_flight_work_finish(models) -> None:
    sock = short_dir() / "s.sock"
    d = Daemon(sock, *models, "--drain-timeout", "600").wait_ready()
    with d.client() as c:
        send(c, 1, "complete", {"prefix": "def g():\n", "max_tokens": 60, "stream": True})
        first_delta(c, 1)
        d.signal(signal.SIGTERM)
        deltas, end = read_until_terminal(c, 1)
        assert end["result"]["stats"]["new_tokens"] == 60  # finished, not cut
    assert d.proc.wait(120) == 0
    d.log.close()
    assert not sock.exists()
    assert "stopped" in d.output()


def test_sigterm_cancels_what_outlives_the_drain_timeout(models) -> None:
    sock = short_dir() / "s.sock"
    d = Daemon(sock, *models, "--drain-timeout", "0").wait_ready()
    with d.client() as c:
        send(c, 1, "complete", {"prefix": LONG_PREFIX, "max_tokens": LONG_TOKENS, "stream": True})
        first_delta(c, 1)
        d.signal(signal.SIGTERM)
        _, end = read_until_terminal(c, 1)
        assert end["error"]["code"] == rpc.REQUEST_CANCELLED and "shutting down" in end["error"]["message"]
    assert d.proc.wait(120) == 0
    d.log.close()
    assert not sock.exists()


def test_second_signal_stops_at_once(models) -> None:
    sock = short_dir() / "s.sock"
    d = Daemon(sock, *models, "--drain-timeout", "600").wait_ready()
    c = d.client()
    send(c, 1, "complete", {"prefix": LONG_PREFIX, "max_tokens": LONG_TOKENS, "stream": True})
    first_delta(c, 1)
    d.signal(signal.SIGINT)
    while "again to stop at once" not in d.output():
        first_delta(c, 1)  # still streaming while it drains
    d.signal(signal.SIGINT)
    d.proc.wait(120)
    d.log.close()
    assert not sock.exists()
    try:
        _, end = read_until_terminal(c, 1)
        assert "error" in end  # never a full result: the work was abandoned
    except (ConnectionError, OSError, json.JSONDecodeError):
        pass
    c.close()


def test_specd_complete_uses_the_daemon_with_identical_output(models) -> None:
    sock = short_dir() / "s.sock"
    d = Daemon(sock, *models).wait_ready()
    target, draft = models
    base = [sys.executable, "-m", "specd", "complete", "--prefix", "def add(a, b):\n", "--suffix", "\n",
            "--max-tokens", "12", "--json", "--target", str(target), "--draft", str(draft), *ENGINE_FLAGS]
    env = env_for(sock.parent)
    try:
        served = d.stats()["requests"]["served"]
        via = subprocess.run(base + ["--socket", str(sock)], capture_output=True, text=True, timeout=120, env=env)
        assert via.returncode == 0, via.stderr
        assert d.stats()["requests"]["served"] == served + 1  # the daemon answered
        local = subprocess.run(base + ["--no-daemon"], capture_output=True, text=True, timeout=120, env=env)
        assert local.returncode == 0, local.stderr
        a, b = json.loads(via.stdout), json.loads(local.stdout)
        assert a["text"] == b["text"] and set(a["stats"]) == set(b["stats"])
        # no daemon there: in-process, same text
        gone = subprocess.run(base + ["--socket", str(sock.parent / "none.sock")], capture_output=True,
                              text=True, timeout=120, env=env)
        assert gone.returncode == 0 and json.loads(gone.stdout)["text"] == a["text"]
        assert "running in-process" in gone.stderr
    finally:
        assert d.stop() == 0


def test_connections_refused_once_stopping(models) -> None:
    sock = short_dir() / "s.sock"
    d = Daemon(sock, *models).wait_ready()
    with d.client() as c:
        assert c.call("shutdown") == {"stopping": True}
    assert d.proc.wait(120) == 0
    d.log.close()
    s = socket.socket(socket.AF_UNIX)
    with pytest.raises(OSError):
        s.connect(str(sock))
    s.close()


def test_plain_asyncio_without_uvloop(models) -> None:
    """Where uvloop cannot be imported the daemon runs on asyncio's own loop, says so, and serves."""
    import os

    sock = short_dir() / "s.sock"
    shadow = sock.parent / "no_uvloop"
    shadow.mkdir()
    (shadow / "uvloop.py").write_text("raise ImportError('uvloop hidden by the test')\n")
    path = os.pathsep.join(p for p in (str(shadow), os.environ.get("PYTHONPATH", "")) if p)
    daemon = Daemon(sock, *models, env={"PYTHONPATH": path}).wait_ready()
    try:
        with daemon.client() as c:
            result = c.call("complete", {"prefix": "def f(x):\n", "max_tokens": 4})
            assert isinstance(result["text"], str)
    finally:
        assert daemon.stop() == 0
    assert "uvloop is not installed" in daemon.output()
