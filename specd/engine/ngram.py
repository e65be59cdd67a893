"""Prompt-lookup (n-gram) drafting: near-free drafts from the text already in the context.

Code repeats itself: an argument list is passed on, a name comes back, the suffix after the cursor
often holds the very lines being written. ``NgramDrafter`` finds the most recent earlier
occurrence of the sequence's last n tokens (n from ``max_ngram`` down to ``min_ngram``) anywhere in
the context — prefix, suffix (which Qwen's FIM order places before the middle) and the tokens
generated so far — and proposes what followed it. Its drafts are deterministic (a one-hot draft
distribution), so the rejection rule keeps the output exactly the target's.

``HybridDrafter`` takes n-gram drafts when a match exists and the draft model's otherwise: per
round, the cheaper source of likely tokens. Lookup drafts are free (no model call), so how many
to verify is the policy's ``lookup_k``, chosen from lookup's own acceptance estimate with no draft
cost (``specd.engine.policy``); they never teach the model's estimate. (One estimate for every
match length: a four-token match is right more often and further on than a two-token one, but an
estimate and a count per length decoded level with it through the daemon; bench/RESULTS.md,
session 35.)
"""

from __future__ import annotations

import torch

from specd.engine.budget import LOOKUP, DraftBudget
from specd.engine.drafters import Chain, Drafter, Proposal
from specd.engine.sampling import SamplingParams


def find(seq: list[int], max_ngram: int = 4, min_ngram: int = 2) -> tuple[int, int]:
    """``(n, j)``: the longest tail of ``seq`` (``n`` tokens, ``min_ngram`` to ``max_ngram``) seen
    earlier, and where its latest earlier occurrence starts; ``(0, -1)`` when none is."""
    n_total = len(seq)
    for n in range(min(max_ngram, n_total - 1), min_ngram - 1, -1):
        tail = seq[n_total - n :]
        first = tail[0]
        # latest start j < n_total - n with seq[j:j+n] == tail and a continuation after it
        for j in range(n_total - n - 1, -1, -1):
            if seq[j] == first and seq[j : j + n] == tail:
                return n, j
    return 0, -1


def lookup(seq: list[int], k: int, max_ngram: int = 4, min_ngram: int = 2) -> list[int]:
    """Up to ``k`` tokens that followed the latest earlier occurrence of ``seq``'s tail."""
    n, j = find(seq, max_ngram, min_ngram)
    return seq[j + n : j + n + k] if n else []


class NgramDrafter:
    def __init__(self, max_ngram: int = 4, min_ngram: int = 2, capacity: int = 1 << 30) -> None:
        self.max_ngram, self.min_ngram = max_ngram, min_ngram
        self._capacity = capacity

    @property
    def max_len(self) -> int:
        return self._capacity

    def prefill(self, context: list[int]) -> int:
        return 0

    def propose(self, seq: list[int], budget: DraftBudget, params: SamplingParams,
                generator: torch.Generator | None) -> Chain:
        found = lookup(seq, budget.lookup_k, self.max_ngram, self.min_ngram)
        return Chain(torch.tensor(found, dtype=torch.long), None, LOOKUP)

    def commit(self, valid: int) -> None:
        pass


class HybridDrafter:
    """N-gram drafts when at least ``min_tokens`` are found, else the model's."""

    def __init__(self, ngram: NgramDrafter, model: Drafter, min_tokens: int = 2) -> None:
        self.ngram, self.model, self.min_tokens = ngram, model, min_tokens
        self.ngram_rounds = 0
        self.model_rounds = 0

    @property
    def max_len(self) -> int:
        return self.model.max_len

    def prefill(self, context: list[int]) -> int:
        return self.model.prefill(context)

    def propose(self, seq: list[int], budget: DraftBudget, params: SamplingParams,
                generator: torch.Generator | None) -> Proposal:
        found = self.ngram.propose(seq, budget, params, generator)
        if len(found) >= min(self.min_tokens, budget.lookup_k) and len(found) > 0:
            self.ngram_rounds += 1
            return found
        self.model_rounds += 1
        return self.model.propose(seq, budget, params, generator)

    def commit(self, valid: int) -> None:
        self.model.commit(valid)
