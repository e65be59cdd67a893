"""Two drafters that pay a step per draft, one of them chosen per round: ``--drafter auto``.

The draft model (``MODEL``) is right more often; the draft heads (``HEADS``: an EAGLE head on the
target's own hidden state) cost a fraction of its step. Which pays more depends on the text, so
the K policy prices both (``StructureK`` with two drafters: an acceptance estimate per drafter and
kind of text, each drafter's own step cost) and names its choice in the round's budget
(``DraftBudget.drafter``); this drafter only dispatches.

Both drafters follow the sequence while the other drafts: the draft model's cache catches up on
the tokens it did not see in its next forward (they go in with the last token), and the heads read
the target's features, which every target forward hands over whoever drafted. Which drafter drafts
depends on the draft side only (estimates and costs), so the output is the target's either way.
"""

from __future__ import annotations

import torch

from specd.engine.budget import HEADS, DraftBudget
from specd.engine.drafters import Drafter, Proposal
from specd.engine.sampling import SamplingParams


class ChoiceDrafter:
    """The draft model's or the heads' drafts, as ``budget.drafter`` says (see the module docstring)."""

    def __init__(self, model: Drafter, heads: Drafter) -> None:
        self.model, self.heads = model, heads
        self.model_rounds = 0
        self.heads_rounds = 0

    @property
    def max_len(self) -> int:
        return min(self.model.max_len, self.heads.max_len)

    def prefill(self, context: list[int]) -> int:
        self.heads.prefill(context)
        return self.model.prefill(context)

    def propose(self, seq: list[int], budget: DraftBudget, params: SamplingParams,
                generator: torch.Generator | None) -> Proposal:
        if budget.drafter == HEADS:
            self.heads_rounds += 1
            return self.heads.propose(seq, budget, params, generator)
        self.model_rounds += 1
        return self.model.propose(seq, budget, params, generator)

    def commit(self, valid: int) -> None:
        self.model.commit(valid)
        self.heads.commit(valid)
