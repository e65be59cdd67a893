"""The daemon over its Unix socket (``specd serve``), through the daemon's asyncio client.

One connection, reopened when it drops; when nothing listens, the daemon is started in the
background (``DaemonSpawner``). Each document is a daemon session, so a newer request for a
document supersedes the older one in the daemon too; a cancelled LSP request sends ``cancel``.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, Callable

from specd.daemon.client import AsyncClient
from specd.daemon.protocol import METHOD_NOT_FOUND, REQUEST_CANCELLED, WARM_PARAMS
from specd.requests import CompletionRequest
from specd.lsp.autostart import DaemonSpawner
from specd.lsp.backend import BackendUnavailable, Superseded
from specd.lsp.shaping import request_params


def warm_params(request: CompletionRequest, session: str) -> dict[str, Any]:
    """``warm``'s parameters: those of ``complete`` that shape the prompt, as the request has them."""
    params = request_params(request, session)
    return {k: v for k, v in params.items() if k in WARM_PARAMS}


class DaemonBackend:
    def __init__(self, socket: Path, spawner: DaemonSpawner | None, log: Callable[[str], None]) -> None:
        self.socket = socket
        self.spawner = spawner
        self.log = log
        self._client: AsyncClient | None = None
        self._connecting = asyncio.Lock()
        self._warm_ok = True  # an older daemon has no ``warm`` method

    def describe(self) -> str:
        return f"daemon on {self.socket}"

    async def start(self) -> None:
        await self._connected()

    def _alive(self, client: AsyncClient) -> bool:
        return not client.reader.at_eof() and not client.writer.is_closing()

    async def _connected(self) -> AsyncClient:
        client = self._client
        if client is not None and self._alive(client):
            return client
        async with self._connecting:
            if self._client is not None and self._alive(self._client):
                return self._client
            self._client = None
            try:
                self._client = await AsyncClient.connect(self.socket)
            except OSError as first:
                if self.spawner is None:
                    raise BackendUnavailable(f"no daemon on {self.socket} ({first}); start `specd serve`") from None
                self.log(f"no daemon on {self.socket}: starting one in the background (log: {self.spawner.log_path})")
                try:
                    await self.spawner.ensure_running(self.socket)
                    self._client = await AsyncClient.connect(self.socket)
                except OSError as e:
                    raise BackendUnavailable(f"could not start the daemon: {e}") from None
                self.log(f"daemon started on {self.socket}")
            return self._client

    async def complete(self, request: CompletionRequest, session: str) -> str:
        client = await self._connected()
        msg = await self._call(client, request_params(request, session))
        error = msg.get("error")
        if error:
            if error.get("code") == REQUEST_CANCELLED:
                raise Superseded(error.get("message", "cancelled"))
            raise BackendUnavailable(f"daemon error {error.get('code')}: {error.get('message')}")
        return str((msg.get("result") or {}).get("text", ""))

    async def warm(self, request: CompletionRequest, session: str) -> int:
        if not self._warm_ok:
            return 0
        client = await self._connected()
        msg = await self._call(client, warm_params(request, session), "warm")
        error = msg.get("error")
        if error:
            if error.get("code") == METHOD_NOT_FOUND:
                self._warm_ok = False
                self.log("the daemon has no warm method: prompts are not computed ahead")
                return 0
            if error.get("code") == REQUEST_CANCELLED:
                raise Superseded(error.get("message", "cancelled"))
            raise BackendUnavailable(f"daemon error {error.get('code')} on warm: {error.get('message')}")
        return int((msg.get("result") or {}).get("tokens", 0))

    async def _call(self, client: AsyncClient, params: dict[str, Any], method: str = "complete") -> dict[str, Any]:
        try:
            rid, reply = client.start(method, params)
        except (ConnectionError, OSError, RuntimeError) as e:
            self._client = None
            raise BackendUnavailable(f"lost the daemon: {e}") from None
        try:
            return await reply
        except asyncio.CancelledError:
            try:
                client.notify_cancel(rid)
            except (ConnectionError, OSError, RuntimeError):
                pass
            raise
        except (ConnectionError, OSError) as e:
            self._client = None
            raise BackendUnavailable(f"lost the daemon: {e}") from None

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()
            self._client = None
