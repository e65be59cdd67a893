"""A real editor gets a completion from specd: headless Neovim (Debian's package) starts
``specd lsp --in-process`` on the tiny pair, opens a file and sends ``textDocument/completion``.

The test finds ``nvim`` on PATH, or installs Debian's ``neovim`` with apt-get when it runs as root
with apt available; it skips, saying why, only when neither is possible."""

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


def find_or_install_nvim() -> str:
    found = shutil.which("nvim")
    if found:
        return found
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        pytest.skip("nvim is not on PATH and cannot be installed here (needs root and apt-get): "
                    "apt-get install neovim")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = subprocess.run(["apt-get", "install", "-y", "--no-install-recommends", "neovim"],
                             capture_output=True, text=True, env=env, timeout=RUN_LIMIT_S)
    if install.returncode != 0:  # maybe the package lists are missing
        subprocess.run(["apt-get", "update"], capture_output=True, env=env, timeout=RUN_LIMIT_S)
        install = subprocess.run(["apt-get", "install", "-y", "--no-install-recommends", "neovim"],
                                 capture_output=True, text=True, env=env, timeout=RUN_LIMIT_S)
    found = shutil.which("nvim")
    if not found:
        pytest.skip(f"apt-get install neovim failed: {install.stderr.strip()[-500:]}")
    return found


def test_neovim_gets_a_completion(tmp_path: Path) -> None:
    nvim = find_or_install_nvim()
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
