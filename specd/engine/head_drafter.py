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

With ``width`` > 1, Medusa's first head's next choices go beside the chain as **siblings** of its
first draft (a token tree, Medusa's own way of verifying: ``specd.engine.tree``), as many as the
budget's branch gate takes. They cost no head call, only verified rows. Each is one-hot, so the
tree's verification keeps the output exactly the target's. After a round whose accepted path left
the chain, the target compacts its hidden states to that path (``CausalLM.keep``), so the next
round reads the state of the token actually accepted.

With ``context_bias``, Medusa's picks lean to the context as an EAGLE head's do
(``eagle_drafter``): every sub-vocabulary token among the sequence's last ``CONTEXT`` gets that
much added to its logit before the heads' top tokens (and head 1's next choices) are taken. A
pick's confidence, which K auto's gates read, stays the heads' own probability for it. On the dev
tasks' decoding rounds head 1's first choice was the target's token 0.231 of the time without,
0.270 with +2 (bench/RESULTS.md, session 44).
"""

from __future__ import annotations

import torch

from specd.engine.budget import HEADS, DraftBudget
from specd.engine.drafters import Chain, Proposal, with_siblings
from specd.engine.eagle_drafter import CONTEXT
from specd.engine.sampling import SamplingParams
from specd.models.eagle import EagleHead
from specd.models.heads import MedusaHeads, RecurrentHead
from specd.models.protocol import CausalLM


DraftHeads = MedusaHeads | RecurrentHead | EagleHead  # an EagleHead drafts through specd.engine.eagle_drafter


def lean_to_context(heads: MedusaHeads, logits: torch.Tensor, seq: list[int], bias: float) -> torch.Tensor:
    """Medusa's ``logits`` ``[k, V']`` with ``bias`` added at every sub-vocabulary token among
    ``seq``'s last ``CONTEXT`` (a new tensor)."""
    near = heads.rows_of(torch.tensor(seq[-CONTEXT:], dtype=torch.long))  # [m]
    lean = torch.zeros(logits.shape[1])  # [V']
    lean[near] = bias
    return logits + lean  # [k, V']


class HeadDrafter:
    """Draft heads over ``target``'s last hidden state (see the module docstring): Medusa heads
    (one call for the chain) or a recurrent head (one small step per draft, each fed the draft
    before it)."""

    def __init__(self, target: CausalLM, heads: DraftHeads, width: int = 1, context_bias: float = 0.0) -> None:
        if width < 1:
            raise ValueError(f"width must be >= 1, got {width}")
        self.target = target
        self.heads = heads
        self.width = width  # Medusa: candidates at the first draft position, the chain's and its siblings
        self.context_bias = context_bias  # Medusa: added to the logits of the context's tokens
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
                generator: torch.Generator | None) -> Proposal:
        state = self._state(seq)
        if state is None or not budget.may_draft([]):
            self.rounds_without_state += state is None
            return Chain(torch.zeros(0, dtype=torch.long), None, HEADS)
        if isinstance(self.heads, RecurrentHead):
            tokens, _ = self.heads.draft(state, seq[-1], budget.k, budget.may_draft, budget.keeps)
            return Chain(torch.tensor(tokens, dtype=torch.long), None, HEADS)
        logits = self.heads.draft_logits(state, budget.k)  # [k, V']: one call for the whole chain
        probs = torch.softmax(logits, -1)  # [k, V']: the heads' own, for the picks' confidences
        if self.context_bias > 0:
            logits = lean_to_context(self.heads, logits, seq, self.context_bias)
        top_i = logits.argmax(-1)  # [k]
        top_p = probs.gather(1, top_i[:, None])[:, 0]  # [k]
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
        others: list[int] = []
        if self.width > 1:  # head 1's next choices, ranked
            others = self.heads.ids[logits[0].topk(min(self.width, logits.shape[1])).indices[1:]].tolist()
        return with_siblings(tokens, tops, others, budget, HEADS)

    def commit(self, valid: int) -> None:
        """Nothing to roll back: the drafter keeps no cache."""
