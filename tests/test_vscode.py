"""The VS Code extension (``lsp/vscode/``) in a real VS Code: code-server serves VS Code's workbench,
headless Chromium (Debian's) drives it through playwright-core. The test builds the ``.vsix``
(``lsp/vscode/build.sh``), installs it with ``code-server --install-extension``, and in one
session:

1. ``specd.backend: "in-process"`` (``specd lsp`` on the tiny random pair): opens a Python file,
   inserts text, waits for the ghost text, accepts it with Tab, saves, and checks the file is the
   text plus exactly what the same ``specd lsp`` suggests there when asked directly;
2. the same extension, only its settings changed to a shared server (``specd.backend:
   "llama-server:URL"``, ``tests/fault_server.py`` standing in for llama-server; the window is
   reloaded after the settings file is rewritten): ``specd lsp`` starts ``specd serve --backend
   ...``; the accepted text must be the server's tokens.

Both check the status bar says ready with a latency. Between them, suggestions are turned off by
clicking the status bar item (no ghost text may show); after them, ``specd: Restart the Daemon
Connection`` restarts ``specd lsp``, and a suggestion from the shared server is accepted again.
Last, ``specd.command`` names no file: the status bar warns, and no popup shows (nor at any phase).

Needs Node 20 with npm, Chromium, and
code-server (``lsp/vscode/test/setup-code-server.sh``, cached in ``~/.cache/specd/vscode-test``;
it needs a C++ toolchain, a few -dev packages and ripgrep, which ``.ci/run`` installs). Without
them the test skips, saying why; with ``CI`` set it fails instead (as ``tests/test_lsp_neovim.py``)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest

from tests.lsp_stdio import inline_suggestion

HERE = Path(__file__).resolve().parent
VSCODE = HERE.parent / "lsp" / "vscode"
LIMIT_S = 900  # bounds for a loaded 2-core machine, not timing assertions
MAX_TOKENS = 16
SERVER_TEXT = "".join(str(i % 10) for i in range(MAX_TOKENS))  # tests/fault_server.py: maxTokens digits
CODE_SETTINGS = {  # a quiet workbench: no welcome page, trust prompt, telemetry, suggest widget
    "security.workspace.trust.enabled": False, "workbench.startupEditor": "none",
    "workbench.tips.enabled": False, "telemetry.telemetryLevel": "off", "extensions.autoCheckUpdates": False,
    "extensions.autoUpdate": False, "editor.quickSuggestions": {"other": False, "comments": False, "strings": False},
    "editor.suggestOnTriggerCharacters": False, "editor.inlineSuggest.enabled": True, "files.autoSave": "off",
    "chat.disableAIFeatures": True, "workbench.welcomePage.walkthroughs.openOnInstall": False,
}


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def unavailable(why: str) -> None:
    if in_ci():
        pytest.fail(f"{why}; CI is set, so the VS Code test must run")
    pytest.skip(why)


def tools() -> tuple[str, str]:
    node = shutil.which("node")
    if node is None or shutil.which("npm") is None:
        unavailable("node and npm (Node 20) are not on PATH")
    major = subprocess.run([node, "-p", "process.versions.node.split('.')[0]"], capture_output=True, text=True).stdout.strip()
    if major != "20":
        unavailable(f"code-server 4.100.3 (the test's VS Code) needs Node 20, found Node {major}")
    chromium = os.environ.get("SPECD_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        unavailable("Chromium is not on PATH (Debian: apt-get install -y chromium; .ci/run does this as root)")
    return node, chromium


def run_script(script: Path, what: str) -> str:
    proc = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=LIMIT_S)
    if proc.returncode == 3:  # a prerequisite is missing: the script says which
        unavailable(f"{what}: {proc.stderr.strip().splitlines()[-1]}")
    assert proc.returncode == 0, f"{script} failed (rc {proc.returncode}): {proc.stderr[-4000:]}"
    return proc.stdout.strip().splitlines()[-1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(url: str, proc: subprocess.Popen, limit_s: float = 120.0) -> None:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"{url}: the server exited with {proc.returncode}"
        try:
            urllib.request.urlopen(url, timeout=2)
            return
        except urllib.error.HTTPError:
            return  # it answers
        except OSError:
            time.sleep(0.25)
    raise AssertionError(f"{url} did not answer within {limit_s} s")


def stop_group(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=15)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def stop_processes_mentioning(marker: str) -> None:
    """The daemon ``specd lsp`` started for the shared server runs detached (its own session): stop
    the processes this test started, found by the test's own directory in their command line."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if marker in cmdline:
            try:
                os.kill(int(entry.name), signal.SIGTERM)
            except ProcessLookupError:
                pass


