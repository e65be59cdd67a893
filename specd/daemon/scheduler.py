"""One model worker thread; the event loop only hands it jobs and receives outcomes.

Jobs wait in lanes (a lane is a session, or a connection for requests without one); the worker takes
one job from each lane in turn (round-robin), so one client cannot starve the others. A new job of a
session supersedes the session's older job, which ends cancelled. Cancelling a queued job removes
it; cancelling the running job sets a flag the backend polls between speculative rounds.

Prewarming jobs (``kind="warm"``) have the lowest priority: they run only when no completion waits,
a newer warm of the same session replaces an older one, and a completion arriving while a warm runs
preempts it (the warm ends cancelled; what it computed stays cached).

A completion arriving while another lane's completion is in its prefill preempts that one too: the
backend stops it between prefill chunks (``Preempted``; its computed blocks stay in the prefix
cache), it goes back to the front of its lane, the newcomer runs next, and then it runs again (its
prefill restored from the cache). It is answered once, when it finally completes (or is
cancelled). A prefill is preempted only after it has computed a chunk, so each run progresses.
A completion past its prefill is not preempted.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from collections import OrderedDict, deque
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

from specd.daemon.model_thread import ModelThread
from specd.requests import Cancelled, CompletionRequest, Preempted, RequestError

if TYPE_CHECKING:  # types only: the daemon is handed a built backend and never imports torch itself
    from specd.daemon.backend import Backend
    from specd.engine.results import Completion


@dataclass(frozen=True)
class Done:
    completion: Completion
    latency_ms: float  # submitted to completed
    queued_ms: float = 0.0  # submitted to started (waiting for the worker)


@dataclass(frozen=True)
class Warmed:
    tokens: int  # prompt tokens now cached
    latency_ms: float


@dataclass(frozen=True)
class WasCancelled:
    reason: str


@dataclass(frozen=True)
class Failed:
    error: BaseException
    invalid: bool  # a RequestError (the request's fault), else a model failure


@dataclass(frozen=True)
class Paused:
    """Preempted during the prefill: the job runs again later (never an answer)."""


Outcome = Done | Warmed | WasCancelled | Failed | Paused
KINDS = ("complete", "warm")
_ids = itertools.count(1)


@dataclass(eq=False)
class Job:
    request: CompletionRequest
    lane: str
    session: str | None = None
    on_delta: Callable[[str], None] | None = None  # called on the worker thread
    kind: str = "complete"  # or "warm": compute the prompt only, at the lowest priority
    id: int = field(default_factory=lambda: next(_ids))
    submitted: float = field(default_factory=time.perf_counter)
    future: asyncio.Future | None = None
    cancel_reason: str = ""
    preemptions: int = 0  # times it was paused for another lane's completion
    _cancel: threading.Event = field(default_factory=threading.Event)
    _preempt: threading.Event = field(default_factory=threading.Event)
    _preempted_by: Job | None = None  # the newest completion that asked to preempt it
    _finished: bool = False

    def cancelled(self) -> bool:
        return self._cancel.is_set()

    def preempted(self) -> bool:
        return self._preempt.is_set()


class SchedulerClosed(RuntimeError):
    pass


class Scheduler:
    def __init__(self, backend: Backend, reuse: bool = True, thread: ModelThread | None = None) -> None:
        """``thread``: the model thread that built ``backend`` (its jobs must run where its
        OpenMP pool lives, see ``specd.daemon.model_thread``); a new one when None."""
        self.backend = backend
        self.reuse = reuse
        self._cv = threading.Condition()
        self._lanes: OrderedDict[str, deque[Job]] = OrderedDict()
        self._warm: OrderedDict[str, Job] = OrderedDict()  # lane -> its newest warm job, oldest first
        self._sessions: dict[str, Job] = {}
        self._running: Job | None = None
        self._urgent: Job | None = None  # the completion a paused job made way for: its lane goes next
        self.preemptions = 0
        self._closed = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread = thread if thread is not None else ModelThread()
        self._worker: Future[None] | None = None

    # -- event-loop side -----------------------------------------------------------------------
    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._worker = self._thread.submit(self._work)

    def submit(self, job: Job) -> asyncio.Future:
        assert self._loop is not None, "start() first"
        job.future = self._loop.create_future()
        if job.kind not in KINDS:
            raise ValueError(f"job kind must be one of {KINDS}, got {job.kind!r}")
        with self._cv:
            if self._closed:
                raise SchedulerClosed("the daemon is shutting down")
            if job.kind == "warm":
                older = self._warm.pop(job.lane, None)
                if older is not None:
                    self._cancel_locked(older, "superseded by a newer warm request")
                self._warm[job.lane] = job
                self._cv.notify()
                return job.future
            running = self._running
            if running is not None and running.kind == "warm":
                self._cancel_locked(running, "preempted by a completion request")
            elif running is not None and running.kind == "complete" and running.lane != job.lane:
                running._preempt.set()  # honoured between prefill chunks only
                running._preempted_by = job
            if job.session is not None:
                older = self._sessions.get(job.session)
                if older is not None:
                    self._cancel_locked(older, f"superseded by a newer request of session {job.session!r}")
                self._sessions[job.session] = job
            self._lanes.setdefault(job.lane, deque()).append(job)
            self._cv.notify()
        return job.future

    def cancel(self, job: Job, reason: str) -> None:
        with self._cv:
            self._cancel_locked(job, reason)

    def cancel_all(self, reason: str) -> None:
        with self._cv:
            jobs = [j for q in self._lanes.values() for j in q] + list(self._warm.values())
            if self._running is not None:
                jobs.append(self._running)
            for job in jobs:
                self._cancel_locked(job, reason)

    def busy(self) -> bool:
        with self._cv:
            return self._running is not None or any(self._lanes.values()) or bool(self._warm)

    def counts(self) -> dict[str, int]:
        with self._cv:
            return {"queued": sum(len(q) for q in self._lanes.values()),
                    "warming": len(self._warm) + int(self._running is not None and self._running.kind == "warm"),
                    "running": int(self._running is not None), "preempted": self.preemptions}

    def close(self, wait: float | None = None) -> None:
        """Stop the worker after its current job (queued jobs must have been cancelled)."""
        with self._cv:
            self._closed = True
            self._cv.notify_all()
        self._thread.stop()
        if wait is not None and self._worker is not None:
            try:
                self._worker.result(wait)
            except TimeoutError:
                pass

    # -- either side, under the lock -----------------------------------------------------------
    def _cancel_locked(self, job: Job, reason: str) -> None:
        if job._finished or job.cancelled():
            return
        job.cancel_reason = reason
        job._cancel.set()
        if job is not self._running:  # still queued: it ends now
            if self._warm.get(job.lane) is job:
                del self._warm[job.lane]
            lane = self._lanes.get(job.lane)
            if lane is not None and job in lane:
                lane.remove(job)
                if not lane:
                    del self._lanes[job.lane]
            self._finish_locked(job, WasCancelled(reason))

    def _finish_locked(self, job: Job, outcome: Outcome) -> None:
        if job._finished:
            return
        job._finished = True
        if job.session is not None and self._sessions.get(job.session) is job:
            del self._sessions[job.session]
        assert self._loop is not None and job.future is not None
        self._loop.call_soon_threadsafe(_resolve, job.future, outcome)

    def _next_locked(self) -> Job | None:
        urgent, self._urgent = self._urgent, None
        if urgent is not None and urgent.lane in self._lanes:  # its lane's turn (in the lane's order)
            self._lanes.move_to_end(urgent.lane, last=False)
        if self._lanes:
            lane, queue = next(iter(self._lanes.items()))
            job = queue.popleft()
            if queue:
                self._lanes.move_to_end(lane)
            else:
                del self._lanes[lane]
            return job
        if self._warm:
            return self._warm.popitem(last=False)[1]
        return None

    # -- worker thread -------------------------------------------------------------------------
    def _work(self) -> None:
        while True:
            with self._cv:
                while not self._lanes and not self._warm and not self._closed:
                    self._cv.wait()
                job = self._next_locked()
                if job is None:  # closed and nothing left
                    return
                self._running = job
            outcome = self._run(job)
            with self._cv:
                if job.cancelled() and not isinstance(outcome, WasCancelled):
                    outcome = WasCancelled(job.cancel_reason)  # a cancelled request always ends cancelled
                self._running = None
                if isinstance(outcome, Paused):  # again later, first in its lane; no answer yet
                    job._preempt.clear()
                    self._urgent, job._preempted_by = job._preempted_by, None
                    job.preemptions += 1
                    self.preemptions += 1
                    self._lanes.setdefault(job.lane, deque()).appendleft(job)
                    continue
                self._finish_locked(job, outcome)

    def _run(self, job: Job) -> Outcome:
        started = time.perf_counter()
        if job.cancelled():
            return WasCancelled(job.cancel_reason)
        try:
            if not self.reuse:
                self.backend.reset()
            if job.kind == "warm":
                tokens = self.backend.warm(job.request, cancelled=job.cancelled)
                return Warmed(tokens, (time.perf_counter() - job.submitted) * 1e3)
            completion = self.backend.complete(job.request, on_delta=job.on_delta, cancelled=job.cancelled,
                                               preempted=job.preempted)
        except Preempted:
            return Paused()
        except Cancelled:
            return WasCancelled(job.cancel_reason or "cancelled")
        except RequestError as e:
            return Failed(e, invalid=True)
        except Exception as e:  # a model failure (out of memory, a runtime error): this job only
            return Failed(e, invalid=False)
        return Done(completion, (time.perf_counter() - job.submitted) * 1e3, (started - job.submitted) * 1e3)


def _resolve(future: asyncio.Future, outcome: Outcome) -> None:
    if not future.done():
        future.set_result(outcome)
