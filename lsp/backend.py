"""What the LSP server asks for completions: the daemon over its socket, or an embedded engine."""

from __future__ import annotations

from typing import Protocol

from specd.requests import CompletionRequest


class BackendUnavailable(Exception):
    """No completion now, for a reason worth logging (daemon down, model failure, bad request)."""


class Superseded(Exception):
    """The backend ended the request early: cancelled, or replaced by a newer one."""


class Backend(Protocol):
    def describe(self) -> str: ...

    async def start(self) -> None:
        """Get ready (load the engine, reach or start the daemon); raises BackendUnavailable."""

    async def complete(self, request: CompletionRequest, session: str) -> str:
        """The completion's text. Cancelling the awaiting task stops the work at once (the
        engine's next round). Raises BackendUnavailable or Superseded."""

    async def warm(self, request: CompletionRequest, session: str) -> int:
        """Compute ``request``'s prompt ahead, at the lowest priority, generating nothing; the
        prompt tokens now cached (0 where the backend cannot warm). Raises BackendUnavailable or
        Superseded (a completion preempted it)."""

    async def close(self) -> None: ...
