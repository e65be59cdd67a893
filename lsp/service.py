"""The completion service: document snapshot → prompt → backend → staleness check →
post-processing. Knows nothing of pygls; the handlers in ``server.py`` only translate types.

A newer request for a document, or a change to it, cancels the request in flight for it at once.
An answer computed for an older version of the document is never returned.

Less work reaches the daemon, and less of it waits for the user:

- typed along: text typed along the suggestion on screen is answered from it (``shown.py``);
- debounce: a request waits a time that follows the user's typing speed (``debounce.py``) and is
  dropped when a newer edit or request comes meanwhile; while it waits, its prompt is warmed;
- prewarming: the daemon computes the prompt the next request will use (``warm``, the lowest
  priority) when a document opens, when the user pauses after an edit, and when an edit lands far
  from the previous one (a cursor jump); a warm never delays a completion (the daemon preempts it,
  and a completion request here cancels this document's warm) and its errors are only logged;
- request-ahead: when an edit inserts the suggestion on screen (accepted), the next suggestion is
  asked for at once and answers the editor's next request at that place.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import time
from dataclasses import dataclass, field
from typing import Callable

from specd.requests import CompletionRequest
from specd.lsp.backend import Backend, BackendUnavailable, Superseded
from specd.lsp.context import FrozenOthers, RecentEdits
from specd.lsp.debounce import AdaptiveDebounce
from specd.lsp.documents import DocumentState, Documents
from specd.lsp.positions import index_to_column
from specd.lsp.postprocess import postprocess
from specd.lsp.settings import LspSettings
from specd.lsp.shaping import completion_request, context_for, session_for
from specd.lsp.shown import ShownSuggestions
from specd.lsp.window import Window, cut_window

Log = Callable[[str], None]
END_OF_LINE = 1 << 30  # a character past a line's end means its end (LSP)


@dataclass(frozen=True)
class Suggestion:
    text: str  # to insert at the cursor
    line: int
    column: int  # the cursor, in the client's units
    word: str  # the identifier characters just before the cursor
    word_column: int  # where that word starts, in the client's units


@dataclass(frozen=True)
class Snapshot:
    uri: str
    version: int | None
    window: Window


@dataclass(frozen=True)
class _Displayed:
    prefix: str  # the window the suggestion was shown at
    suffix: str
    text: str  # what the editor shows (and inserts when accepted)


@dataclass(frozen=True)
class _Ahead:
    prefix: str  # the window after the accepted suggestion
    suffix: str
    task: asyncio.Task[str | None]


@dataclass
class ServiceCounters:
    answered_locally: int = 0  # typed along a shown suggestion: no request
    answered_ahead: int = 0  # answered by a request sent ahead after an accept
    debounced: int = 0  # dropped while waiting: a newer edit or request came
    requests: int = 0  # completions sent to the backend
    warms: int = 0  # warms sent
    warm_errors: int = 0
    aheads: int = 0  # requests sent ahead after an accepted suggestion
    accepts: int = 0
    context_retries: int = 0  # answers empty with repository context, asked again without it


class CompletionService:
    def __init__(self, backend: Backend, documents: Documents, settings: LspSettings, log: Log,
                 debug: Log | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.backend = backend
        self.documents = documents
        self.settings = settings
        self.log = log
        self.debug = debug or (lambda _m: None)
        self.clock = clock
        self.recent = RecentEdits()
        self.frozen = FrozenOthers()
        self.shown = ShownSuggestions()
        self.counters = ServiceCounters()
        self.debounce = AdaptiveDebounce(settings.debounce)
        self._inflight: dict[str, asyncio.Task[str]] = {}
        self._superseded: set[asyncio.Task[str]] = set()
        self._session_tag = f"lsp-{os.getpid()}"
        self._cursor: dict[str, tuple[int, int]] = {}  # last known cursor (line, character) per document
        self._waiting: dict[str, int] = {}  # per document: bumped by every edit and request
        self._requested: dict[str, int | None] = {}  # the version last sent to the backend, per document
        self._displayed: dict[str, _Displayed] = {}
        self._ahead: dict[str, _Ahead] = {}
        self._warming: dict[str, asyncio.Task[None]] = {}
        self._pause: dict[str, asyncio.TimerHandle] = {}

    @property
    def answered_locally(self) -> int:
        return self.counters.answered_locally

    # -- document events ------------------------------------------------------------------------
    def opened(self, uri: str) -> None:
        self.recent.touched(uri, 0)
        prewarm = self.settings.prewarm
        if not (prewarm.enabled and prewarm.on_open):
            return
        doc = self.documents.get(uri)
        if doc is None:
            return
        at = self._cursor.get(uri) or _open_position(doc.text, self.settings.window.prefix_lines)
        self._warm(uri, *at)

    def changed(self, uri: str, line: int, cursor: tuple[int, int] | None = None) -> None:
        """An edit at ``line``; ``cursor`` is where it left the cursor, when the change says."""
        self.recent.touched(uri, line)
        self._supersede(uri)  # its answer would be for an older version
        self._bump(uri)
        self.debounce.edited(self.clock())
        self._forget_ahead(uri)
        if cursor is None:
            self._arm_pause(uri)
            return
        before = self._cursor.get(uri)
        self._cursor[uri] = cursor
        if self.settings.request_ahead and self._accepted(uri, cursor):
            return
        prewarm = self.settings.prewarm
        if prewarm.enabled and before is not None and abs(cursor[0] - before[0]) >= prewarm.jump_lines:
            self._warm(uri, *cursor)  # a cursor jump: the next request's prompt is far from the cached one
        else:
            self._arm_pause(uri)

    def closed(self, uri: str) -> None:
        self.recent.closed(uri)
        self.frozen.closed(uri)
        self.shown.forget(uri)
        self._supersede(uri)
        self._bump(uri)
        self._forget_ahead(uri)
        for table in (self._cursor, self._requested, self._displayed, self._waiting):
            table.pop(uri, None)
        handle = self._pause.pop(uri, None)
        if handle is not None:
            handle.cancel()
        warm = self._warming.pop(uri, None)
        if warm is not None:
            warm.cancel()

    def _bump(self, uri: str) -> int:
        self._waiting[uri] = self._waiting.get(uri, 0) + 1
        return self._waiting[uri]

    def _supersede(self, uri: str) -> None:
        task = self._inflight.pop(uri, None)
        if task is not None and not task.done():
            self._superseded.add(task)
            task.cancel()

    # -- requests -------------------------------------------------------------------------------
    def snapshot(self, uri: str, line: int, character: int) -> tuple[Snapshot, DocumentState] | None:
        doc = self.documents.get(uri)
        if doc is None:
            self.log(f"completion for a document that is not open: {uri}")
            return None
        window = cut_window(doc.text, line, character, self.documents.encoding(), self.settings.window)
        if window is None:
            self.log(f"completion at {line}:{character}, outside {uri} (version {doc.version})")
            return None
        return Snapshot(uri, doc.version, window), doc

    def request_for(self, doc: DocumentState, window: Window) -> CompletionRequest:
        return completion_request(window, self.context_for(doc), self.settings)

    async def suggest(self, uri: str, line: int, character: int) -> Suggestion | None:
        taken = self.snapshot(uri, line, character)
        if taken is None:
            return None
        snap, doc = taken
        w = snap.window
        self._cursor[uri] = (line, character)
        if not w.prefix and not w.suffix:
            return None
        ticket = self._bump(uri)
        raw = self.shown.along(uri, w)
        if raw is not None:  # typing along the suggestion on screen: its rest, at once
            self.counters.answered_locally += 1
        else:
            raw = await self._from_ahead(uri, w)
            if raw is not None:
                self.counters.answered_ahead += 1
            else:
                raw = await self._ask(uri, snap, doc, ticket)
                if raw is None:
                    return None
            self.shown.remember(uri, w, raw)
        now = self.documents.get(uri)
        if now is None or now.version != snap.version:
            self.debug(f"dropped a completion for {uri} version {snap.version}: now {now and now.version}")
            return None
        text = postprocess(raw, w.line_prefix, w.line_suffix, w.suffix, self.settings.rules)
        if not text.strip():
            return None
        self._displayed[uri] = _Displayed(w.prefix, w.suffix, text)
        word = _word_before(w.line_prefix)
        return Suggestion(text, w.line, w.column, word, w.column - _units(word, self.documents.encoding()))

    async def _ask(self, uri: str, snap: Snapshot, doc: DocumentState, ticket: int) -> str | None:
        """The backend's answer at ``snap``, after the debounce; None when a newer edit or
        request came while it waited, or when it was superseded."""
        w = snap.window
        request = self.request_for(doc, w)
        self.debounce.settings = self.settings.debounce
        wait_ms = self.debounce.wait_ms(w.line_prefix, w.line_suffix, w.suffix)
        if wait_ms > 0:
            if self.settings.prewarm.enabled:
                self._send_warm(uri, request)  # the prompt is computed while the request waits
            await asyncio.sleep(wait_ms / 1e3)
            if self._waiting.get(uri) != ticket:
                self.counters.debounced += 1
                return None
        started = self.clock()
        raw = await self._run(uri, request, snap.version)
        if raw is not None:
            self.debounce.responded((self.clock() - started) * 1e3)
        if raw is not None and request.context and not self._shows(raw, w):
            # repository context must never turn a suggestion into nothing (seen: with it, the model
            # answered whitespace where the file alone gave the next line): ask again without it
            self.counters.context_retries += 1
            raw = await self._run(uri, dataclasses.replace(request, context=""), snap.version)
        return raw

    def _shows(self, raw: str, w: Window) -> bool:
        """Whether ``raw`` leaves anything to show after post-processing at ``w``."""
        return bool(postprocess(raw, w.line_prefix, w.line_suffix, w.suffix, self.settings.rules).strip())

    async def _run(self, uri: str, request: CompletionRequest, version: int | None = None) -> str | None:
        session = session_for(self._session_tag, uri)
        self._supersede(uri)
        warm = self._warming.pop(uri, None)
        if warm is not None:  # a warm must never hold a completion up
            warm.cancel()
        self.counters.requests += 1
        self._requested[uri] = version
        task = asyncio.ensure_future(self.backend.complete(request, session))
        self._inflight[uri] = task
        try:
            return await task
        except asyncio.CancelledError:
            if task in self._superseded:  # replaced by a newer request or a change: answer empty
                return None
            raise
        except Superseded:
            return None
        except BackendUnavailable as e:
            self.log(f"no completion: {e}")
            return None
        finally:
            self._superseded.discard(task)
            if self._inflight.get(uri) is task:
                del self._inflight[uri]

    def context_for(self, doc: DocumentState) -> str:
        return context_for(doc, self.documents, self.recent, self.settings, self.frozen)

    # -- request-ahead --------------------------------------------------------------------------
    def _accepted(self, uri: str, cursor: tuple[int, int]) -> bool:
        """When the edit inserted the suggestion on screen: ask for the next one now."""
        shown = self._displayed.get(uri)
        if shown is None:
            return False
        taken = self.snapshot(uri, *cursor)
        if taken is None:
            return False
        snap, doc = taken
        w = snap.window
        if w.suffix != shown.suffix or w.prefix != shown.prefix + shown.text:
            return False
        if self.shown.along(uri, w) is not None:
            return False  # the rest of the suggestion shown answers the next request
        del self._displayed[uri]
        self.counters.accepts += 1
        self.counters.aheads += 1
        request = self.request_for(doc, w)
        task = asyncio.ensure_future(self._run(uri, request, snap.version))
        self._ahead[uri] = _Ahead(w.prefix, w.suffix, task)
        self.debug(f"accepted a suggestion in {uri}: the next one is asked for ahead")
        return True

    async def _from_ahead(self, uri: str, w: Window) -> str | None:
        ahead = self._ahead.get(uri)
        if ahead is None or ahead.prefix != w.prefix or ahead.suffix != w.suffix:
            return None
        try:
            return await asyncio.shield(ahead.task)
        except (asyncio.CancelledError, BackendUnavailable, Superseded):
            if ahead.task.cancelled() or ahead.task.done():
                return None
            raise  # this request itself was cancelled

    def _forget_ahead(self, uri: str) -> None:
        self._ahead.pop(uri, None)  # its task, if running, was superseded with the edit

    # -- prewarming -----------------------------------------------------------------------------
    def _arm_pause(self, uri: str) -> None:
        prewarm = self.settings.prewarm
        handle = self._pause.pop(uri, None)
        if handle is not None:
            handle.cancel()
        if not prewarm.enabled:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        self._pause[uri] = loop.call_later(prewarm.pause_ms / 1e3, self._paused, uri)

    def _paused(self, uri: str) -> None:
        self._pause.pop(uri, None)
        doc = self.documents.get(uri)
        at = self._cursor.get(uri)
        if doc is None or at is None or uri in self._ahead:
            return
        if uri in self._requested and self._requested[uri] == doc.version:
            return  # a completion already computed this version's prompt
        self._warm(uri, *at)

    def _warm(self, uri: str, line: int, character: int) -> None:
        taken = self.snapshot(uri, line, character)
        if taken is None:
            return
        snap, doc = taken
        if snap.window.prefix or snap.window.suffix:
            self._send_warm(uri, self.request_for(doc, snap.window))

    def _send_warm(self, uri: str, request: CompletionRequest) -> None:
        older = self._warming.pop(uri, None)
        if older is not None:
            older.cancel()
        self.counters.warms += 1
        task = asyncio.ensure_future(self._warm_task(uri, request))
        self._warming[uri] = task
        task.add_done_callback(lambda t: self._warming.pop(uri, None) if self._warming.get(uri) is t else None)

    async def _warm_task(self, uri: str, request: CompletionRequest) -> None:
        try:
            tokens = await self.backend.warm(request, session_for(self._session_tag, uri))
            self.debug(f"warmed {uri}: {tokens} prompt tokens cached")
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

    async def close(self) -> None:
        for uri in list(self._inflight):
            self._supersede(uri)
        for handle in self._pause.values():
            handle.cancel()
        self._pause.clear()
        for task in list(self._warming.values()):
            task.cancel()
        await self.backend.close()


def _word_before(line_prefix: str) -> str:
    i = len(line_prefix)
    while i > 0 and (line_prefix[i - 1].isalnum() or line_prefix[i - 1] == "_"):
        i -= 1
    return line_prefix[i:]


def _units(text: str, encoding: str) -> int:
    return index_to_column(text, len(text), encoding)


def _open_position(text: str, prefix_lines: int) -> tuple[int, int]:
    """Where a newly opened document is warmed: the end of the last line the first prompt window
    holds (a request anywhere above reuses the cached prompt up to its cursor)."""
    line = min(text.count("\n"), max(0, prefix_lines - 1))
    return line, END_OF_LINE
