"""The bench's one way to a daemon: ``specd serve`` started as a process on a socket of its own (and
stopped when done), or the daemon already at ``--socket``; talked to with the daemon's own client.

The bench imports no part of the daemon (layers): the command line hands it ``connect``, the
daemon's asyncio client's constructor (``specd.daemon.client.AsyncClient.connect``), and the
command that starts ``specd serve``.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import tempfile
import time
from pathlib import Path
from typing import IO, Any, AsyncIterator, Awaitable, Callable, Protocol

from specd.bench.errors import BenchError
from specd.bench.llamacpp_bin import die_with_parent


class DaemonClient(Protocol):
    """What the bench uses of ``specd.daemon.client.AsyncClient``: many requests in flight on one
    connection, each answered by a future of its whole response message."""

    def start(self, method: str, params: dict[str, Any] | None = None,
              on_delta: Callable[[str], None] | None = None) -> tuple[int, asyncio.Future]: ...

    async def close(self) -> None: ...


Connect = Callable[[Path], Awaitable[DaemonClient]]  # socket -> a connected client


async def request(client: DaemonClient, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    """The whole response message (``result`` or ``error``) of one request."""
    _, fut = client.start(method, params)
    return await fut


async def call(client: DaemonClient, method: str, params: dict[str, Any] | None = None) -> Any:
    """The result of one request; a RuntimeError naming the daemon's error."""
    msg = await request(client, method, params)
    if "error" in msg:
        raise RuntimeError(f"the daemon refused {method}: {msg['error'].get('message', msg['error'])}")
    return msg.get("result")


class DaemonProcess:
    """``argv`` (a ``specd serve`` command on ``socket``) as a child process: :meth:`start` waits
    until it answers ``health`` and returns a client; :meth:`stop` ends it (SIGTERM, then SIGKILL).
    The child gets SIGTERM when the bench dies, so no daemon is left busy behind a killed run."""

    def __init__(self, argv: list[str], socket: Path, log: Path | None, connect: Connect) -> None:
        self.argv, self.socket, self.log, self.connect = argv, socket, log, connect
        self.proc: subprocess.Popen | None = None
        self._out: IO[bytes] | None = None

    async def start(self, timeout: float = 600.0) -> DaemonClient:
        self._out = open(self.log, "ab") if self.log else None
        self.proc = subprocess.Popen(self.argv, stdout=self._out or subprocess.DEVNULL, stderr=subprocess.STDOUT,
                                     start_new_session=True, preexec_fn=die_with_parent)
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"specd serve exited with {self.proc.returncode}" +
                                   (f" (log: {self.log})" if self.log else ""))
            try:
                client = await self.connect(self.socket)
            except OSError:
                client = None
            if client is not None:
                try:
                    msg = await request(client, "health")
                    if "result" in msg:
                        return client
                except (OSError, ConnectionError):
                    pass
                await client.close()
            if time.monotonic() > deadline:
                raise TimeoutError(f"specd serve not ready after {timeout:.0f} s")
            await asyncio.sleep(0.2)

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if self._out is not None:
            self._out.close()
            self._out = None


@contextlib.asynccontextmanager
async def daemon_client(connect: Connect, serve_argv: Callable[[Path], list[str]] | None, socket: Path | None,
                        log: Path | None = None, say: Callable[[str], None] | None = None,
                        tag: str = "sdd-") -> AsyncIterator[DaemonClient]:
    """A client of ``specd serve``: one started here (``serve_argv(socket path)``, stopped on exit,
    its output appended to ``log``) or, with ``serve_argv`` None, the daemon at ``socket``."""
    with tempfile.TemporaryDirectory(prefix=tag, dir="/tmp") as d:  # AF_UNIX paths stay short
        daemon = None
        if serve_argv is not None:
            sock = Path(d) / "s.sock"
            daemon = DaemonProcess(serve_argv(sock), sock, log, connect)
            if say:
                say("starting specd serve")
        elif socket is None:
            raise BenchError("no daemon: give --socket or let the bench start one")
        try:
            client = await daemon.start() if daemon is not None else await connect(socket)
            try:
                yield client
            finally:
                await client.close()
        finally:
            if daemon is not None:
                daemon.stop()
