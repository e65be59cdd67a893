"""Open documents held in memory, for driving the LSP completion service without an editor."""

from __future__ import annotations

from specd.lsp.documents import DocumentState


class MemoryDocuments:
    """:class:`~specd.lsp.documents.Documents`: ``put`` opens or edits a document (its version + 1)."""

    def __init__(self, root: str = "/proj", encoding: str = "utf-16") -> None:
        self.docs: dict[str, DocumentState] = {}
        self._root = root
        self._encoding = encoding

    def put(self, uri: str, text: str) -> None:
        old = self.docs.get(uri)
        self.docs[uri] = DocumentState(uri, (old.version + 1) if old and old.version else 1, text, "python",
                                       uri.removeprefix("file://"))

    def close(self, uri: str) -> None:
        self.docs.pop(uri, None)

    def get(self, uri: str) -> DocumentState | None:
        return self.docs.get(uri)

    def root(self) -> str | None:
        return self._root

    def encoding(self) -> str:
        return self._encoding