def logs(*roots: Path) -> str:
    out = []
    for root in roots:
        for path in sorted(root.rglob("*.log")) if root.is_dir() else [root]:
            if path.is_file() and ("specd" in path.name.lower() or path.name in ("daemon.log", "exthost.log", "cs.log")):
                out.append(f"--- {path}\n{path.read_text(errors='replace')[-3000:]}")
    return "\n".join(out)


@pytest.fixture(scope="module")
def vsix() -> str:
    tools()
    return run_script(VSCODE / "build.sh", "building the extension")


def test_extension_settings_mapping(vsix: str) -> None:
    """The settings' mapping to ``specd lsp`` (``src/options.ts``), under plain Node."""
    proc = subprocess.run([shutil.which("node") or "node", "--test", str(VSCODE / "test" / "options.test.js")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert Path(vsix).is_file() and Path(vsix).stat().st_size > 10_000


def test_vscode_ghost_text_accepted_with_tab(vsix: str, tmp_path: Path) -> None:
    node, chromium = tools()
    code_server = run_script(VSCODE / "test" / "setup-code-server.sh", "installing code-server")

    from tests.tiny import tiny_tokenizer

    run_dir = Path(tempfile.mkdtemp(prefix="svsc-", dir="/tmp"))  # short: the daemon's socket lives here
    user_dir, ext_dir, ws, out = (tmp_path / n for n in ("user", "ext", "ws", "out"))
    for d in (user_dir / "User", ext_dir, ws, out):
        d.mkdir(parents=True)
    tokenizer = run_dir / "tokenizer.json"
    tiny_tokenizer()._tok.save(str(tokenizer))
    wrapper = run_dir / "specd"  # `specd lsp ...` on the tiny pair (tests/lsp_tiny.py adds `lsp`)
    wrapper.write_text(f"#!/bin/sh\nshift\nexec {sys.executable} {HERE / 'lsp_tiny.py'} \"$@\"\n")
    wrapper.chmod(0o755)
    fib, off, calc, again = ws / "fib.py", ws / "off.py", ws / "calc.py", ws / "again.py"
    fib.write_text("# café\ndef fib(n):\n", encoding="utf-8")
    off.write_text("def sub(a, b):\n", encoding="utf-8")
    calc.write_text("def add(a, b):\n", encoding="utf-8")
    again.write_text("def mul(a, b):\n", encoding="utf-8")
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "xdg"), "XDG_RUNTIME_DIR": str(run_dir),
           "XDG_DATA_HOME": str(tmp_path / "xdg-data")}

    local = {**CODE_SETTINGS, "specd.command": str(wrapper), "specd.backend": "in-process", "specd.maxTokens": MAX_TOKENS}
    (user_dir / "User" / "settings.json").write_text(json.dumps(local, indent=2))
    installed = subprocess.run([code_server, "--user-data-dir", str(user_dir), "--extensions-dir", str(ext_dir),
                                "--install-extension", vsix], capture_output=True, text=True, env=env, timeout=300)
    assert installed.returncode == 0 and "successfully installed" in installed.stdout, installed.stdout + installed.stderr

    fault_port, port = free_port(), free_port()
    fault = subprocess.Popen([sys.executable, str(HERE / "fault_server.py"), str(fault_port)], stdout=subprocess.PIPE,
                             text=True, start_new_session=True)
    server = None
    try:
        assert fault.stdout is not None and fault.stdout.readline().strip() == "ready"
        shared = {**local, "specd.backend": f"llama-server:http://127.0.0.1:{fault_port}",
                  "specd.remoteTokenizer": str(tokenizer)}
        plan = {"settingsPath": str(user_dir / "User" / "settings.json"), "phases": [
            {"name": "local", "file": str(fib), "typed": "    if n"},
            {"name": "off", "file": str(off), "typed": "    x = ", "toggle": True},
            {"name": "shared", "file": str(calc), "typed": "    return a + ", "settings": shared},
            {"name": "restart", "file": str(again), "typed": "    return a * ",
             "command": "specd: Restart the Daemon Connection"},
            {"name": "broken", "file": str(fib), "typed": "", "degraded": True,
             "settings": {**local, "specd.command": str(run_dir / "no-such-specd")}},
        ]}
        (tmp_path / "plan.json").write_text(json.dumps(plan))
        with open(tmp_path / "cs.log", "w") as cs_log:
            server = subprocess.Popen(
                [code_server, "--auth", "none", "--bind-addr", f"127.0.0.1:{port}", "--user-data-dir", str(user_dir),
                 "--extensions-dir", str(ext_dir), "--disable-telemetry", "--disable-update-check",
                 "--disable-workspace-trust", str(ws)],
                stdout=cs_log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        wait_http(f"http://127.0.0.1:{port}/healthz", server)
        drive = subprocess.run([node, str(VSCODE / "test" / "e2e.js"), f"http://127.0.0.1:{port}/?folder={ws}",
                                str(tmp_path / "plan.json"), str(out)], capture_output=True, text=True,
                               env={**env, "SPECD_CHROMIUM": chromium}, cwd=VSCODE, timeout=LIMIT_S)
        result = json.loads((out / "result.json").read_text()) if (out / "result.json").exists() else {}
        context = (f"driver rc {drive.returncode}: {drive.stderr[-3000:]}\nresult: {json.dumps(result)[-3000:]}\n"
                   f"{logs(tmp_path / 'cs.log', user_dir / 'logs', run_dir)}")
        assert drive.returncode == 0 and "error" not in result, context
        phase_local, phase_off, phase_shared, phase_restart, phase_broken = result["phases"]

        # 1. the tiny model's suggestion, as `specd lsp` gives it for the same text, accepted whole
        expected = inline_suggestion([sys.executable, str(HERE / "lsp_tiny.py"), "--in-process"], fib,
                                     phase_local["before"], {"maxTokens": MAX_TOKENS, "prewarm": True,
                                                             "debounce": True, "requestAhead": True})
        assert expected, f"specd lsp suggests nothing at the end of {phase_local['before']!r}"
        assert "".join(phase_local["ghost"]).strip(), context
        assert phase_local["saved"] == phase_local["before"] + expected, context
        assert "codicon-check" in phase_local["status"] and " ms" in phase_local["status"], context

        # suggestions toggled off from the status bar: no ghost text
        assert phase_off["ghost"] == [] and "codicon-circle-slash" in phase_off["status"], context
        assert phase_off["saved"] == phase_off["before"], context

        # 2. a shared server, only the settings changed: its tokens, accepted with Tab
        assert phase_shared["saved"] == phase_shared["before"] + SERVER_TEXT, context
        assert "codicon-check" in phase_shared["status"] and " ms" in phase_shared["status"], context

        # `specd: Restart the Daemon Connection`: specd lsp starts again, reaches the same daemon
        assert phase_restart["saved"] == phase_restart["before"] + SERVER_TEXT, context

        # a command that is not there: a warning in the status bar, the reason in the output, no popup
        assert "codicon-warning" in phase_broken["status"], context
        for phase in (phase_local, phase_shared, phase_restart, phase_broken):
            assert phase["toasts"] == [], context
    finally:
        if server is not None:
            stop_group(server)
        stop_group(fault)
        stop_processes_mentioning(str(run_dir))
        shutil.rmtree(run_dir, ignore_errors=True)
