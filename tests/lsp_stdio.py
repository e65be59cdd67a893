"""A minimal synchronous LSP client over a subprocess's stdio, for tests that need one answer from
the real ``specd lsp`` outside pytest-lsp's fixtures (``tests/test_vscode.py`` asks it for the
suggestion VS Code should have shown)."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any


class StdioClient:
    def __init__(self, argv: list[str], cwd: Path | None = None) -> None:
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     cwd=cwd)
        self.next_id = 0

    def send(self, message: dict[str, Any]) -> None:
        body = json.dumps({"jsonrpc": "2.0", **message}).encode()
        assert self.proc.stdin is not None
        self.proc.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        self.proc.stdin.flush()

    def read(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        length = None
        while True:
            line = self.proc.stdout.readline()
            if not line:
                raise EOFError("the server closed its output")
            if line in (b"\r\n", b"\n"):
                break
            name, _, value = line.decode().partition(":")
            if name.strip().lower() == "content-length":
                length = int(value)
        assert length is not None
        return json.loads(self.proc.stdout.read(length))

    def request(self, method: str, params: Any, timeout_s: float = 300.0) -> Any:
        self.next_id += 1
        self.send({"id": self.next_id, "method": method, "params": params})
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            msg = self.read()
            if msg.get("id") == self.next_id and "method" not in msg:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result")
            if "id" in msg and "method" in msg:  # a request from the server: answer it empty
                self.send({"id": msg["id"], "result": None})
        raise TimeoutError(method)

    def notify(self, method: str, params: Any) -> None:
        self.send({"method": method, "params": params})

    def close(self) -> None:
        try:
            self.request("shutdown", None, 30.0)
            self.notify("exit", None)
            self.proc.wait(timeout=30)
        except Exception:
            self.proc.kill()
            self.proc.wait()


def inline_suggestion(argv: list[str], path: Path, text: str, options: dict[str, Any]) -> str | None:
    """The ``insertText`` ``specd lsp`` (``argv``) suggests at the end of ``text`` (a Python file
    at ``path``), initialized with ``options`` as VS Code's client does; None when it has none."""
    client = StdioClient(argv, cwd=path.parent)
    try:
        uri = path.resolve().as_uri()
        client.request("initialize", {"processId": None, "rootUri": path.parent.resolve().as_uri(),
                                      "capabilities": {}, "initializationOptions": options})
        client.notify("initialized", {})
        client.notify("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "python", "version": 1,
                                                                "text": text}})
        lines = text.split("\n")
        at = {"line": len(lines) - 1, "character": len(lines[-1].encode("utf-16-le")) // 2}
        result = client.request("textDocument/inlineCompletion", {
            "textDocument": {"uri": uri}, "position": at, "context": {"triggerKind": 2}})
        items = (result or {}).get("items", []) if isinstance(result, dict) else (result or [])
        if not items:
            return None
        item = items[0]
        assert item.get("range") in (None, {"start": at, "end": at}), item
        return item["insertText"] if isinstance(item["insertText"], str) else item["insertText"]["value"]
    finally:
        client.close()
