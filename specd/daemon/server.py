"""The asyncio server: listen, serve connections, stop gracefully (uvicorn-style).

First SIGTERM/SIGINT (or a ``shutdown`` request): stop accepting, remove the socket, let in-flight
work finish for up to ``drain_timeout_s``, cancel the rest, close connections. A second signal
skips the waiting.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import signal
import time
from typing import TYPE_CHECKING, Any

from specd.daemon.config import DaemonConfig
from specd.daemon.connection import Connection
from specd.daemon.listener import Listener
from specd.daemon.model_thread import ModelThread
from specd.daemon.scheduler import Scheduler
from specd.daemon.stats import DaemonStats

if TYPE_CHECKING:  # a type only: the daemon is handed a built backend and never imports torch itself
    from specd.daemon.backend import Backend

HANDLED_SIGNALS = (signal.SIGINT, signal.SIGTERM)
PROTOCOL_VERSION = 1
logger = logging.getLogger("specd.daemon")  # ``specd serve`` sends it to stderr as "specd: ..."


def log(message: str) -> None:
    logger.info(message)


class Server:
    def __init__(self, backend: Backend, config: DaemonConfig, listener: Listener,
                 thread: ModelThread | None = None) -> None:
        """``backend``: the local engine, or a remote server's driver (``specd.daemon.backend``);
        ``thread``: the model thread that built it, which then runs its jobs."""
        self.backend = backend
        self.config = config
        self.listener = listener
        self.scheduler = Scheduler(backend, reuse=config.reuse, thread=thread)
        self.stats = DaemonStats()
        self.max_len = backend.max_len
        self.draining = False
        self.force_exit = False
        self.connections: set[Connection] = set()
        self._conn_tasks: set[asyncio.Task] = set()
        self._ids = itertools.count(1)
        self._should_exit: asyncio.Event | None = None
        self._force: asyncio.Event | None = None

    # -- signals --------------------------------------------------------------------------------
    def request_exit(self, why: str) -> None:
        assert self._should_exit is not None and self._force is not None
        if self._should_exit.is_set():
            log(f"{why}: stopping now")
            self.force_exit = True
            self._force.set()
        else:
            log(f"{why}: stopping (again to stop at once)")
            self._should_exit.set()

    def _install_signals(self, loop: asyncio.AbstractEventLoop) -> None:
        for sig in HANDLED_SIGNALS:
            loop.add_signal_handler(sig, self.request_exit, signal.Signals(sig).name)

    # -- serving --------------------------------------------------------------------------------
    async def serve(self) -> int:
        loop = asyncio.get_running_loop()
        self._should_exit, self._force = asyncio.Event(), asyncio.Event()
        self._install_signals(loop)
        assert self.listener.sock is not None
        self.scheduler.start(loop)
        server = await asyncio.start_unix_server(self._on_connect, sock=self.listener.sock)
        log(f"listening on {self.listener.path} (pid {os.getpid()})")
        await self._should_exit.wait()
        await self._shutdown(server)
        return 0

    async def _on_connect(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.draining:
            writer.close()
            return
        conn = Connection(next(self._ids), reader, writer, self)
        self.connections.add(conn)
        task = asyncio.current_task()
        if task is not None:
            self._conn_tasks.add(task)
        try:
            await conn.run()
        except Exception as e:  # a bug in one connection is logged; the daemon serves on
            log(f"connection {conn.cid} ended by {type(e).__name__}: {e}")
        finally:
            self.connections.discard(conn)
            if task is not None:
                self._conn_tasks.discard(task)

    async def _shutdown(self, server: asyncio.AbstractServer) -> None:
        self.draining = True
        server.close()
        self.listener.close()  # the socket file goes now: new clients fail fast
        assert self._force is not None
        deadline = time.monotonic() + self.config.drain_timeout_s
        while self.scheduler.busy() and time.monotonic() < deadline and not self.force_exit:
            await self._sleep_or_force(min(0.05, max(0.0, deadline - time.monotonic())))
        if self.scheduler.busy():
            log("cancelling unfinished requests")
            self.scheduler.cancel_all("the daemon is shutting down")
        if not self.force_exit:  # let the cancelled requests end and their answers go out
            while self.scheduler.busy() and not self.force_exit:
                await self._sleep_or_force(0.05)
            await asyncio.sleep(0)
            pending = [t for c in self.connections for t in c.tasks]
            if pending:
                await asyncio.wait(pending, timeout=5.0)
        for conn in list(self.connections):
            await conn.close()
        if self._conn_tasks and not self.force_exit:
            await asyncio.wait(set(self._conn_tasks), timeout=5.0)
        self.scheduler.close(wait=None if self.force_exit else 5.0)
        log("stopped")

    async def _sleep_or_force(self, seconds: float) -> None:
        assert self._force is not None
        try:
            await asyncio.wait_for(self._force.wait(), seconds)
        except asyncio.TimeoutError:
            pass

    # -- what the methods report ----------------------------------------------------------------
    def stats_dict(self) -> dict[str, Any]:
        return self.stats.as_dict(self.backend.memory(), self.scheduler.counts())

    def health(self) -> dict[str, Any]:
        backend = self.backend.health()
        return {
            "status": "draining" if self.draining else ("ok" if backend.get("ok") else "degraded"),
            "backend": backend,
            "pid": os.getpid(),
            "uptime_s": round(time.monotonic() - self.stats.started, 3),
            "protocol": PROTOCOL_VERSION,
            "socket": str(self.listener.path),
            "engine": self.backend.describe(),
            **self.scheduler.counts(),
        }

