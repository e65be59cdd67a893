"""Everything the completion service keeps for one document, in one object.

A document's :class:`PerDocument` is made on its first event and dropped whole when it closes
(:meth:`DocumentStates.drop`), its work in flight stopped: a field added here is dropped with the
rest, with nothing to remember in ``closed``. (What spans documents — the shown-suggestion cache
— lives in its own collaborator, forgotten there.)
"""

from __future__ import annotations

from dataclasses import dataclass, field

from specd.lsp.ahead import RequestAhead
from specd.lsp.inflight import InFlight
from specd.lsp.prewarm import WarmSlots


@dataclass
class PerDocument:
    cursor: tuple[int, int] | None = None  # the last known cursor (line, character)
    ticket: int = 0  # bumped by every edit and request: a waiting (debounced) request is current while it holds the latest
    inflight: InFlight = field(default_factory=InFlight)  # the completion in flight, the version last sent
    ahead: RequestAhead = field(default_factory=RequestAhead)  # the suggestion on screen, the request sent ahead
    warm: WarmSlots = field(default_factory=WarmSlots)  # the warm in flight, the pause timer

    def bump(self) -> int:
        self.ticket += 1
        return self.ticket

    def stop(self) -> None:
        """Stops the document's work: its request in flight, its warm and pause timer; a request
        still waiting finds itself replaced."""
        self.bump()
        self.inflight.supersede()
        self.ahead.forget()
        self.warm.cancel()


class DocumentStates:
    """The open documents' states by URI."""

    def __init__(self) -> None:
        self._by_uri: dict[str, PerDocument] = {}

    def of(self, uri: str) -> PerDocument:
        """``uri``'s state, made on first use."""
        state = self._by_uri.get(uri)
        if state is None:
            state = self._by_uri[uri] = PerDocument()
        return state

    def get(self, uri: str) -> PerDocument | None:
        return self._by_uri.get(uri)

    def drop(self, uri: str) -> None:
        """Forgets ``uri``, its work stopped."""
        state = self._by_uri.pop(uri, None)
        if state is not None:
            state.stop()

    def drop_all(self) -> None:
        for uri in list(self._by_uri):
            self.drop(uri)

    def uris(self) -> frozenset[str]:
        return frozenset(self._by_uri)
