"""What the daemon serves from: a backend.

The local engine (``specd.engine.engine.Engine``: the models in this process) is one backend; a
remote inference server is another. Everything above this seam (the socket protocol, sessions,
cancellation, stats, the LSP) is the same for every backend.

Called on the daemon's one worker thread, one call at a time; ``cancelled`` is polled by the
backend (between speculative rounds, prefill chunks or streamed chunks) and, when it returns True,
the call ends by raising ``specd.requests.Cancelled``.
"""

from __future__ import annotations

from typing import Any, Callable, Protocol

from specd.engine.results import Completion
from specd.requests import CompletionRequest


class Backend(Protocol):
    @property
    def max_len(self) -> int:
        """Tokens of context a request may use (prompt plus max_tokens)."""
        ...

    def describe(self) -> dict[str, Any]:
        """The backend's configuration as JSON values (``health`` reports it; clients compare)."""
        ...

    def complete(self, request: CompletionRequest, on_delta: Callable[[str], None] | None = None,
                 cancelled: Callable[[], bool] | None = None,
                 preempted: Callable[[], bool] | None = None) -> Completion:
        """One completion; ``on_delta`` receives verified text as it comes. ``preempted`` may be
        polled while the prompt is computed, before any text: when it returns True the call may end
        by raising ``specd.requests.Preempted`` (the scheduler runs the request again later); a
        backend that cannot pause simply never polls it."""
        ...

    def warm(self, request: CompletionRequest, cancelled: Callable[[], bool] | None = None) -> int:
        """Compute (and cache) the prompt ``request`` would use, generating nothing; returns the
        prompt tokens now cached (0 where the backend caches nothing it can report)."""
        ...

    def reset(self) -> None:
        """Forget cached state: the next request runs cold."""
        ...

    def memory(self) -> dict[str, int]:
        """Resident bytes by kind (weights, KV caches); empty where nothing is held here."""
        ...

    def health(self) -> dict[str, Any]:
        """``{"ok": bool, ...}``: whether the backend can serve now (a remote server may be down)."""
        ...
