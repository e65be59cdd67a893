"""The one place a completion's prompt-shaping parameters are built from the document: the
request a suggestion sends, the ``warm`` sent ahead of it and the editor bench's socket requests
all come from :func:`completion_request`, so a warm computes exactly the prompt the next request
uses.
"""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Any

from specd.requests import CompletionRequest
from specd.lsp.documents import DocumentState, TextDocuments
from specd.lsp.postprocess import is_mid_line, postprocess
from specd.lsp.settings import LspSettings
from specd.lsp.window import Window, cut_window


def completion_request(window: Window, settings: LspSettings) -> CompletionRequest:
    """The request for a suggestion at ``window``: greedy, one line when the cursor is mid-line."""
    mid = settings.rules.single_line_mid_line and is_mid_line(window.line_suffix)
    return CompletionRequest(prefix=window.prefix, suffix=window.suffix, max_tokens=settings.max_tokens,
                             temperature=0.0, stop=("\n",) if mid else (),
                             line_budget_ms=None if mid else settings.line_budget_ms)


def request_params(request: CompletionRequest, session: str) -> dict[str, Any]:
    """The daemon's ``complete`` params for ``request`` in ``session``."""
    params = {k: v for k, v in dataclasses.asdict(request).items() if v is not None}
    params["stop"] = list(request.stop)
    params["session"] = session
    return params


def session_for(tag: str, uri: str) -> str:
    """The daemon session of a document: one per document and server process."""
    return f"{tag}-{hashlib.sha1(uri.encode('utf-8', 'replace')).hexdigest()[:16]}"


class RequestShaper:
    """The LSP server's request shaping without a server: what ``specd lsp`` would send to the
    daemon (``complete`` params, the same window, session naming) and what it would show,
    for clients that talk to the socket themselves (the editor bench's socket path)."""

    def __init__(self, settings: LspSettings = LspSettings(), encoding: str = "utf-16",
                 session_tag: str = "shaper") -> None:
        self.settings = settings
        self.documents = TextDocuments(encoding)
        self.session_tag = session_tag

    def open(self, uri: str, text: str) -> None:
        self.documents.docs[uri] = DocumentState(uri, 1, text)

    def edit(self, uri: str, text: str) -> None:
        old = self.documents.docs[uri]
        self.documents.docs[uri] = DocumentState(uri, (old.version or 0) + 1, text)

    def window(self, uri: str, line: int, character: int) -> Window | None:
        doc = self.documents.get(uri)
        if doc is None:
            return None
        return cut_window(doc.text, line, character, self.documents.encoding(), self.settings.window)

    def params(self, uri: str, line: int, character: int) -> dict[str, Any] | None:
        """The ``complete`` params ``specd lsp`` would send here (None: nothing to complete)."""
        w = self.window(uri, line, character)
        if w is None or not (w.prefix or w.suffix):
            return None
        request = completion_request(w, self.settings)
        return request_params(request, session_for(self.session_tag, uri))

    def display(self, raw: str, uri: str, line: int, character: int) -> str:
        """What the server would show of ``raw`` at this place ("" for nothing)."""
        w = self.window(uri, line, character)
        if w is None:
            return ""
        text = postprocess(raw, w.line_prefix, w.line_suffix, w.suffix, self.settings.rules)
        return text if text.strip() else ""
