"""The daemon's :class:`~specd.daemon.backend.Backend` over the engine in this process.

The engine turns requests into completions and knows nothing of the daemon; this adapter adds
what the daemon asks of every backend and the engine has no reason to know: its name in
``health``, its settings as JSON values, its context length. Built by ``specd serve`` (through
``specd.app.build_engine``) and by the tests that drive the scheduler over real models.
"""

from __future__ import annotations

import dataclasses
import json
from typing import TYPE_CHECKING, Any, Callable

from specd.requests import CompletionRequest

if TYPE_CHECKING:  # types only: the daemon never imports torch itself (``specd serve`` hands it the engine)
    from specd.engine.engine import Engine
    from specd.engine.results import Completion


class LocalBackend:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    @property
    def max_len(self) -> int:
        return self.engine.config.max_len

    def describe(self) -> dict[str, Any]:
        """The engine's settings as JSON values (clients compare them with their own)."""
        return json.loads(json.dumps(dataclasses.asdict(self.engine.config), default=str))

    def health(self) -> dict[str, Any]:
        """``step_costs``: the costs K auto chooses from now (``draft_ms``, ``verify_ms`` for n = 1,
        2, ... tokens: the measured curve as this daemon's own rounds have shifted it,
        ``specd.engine.policy.LiveCosts``), when K is auto and there is a drafter; with
        ``--drafter auto`` also ``steps_ms``, each drafter's step by its source. ``drafter``: the
        one that runs (``--drafter default`` resolved)."""
        out: dict[str, Any] = {"ok": True, "backend": "local", "drafter": self.engine.drafter}
        policy = self.engine.policy
        if policy is not None:
            cost = policy.cost
            out["step_costs"] = {"draft_ms": round(cost.draft_ms, 3), "verify_ms": [round(v, 3) for v in cost.verify_ms]}
            if len(policy.live.steps) > 1:
                out["step_costs"]["steps_ms"] = {source: round(ms, 3) for source, ms in policy.live.steps.items()}
        return out

    def complete(self, request: CompletionRequest, on_delta: Callable[[str], None] | None = None,
                 cancelled: Callable[[], bool] | None = None,
                 preempted: Callable[[], bool] | None = None) -> Completion:
        return self.engine.complete(request, on_delta, cancelled, preempted)

    def warm(self, request: CompletionRequest, cancelled: Callable[[], bool] | None = None) -> int:
        return self.engine.warm(request, cancelled)

    def reset(self) -> None:
        self.engine.reset()

    def memory(self) -> dict[str, int]:
        return self.engine.memory()
