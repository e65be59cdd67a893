"""One client connection: read lines, dispatch methods, write responses and stream deltas."""

from __future__ import annotations

import asyncio
import os
from typing import Any, Protocol

from specd.daemon import protocol as rpc
from specd.daemon.config import DaemonConfig
from specd.daemon.framing import TOO_LARGE, LineReader
from specd.daemon.peer import peer_allowed, peer_closed
from specd.daemon.scheduler import Done, Failed, Job, Scheduler, SchedulerClosed, Warmed, WasCancelled
from specd.daemon.stats import DaemonStats
from specd.requests import RequestError

HALF_CLOSE_POLL_S = 0.2  # while a half-closed client waits for answers: how often to look for a hang-up


class Host(Protocol):
    """What a connection needs from the server that accepted it (``specd.daemon.server.Server``)."""

    config: DaemonConfig
    scheduler: Scheduler
    stats: DaemonStats
    max_len: int  # the engine's context: longest prompt plus completion
    draining: bool  # stopping: new requests are refused

    def stats_dict(self) -> dict[str, Any]: ...

    def health(self) -> dict[str, Any]: ...

    def request_exit(self, why: str) -> None: ...


class Connection:
    def __init__(self, cid: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                 server: Host) -> None:
        self.cid = cid
        self.reader = reader
        self.writer = writer
        self.server = server
        self.jobs: dict[rpc.RequestId, Job] = {}
        self.tasks: set[asyncio.Task] = set()
        self.closed = False

    # -- lifecycle ------------------------------------------------------------------------------
    async def run(self) -> None:
        sock = self.writer.get_extra_info("socket")
        if sock is None or not peer_allowed(sock, os.getuid()):
            self.send(rpc.error(None, rpc.RpcError(rpc.PERMISSION_DENIED,
                                                   "permission denied: only the daemon's own user may connect")))
            await self.close()
            return
        try:
            await self._serve(sock)
        finally:  # whatever ended the connection, nothing it queued may keep the model busy
            self.cancel_all("client disconnected")
            await self.close()

    async def _serve(self, sock: Any) -> None:
        lines = LineReader(self.reader, self.server.config.max_message_bytes)
        try:
            while not self.closed:
                line = await lines.next()
                if line is None:
                    break
                if line is TOO_LARGE:
                    self.reject(None, rpc.RpcError(
                        rpc.PAYLOAD_TOO_LARGE,
                        f"payload too large: a message may hold {self.server.config.max_message_bytes} bytes"))
                    continue
                assert isinstance(line, bytes)
                if line.strip():
                    self.handle(line)
        except (ConnectionError, OSError):
            pass
        # end of input: a half-closed client still gets its answers; a gone one gets nothing
        while self.tasks and not self.closed and not peer_closed(sock):
            await asyncio.wait(set(self.tasks), timeout=HALF_CLOSE_POLL_S)
        self.cancel_all("client disconnected")
        if self.tasks:
            await asyncio.wait(set(self.tasks))

    async def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.cancel_all("client disconnected")
        try:
            self.writer.close()
            await asyncio.wait_for(self.writer.wait_closed(), 5.0)
        except (ConnectionError, OSError, asyncio.TimeoutError):
            pass

    def cancel_all(self, reason: str) -> None:
        for job in list(self.jobs.values()):
            self.server.scheduler.cancel(job, reason)

    # -- output ---------------------------------------------------------------------------------
    def send(self, obj: dict[str, Any]) -> None:
        if self.closed or self.writer.is_closing():
            return
        self.writer.write(rpc.encode(obj))
        transport = self.writer.transport
        if transport.get_write_buffer_size() > self.server.config.max_write_buffer_bytes:
            transport.abort()  # the client does not read: drop it (its jobs are cancelled)
            self.closed = True
            self.cancel_all("client stopped reading")

    def reject(self, rid: rpc.RequestId, err: rpc.RpcError) -> None:
        self.server.stats.rejected += 1
        self.send(rpc.error(rid, err))

    # -- dispatch -------------------------------------------------------------------------------
    def handle(self, line: bytes) -> None:
        try:
            msg = rpc.parse_message(line)
        except rpc.RpcError as e:
            rid = None if e.code == rpc.PARSE_ERROR else rpc.salvage_id(line)
            self.reject(rid, e)
            return
        try:
            if msg.method == "complete":
                self.complete(msg)
            elif msg.method == "warm":
                self.complete(msg, kind="warm")
            elif msg.method == "cancel":
                found = self.cancel(rpc.parse_cancel(msg.params))
                self.answer(msg, {"cancelled": found})
            elif msg.method == "stats":
                rpc.no_params(msg.params)
                self.answer(msg, self.server.stats_dict())
            elif msg.method == "health":
                rpc.no_params(msg.params)
                self.answer(msg, self.server.health())
            elif msg.method == "shutdown":
                rpc.no_params(msg.params)
                self.answer(msg, {"stopping": True})
                self.server.request_exit("shutdown requested by a client")
        except rpc.RpcError as e:
            if msg.has_id:
                self.reject(msg.id, e)
        except Exception as e:  # a bug must cost one request, never the connection or the daemon
            if msg.has_id:
                self.send(rpc.error(msg.id, rpc.RpcError(rpc.INTERNAL_ERROR, f"internal error: {type(e).__name__}: {e}"[:2000])))

    def answer(self, msg: rpc.Message, value: Any) -> None:
        if msg.has_id:
            self.send(rpc.result(msg.id, value))

    def cancel(self, rid: rpc.RequestId) -> bool:
        job = self.jobs.get(rid)
        if job is None:
            return False
        self.server.scheduler.cancel(job, "cancelled by the client")
        return True

    def complete(self, msg: rpc.Message, kind: str = "complete") -> None:
        """``complete``, or ``warm`` (the same prompt computed and cached, nothing generated)."""
        params = rpc.parse_warm(msg.params) if kind == "warm" else rpc.parse_complete(msg.params)
        try:
            params.request.validate(self.server.max_len)
        except RequestError as e:
            raise rpc.invalid_params(e.field, str(e).split(": ", 1)[-1]) from None
        if msg.id in self.jobs:
            raise rpc.RpcError(rpc.INVALID_REQUEST, f"invalid request: id {msg.id!r} is already in use")
        if self.server.draining:
            raise rpc.RpcError(rpc.SHUTTING_DOWN, "the daemon is shutting down")
        rid = msg.id
        loop = asyncio.get_running_loop()
        on_delta = None
        if params.stream and kind == "complete":
            def on_delta(text: str) -> None:  # worker thread → event loop
                loop.call_soon_threadsafe(self.send, rpc.delta(rid, text))
        job = Job(params.request, lane=params.session or f"connection-{self.cid}", session=params.session,
                  on_delta=on_delta, kind=kind)
        try:
            future = self.server.scheduler.submit(job)
        except SchedulerClosed:
            raise rpc.RpcError(rpc.SHUTTING_DOWN, "the daemon is shutting down") from None
        self.jobs[rid] = job
        task = asyncio.ensure_future(self._finish(rid, job, future))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _finish(self, rid: rpc.RequestId, job: Job, future: asyncio.Future) -> None:
        outcome = await future
        self.jobs.pop(rid, None)
        stats = self.server.stats
        if isinstance(outcome, Done):
            c = outcome.completion
            stats.served_one(c.stats, outcome.latency_ms, c.lookahead)
            answer: dict[str, Any] = {"text": c.text, "stats": c.stats.as_dict()}
            if c.timeline is not None:  # a profiled request: where the time went, the daemon's part too
                answer["timeline"] = {**c.timeline, "daemon_ms": {"queued": round(outcome.queued_ms, 3),
                                                                  "latency": round(outcome.latency_ms, 3)}}
            self.send(rpc.result(rid, answer))
        elif isinstance(outcome, Warmed):
            stats.warmed += 1
            self.send(rpc.result(rid, {"tokens": outcome.tokens}))
        elif isinstance(outcome, WasCancelled):
            stats.cancelled += 1
            self.send(rpc.error(rid, rpc.RpcError(rpc.REQUEST_CANCELLED, f"request cancelled: {outcome.reason}")))
        elif isinstance(outcome, Failed) and outcome.invalid:
            e = outcome.error
            field = getattr(e, "field", "params")
            self.reject(rid, rpc.invalid_params(field, str(e).split(": ", 1)[-1]))
        else:
            assert isinstance(outcome, Failed)
            stats.failed += 1
            self.send(rpc.error(rid, rpc.RpcError(
                rpc.INTERNAL_ERROR, f"model failure: {type(outcome.error).__name__}: {outcome.error}"[:2000],
                {"exception": type(outcome.error).__name__, **_error_data(outcome.error)})))
        if not self.closed:
            try:
                await self.writer.drain()
            except (ConnectionError, OSError):
                pass


def _error_data(error: BaseException) -> dict[str, Any]:
    """Facts a failure carries for the client (a remote answer cut short: ``incomplete``, the
    text already streamed), when it carries any."""
    data = getattr(error, "data", None)
    return dict(data) if isinstance(data, dict) else {}
