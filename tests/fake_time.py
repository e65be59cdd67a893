"""A clock and a sleep that move only when a test moves them, for the LSP completion service.

``FakeTime.clock`` and ``FakeTime.sleep`` go where the service takes ``clock=`` and ``sleep=``. A
sleeper wakes when :meth:`FakeTime.advance` moves the clock past its deadline, in deadline order,
with the event loop run between wake-ups so what each one starts has happened before the next. The
outcome then depends on the order of events only, never on how fast the machine runs them.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from typing import Awaitable, TypeVar

T = TypeVar("T")

REAL_POLL_S = 0.005  # while only real work (a daemon's answer) is pending, how often to look again
# loop turns given to ready work after each wake-up: more than any chain of awaits the service
# passes through before it sleeps again or finishes (no real I/O: a turn is microseconds)
TURNS = 100


class FakeTime:
    def __init__(self, start: float = 1000.0, turns: int = TURNS) -> None:
        self.now = start
        self.turns = turns
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._order = itertools.count()

    def clock(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            await asyncio.sleep(0)
            return
        wake: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (self.now + seconds, next(self._order), wake))
        await wake

    async def settle(self) -> None:
        """Runs what is ready now, the clock standing still."""
        for _ in range(self.turns):
            await asyncio.sleep(0)

    async def advance(self, seconds: float) -> None:
        """Moves the clock ``seconds`` on, waking each sleeper due on the way at its deadline."""
        end = self.now + seconds
        await self.settle()
        while self._sleepers and self._sleepers[0][0] <= end:
            deadline, _, wake = heapq.heappop(self._sleepers)
            self.now = max(self.now, deadline)
            if not wake.done():  # a cancelled sleeper is skipped
                wake.set_result(None)
                await self.settle()
        self.now = end
        await self.settle()

    async def run(self, work: Awaitable[T]) -> T:
        """``work``'s result, the clock moved from one sleeper's deadline to the next until it is
        done (while nothing sleeps on this clock, real work such as a daemon's answer is awaited)."""
        task = asyncio.ensure_future(work)
        await self.settle()
        while not task.done():
            deadline = self._next_deadline()
            if deadline is None:
                await asyncio.wait({task}, timeout=REAL_POLL_S)
            else:
                await self.advance(deadline - self.now)
        return task.result()

    def _next_deadline(self) -> float | None:
        while self._sleepers and self._sleepers[0][2].done():
            heapq.heappop(self._sleepers)  # cancelled
        return self._sleepers[0][0] if self._sleepers else None
