"""One document's completion request in flight: a newer request or an edit supersedes it at once.

A superseded request answers None (its answer would be for an older version of the document); a
request cancelled for any other reason (its caller was cancelled) stays cancelled.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, Coroutine

from specd.lsp.backend import Superseded


@dataclass(frozen=True)
class Sent:
    version: int | None  # the document's version whose prompt the request carried


@dataclass
class InFlight:
    task: asyncio.Task[str] | None = None
    sent: Sent | None = None  # the latest request sent for the document (None: none yet)
    _superseded: set[asyncio.Task[str]] = field(default_factory=set)

    def computed(self, version: int | None) -> bool:
        """Whether a request already carried this version's prompt (the backend cached it)."""
        return self.sent is not None and self.sent.version == version

    def supersede(self) -> None:
        """Cancels the request in flight, which then answers None."""
        task, self.task = self.task, None
        if task is not None and not task.done():
            self._superseded.add(task)
            task.cancel()

    async def run(self, work: Coroutine[Any, Any, str], version: int | None) -> str | None:
        """``work`` as the document's one request in flight (superseding the one before): its
        answer, or None when it was superseded, here or by the backend."""
        self.supersede()
        self.sent = Sent(version)
        task = asyncio.ensure_future(work)
        self.task = task
        try:
            return await task
        except asyncio.CancelledError:
            if task in self._superseded:  # replaced by a newer request or a change: answer empty
                return None
            raise
        except Superseded:
            return None
        finally:
            self._superseded.discard(task)
            if self.task is task:
                self.task = None
