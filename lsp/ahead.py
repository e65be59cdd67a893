"""Request-ahead: when an edit inserts the suggestion on screen (the user accepted it), the next
suggestion is asked for at once, and it answers the editor's next request at that place.

This is one document's part of it: the suggestion on screen, and the request sent ahead. Any edit
forgets the request sent ahead (the edit superseded it).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from specd.lsp.backend import BackendUnavailable, Superseded
from specd.lsp.window import Window


@dataclass(frozen=True)
class Displayed:
    prefix: str  # the window the suggestion was shown at
    suffix: str
    text: str  # what the editor shows (and inserts when accepted)


@dataclass(frozen=True)
class Ahead:
    prefix: str  # the window after the accepted suggestion
    suffix: str
    task: asyncio.Task[str | None]


@dataclass
class RequestAhead:
    displayed: Displayed | None = None
    ahead: Ahead | None = None

    def show(self, window: Window, text: str) -> None:
        """``text`` is on screen at ``window``."""
        self.displayed = Displayed(window.prefix, window.suffix, text)

    def accepted_at(self, window: Window) -> bool:
        """Whether ``window`` is the suggestion on screen inserted at its place."""
        shown = self.displayed
        return shown is not None and window.suffix == shown.suffix and window.prefix == shown.prefix + shown.text

    def sent(self, window: Window, task: asyncio.Task[str | None]) -> None:
        """The next suggestion is asked for at ``window`` (the one on screen was accepted)."""
        self.displayed = None
        self.ahead = Ahead(window.prefix, window.suffix, task)

    @property
    def pending(self) -> bool:
        return self.ahead is not None

    def forget(self) -> None:
        self.ahead = None  # its task, if running, was superseded with the edit

    async def answer(self, window: Window) -> str | None:
        """The answer of the request sent ahead for ``window``; None when none was, or it failed."""
        ahead = self.ahead
        if ahead is None or ahead.prefix != window.prefix or ahead.suffix != window.suffix:
            return None
        try:
            return await asyncio.shield(ahead.task)
        except (asyncio.CancelledError, BackendUnavailable, Superseded):
            if ahead.task.cancelled() or ahead.task.done():
                return None
            raise  # this request itself was cancelled
