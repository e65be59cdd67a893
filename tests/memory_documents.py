"""Open documents held in memory, for driving the LSP completion service without an editor."""

from __future__ import annotations

from specd.lsp.documents import DocumentState, TextDocuments


class MemoryDocuments(TextDocuments):
    """``put`` opens or edits a document (its version + 1), ``close`` drops it."""

    def __init__(self, encoding: str = "utf-16") -> None:
        super().__init__(encoding)

    def put(self, uri: str, text: str) -> None:
        old = self.docs.get(uri)
        self.docs[uri] = DocumentState(uri, (old.version + 1) if old and old.version else 1, text)

    def close(self, uri: str) -> None:
        self.docs.pop(uri, None)
