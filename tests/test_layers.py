"""Layers: faces (CLI, LSP, bench) above serving (the daemon) above the engine above the models.

Read from the installed packages' source (``tests/import_graph.py``): no import cycles among
modules, no import against the layer order, and the thin paths — ``specd complete`` over the
daemon, ``specd lsp`` over the daemon — import no torch, checked on the source and by running
them. The checker itself is tested on a small fake package, so a violation is known to fail.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest

from specd.engine.config import EngineConfig
from tests.import_graph import (all_imports, cycles, find_modules, graph, import_time_closure, layer_violations,
                                owner)

PACKAGES = ("specd", "specd.models", "specd.lsp")
FACES = ("specd.cli", "specd.lsp", "specd.bench", "specd.app")
# importer layer -> layers it must not import (anywhere: at module top, in functions, for types)
RULES: dict[str, tuple[str, ...]] = {
    "specd.models": ("specd.engine", "specd.daemon", "specd.remote", "specd.requests", "specd.schema",
                     "specd.config", *FACES),
    "specd.engine": ("specd.daemon", "specd.remote", "specd.config", *FACES),
    # remote servers' drivers sit beside the engine under the daemon; torch-free (THIN below)
    "specd.remote": ("specd.daemon", "specd.config", *FACES),
    "specd.daemon": FACES,
    "specd.requests": ("specd.engine", "specd.daemon", "specd.config", "specd.models", *FACES),
    "specd.schema": ("specd.engine", "specd.daemon", "specd.requests", "specd.config", "specd.models", *FACES),
    "specd.lsp": ("specd.cli", "specd.bench", "specd.app"),
    "specd.bench": ("specd.cli", "specd.lsp", "specd.daemon"),
    # training draft heads: a tool over the models (and their data), below the faces
    "specd.heads": ("specd.engine", "specd.daemon", "specd.remote", *FACES),
}
# the bench reaches models through the engine and specd.app; of specd.models it may name only these
BENCH_MAY_IMPORT = ("specd.models.protocol", "specd.models.registry", "specd.models.modes", "specd.models.errors")
# the engine reads models through their runtime (and the quantization modes its settings name; draft
# heads' runtimes: heads, eagle), never through loading: which models exist and where they are found
# is the faces' and specd.app's business
ENGINE_MAY_IMPORT = ("specd.models.protocol", "specd.models.tokenizer", "specd.models.kv_cache",
                     "specd.models.profile", "specd.models.heads", "specd.models.eagle", "specd.models.modes")
# modules the thin paths import; importing any of them must not import these
THIN = ("specd.cli", "specd.requests", "specd.schema", "specd.config", "specd.engine.config",
        "specd.daemon.client", "specd.daemon.protocol", "specd.daemon.config", "specd.lsp.server",
        "specd.lsp.daemon_backend", "specd.models.registry", "specd.models.modes", "specd.remote",
        "specd.cli.serve")
HEAVY = ("torch", "numpy")


@pytest.fixture(scope="module")
def installed():
    modules = find_modules(PACKAGES)
    return modules, all_imports(modules)


def test_there_are_no_import_cycles(installed) -> None:
    modules, imports = installed
    assert cycles(graph(modules, imports)) == []


def test_layers_import_only_downward(installed) -> None:
    modules, imports = installed
    assert layer_violations(imports, modules, RULES) == []


def _models_imported(installed, layer: str, allowed: tuple[str, ...]) -> list[str]:
    """Where modules of ``layer`` import a module of specd.models outside ``allowed``."""
    modules, imports = installed
    return [f"{i.importer}:{i.line} imports {owner(i.target, modules)}" for i in imports
            if i.importer.startswith(layer + ".") and (owner(i.target, modules) or "").startswith("specd.models")
            and owner(i.target, modules) not in allowed]


def test_the_bench_reaches_models_only_through_their_public_interface(installed) -> None:
    assert _models_imported(installed, "specd.bench", BENCH_MAY_IMPORT) == []


def test_the_engine_reaches_models_only_through_their_runtime(installed) -> None:
    assert _models_imported(installed, "specd.engine", ENGINE_MAY_IMPORT) == []


def test_the_thin_modules_import_no_torch(installed) -> None:
    modules, imports = installed
    thin = [m for m in modules if any(m == t or m.startswith(t + ".") for t in THIN)]
    found = {f"{m}: {chain}" for m in thin for name, chain in import_time_closure(m, modules, imports).items()
             if name in HEAVY}
    assert found == set()


# -- the thin paths, run ---------------------------------------------------------------------------

def _heavy_imports(stderr: str) -> list[str]:
    """Modules ``python -X importtime`` reports among HEAVY."""
    names = [line.rsplit("|", 1)[-1].strip() for line in stderr.splitlines() if line.startswith("import time:")]
    return [n for n in names if n.split(".")[0] in HEAVY]


def _serve_fake_daemon(path: Path, engine: dict) -> threading.Thread:
    """One connection of a daemon that answers ``health`` with ``engine`` and ``complete`` with a
    fixed text; what the client sent is recorded in the thread's ``requests``."""
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(1)
    requests: list[dict] = []

    def serve() -> None:
        conn, _ = server.accept()
        with conn, conn.makefile("rwb") as f:
            for line in f:
                msg = json.loads(line)
                requests.append(msg)
                result = {"status": "ok", "engine": engine} if msg["method"] == "health" else \
                    {"text": "return a + b", "stats": {"mode": "spec"}}
                f.write(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": result}).encode() + b"\n")
                f.flush()
        server.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.requests = requests  # type: ignore[attr-defined]
    thread.start()
    return thread


def _env(home: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["XDG_CONFIG_HOME"] = str(home)  # no developer's config file
    env["XDG_RUNTIME_DIR"] = str(home)
    env.pop("PYTHONWARNINGS", None)
    return env


def test_complete_over_the_daemon_imports_no_torch() -> None:
    with tempfile.TemporaryDirectory(prefix="sd-", dir="/tmp") as d:  # AF_UNIX paths stay short
        sock = Path(d) / "s.sock"
        engine = json.loads(json.dumps(dataclasses.asdict(EngineConfig()), default=str))
        daemon = _serve_fake_daemon(sock, engine)
        proc = subprocess.run(
            [sys.executable, "-X", "importtime", "-m", "specd", "complete", "--socket", str(sock),
             "--prefix", "def add(a, b):\n    ", "--json"],
            capture_output=True, text=True, timeout=120, env=_env(Path(d)))
        daemon.join(10)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout)["text"] == "return a + b"
    methods = [m["method"] for m in daemon.requests]  # type: ignore[attr-defined]
    assert methods == ["health", "complete"]  # served by the daemon, not in-process
    assert _heavy_imports(proc.stderr) == []


def test_lsp_over_the_daemon_imports_no_torch(tmp_path) -> None:
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "specd", "lsp", "--no-autostart", "--socket",
         str(tmp_path / "none.sock")],
        stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120, env=_env(tmp_path))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "import time:" in proc.stderr and "pygls" in proc.stderr  # the server did start
    assert _heavy_imports(proc.stderr) == []


