"""The bench's LSP client: ``specd lsp`` (or any language server) over a subprocess's stdio,
Content-Length frames, many requests in flight; the server's ``window/logMessage`` lines are kept.
The editor scenario and ``bench/lsp_typing.py`` type through it (the test suite drives the server
with pytest-lsp, which a bench run does not install)."""

from __future__ import annotations

import asyncio
import itertools
import json
from typing import Any

MAX_LINE = 64 << 20


class StdioLspClient:
    """A minimal LSP client over a subprocess's stdin/stdout (Content-Length frames)."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.ids = itertools.count(1)
        self.pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self.logs: list[str] = []
        self.reader = asyncio.ensure_future(self._read())

    @classmethod
    async def start(cls, argv: list[str], env: dict[str, str] | None = None) -> "StdioLspClient":
        proc = await asyncio.create_subprocess_exec(*argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                                                    stderr=asyncio.subprocess.DEVNULL, limit=MAX_LINE, env=env)
        return cls(proc)

    async def _read(self) -> None:
        assert self.proc.stdout is not None
        try:
            while True:
                length = 0
                while True:
                    line = await self.proc.stdout.readline()
                    if not line:
                        return
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                    if line in (b"\r\n", b"\n"):
                        break
                msg = json.loads(await self.proc.stdout.readexactly(length))
                if msg.get("method") == "window/logMessage":
                    self.logs.append(msg["params"]["message"])
                fut = self.pending.pop(msg.get("id"), None) if "method" not in msg else None
                if fut is not None and not fut.done():
                    fut.set_result(msg)
        finally:
            for fut in self.pending.values():
                if not fut.done():
                    fut.set_exception(ConnectionError("the language server exited"))

    def _send(self, obj: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        body = json.dumps(obj).encode()
        self.proc.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)

    def notify(self, method: str, params: Any) -> None:
        self._send({"jsonrpc": "2.0", "method": method, "params": params})

    def request(self, method: str, params: Any) -> asyncio.Future[dict[str, Any]]:
        rid = next(self.ids)
        fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self.pending[rid] = fut
        self._send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        return fut

    async def close(self, timeout: float = 10.0) -> None:
        try:
            await asyncio.wait_for(self.request("shutdown", None), timeout)
            self.notify("exit", None)
            await asyncio.wait_for(self.proc.wait(), timeout)
        except (asyncio.TimeoutError, ConnectionError, BrokenPipeError):
            if self.proc.returncode is None:
                self.proc.kill()
                await self.proc.wait()
        self.reader.cancel()
