"""Takes the README's screenshot (``lsp/vscode/docs/ghost-text.png``): the extension in code-server,
with the default model pair in process, ghost text after typing in a Python file. Run from the
repository root, after ``specd models pull``, on a quiet machine:

    flock /tmp/specd-cpu.lock python lsp/vscode/test/screenshot.py

It reuses the browser test's setup (``tests/test_vscode.py``) and driver (``e2e.js``)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

from tests.test_vscode import CODE_SETTINGS, VSCODE, free_port, run_script, stop_group, tools, wait_http  # noqa: E402


def main() -> int:
    node, chromium = tools()
    vsix = run_script(VSCODE / "build.sh", "building the extension")
    code_server = run_script(VSCODE / "test" / "setup-code-server.sh", "installing code-server")
    tmp = Path(tempfile.mkdtemp(prefix="svsc-shot-"))
    user, ext, ws, out = (tmp / n for n in ("user", "ext", "ws", "out"))
    for d in (user / "User", ext, ws, out):
        d.mkdir(parents=True)
    source = ws / "fib.py"
    source.write_text('def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n')
    settings = {**CODE_SETTINGS, "specd.backend": "in-process", "specd.command": shutil.which("specd") or "specd",
                "editor.fontSize": 15}
    (user / "User" / "settings.json").write_text(json.dumps(settings))
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp / "xdg"), "XDG_DATA_HOME": str(tmp / "xdg-data")}
    subprocess.run([code_server, "--user-data-dir", str(user), "--extensions-dir", str(ext), "--install-extension",
                    vsix], check=True, env=env, capture_output=True)
    plan = {"settingsPath": str(user / "User" / "settings.json"),
            "phases": [{"name": "ghost-text", "file": str(source), "typed": "    if n"}]}
    (tmp / "plan.json").write_text(json.dumps(plan))
    port = free_port()
    server = subprocess.Popen([code_server, "--auth", "none", "--bind-addr", f"127.0.0.1:{port}", "--user-data-dir",
                               str(user), "--extensions-dir", str(ext), "--disable-telemetry", "--disable-update-check",
                               "--disable-workspace-trust", str(ws)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, start_new_session=True)
    try:
        wait_http(f"http://127.0.0.1:{port}/healthz", server)
        subprocess.run([node, str(VSCODE / "test" / "e2e.js"), f"http://127.0.0.1:{port}/?folder={ws}",
                        str(tmp / "plan.json"), str(out)], check=True, cwd=VSCODE,
                       env={**env, "SPECD_CHROMIUM": chromium})
    finally:
        stop_group(server)
    target = VSCODE / "docs" / "ghost-text.png"
    shutil.copyfile(out / "ghost-text.png", target)
    print(json.loads((out / "result.json").read_text())["phases"][0])
    print(target)
    return 0


if __name__ == "__main__":
    sys.exit(main())
