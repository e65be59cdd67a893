"""The completion service: document snapshot → prompt → backend → staleness check →
post-processing. Knows nothing of pygls; the handlers in ``server.py`` only translate types.

A newer request for a document, or a change to it, cancels the request in flight for it at once
(``inflight.py``). An answer computed for an older version of the document is never returned.

Less work reaches the daemon, and less of it waits for the user:

- typed along: text typed along the suggestion on screen is answered from it (``shown.py``);
- debounce: a request waits a time that follows the user's typing speed (``debounce.py``) and is
  dropped when a newer edit or request comes meanwhile; while it waits, its prompt is warmed;
- prewarming (``prewarm.py``): the daemon computes the prompt the next request will use (``warm``,
  the lowest priority) when a document opens, when the user pauses after an edit (at the end of a
  line also the prompt of the line after Enter, ``enter.py``), and when an edit lands far from the
  previous one (a cursor jump); a warm never delays a completion (the daemon
  preempts it, and a completion request here cancels this document's warm) and its errors are only
  logged;
- request-ahead (``ahead.py``): when an edit inserts the suggestion on screen (accepted), the next
  suggestion is asked for at once and answers the editor's next request at that place.

What the service keeps per document is one :class:`~specd.lsp.per_document.PerDocument`, dropped
whole when the document closes. Its waits go through the injected ``sleep`` and its instants come
from the injected ``clock`` (``timing.py``).
"""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass
from typing import Callable

from specd.requests import CompletionRequest
from specd.lsp.backend import Backend, BackendUnavailable
from specd.lsp.counters import ServiceCounters
from specd.lsp.debounce import Debouncer
from specd.lsp.documents import Documents
from specd.lsp.enter import window_after_enter
from specd.lsp.per_document import DocumentStates, PerDocument
from specd.lsp.postprocess import postprocess
from specd.lsp.prewarm import Prewarmer
from specd.lsp.settings import LspSettings
from specd.lsp.shaping import completion_request, session_for
from specd.lsp.shown import ShownSuggestions
from specd.lsp.suggestion import Suggestion, suggestion_at
from specd.lsp.timing import Clock, Sleep
from specd.lsp.window import Window, cut_window

__all__ = ["CompletionService", "ServiceCounters", "Snapshot", "Suggestion"]

Log = Callable[[str], None]
END_OF_LINE = 1 << 30  # a character past a line's end means its end (LSP)


@dataclass(frozen=True)
class Snapshot:
    uri: str
    version: int | None
    window: Window


