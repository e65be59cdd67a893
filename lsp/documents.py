"""A read-only view of the open documents, as the completion service needs them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class DocumentState:
    uri: str
    version: int | None
    text: str
    language: str | None
    path: str | None  # a file-system path, when the URI has one


class Documents(Protocol):
    def get(self, uri: str) -> DocumentState | None:
        """The open document, or None when it was never opened (or was closed)."""

    def root(self) -> str | None:
        """The workspace root directory, when there is one."""

    def encoding(self) -> str:
        """The negotiated position encoding: utf-8, utf-16 or utf-32."""


class TextDocuments:
    """:class:`Documents` over plain texts held here (no editor): the editor bench's request
    shaper and the tests that drive the completion service put documents in ``docs``."""

    def __init__(self, root: str | None, encoding: str) -> None:
        self._root, self._encoding = root, encoding
        self.docs: dict[str, DocumentState] = {}

    def get(self, uri: str) -> DocumentState | None:
        return self.docs.get(uri)

    def root(self) -> str | None:
        return self._root

    def encoding(self) -> str:
        return self._encoding
