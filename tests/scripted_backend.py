"""A scripted completion backend for the LSP service's tests: it answers from a list and records
what reaches it (the daemon's side is tested against a real ``specd serve``)."""

from __future__ import annotations

import asyncio

from specd.lsp.backend import BackendUnavailable
from specd.lsp.timing import Sleep
from specd.requests import CompletionRequest


class Scripted:
    """Answers completions from a list (then the last one) after 1 ms of ``sleep``; records
    completes and warms. A blocking warm blocks on a real 60 s sleep (cancelled, it ends at once)."""

    def __init__(self, answers: list[str], sleep: Sleep, warm_error: bool = False, warm_blocks: bool = False) -> None:
        self.answers = list(answers)
        self.sleep = sleep
        self.completes: list[CompletionRequest] = []
        self.warms: list[CompletionRequest] = []
        self.warm_error = warm_error
        self.warm_blocks = warm_blocks
        self.warm_cancelled = 0

    def describe(self) -> str:
        return "scripted"

    async def start(self) -> None:
        pass

    async def complete(self, request: CompletionRequest, session: str) -> str:
        self.completes.append(request)
        await self.sleep(0.001)
        return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]

    async def warm(self, request: CompletionRequest, session: str) -> int:
        self.warms.append(request)
        if self.warm_error:
            raise BackendUnavailable("daemon error -32603 on warm: model failure")
        if self.warm_blocks:
            try:
                await asyncio.sleep(60)
            except asyncio.CancelledError:
                self.warm_cancelled += 1
                raise
        return len(request.prefix)

    async def close(self) -> None:
        pass
