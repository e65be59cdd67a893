"""Counters the ``stats`` method reports. Updated on the event-loop thread only."""

from __future__ import annotations

import time
from collections import deque
from typing import TYPE_CHECKING, Any

from specd.engine.results import add_source, source_counts
from specd.models.memory import rss_bytes
from specd.percentile import percentile

if TYPE_CHECKING:  # a type only: the daemon never imports torch itself
    from specd.engine.results import GenerationStats

LATENCY_WINDOW = 1000  # latest served requests the percentiles cover


class DaemonStats:
    def __init__(self) -> None:
        self.started = time.monotonic()
        self.served = 0
        self.warmed = 0  # warm requests that ran to the end
        self.cancelled = 0
        self.failed = 0  # model failures
        self.rejected = 0  # protocol errors and invalid params
        self.prompt_tokens = 0
        self.new_tokens = 0
        self.rounds = 0
        self.drafted = 0
        self.accepted = 0
        self.drafted_at: list[int] = []
        self.accepted_at: list[int] = []
        self.by_source: dict[str, list[int]] = {}  # draft source -> [rounds, drafted, accepted]
        self.prefill_reused = 0
        self.prefill_computed = 0
        self.continuations = 0  # requests whose previous suggestion was offered as drafts
        self.continuation_tokens = 0
        self._latency_ms: deque[float] = deque(maxlen=LATENCY_WINDOW)

    def served_one(self, stats: GenerationStats, latency_ms: float, lookahead: int) -> None:
        self.served += 1
        self.prompt_tokens += stats.prompt_tokens
        self.new_tokens += stats.new_tokens
        self.rounds += stats.rounds
        self.drafted += stats.drafted
        self.accepted += stats.accepted
        for counts, add in ((self.drafted_at, stats.drafted_at), (self.accepted_at, stats.accepted_at)):
            counts.extend([0] * (len(add) - len(counts)))
            for i, n in enumerate(add):
                counts[i] += n
        for source, (rounds, drafted, accepted) in stats.by_source.items():
            add_source(self.by_source, source, rounds, drafted, accepted)
        self.prefill_reused += stats.prefill_reused
        self.prefill_computed += max(0, stats.prompt_tokens - 1 - stats.prefill_reused)
        if lookahead:
            self.continuations += 1
            self.continuation_tokens += lookahead
        self._latency_ms.append(latency_ms)

    def accepted_length_histogram(self) -> list[int]:
        """Speculative rounds by number of drafts accepted (index 0: none accepted). A round that
        accepted ``j`` drafts accepted positions ``0..j-1`` and not ``j``."""
        if not self.drafted_at:
            return []
        at = self.accepted_at + [0]
        hist = [self.drafted_at[0] - at[0]]
        hist += [at[j - 1] - at[j] for j in range(1, len(at))]
        return hist

    def as_dict(self, memory: dict[str, int], queue: dict[str, int]) -> dict[str, Any]:
        lat = list(self._latency_ms)
        return {
            "uptime_s": round(time.monotonic() - self.started, 3),
            "requests": {"served": self.served, "warmed": self.warmed, "cancelled": self.cancelled, "failed": self.failed,
                         "rejected": self.rejected, **queue},
            "tokens": {"prompt": self.prompt_tokens, "generated": self.new_tokens},
            "rounds": self.rounds,
            "drafted": self.drafted,
            "accepted": self.accepted,
            "acceptance_rate": round(self.accepted / self.drafted, 4) if self.drafted else 0.0,
            "mean_accepted_len": round(1 + self.accepted / self.rounds, 4) if self.rounds else 0.0,
            "accepted_at": list(self.accepted_at),
            "drafted_at": list(self.drafted_at),
            "acceptance_by_position": [round(a / d, 4) if d else 0.0
                                       for a, d in zip(self.accepted_at, self.drafted_at)],
            "accepted_length_histogram": self.accepted_length_histogram(),
            "by_source": source_counts(self.by_source),
            "latency_ms": {"p50": round(percentile(lat, 50), 3), "p95": round(percentile(lat, 95), 3),
                           "count": len(lat)},
            "prefill_tokens": {"reused": self.prefill_reused, "computed": self.prefill_computed},
            "continuations": {"requests": self.continuations, "tokens_offered": self.continuation_tokens},
            "memory": {"rss_bytes": rss_bytes(), **memory},
        }
