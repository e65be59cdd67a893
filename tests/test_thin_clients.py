"""The thin clients' import sets: ``specd complete --socket`` and ``specd lsp`` over the daemon
import neither torch nor numpy nor the engine, the daemon's server, the bench or another
command's module; ``specd complete`` does not even import asyncio or the LSP's libraries. (Their
start-up time follows from this; README figures come from measurements, not from a test.)"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from specd.engine.config import EngineConfig
from tests.test_layers import _env, _serve_fake_daemon

NEVER = ("torch", "numpy", "specd.engine.engine", "specd.engine.speculative", "specd.models.loader",
         "specd.daemon.server", "specd.daemon.scheduler", "specd.bench", "specd.app", "specd.cli.bench",
         "specd.cli.serve", "specd.cli.models")


def imported(stderr: str) -> set[str]:
    """Every module ``python -X importtime`` reports."""
    return {line.rsplit("|", 1)[-1].strip() for line in stderr.splitlines() if line.startswith("import time:")}


def forbidden(modules: set[str], prefixes: tuple[str, ...]) -> list[str]:
    return sorted(m for m in modules if any(m == p or m.startswith(p + ".") for p in prefixes))


def test_complete_over_the_socket_imports_only_what_it_needs() -> None:
    with tempfile.TemporaryDirectory(prefix="sd-", dir="/tmp") as d:
        sock = Path(d) / "s.sock"
        engine = json.loads(json.dumps(dataclasses.asdict(EngineConfig()), default=str))
        daemon = _serve_fake_daemon(sock, engine)
        proc = subprocess.run(
            [sys.executable, "-X", "importtime", "-m", "specd", "complete", "--socket", str(sock),
             "--prefix", "def add(a, b):\n    ", "--max-tokens", "1", "--json"],
            capture_output=True, text=True, timeout=120, env=_env(Path(d)))
        daemon.join(10)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout)["text"] == "return a + b"  # the daemon answered
    modules = imported(proc.stderr)
    assert "specd.daemon.client" in modules
    assert forbidden(modules, NEVER + ("asyncio", "pygls", "lsprotocol", "specd.lsp", "specd.cli.lsp")) == []


def test_lsp_over_the_daemon_imports_only_what_it_needs(tmp_path) -> None:
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "specd", "lsp", "--no-autostart", "--socket",
         str(tmp_path / "none.sock")],
        stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120, env=_env(tmp_path))
    assert proc.returncode == 0, proc.stderr[-3000:]
    modules = imported(proc.stderr)
    assert {"pygls", "specd.lsp.server", "specd.lsp.daemon_backend"} <= modules  # the server did start
    assert forbidden(modules, NEVER + ("specd.cli.complete", "specd.lsp.inprocess")) == []