# -- the checker, on a fake package ----------------------------------------------------------------

def _fake_package(root: Path) -> Path:
    """``fake`` with a cycle (a <-> b, one side inside a function), a lower layer importing a
    higher one (low -> high, for types only), a relative import, and a heavy import two steps
    away from ``thin``."""
    files = {
        "__init__.py": "",
        "a.py": "from fake import b\n",
        "b.py": "def f():\n    from . import a\n",
        "low/__init__.py": "",
        "low/core.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from fake.high.face import X\n",
        "high/__init__.py": "",
        "low/util.py": "",
        "high/face.py": "from ..low import util\nX = 1\n",
        "thin.py": "import fake.middle\n",
        "middle.py": "import json\nimport torch.nn\n",
        "data/not_a_package.py": "import torch\n",
    }
    for name, text in files.items():
        (root / "fake" / name).parent.mkdir(parents=True, exist_ok=True)
        (root / "fake" / name).write_text(text)
    return root / "fake"


def test_the_checker_finds_cycles_layer_breaks_and_heavy_imports(tmp_path) -> None:
    modules = find_modules(["fake"], {"fake": _fake_package(tmp_path)})
    assert "fake.data.not_a_package" not in modules and "fake.low.core" in modules
    imports = all_imports(modules)
    edges = graph(modules, imports)
    assert edges["fake.high.face"] == {"fake.low.util"}  # the relative import, resolved
    assert cycles(edges) == [["fake.a", "fake.b"]]
    found = layer_violations(imports, modules, {"fake.low": ("fake.high",)})
    assert len(found) == 1 and "fake.low.core imports fake.high.face" in found[0]
    closure = import_time_closure("fake.thin", modules, imports)
    assert closure["torch"] == "fake.thin -> fake.middle -> torch"
    assert "fake.a" not in import_time_closure("fake.b", modules, imports)  # imported in a function only


def test_the_checker_fails_on_a_violation_added_to_a_copy_of_specd(tmp_path, installed) -> None:
    """A copy of the real packages with one upward import added to the daemon: the rules catch it."""
    modules, _ = installed
    roots = {}
    for package in PACKAGES:
        src = modules[package].path.parent
        roots[package] = tmp_path / package
        shutil.copytree(src, roots[package], ignore=shutil.ignore_patterns("*.so", "__pycache__", "data"))
    config = roots["specd"] / "daemon" / "config.py"
    config.write_text(config.read_text() + "\n\ndef _late():\n    from specd.cli import flags  # noqa\n")
    copy = find_modules(PACKAGES, roots)
    imports = all_imports(copy)
    assert any("specd.daemon.config imports specd.cli.flags" in v for v in layer_violations(imports, copy, RULES))
    assert any("specd.daemon.config" in c and "specd.cli.flags" in c for c in cycles(graph(copy, imports)))
