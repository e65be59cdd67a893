"""Real inference servers for the remote-backend tests, on the draft model's GGUF
(Qwen2.5-Coder-0.5B, which has FIM tokens): llama.cpp's ``llama-server`` (where its binary is
built: ``python -m specd.bench.llamacpp_build``) and llama-cpp-python's OpenAI-compatible server
(``pip install 'llama-cpp-python[server]'``, in the ``test`` extra). Each runs as a subprocess on a
free loopback port and is stopped at teardown; ``specd serve --backend ...`` daemons run in front
of them over a real Unix socket.

A server that cannot run here skips its tests, saying why; with ``CI`` set a missing
llama-cpp-python fails instead (the ``test`` extra installs it), as a missing editor fails
``tests/test_lsp_neovim.py``. The llama-server binary is never built in CI (as for
``tests/test_llamacpp_anchor.py``): its tests skip there.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from specd.bench.llamacpp_bin import LlamaServer, find_binaries, free_port, unavailable_note
from specd.models.registry import DEFAULT_DRAFT, model_dir
from tests.daemon_harness import START_TIMEOUT_S, env_for

SERVER_START_TIMEOUT_S = 300  # loading a 0.5B model on a busy 2-core machine; a bound, not a timing
THREADS = "2"
CTX = 4096


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def draft_gguf() -> Path:
    path = model_dir(DEFAULT_DRAFT) / "model.gguf"
    if not path.is_file():
        pytest.skip(f"the draft GGUF is not pulled ({path}): specd models pull")
    return path


def llama_server(log: Path, model: Path | None = None) -> LlamaServer:
    bins = find_binaries()
    if bins is None:
        pytest.skip(unavailable_note())
    return LlamaServer(bins, model or draft_gguf(), threads=int(THREADS), ctx=CTX, log_path=log).start(
        SERVER_START_TIMEOUT_S)


class LlamaCppPythonServer:
    """``python -m llama_cpp.server`` on a free port; ``url`` is its OpenAI base (``.../v1``)."""

    def __init__(self, model: Path, log: Path) -> None:
        self.port = free_port()
        self.log = open(log, "wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "llama_cpp.server", "--model", str(model), "--host", "127.0.0.1",
             "--port", str(self.port), "--n_ctx", str(CTX), "--n_threads", THREADS, "--n_threads_batch", THREADS],
            stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        self.log_path = log

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def wait_ready(self) -> "LlamaCppPythonServer":
        deadline = time.monotonic() + SERVER_START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"llama_cpp.server exited with {self.proc.returncode}: "
                                   f"{self.log_path.read_text(errors='replace')[-3000:]}")
            try:
                with urllib.request.urlopen(self.url + "/models", timeout=2) as r:
                    if r.status == 200:
                        return self
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.2)
        self.stop()
        raise TimeoutError(f"llama_cpp.server not ready after {SERVER_START_TIMEOUT_S} s")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def llama_cpp_python_server(log: Path, model: Path | None = None) -> LlamaCppPythonServer:
    if importlib.util.find_spec("llama_cpp") is None or importlib.util.find_spec("sse_starlette") is None:
        why = "llama-cpp-python[server] is not installed: pip install -e '.[test]'"
        if in_ci():
            pytest.fail(f"{why}; CI is set, so the remote-backend tests must run")
        pytest.skip(why)
    return LlamaCppPythonServer(model or draft_gguf(), log).wait_ready()


def post(url: str, body: dict, timeout: float = 120) -> dict:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"},
                                 method="POST")
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def get(url: str, timeout: float = 30) -> dict:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return json.loads(r.read())


class RemoteDaemon:
    """``specd serve --backend BACKEND`` over a real Unix socket (no models loaded here)."""

    def __init__(self, socket: Path, backend: str, *extra: str, env: dict[str, str] | None = None) -> None:
        from specd.daemon.client import Client  # noqa: F401  (imported for wait_ready's use)

        self.socket = socket
        self.log_path = socket.parent / "daemon.log"
        self.log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "specd", "serve", "--socket", str(socket), "--backend", backend, *extra],
            stdout=self.log, stderr=subprocess.STDOUT, env=env_for(socket.parent) | (env or {}))

    def wait_ready(self) -> "RemoteDaemon":
        from specd.daemon.client import Client
        from specd.daemon.listener import is_listening

        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"daemon exited with {self.proc.returncode}: {self.output()}")
            if is_listening(self.socket):
                with Client(self.socket, timeout=30) as c:
                    c.call("health")
                return self
            time.sleep(0.05)
        raise RuntimeError(f"daemon did not start: {self.output()}")

    def output(self) -> str:
        if not self.log.closed:
            self.log.flush()
        return self.log_path.read_text(errors="replace")

    def client(self):
        from specd.daemon.client import Client

        return Client(self.socket, timeout=300)

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        return self.proc.returncode
