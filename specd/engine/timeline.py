"""Where a completion's time goes, round by round: the timeline of a profiled request.

A request with ``profile: true`` is served as any other, and its answer carries this timeline.
Glossary (the names used in the answer and by ``specd bench --scenario profile``):

- request phases (once per request, ms): ``prompt`` (windows cut, tokenized, FIM block built),
  ``prefill`` (both caches brought up to the prompt), ``decode`` (every round), ``finish`` (the
  final text, the continuation cache);
- round phases (per round, ms): ``draft`` (the drafter's proposal: draft forwards, n-gram
  lookup), ``verify`` (the target's one forward over the last token and the drafts), ``accept``
  (logits cut to the shared vocabulary, the acceptance rule, the next token), ``rollback`` (both
  caches back to the accepted prefix), ``stream`` (the new text decoded, stop strings, the delta
  handed to the face), ``loop`` (the rest of the round: the K policy, bookkeeping, Python);
- model phases (per round, per role ``target`` / ``draft``, ms; see ``specd.models.profile``):
  ``forward``, ``embed``, ``layers`` (``matmul``, ``attention``, ``layer_other`` when the layers
  run in C), ``head``, and the OpenMP team's ``team_wait`` and ``preempted`` thread-ms.

The timeline is off unless asked for; off, every span is one shared no-op context manager.
"""

from __future__ import annotations

import time
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Iterator

from specd.models.profile import PhaseClock
from specd.models.protocol import CausalLM

ROUND_PHASES = ("draft", "verify", "accept", "rollback", "stream", "loop")
REQUEST_PHASES = ("prompt", "prefill", "decode", "finish")
_NO_SPAN = nullcontext()


class NoTimeline:
    """The timeline of a request that did not ask for one: every call does nothing."""

    enabled = False

    def span(self, name: str) -> AbstractContextManager[None]:
        return _NO_SPAN

    def round_done(self, tokens: int, drafted: int, accepted: int) -> None:
        pass


NO_TIMELINE = NoTimeline()


class Timeline:
    """The phases of one request (see the module docstring). ``models``: the runtimes whose
    forwards are broken down, by role; their clocks are attached until :meth:`close`."""

    enabled = True

    def __init__(self, models: dict[str, CausalLM]) -> None:
        self.request: dict[str, float] = {}
        self.rounds: list[dict] = []
        self._models = dict(models)
        self._clocks = {role: PhaseClock() for role in self._models}
        for role, model in self._models.items():
            model.profile(self._clocks[role])
        self._current: dict[str, float] = {}
        self._round_start = time.perf_counter()
        self._prefill_models: dict[str, dict[str, float]] = {}

    @contextmanager
    def span(self, name: str) -> Iterator[None]:
        """Time a round phase (``ROUND_PHASES``) or a request phase (``REQUEST_PHASES``)."""
        t0 = time.perf_counter()
        if name == "decode":
            self._round_start = t0
            self._drain_clocks()  # what the prefill's forwards added is the prefill's
        try:
            yield
        finally:
            ms = (time.perf_counter() - t0) * 1e3
            if name in REQUEST_PHASES:
                self.request[name] = self.request.get(name, 0.0) + ms
                if name == "prefill":
                    self._prefill_models = self._drain_clocks()
            else:
                self._current[name] = self._current.get(name, 0.0) + ms

    def round_done(self, tokens: int, drafted: int, accepted: int) -> None:
        """Close the round that emitted ``tokens`` after verifying ``drafted`` drafts."""
        now = time.perf_counter()
        wall = (now - self._round_start) * 1e3
        self._round_start = now
        phases = self._current
        self._current = {}
        phases["loop"] = max(0.0, wall - sum(phases.values()))
        self.rounds.append({"ms": wall, "tokens": tokens, "drafted": drafted, "accepted": accepted,
                            "phases": phases, "models": self._drain_clocks()})

    def close(self) -> None:
        """Detach the clocks from the models."""
        for model in self._models.values():
            model.profile(None)

    def as_dict(self) -> dict:
        """JSON values: the request phases, every round, and the per-token sums."""
        return {"request_ms": {k: round(v, 3) for k, v in self.request.items()},
                "prefill_models": self._prefill_models,
                "rounds": [_rounded(r) for r in self.rounds],
                "per_token_ms": per_token(self.rounds)}

    def _drain_clocks(self) -> dict[str, dict[str, float]]:
        out = {}
        for role, clock in self._clocks.items():
            s = clock.take()
            if s.get("forwards"):
                out[role] = model_phases(s)
        return out


def model_phases(seconds: dict[str, float]) -> dict[str, float]:
    """A clock's seconds as the timeline's ms (the team's accounting turned into its two waits)."""
    out = {k: v * 1e3 for k, v in seconds.items() if k not in ("forwards", "regions", "team", "busy", "busy_cpu")}
    if seconds.get("team"):
        out["team_wait"] = (seconds["team"] - seconds.get("busy", 0.0)) * 1e3
        # the two clocks tick at different grains: a difference below zero is none
        out["preempted"] = max(0.0, seconds.get("busy", 0.0) - seconds.get("busy_cpu", 0.0)) * 1e3
        out["regions"] = seconds.get("regions", 0.0)
    out["forwards"] = seconds.get("forwards", 0.0)
    return out


def per_token(rounds: list[dict]) -> dict[str, float]:
    """Every round phase and model phase summed over ``rounds``, divided by the tokens emitted."""
    tokens = sum(r["tokens"] for r in rounds)
    if not tokens:
        return {}
    total: dict[str, float] = {"round": sum(r["ms"] for r in rounds)}
    for r in rounds:
        for k, v in r["phases"].items():
            total[k] = total.get(k, 0.0) + v
        for role, phases in r["models"].items():
            for k, v in phases.items():
                if k not in ("regions", "forwards"):
                    total[f"{role}.{k}"] = total.get(f"{role}.{k}", 0.0) + v
    return {k: round(v / tokens, 3) for k, v in total.items()}


def _rounded(r: dict) -> dict:
    return {"ms": round(r["ms"], 3), "tokens": r["tokens"], "drafted": r["drafted"], "accepted": r["accepted"],
            "phases": {k: round(v, 3) for k, v in r["phases"].items()},
            "models": {role: {k: round(v, 3) for k, v in p.items()} for role, p in r["models"].items()}}
