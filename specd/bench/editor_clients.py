"""The editor bench's wire clients, each small and standalone (the bench imports neither the LSP
server nor the daemon): an LSP client over a subprocess's stdio, a JSON-lines client for the
daemon's Unix socket, and an HTTP/1.1 client for llama-server's ``/infill`` that aborts a request
by closing its connection (as llama.vscode aborts its fetch on the next key)."""

from __future__ import annotations

import asyncio
import itertools
import json
from pathlib import Path
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


class SocketClient:
    """JSON-RPC lines over the daemon's Unix socket; many requests in flight."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.ids = itertools.count(1)
        self.pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._reading = asyncio.ensure_future(self._read())

    @classmethod
    async def connect(cls, path: Path) -> "SocketClient":
        reader, writer = await asyncio.open_unix_connection(str(path), limit=MAX_LINE)
        return cls(reader, writer)

    async def _read(self) -> None:
        try:
            while line := await self.reader.readline():
                msg = json.loads(line)
                fut = self.pending.pop(msg.get("id"), None)
                if fut is not None and not fut.done():
                    fut.set_result(msg)
        finally:
            for fut in self.pending.values():
                if not fut.done():
                    fut.set_exception(ConnectionError("the daemon closed the connection"))

    def request(self, method: str, params: dict[str, Any] | None = None) -> asyncio.Future[dict[str, Any]]:
        rid = next(self.ids)
        fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self.pending[rid] = fut
        msg: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method}
        if params is not None:
            msg["params"] = params
        self.writer.write(json.dumps(msg).encode() + b"\n")
        return fut

    async def call(self, method: str, params: dict[str, Any] | None = None) -> Any:
        msg = await self.request(method, params)
        if "error" in msg:
            raise RuntimeError(f"daemon error on {method}: {msg['error']}")
        return msg.get("result")

    async def close(self) -> None:
        self._reading.cancel()
        self.writer.close()
        try:
            await self.writer.wait_closed()
        except (ConnectionError, OSError):
            pass


async def post_json(host: str, port: int, path: str, body: dict[str, Any]) -> dict[str, Any]:
    """One HTTP/1.1 POST on its own connection; cancelling the awaiting task closes the connection
    (llama-server then stops the request's generation)."""
    reader, writer = await asyncio.open_connection(host, port, limit=MAX_LINE)
    try:
        data = json.dumps(body).encode()
        writer.write((f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
                      f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n").encode() + data)
        await writer.drain()
        raw = await reader.read()
    finally:
        writer.close()
    head, _, payload = raw.partition(b"\r\n\r\n")
    status = head.split(b"\r\n", 1)[0]
    if b"transfer-encoding: chunked" in head.lower():
        payload = _unchunk(payload)
    if b" 200 " not in status + b" ":
        raise RuntimeError(f"{path}: {status.decode(errors='replace')}: {payload[:300].decode(errors='replace')}")
    return json.loads(payload)


def _unchunk(data: bytes) -> bytes:
    out, i = bytearray(), 0
    while i < len(data):
        j = data.index(b"\r\n", i)
        size = int(data[i:j].split(b";")[0], 16)
        if size == 0:
            break
        out += data[j + 2:j + 2 + size]
        i = j + 2 + size + 2
    return bytes(out)
