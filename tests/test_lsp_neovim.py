"""A real editor gets a completion from specd: headless Neovim (Debian's package) starts
``specd lsp --in-process`` on the tiny pair, opens a file and sends ``textDocument/completion``.

The test needs ``nvim`` on PATH (Debian: ``apt-get install neovim``; ``.ci/run`` installs it). Without
it the test fails in CI (the environment variable ``CI`` set, e.g. ``CI=true``) and skips, saying why,
elsewhere. It never installs anything itself."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
RUN_LIMIT_S = 600  # a bound for a loaded machine, not a timing assertion
MISSING = ("nvim is not on PATH: install Neovim (Debian: apt-get install -y --no-install-recommends "
           "neovim; .ci/run does this when it runs as root)")


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def find_nvim() -> str:
    found = shutil.which("nvim")
    if found:
        return found
    if in_ci():
        pytest.fail(f"{MISSING}; CI is set, so the editor test must run")
    pytest.skip(MISSING)


def test_neovim_gets_a_completion(tmp_path: Path) -> None:
    nvim = find_nvim()
    source = tmp_path / "fib.py"
    source.write_text("# café 😀\ndef fib(n):\n    \n", encoding="utf-8")
    out = tmp_path / "answer.json"
    server = [sys.executable, str(HERE / "lsp_tiny.py"), "--in-process", "--max-tokens", "16"]
    env = {**os.environ, "SPECD_NVIM_CMD": json.dumps(server), "SPECD_NVIM_FILE": str(source),
           "SPECD_NVIM_OUT": str(out), "SPECD_NVIM_LINE": "3", "SPECD_NVIM_COL": "4",
           "XDG_CONFIG_HOME": str(tmp_path / "config"), "XDG_STATE_HOME": str(tmp_path / "state"),
           "XDG_DATA_HOME": str(tmp_path / "data")}
    proc = subprocess.run([nvim, "--headless", "-n", "-i", "NONE", "-u", str(HERE / "nvim_specd.lua")],
                          capture_output=True, text=True, env=env, timeout=RUN_LIMIT_S, cwd=tmp_path)
    assert out.exists(), f"nvim wrote nothing (rc {proc.returncode}): {proc.stdout[-2000:]} {proc.stderr[-2000:]}"
    answer = json.loads(out.read_text())
    assert "error" not in answer, answer
    (response,) = answer["responses"]
    assert response["err"] is None, response
    items = response["result"]["items"]
    assert len(items) == 1
    edit = items[0]["textEdit"]
    assert edit["range"]["end"] == {"line": 2, "character": 4}
    assert edit["newText"].strip()
