"""``specd/status``: a notification the server sends the editor (the VS Code extension shows it in
its status bar; other clients ignore an unknown notification). Parameters: ``{"state": "loading" |
"ready" | "degraded", "message": str, "latencyMs": float | None}``, ``latencyMs`` being the time
from the last non-empty suggestion's request to its answer, in this server.

Sent only to a client that asks for it with ``"statusNotifications": true`` in its
``initializationOptions`` (as rust-analyzer's ``experimental/serverStatus`` is opt-in): when the
backend starts (``loading``, then ``ready`` or ``degraded``), when a completion
fails for a reason worth reporting (``degraded``: the daemon is down, the model failed), when one
succeeds again (``ready``), and after each non-empty suggestion (``ready`` with its latency)."""

from __future__ import annotations

from typing import Any, Callable

from specd.requests import CompletionRequest
from specd.lsp.backend import Backend, BackendUnavailable

METHOD = "specd/status"
LOADING, READY, DEGRADED = "loading", "ready", "degraded"

Send = Callable[[dict[str, Any]], None]


class StatusReporter:
    def __init__(self, send: Send) -> None:
        self.send = send
        self.enabled = False  # the client asked for it
        self.state: str | None = None
        self.message = ""
        self.latency_ms: float | None = None

    def report(self, state: str, message: str = "", latency_ms: float | None = None) -> None:
        if latency_ms is not None:
            self.latency_ms = latency_ms
        elif state == self.state and message == self.message:
            return  # nothing new
        self.state, self.message = state, message
        if not self.enabled:
            return
        try:
            self.send({"state": state, "message": message, "latencyMs": self.latency_ms})
        except Exception:  # no client connected yet, or it is gone
            pass

    def suggested(self, latency_ms: float) -> None:
        self.report(READY, self.message if self.state == READY else "", latency_ms)


class ReportingBackend:
    """``backend`` as it is, telling ``status`` whether its completions work."""

    def __init__(self, backend: Backend, status: StatusReporter) -> None:
        self.backend = backend
        self.status = status

    def describe(self) -> str:
        return self.backend.describe()

    async def start(self) -> None:
        self.status.report(LOADING, f"starting: {self.backend.describe()}")
        try:
            await self.backend.start()
        except BackendUnavailable as e:
            self.status.report(DEGRADED, str(e))
            raise
        self.status.report(READY, self.backend.describe())

    async def complete(self, request: CompletionRequest, session: str) -> str:
        try:
            text = await self.backend.complete(request, session)
        except BackendUnavailable as e:
            self.status.report(DEGRADED, str(e))
            raise
        if self.status.state != READY:
            self.status.report(READY, self.backend.describe())
        return text

    async def warm(self, request: CompletionRequest, session: str) -> int:
        return await self.backend.warm(request, session)

    async def close(self) -> None:
        await self.backend.close()
