"""Prompt-lookup (n-gram) drafting: near-free drafts from the text already in the context.

Code repeats itself: an argument list is passed on, a name comes back, the suffix after the cursor
often holds the very lines being written. ``NgramDrafter`` finds the most recent earlier
occurrence of the sequence's last n tokens (n from ``max_ngram`` down to ``min_ngram``) anywhere in
the context — prefix, suffix (which Qwen's FIM order places before the middle) and the tokens
generated so far — and proposes what followed it. Where none is found there, it looks in the
request's text outside the prompt's windows (``Outside``: the document before the prefix window
and after the suffix window, which the target never reads but the user's code repeats all the
same), at the occurrence nearest the cursor. Its drafts are deterministic (a one-hot draft
distribution), so the rejection rule keeps the output exactly the target's.

``HybridDrafter`` takes n-gram drafts when a match exists and the draft model's otherwise: per
round, the cheaper source of likely tokens. Lookup drafts are free (no model call), so how many
to verify is the policy's ``lookup_k``, chosen from lookup's own acceptance estimate with no draft
cost (``specd.engine.policy``); they never teach the model's estimate.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import torch

from specd.engine.budget import LOOKUP, DraftBudget
from specd.engine.drafters import Chain, Drafter, Proposal
from specd.engine.sampling import SamplingParams


def lookup(seq: list[int], k: int, max_ngram: int = 4, min_ngram: int = 2) -> list[int]:
    """Up to ``k`` tokens that followed the latest earlier occurrence of ``seq``'s tail."""
    n_total = len(seq)
    for n in range(min(max_ngram, n_total - 1), min_ngram - 1, -1):
        tail = seq[n_total - n :]
        first = tail[0]
        # latest start j < n_total - n with seq[j:j+n] == tail and a continuation after it
        for j in range(n_total - n - 1, -1, -1):
            if seq[j] == first and seq[j : j + n] == tail:
                return seq[j + n : j + n + k]
    return []


@dataclass(frozen=True)
class Outside:
    """A request's tokens outside its prompt: ``before`` the prefix window (in document order,
    ending nearest the cursor) and ``after`` the suffix window (starting nearest it)."""

    before: Sequence[int] = ()
    after: Sequence[int] = ()

    def __bool__(self) -> bool:
        return bool(self.before) or bool(self.after)


@dataclass
class Haystack:
    """``Outside``'s n-grams (``min_ngram`` .. ``max_ngram`` tokens), each at its occurrence nearest
    the cursor that has a continuation inside its own part: built once per request, so a
    round's lookup there is one dictionary read per n."""

    outside: Outside
    max_ngram: int = 4
    min_ngram: int = 2
    # n-gram -> (distance from the cursor, part, start): the nearest occurrence kept
    _index: dict[tuple[int, ...], tuple[int, int, int]] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        before, after = list(self.outside.before), list(self.outside.after)
        self._parts = (before, after)
        for n in range(self.min_ngram, self.max_ngram + 1):
            for j in range(len(before) - n):  # later starts are nearer the cursor: they overwrite
                self._keep(tuple(before[j : j + n]), (len(before) - j, 0, j))
            for j in range(len(after) - n - 1, -1, -1):  # earlier starts are nearer: written last
                self._keep(tuple(after[j : j + n]), (j, 1, j))

    def _keep(self, gram: tuple[int, ...], at: tuple[int, int, int]) -> None:
        old = self._index.get(gram)
        if old is None or at[0] <= old[0]:
            self._index[gram] = at

    def find(self, tail: Sequence[int], k: int) -> list[int]:
        """Up to ``k`` tokens that followed ``tail`` at its nearest occurrence (none: [])."""
        at = self._index.get(tuple(tail))
        if at is None:
            return []
        _, part, j = at
        start = j + len(tail)
        return self._parts[part][start : start + k]


def lookup_outside(seq: list[int], k: int, haystack: Haystack | None, max_ngram: int = 4,
                   min_ngram: int = 2) -> list[int]:
    """``lookup`` in ``seq``, each n-gram length tried in ``seq`` first and then outside the prompt
    (``haystack``): a longer match outside beats a shorter one inside."""
    if haystack is None:
        return lookup(seq, k, max_ngram, min_ngram)
    for n in range(min(max_ngram, len(seq) - 1), min_ngram - 1, -1):
        found = lookup(seq, k, n, n) or haystack.find(seq[len(seq) - n :], k)
        if found:
            return found
    return []


class NgramDrafter:
    def __init__(self, max_ngram: int = 4, min_ngram: int = 2, capacity: int = 1 << 30,
                 haystack: Haystack | None = None) -> None:
        self.max_ngram, self.min_ngram = max_ngram, min_ngram
        self._capacity = capacity
        self.haystack = haystack

    def around(self, outside: Outside) -> NgramDrafter:
        """This drafter for one request that also looks ``outside`` its prompt."""
        haystack = Haystack(outside, self.max_ngram, self.min_ngram) if outside else None
        return NgramDrafter(self.max_ngram, self.min_ngram, self._capacity, haystack)

    @property
    def max_len(self) -> int:
        return self._capacity

    def prefill(self, context: list[int]) -> int:
        return 0

    def propose(self, seq: list[int], budget: DraftBudget, params: SamplingParams,
                generator: torch.Generator | None) -> Chain:
        found = lookup_outside(seq, budget.lookup_k, self.haystack, self.max_ngram, self.min_ngram)
        return Chain(torch.tensor(found, dtype=torch.long), None, LOOKUP)

    def commit(self, valid: int) -> None:
        pass


class HybridDrafter:
    """N-gram drafts when at least ``min_tokens`` are found, else the model's."""

    def __init__(self, ngram: NgramDrafter, model: Drafter, min_tokens: int = 2) -> None:
        self.ngram, self.model, self.min_tokens = ngram, model, min_tokens
        self.ngram_rounds = 0
        self.model_rounds = 0

    def around(self, outside: Outside) -> HybridDrafter:
        """This drafter for one request whose lookup also searches ``outside`` its prompt (the
        model drafter, and its caches, shared)."""
        return HybridDrafter(self.ngram.around(outside), self.model, self.min_tokens)

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
