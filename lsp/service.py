"""The completion service: document snapshot → prompt → backend → staleness check →
post-processing. Knows nothing of pygls; the handlers in ``server.py`` only translate types.

A newer request for a document, or a change to it, cancels the request in flight for it at once.
An answer computed for an older version of the document is never returned.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Callable

from specd.requests import CompletionRequest
from specd.lsp.backend import Backend, BackendUnavailable, Superseded
from specd.lsp.context import OtherFile, RecentEdits, display_path, repo_context
from specd.lsp.documents import DocumentState, Documents
from specd.lsp.positions import index_to_column
from specd.lsp.postprocess import is_mid_line, postprocess
from specd.lsp.settings import LspSettings
from specd.lsp.shown import ShownSuggestions
from specd.lsp.window import Window, cut_window

Log = Callable[[str], None]


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


class CompletionService:
    def __init__(self, backend: Backend, documents: Documents, settings: LspSettings, log: Log,
                 debug: Log | None = None) -> None:
        self.backend = backend
        self.documents = documents
        self.settings = settings
        self.log = log
        self.debug = debug or (lambda _m: None)
        self.recent = RecentEdits()
        self.shown = ShownSuggestions()
        self.answered_locally = 0  # suggestions served from ``shown`` without a request
        self._inflight: dict[str, asyncio.Task[str]] = {}
        self._superseded: set[asyncio.Task[str]] = set()
        self._session_tag = f"lsp-{os.getpid()}"

    # -- document events ------------------------------------------------------------------------
    def opened(self, uri: str) -> None:
        self.recent.touched(uri, 0)

    def changed(self, uri: str, line: int) -> None:
        self.recent.touched(uri, line)
        self._supersede(uri)  # its answer would be for an older version

    def closed(self, uri: str) -> None:
        self.recent.closed(uri)
        self.shown.forget(uri)
        self._supersede(uri)

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

    async def suggest(self, uri: str, line: int, character: int) -> Suggestion | None:
        taken = self.snapshot(uri, line, character)
        if taken is None:
            return None
        snap, doc = taken
        w = snap.window
        if not w.prefix and not w.suffix:
            return None
        raw = self.shown.along(uri, w)
        if raw is not None:  # typing along the suggestion on screen: its rest, at once
            self.answered_locally += 1
        else:
            mid = self.settings.rules.single_line_mid_line and is_mid_line(w.line_suffix)
            request = CompletionRequest(
                prefix=w.prefix, suffix=w.suffix, max_tokens=self.settings.max_tokens, temperature=0.0,
                stop=("\n",) if mid else (), context=self.context_for(doc))
            raw = await self._run(uri, request)
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
        word = _word_before(w.line_prefix)
        return Suggestion(text, w.line, w.column, word, w.column - _units(word, self.documents.encoding()))

    async def _run(self, uri: str, request: CompletionRequest) -> str | None:
        session = f"{self._session_tag}-{hashlib.sha1(uri.encode('utf-8', 'replace')).hexdigest()[:16]}"
        self._supersede(uri)
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
        if not self.settings.repo_context:
            return ""
        root = self.documents.root()
        others: list[OtherFile] = []
        for uri, line in self.recent.recent(doc.uri, self.settings.context.files):
            other = self.documents.get(uri)
            if other is not None:
                others.append(OtherFile(display_path(other.path, root, other.language), other.text, line))
        repo = PurePosixPath(root).name if root else "workspace"
        return repo_context(repo, display_path(doc.path, root, doc.language), others, self.settings.context)

    async def close(self) -> None:
        for uri in list(self._inflight):
            self._supersede(uri)
        await self.backend.close()


def _word_before(line_prefix: str) -> str:
    i = len(line_prefix)
    while i > 0 and (line_prefix[i - 1].isalnum() or line_prefix[i - 1] == "_"):
        i -= 1
    return line_prefix[i:]


def _units(text: str, encoding: str) -> int:
    return index_to_column(text, len(text), encoding)
