"""Continuation along the previous suggestion: the user typed part of what was suggested.

When a greedy request's prefix is the previous request's prefix plus the start of the previous
completion (same suffix), the rest of that completion is the best guess of the new answer. It is
*not* the answer itself: in FIM order the prompt changes (the typed text moves from the middle into
the prefix), so the target may answer differently. The remainder is therefore offered to the
speculative loop as drafts (:class:`LookaheadDrafter`): the target verifies all of them in one
forward pass, no draft-model call is made while they hold, and the output is exactly the output of
a cold request (the rejection rule keeps any proposal exact).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from specd.engine.budget import AHEAD, DraftBudget
from specd.engine.drafters import Chain, Drafter, Proposal
from specd.engine.sampling import SamplingParams
from specd.models.tokenizer import Tokenizer


@dataclass(frozen=True)
class _Suggestion:
    prefix: str
    suffix: str
    text: str
    tokens: tuple[int, ...]


class ContinuationCache:
    """The last greedy completion; ``lookahead`` returns the tokens still ahead of the cursor."""

    def __init__(self) -> None:
        self._last: _Suggestion | None = None

    def remember(self, prefix: str, suffix: str, text: str, tokens: list[int]) -> None:
        self._last = _Suggestion(prefix, suffix, text, tuple(tokens)) if text else None

    def clear(self) -> None:
        self._last = None

    def lookahead(self, prefix: str, suffix: str, tokenizer: Tokenizer) -> list[int]:
        last = self._last
        if last is None or suffix != last.suffix or not prefix.startswith(last.prefix):
            return []
        typed = prefix[len(last.prefix):]
        if not last.text.startswith(typed) or len(typed) >= len(last.text):
            return []
        # the model's own tokens when the typed text ends on a token boundary, else re-encode
        for j in range(len(last.tokens) + 1):
            done = tokenizer.decode(list(last.tokens[:j]))
            if done == typed:
                return list(last.tokens[j:])
            if len(done) > len(typed):
                break
        return tokenizer.encode(last.text[len(typed):])


class LookaheadDrafter:
    """Proposes ``tokens`` (expected right after the prompt) while the output follows them, as many
    per round as the budget's ``free_k``; then hands over to ``fallback``, which drafts under the
    same budget as any other round (the K policy's choice and gate)."""

    def __init__(self, tokens: list[int], prompt_len: int, fallback: Drafter) -> None:
        self.tokens = tokens
        self.prompt_len = prompt_len
        self.fallback = fallback
        self.proposed = 0  # lookahead tokens offered for verification

    @property
    def max_len(self) -> int:
        return self.fallback.max_len

    def prefill(self, context: list[int]) -> int:
        return self.fallback.prefill(context)

    def propose(self, seq: list[int], budget: DraftBudget, params: SamplingParams,
                generator: torch.Generator | None) -> Proposal:
        done = seq[self.prompt_len:]
        n = len(done)
        if n < len(self.tokens) and done == self.tokens[:n] and budget.free_k > 0:
            ahead = self.tokens[n : n + budget.free_k]
            self.proposed += len(ahead)
            return Chain(torch.tensor(ahead, dtype=torch.long), None, AHEAD)
        return self.fallback.propose(seq, budget, params, generator)

    def commit(self, valid: int) -> None:
        self.fallback.commit(valid)