class CompletionService:
    def __init__(self, backend: Backend, documents: Documents, settings: LspSettings, log: Log,
                 debug: Log | None = None, clock: Clock = time.monotonic, sleep: Sleep = asyncio.sleep) -> None:
        self.backend = backend
        self.documents = documents
        self.settings = settings
        self.log = log
        self.debug = debug or (lambda _m: None)
        self.clock = clock
        self.counters = ServiceCounters()
        # spanning documents: forgets a closed one itself
        self.shown = ShownSuggestions()
        # the features
        self.debounce = Debouncer(settings.debounce, clock, sleep)
        self.prewarm = Prewarmer(backend, self.counters, log, self.debug, sleep)
        self._states = DocumentStates()
        self._session_tag = f"lsp-{os.getpid()}"

    @property
    def answered_locally(self) -> int:
        return self.counters.answered_locally

    def tracked(self) -> frozenset[str]:
        """The documents the service keeps state for."""
        return self._states.uris()

    # -- document events ------------------------------------------------------------------------
    def opened(self, uri: str) -> None:
        state = self._states.of(uri)
        prewarm = self.settings.prewarm
        if not (prewarm.enabled and prewarm.on_open):
            return
        doc = self.documents.get(uri)
        if doc is None:
            return
        at = state.cursor or _open_position(doc.text, self.settings.window.prefix_lines)
        self._warm(uri, state, *at)

    def changed(self, uri: str, cursor: tuple[int, int] | None = None) -> None:
        """An edit; ``cursor`` is where it left the cursor, when the change says."""
        state = self._states.of(uri)
        state.inflight.supersede()  # its answer would be for an older version
        state.bump()
        self.debounce.edited()
        state.ahead.forget()
        if cursor is None:
            self._arm_pause(uri, state)
            return
        before, state.cursor = state.cursor, cursor
        if self.settings.request_ahead and self._accepted(uri, state, cursor):
            return
        prewarm = self.settings.prewarm
        if prewarm.enabled and before is not None and abs(cursor[0] - before[0]) >= prewarm.jump_lines:
            self._warm(uri, state, *cursor)  # a cursor jump: the next request's prompt is far from the cached one
        else:
            self._arm_pause(uri, state)

    def closed(self, uri: str) -> None:
        self.shown.forget(uri)
        self._states.drop(uri)

    # -- requests -------------------------------------------------------------------------------
    def snapshot(self, uri: str, line: int, character: int) -> Snapshot | None:
        doc = self.documents.get(uri)
        if doc is None:
            self.log(f"completion for a document that is not open: {uri}")
            return None
        window = cut_window(doc.text, line, character, self.documents.encoding(), self.settings.window)
        if window is None:
            self.log(f"completion at {line}:{character}, outside {uri} (version {doc.version})")
            return None
        return Snapshot(uri, doc.version, window)

    def request_for(self, window: Window) -> CompletionRequest:
        return completion_request(window, self.settings)

    async def suggest(self, uri: str, line: int, character: int) -> Suggestion | None:
        snap = self.snapshot(uri, line, character)
        if snap is None:
            return None
        w = snap.window
        state = self._states.of(uri)
        state.cursor = (line, character)
        if not w.prefix and not w.suffix:
            return None
        ticket = state.bump()
        raw = self.shown.along(uri, w)
        if raw is not None:  # typing along the suggestion on screen: its rest, at once
            self.counters.answered_locally += 1
        else:
            raw = await state.ahead.answer(w)
            if raw is not None:
                self.counters.answered_ahead += 1
            else:
                raw = await self._ask(uri, state, snap, ticket)
                if raw is None:
                    return None
            if self._states.get(uri) is state:  # not closed meanwhile
                self.shown.remember(uri, w, raw)
        now = self.documents.get(uri)
        if now is None or now.version != snap.version:
            self.debug(f"dropped a completion for {uri} version {snap.version}: now {now and now.version}")
            return None
        text = postprocess(raw, w.line_prefix, w.line_suffix, w.suffix, self.settings.rules)
        if not text.strip():
            return None
        state.ahead.show(w, text)
        return suggestion_at(w, text, self.documents.encoding())

    async def _ask(self, uri: str, state: PerDocument, snap: Snapshot, ticket: int) -> str | None:
        """The backend's answer at ``snap``, after the debounce; None when a newer edit or
        request came while it waited, or when it was superseded."""
        w = snap.window
        request = self.request_for(w)
        wait_ms = self.debounce.wait_ms(self.settings.debounce, w)
        if wait_ms > 0:
            if self.settings.prewarm.enabled:  # the prompt is computed while the request waits
                self.prewarm.send(state.warm, uri, request, self._session(uri))
            await self.debounce.wait(wait_ms)
            if state.ticket != ticket:
                self.counters.debounced += 1
                return None
        return await self.debounce.timed(self._complete(uri, state, request, snap.version))

    async def _complete(self, uri: str, state: PerDocument, request: CompletionRequest,
                        version: int | None) -> str | None:
        """``request`` as the document's request in flight; None when superseded or failed (logged)."""
        state.warm.cancel_warm()  # a warm must never hold a completion up
        self.counters.requests += 1
        try:
            return await state.inflight.run(self.backend.complete(request, self._session(uri)), version)
        except BackendUnavailable as e:
            self.log(f"no completion: {e}")
            return None

    def _session(self, uri: str) -> str:
        return session_for(self._session_tag, uri)

    # -- request-ahead --------------------------------------------------------------------------
    def _accepted(self, uri: str, state: PerDocument, cursor: tuple[int, int]) -> bool:
        """When the edit inserted the suggestion on screen: ask for the next one now."""
        if state.ahead.displayed is None:
            return False
        snap = self.snapshot(uri, *cursor)
        if snap is None:
            return False
        w = snap.window
        if not state.ahead.accepted_at(w):
            return False
        if self.shown.along(uri, w) is not None:
            return False  # the rest of the suggestion shown answers the next request
        self.counters.accepts += 1
        self.counters.aheads += 1
        request = self.request_for(w)
        state.ahead.sent(w, asyncio.ensure_future(self._complete(uri, state, request, snap.version)))
        self.debug(f"accepted a suggestion in {uri}: the next one is asked for ahead")
        return True

    # -- prewarming -----------------------------------------------------------------------------
    def _arm_pause(self, uri: str, state: PerDocument) -> None:
        state.warm.cancel_pause()
        prewarm = self.settings.prewarm
        if prewarm.enabled:
            self.prewarm.after_pause(state.warm, prewarm.pause_ms / 1e3, lambda: self._paused(uri, state))

    def _paused(self, uri: str, state: PerDocument) -> None:
        doc = self.documents.get(uri)
        at = state.cursor
        if doc is None or at is None or state.ahead.pending:
            return
        # the cursor's prompt, unless a completion already computed this version's; then, at the end
        # of a line, the prompt of the line after Enter (lowest priority: any request preempts it)
        requests = [] if state.inflight.computed(doc.version) else self._warm_requests(uri, *at)
        if self.settings.prewarm.after_enter:
            requests += self._after_enter_requests(doc.text, *at)
        if requests:
            self.prewarm.send(state.warm, uri, requests, self._session(uri))

    def _after_enter_requests(self, text: str, line: int, character: int) -> list[CompletionRequest]:
        """The request of the line after Enter at ``(line, character)`` (none: not a line's end)."""
        window = window_after_enter(text, line, character, self.documents.encoding(), self.settings.window)
        return [] if window is None else [self.request_for(window)]

    def _warm(self, uri: str, state: PerDocument, line: int, character: int) -> None:
        requests = self._warm_requests(uri, line, character)
        if requests:
            self.prewarm.send(state.warm, uri, requests, self._session(uri))

    def _warm_requests(self, uri: str, line: int, character: int) -> list[CompletionRequest]:
        """The request at ``(line, character)`` a warm computes the prompt of (none: nothing there)."""
        snap = self.snapshot(uri, line, character)
        if snap is None or not (snap.window.prefix or snap.window.suffix):
            return []
        return [self.request_for(snap.window)]

    async def close(self) -> None:
        self._states.drop_all()
        await self.backend.close()


def _open_position(text: str, prefix_lines: int) -> tuple[int, int]:
    """Where a newly opened document is warmed: the end of the last line the first prompt window
    holds (a request anywhere above reuses the cached prompt up to its cursor)."""
    line = min(text.count("\n"), max(0, prefix_lines - 1))
    return line, END_OF_LINE
