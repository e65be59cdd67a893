"""A read-only view of the open documents, as the completion service needs them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class DocumentState:
    uri: str
    version: int | None
    text: str


class Documents(Protocol):
    def get(self, uri: str) -> DocumentState | None:
        """The open document, or None when it was never opened (or was closed)."""

    def encoding(self) -> str:
        """The negotiated position encoding: utf-8, utf-16 or utf-32."""


class TextDocuments:
    """:class:`Documents` over plain texts held here (no editor): the editor bench's request
    shaper and the tests that drive the completion service put documents in ``docs``."""

    def __init__(self, encoding: str) -> None:
        self._encoding = encoding
        self.docs: dict[str, DocumentState] = {}

    def get(self, uri: str) -> DocumentState | None:
        return self.docs.get(uri)

    def encoding(self) -> str:
        return self._encoding
