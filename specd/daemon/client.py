"""Small clients for the daemon's socket: a blocking one (``specd complete --socket``, tests) and
an asyncio one (the LSP server, the load bench). asyncio is imported by the asyncio client only:
``specd complete --socket`` starts without it."""

from __future__ import annotations

import itertools
from collections import Counter
import json
import socket
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    import asyncio

MAX_RESPONSE_BYTES = 64 << 20


class DaemonError(Exception):
    """An error response: ``code`` and ``message`` as the daemon sent them."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(f"{message} ({code})")
        self.code = code
        self.message = message
        self.data = data


def _request(rid: int | str, method: str, params: dict[str, Any] | None) -> bytes:
    obj: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method}
    if params is not None:
        obj["params"] = params
    return json.dumps(obj, ensure_ascii=False).encode("utf-8") + b"\n"


def _outcome(msg: dict[str, Any]) -> Any:
    if "error" in msg:
        e = msg["error"]
        raise DaemonError(e.get("code", 0), e.get("message", ""), e.get("data"))
    return msg.get("result")


class Client:
    """Blocking client: one request at a time (deltas go to ``on_delta``)."""

    def __init__(self, path: str | Path, timeout: float | None = None) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        try:
            self.sock.connect(str(path))
        except OSError:
            self.sock.close()
            raise
        self.file = self.sock.makefile("rb")
        self._ids = itertools.count(1)

    def close(self) -> None:
        self.file.close()
        self.sock.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def read_message(self) -> dict[str, Any]:
        line = self.file.readline(MAX_RESPONSE_BYTES)
        if not line:
            raise ConnectionError("the daemon closed the connection")
        return json.loads(line)

    def call(self, method: str, params: dict[str, Any] | None = None,
             on_delta: Callable[[str], None] | None = None) -> Any:
        rid = next(self._ids)
        self.send_raw(_request(rid, method, params))
        while True:
            msg = self.read_message()
            if msg.get("method") == "complete/delta":
                if on_delta is not None and msg["params"].get("id") == rid:
                    on_delta(msg["params"]["text"])
                continue
            if msg.get("id") == rid:
                return _outcome(msg)


class AsyncClient:
    """Asyncio client: many requests in flight on one connection."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future] = {}
        self._deltas: dict[int, Callable[[str], None]] = {}
        self.answers: Counter = Counter()  # terminal messages received per id (exactly one is right)
        import asyncio

        self._reading = asyncio.ensure_future(self._read())

    @classmethod
    async def connect(cls, path: str | Path) -> "AsyncClient":
        import asyncio

        reader, writer = await asyncio.open_unix_connection(str(path), limit=MAX_RESPONSE_BYTES)
        return cls(reader, writer)

    async def close(self) -> None:
        self._reading.cancel()
        self.writer.close()
        try:
            await self.writer.wait_closed()
        except (ConnectionError, OSError):
            pass

    async def _read(self) -> None:
        try:
            while line := await self.reader.readline():
                msg = json.loads(line)
                if msg.get("method") == "complete/delta":
                    cb = self._deltas.get(msg["params"].get("id"))
                    if cb is not None:
                        cb(msg["params"]["text"])
                    continue
                self.answers[msg.get("id")] += 1
                fut = self._pending.pop(msg.get("id"), None)
                if fut is not None and not fut.done():
                    fut.set_result(msg)
        finally:
            for fut in self._pending.values():
                if not fut.done():
                    fut.set_exception(ConnectionError("the daemon closed the connection"))

    def start(self, method: str, params: dict[str, Any] | None = None,
              on_delta: Callable[[str], None] | None = None) -> tuple[int, asyncio.Future]:
        """Send a request; returns its id and a future of the whole response message."""
        import asyncio

        rid = next(self._ids)
        fut = asyncio.get_running_loop().create_future()
        self._pending[rid] = fut
        if on_delta is not None:
            self._deltas[rid] = on_delta
        self.writer.write(_request(rid, method, params))
        return rid, fut

    async def call(self, method: str, params: dict[str, Any] | None = None) -> Any:
        _, fut = self.start(method, params)
        return _outcome(await fut)

    def notify_cancel(self, rid: int) -> None:
        self.writer.write(json.dumps({"jsonrpc": "2.0", "method": "cancel", "params": {"id": rid}}).encode() + b"\n")
