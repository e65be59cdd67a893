"""Drafters propose the tokens the target verifies. The engine's loop does not care where they
come from: a small model today; n-gram lookup and token trees plug in here."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch

from specd.engine.sampling import SamplingParams, sample, warp
from specd.models.protocol import CausalLM


@dataclass(frozen=True)
class Proposal:
    """``tokens``: ``[k]`` drafts; ``probs``: ``[k, V]`` the draft distributions they were drawn
    from, or None when drafting was greedy/deterministic (one-hot on each draft)."""

    tokens: torch.Tensor
    probs: torch.Tensor | None


class Drafter(Protocol):
    @property
    def max_len(self) -> int:
        """Longest sequence (prompt + generated + drafts) the drafter can hold."""
        ...

    def prefill(self, context: list[int]) -> int:
        """Bring internal state up to ``context`` (all prompt tokens but the last); return how
        many were reused from the previous request."""
        ...

    def propose(
        self, seq: list[int], k: int, params: SamplingParams, generator: torch.Generator | None
    ) -> Proposal:
        """Up to ``k`` tokens that follow ``seq``."""
        ...

    def commit(self, valid: int) -> None:
        """Only ``seq[:valid]`` is final: forget anything past it."""
        ...


class ModelDrafter:
    """A small language model as the drafter; its KV cache follows the accepted sequence."""

    def __init__(self, model: CausalLM, min_prob: float = 0.0) -> None:
        self.model = model
        # stop drafting a round once the draft's probability of its own next token is below this
        self.min_prob = min_prob

    @property
    def max_len(self) -> int:
        return self.model.max_len

    def prefill(self, context: list[int]) -> int:
        ids = torch.tensor(context, dtype=torch.long)
        reused = self.model.common_prefix(ids)
        self.model.rollback(reused)
        if reused < len(context):
            self.model.forward(ids[reused:])
        return reused

    def propose(
        self, seq: list[int], k: int, params: SamplingParams, generator: torch.Generator | None
    ) -> Proposal:
        model = self.model
        feed = torch.tensor(seq[model.cache_len :], dtype=torch.long)  # catch-up + last token
        tokens: list[int] = []
        rows: list[torch.Tensor] = []
        for i in range(k):
            logits = model.forward(feed)[-1]  # [V]
            # Stop on the draft's confidence at this position (its top probability), decided
            # before sampling: a rule that looked at the sampled token itself would bias which
            # drafts get verified, and the output would no longer follow the target exactly.
            if params.greedy:
                if i > 0 and self.min_prob > 0 and float(torch.softmax(logits, -1).max()) < self.min_prob:
                    break
                d = int(torch.argmax(logits))
            else:
                q = warp(logits, params)
                if i > 0 and float(q.max()) < self.min_prob:
                    break
                d = sample(q, generator)
                rows.append(q)
            tokens.append(d)
            feed = torch.tensor([d], dtype=torch.long)
        # the cache now holds seq + d_1..d_{k-1} (k = drafts kept; an early stop also fed d_k)
        probs = torch.stack(rows) if rows else None  # [k, V]
        return Proposal(torch.tensor(tokens, dtype=torch.long), probs)

    def commit(self, valid: int) -> None:
        if self.model.cache_len > valid:
            self.model.rollback(valid)
