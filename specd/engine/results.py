"""What a completion returns: its text and tokens, and how it was produced.

Torch-free: the daemon, its stats and the remote backends use these types without loading the engine.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from specd.engine.budget import MODEL


@dataclass(frozen=True)
class Round:
    """What one round did: ``tokens`` emitted (the accepted drafts, then the recovered or bonus
    token), ``drafted`` draft positions verified (a tree's chain depth), ``accepted`` of them kept;
    ``source``: where the drafts came from (``specd.engine.budget``: model, ahead, lookup)."""

    tokens: list[int]
    drafted: int = 0
    accepted: int = 0
    source: str = MODEL
    tree_nodes: int = 0
    branch_hit: bool = False
    on_chain: int = 0  # a token tree's chain drafts accepted (its path may then leave the chain)
    siblings_tried: int = 0  # a token tree's candidates beside the first draft judged after it missed
    rows: int = 0  # tokens in the round's target forward (0: not timed)
    verify_ms: float = 0.0  # that forward's wall time (a lone target step's: with its sampling)
    draft_ms: float = 0.0  # the drafter's wall time this round



@dataclass
class GenerationStats:
    mode: str = "spec"
    prompt_tokens: int = 0
    prefill_reused: int = 0  # target prompt tokens whose KV came from the previous request
    new_tokens: int = 0
    rounds: int = 0
    drafted: int = 0
    accepted: int = 0
    drafted_at: list[int] = field(default_factory=list)  # per draft position i: rounds that drafted it
    accepted_at: list[int] = field(default_factory=list)  # ... and rounds that accepted it
    tree_nodes: int = 0  # token-tree rounds: nodes verified (chain + extra candidates)
    branch_hits: int = 0  # ... rounds whose accepted path left the chain for another candidate
    # per draft source (specd.engine.budget: model, ahead, lookup): [rounds, drafted, accepted]
    by_source: dict[str, list[int]] = field(default_factory=dict)
    prefill_ms: float = 0.0
    ttft_ms: float = 0.0
    total_ms: float = 0.0
    stop_reason: str = ""  # "stop_token" | "max_tokens" | "stop_string" | "line_budget" | "context" | "cancelled"

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0

    @property
    def mean_accepted_len(self) -> float:
        """Tokens emitted per round: 1 + accepted / rounds (the recovered/bonus token counts)."""
        return 1.0 + self.accepted / self.rounds if self.rounds else 0.0

    @property
    def decode_ms_per_token(self) -> float:
        return (self.total_ms - self.prefill_ms) / self.new_tokens if self.new_tokens else 0.0

    def as_dict(self) -> dict:
        return {
            "mode": self.mode,
            "prompt_tokens": self.prompt_tokens,
            "prefill_reused": self.prefill_reused,
            "new_tokens": self.new_tokens,
            "rounds": self.rounds,
            "drafted": self.drafted,
            "accepted": self.accepted,
            "acceptance_rate": round(self.acceptance_rate, 4),
            "mean_accepted_len": round(self.mean_accepted_len, 4),
            "accepted_at": list(self.accepted_at),
            "drafted_at": list(self.drafted_at),
            "tree_nodes": self.tree_nodes,
            "branch_hits": self.branch_hits,
            "by_source": source_counts(self.by_source),
            "prefill_ms": round(self.prefill_ms, 3),
            "ttft_ms": round(self.ttft_ms, 3),
            "decode_ms_per_token": round(self.decode_ms_per_token, 3),
            "total_ms": round(self.total_ms, 3),
            "stop_reason": self.stop_reason,
        }


    def add(self, r: Round) -> None:
        """Count one round."""
        self.rounds += 1
        self.drafted += r.drafted
        self.accepted += r.accepted
        self.tree_nodes += r.tree_nodes
        self.branch_hits += int(r.branch_hit)
        if r.drafted:
            add_source(self.by_source, r.source, 1, r.drafted, r.accepted)
        _grow(self.drafted_at, r.drafted)
        _grow(self.accepted_at, r.drafted)
        for i in range(r.drafted):
            self.drafted_at[i] += 1
        for i in range(r.accepted):
            self.accepted_at[i] += 1


@dataclass
class Completion:
    text: str
    tokens: list[int]
    stats: GenerationStats
    lookahead: int = 0  # tokens proposed from the previous suggestion (see continuation.py)
    timeline: dict | None = None  # a profiled request's (specd.engine.timeline.Timeline.as_dict)


def add_source(by_source: dict[str, list[int]], source: str, rounds: int, drafted: int, accepted: int) -> None:
    """Count ``rounds`` rounds of ``source`` that drafted ``drafted`` and kept ``accepted``."""
    c = by_source.setdefault(source, [0, 0, 0])
    c[0] += rounds
    c[1] += drafted
    c[2] += accepted


def source_counts(by_source: dict[str, list[int]]) -> dict[str, dict[str, float]]:
    """``by_source`` as JSON: per source its rounds, drafted, accepted and acceptance rate."""
    return {s: {"rounds": r, "drafted": d, "accepted": a, "acceptance_rate": round(a / d, 4) if d else 0.0}
            for s, (r, d, a) in sorted(by_source.items())}


def _grow(counts: list[int], n: int) -> None:
    counts.extend([0] * (n - len(counts)))
