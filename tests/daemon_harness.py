"""A real ``specd serve`` subprocess on tiny models, and small helpers for talking to it."""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from specd.daemon.client import Client
from specd.daemon.listener import is_listening
from tests.tiny import save_tiny_model

START_TIMEOUT_S = 120  # a generous bound for a loaded CI machine, not a timing assertion
LONG_PREFIX = "def f(x):\n"
LONG_TOKENS = 3000  # greedy on the tiny pair runs to max_tokens: seconds of work, cancelled early
# K fixed: these tests check the daemon's mechanics and stats with drafting on; the default K policy
# may choose K = 0 on tiny random models
ENGINE_FLAGS = ("--threads", "1", "--max-len", "4096", "--k", "4")


def tiny_pair(root: Path) -> tuple[Path, Path]:
    return save_tiny_model(root / "target", seed=0), save_tiny_model(root / "draft", seed=1)


def short_dir() -> Path:
    """A directory for sockets: AF_UNIX paths must stay under ~107 bytes (removed at exit)."""
    path = Path(tempfile.mkdtemp(prefix="sd-", dir="/tmp"))
    atexit.register(shutil.rmtree, path, True)
    return path


def env_for(runtime: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["XDG_RUNTIME_DIR"] = str(runtime)  # never meet a developer's own daemon
    env["XDG_CONFIG_HOME"] = str(runtime / "config")
    env.pop("PYTHONWARNINGS", None)
    return env


def stop_process(proc: subprocess.Popen, wait: float) -> None:
    """SIGTERM, then SIGKILL if it has not exited within ``wait`` seconds."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(wait)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class ServeProcess:
    """``specd serve --socket SOCKET ARGS...`` as a subprocess, logging beside its socket."""

    client_timeout_s: float = 120
    health_timeout_s: float | None = None
    needs_ok: bool = True  # ready only when health says "ok" (a remote backend may be "degraded")

    def __init__(self, socket: Path, args: list[str], env: dict[str, str] | None = None) -> None:
        self.socket = socket
        self.log_path = socket.parent / "daemon.log"
        self.log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "specd", "serve", "--socket", str(socket), *args],
            stdout=self.log, stderr=subprocess.STDOUT, env=env_for(socket.parent) | (env or {}),
        )

    def wait_ready(self):
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"daemon exited with {self.proc.returncode}: {self.output()}")
            if is_listening(self.socket):
                with Client(self.socket, timeout=self.health_timeout_s) as c:
                    if c.call("health")["status"] == "ok" or not self.needs_ok:
                        return self
            time.sleep(0.05)
        raise RuntimeError(f"daemon did not start: {self.output()}")

    def output(self) -> str:
        if not self.log.closed:
            self.log.flush()
        return self.log_path.read_text(errors="replace")

    def signal(self, sig: int = signal.SIGTERM) -> None:
        self.proc.send_signal(sig)

    def stop(self) -> int:
        stop_process(self.proc, 60)
        self.log.close()
        return self.proc.returncode

    def client(self) -> Client:
        return Client(self.socket, timeout=self.client_timeout_s)

    def stats(self) -> dict:
        with self.client() as c:
            return c.call("stats")


class Daemon(ServeProcess):
    """``specd serve`` on local (tiny) models."""

    def __init__(self, socket: Path, target: Path, draft: Path, *extra: str, env: dict[str, str] | None = None) -> None:
        super().__init__(socket, ["--target", str(target), "--draft", str(draft), *ENGINE_FLAGS, *extra], env)


def wait_for(predicate, what: str, timeout: float = 120.0) -> None:
    """Poll until ``predicate()`` holds (a bound against hangs, not a timing assertion)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def read_until_terminal(client: Client, rid) -> tuple[list[str], dict]:
    """Deltas for ``rid`` and its one terminal message (result or error)."""
    deltas: list[str] = []
    while True:
        msg = client.read_message()
        if msg.get("method") == "complete/delta":
            if msg["params"]["id"] == rid:
                deltas.append(msg["params"]["text"])
            continue
        if msg.get("id") == rid:
            return deltas, msg


def send(client: Client, rid, method: str, params: dict | None = None) -> None:
    import json

    obj = {"jsonrpc": "2.0", "id": rid, "method": method}
    if params is not None:
        obj["params"] = params
    client.send_raw(json.dumps(obj, allow_nan=False).encode() + b"\n")


def first_delta(client: Client, rid) -> str:
    while True:
        msg = client.read_message()
        if msg.get("method") == "complete/delta" and msg["params"]["id"] == rid:
            return msg["params"]["text"]
        assert msg.get("id") != rid, f"request ended before streaming: {msg}"
