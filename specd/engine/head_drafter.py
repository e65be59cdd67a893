"""Drafting from the target's own hidden state: Medusa heads (``specd.models.heads``).

At the top of a round the target's cache holds ``seq[:-1]`` and its last forward computed the
hidden state at position ``len(seq) - 2``: the one whose output-head row gave ``seq[-1]`` (the
bonus or recovered token of the last round, or the row of the last accepted draft). Head ``j``
reads that same state and guesses the token ``j`` after ``seq[-1]``, so one call of the heads gives
a whole chain ``d_1..d_K`` with no draft model and no draft KV cache. The first round of a request
has no such state (the prefill computes no logits): it drafts nothing and the target decodes one
token, whose forward leaves the state for the next round.

Drafts are deterministic (the heads' top token), so they are verified as one-hot proposals: in
greedy mode a draft is accepted when it is the target's greedy token, when sampling with
probability ``p_target(d)``; either way the output is exactly the target's. Tokens outside the
heads' sub-vocabulary are never proposed (and are still produced, as recovered or bonus tokens).
"""

from __future__ import annotations

import torch

from specd.engine.budget import HEADS, DraftBudget
from specd.engine.drafters import Chain
from specd.engine.sampling import SamplingParams
from specd.models.eagle import EagleHead
from specd.models.heads import MedusaHeads, RecurrentHead
from specd.models.protocol import CausalLM


DraftHeads = MedusaHeads | RecurrentHead | EagleHead  # an EagleHead drafts through specd.engine.eagle_drafter


class HeadDrafter:
    """Draft heads over ``target``'s last hidden state (see the module docstring): Medusa heads
    (one call for the chain) or a recurrent head (one small step per draft, each fed the draft
    before it)."""

    def __init__(self, target: CausalLM, heads: DraftHeads) -> None:
        self.target = target
        self.heads = heads
        self.rounds_without_state = 0  # rounds that found no hidden state to draft from

    @property
    def max_len(self) -> int:
        return self.target.max_len

    def prefill(self, context: list[int]) -> int:
        return 0  # no state of its own: the target's cache is the drafter's

    def _state(self, seq: list[int]) -> torch.Tensor | None:
        """The target's hidden state ``[H]`` at position ``len(seq) - 2``, if its last forward
        computed it and the cache still ends right after it."""
        hidden = self.target.last_hidden()
        pos = len(seq) - 2
        if hidden is None or pos < 0 or self.target.cache_len != pos + 1:
            return None
        row = pos - hidden.start
        if not 0 <= row < hidden.states.shape[0]:
            return None
        return hidden.states[row]

    def propose(self, seq: list[int], budget: DraftBudget, params: SamplingParams,
                generator: torch.Generator | None) -> Chain:
        state = self._state(seq)
        if state is None or not budget.may_draft([]):
            self.rounds_without_state += state is None
            return Chain(torch.zeros(0, dtype=torch.long), None, HEADS)
        if isinstance(self.heads, RecurrentHead):
            tokens, _ = self.heads.draft(state, seq[-1], budget.k, budget.may_draft, budget.keeps)
            return Chain(torch.tensor(tokens, dtype=torch.long), None, HEADS)
        logits = self.heads.draft_logits(state, budget.k)  # [k, V']: one call for the whole chain
        top_p, top_i = torch.softmax(logits, -1).max(-1)  # [k], [k]
        tokens: list[int] = []
        tops: list[float] = []
        for i in range(logits.shape[0]):
            if i and not budget.may_draft(tops):
                break
            top = float(top_p[i])
            if not budget.keeps(top, i):
                break
            tokens.append(int(self.heads.ids[top_i[i]]))
            tops.append(top)
        return Chain(torch.tensor(tokens, dtype=torch.long), None, HEADS)  # [k], one-hot proposals

    def commit(self, valid: int) -> None:
        """Nothing to roll back: the drafter keeps no cache."""
