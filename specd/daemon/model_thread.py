"""The daemon's one model thread: it builds the backend, then runs every job (the scheduler's worker).

Why the same thread for both: OpenMP (torch's runtime, which specd's kernels share) keeps a
thread pool per thread that opens a parallel region. Loading the models opens regions (repacking
weights, measuring step costs); if that happened on the main thread and the jobs ran on another,
the process would hold two pools, more OpenMP threads than CPUs on a small machine, and libgomp
then throttles its spin-wait to ~100 spins: every one of a step's ~200 parallel regions wakes its
team through a futex. Measured on 2 cores (AMD EPYC, session 10): the target's step went from
53–58 ms to 74–85 ms, the team's idle thread-time from 11–14 to 35–45 ms a step
(``specd bench --scenario profile`` shows it as ``target.team_wait``). One thread, one pool.
It also makes ``--threads`` hold for the jobs (``torch.set_num_threads`` sets the count of the
calling thread only).
"""

from __future__ import annotations

import queue
import threading
from concurrent.futures import Future
from typing import Callable, TypeVar

T = TypeVar("T")
NAME = "specd-model"


class ModelThread:
    """A single thread that runs the callables handed to it, in order."""

    def __init__(self) -> None:
        self._tasks: queue.SimpleQueue[tuple[Callable[[], object], Future] | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name=NAME, daemon=True)
        self._thread.start()

    def submit(self, fn: Callable[[], T]) -> Future[T]:
        """Run ``fn`` on the model thread after what was submitted before; its future."""
        future: Future[T] = Future()
        self._tasks.put((fn, future))
        return future

    def call(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` on the model thread and wait for its result (or its exception)."""
        return self.submit(fn).result()

    def stop(self, wait: float | None = None) -> None:
        """No more callables: the thread ends after those already submitted (``wait``: seconds to
        join it)."""
        self._tasks.put(None)
        if wait is not None and self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(wait)

    @property
    def ident(self) -> int | None:
        return self._thread.ident

    def _run(self) -> None:
        while (task := self._tasks.get()) is not None:
            fn, future = task
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(fn())
            except BaseException as e:  # handed to the caller
                future.set_exception(e)
