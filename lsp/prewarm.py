"""Prewarming: the backend computes the prompt the next request will use (``warm``, the lowest
priority) ahead of it. A warm never delays a completion (the service cancels a document's warm
when it sends a completion) and its errors are only logged.

:class:`WarmSlots` is one document's part (its warm in flight, its pause timer);
:class:`Prewarmer` sends warms and arms pause timers through the injected sleep.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Callable, Sequence

from specd.requests import CompletionRequest
from specd.lsp.backend import Backend, BackendUnavailable, Superseded
from specd.lsp.counters import ServiceCounters
from specd.lsp.timing import Sleep

Log = Callable[[str], None]


@dataclass
class WarmSlots:
    warming: asyncio.Task[None] | None = None
    pause: asyncio.Task[None] | None = None  # fires the pause callback unless an edit re-arms it

    def cancel_warm(self) -> None:
        task, self.warming = self.warming, None
        if task is not None:
            task.cancel()

    def cancel_pause(self) -> None:
        task, self.pause = self.pause, None
        if task is not None:
            task.cancel()

    def cancel(self) -> None:
        self.cancel_pause()
        self.cancel_warm()


class Prewarmer:
    def __init__(self, backend: Backend, counters: ServiceCounters, log: Log, debug: Log, sleep: Sleep) -> None:
        self.backend = backend
        self.counters = counters
        self.log = log
        self.debug = debug
        self.sleep = sleep

    def send(self, slots: WarmSlots, uri: str, request: CompletionRequest | Sequence[CompletionRequest],
             session: str) -> None:
        """Warms ``request``'s prompt for ``uri`` (several: one after the other, in order),
        replacing the document's warm in flight."""
        slots.cancel_warm()
        requests = [request] if isinstance(request, CompletionRequest) else list(request)
        if not requests:
            return
        task = asyncio.ensure_future(self._warm_all(uri, requests, session))
        slots.warming = task
        task.add_done_callback(lambda t: setattr(slots, "warming", None) if slots.warming is t else None)

    def after_pause(self, slots: WarmSlots, delay_s: float, then: Callable[[], None]) -> None:
        """Calls ``then`` after ``delay_s`` unless the pause is re-armed or cancelled meanwhile;
        nothing when no event loop runs."""
        slots.cancel_pause()
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        slots.pause = loop.create_task(self._paused(slots, delay_s, then))

    async def _paused(self, slots: WarmSlots, delay_s: float, then: Callable[[], None]) -> None:
        await self.sleep(delay_s)
        slots.pause = None  # it fired (a cancelled timer never gets here)
        then()

    async def _warm_all(self, uri: str, requests: list[CompletionRequest], session: str) -> None:
        for request in requests:
            if not await self._warm(uri, request, session):
                return

    async def _warm(self, uri: str, request: CompletionRequest, session: str) -> bool:
        """One warm; False when it did not complete (preempted, failed, cancelled)."""
        self.counters.warms += 1
        try:
            tokens = await self.backend.warm(request, session)
            self.debug(f"warmed {uri}: {tokens} prompt tokens cached")
            return True
        except Superseded:
            self.debug(f"a warm of {uri} was preempted")
        except BackendUnavailable as e:
            self.counters.warm_errors += 1
            self.log(f"warm failed (completions go on): {e}")
        except asyncio.CancelledError:
            pass
        except Exception as e:  # a warm must never take the server down
            self.counters.warm_errors += 1
            self.log(f"warm failed (completions go on): {type(e).__name__}: {e}")
        return False
