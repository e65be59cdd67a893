"""How far one round drafts: every rule that stops drafting, in one object.

The K policy (``policy.py``) makes a :class:`DraftBudget` for each round; the drafter asks it
:meth:`~DraftBudget.may_draft` before paying each draft's forward and :meth:`~DraftBudget.keeps`
once it sees the draft's distribution. The rules:

- **k**: at most this many model drafts (the policy's choice, never past the tokens left);
- **gate**: the policy's in-round gate, asked before each draft after the first with the drafter's
  confidence (top probability) in each draft so far;
- **min_prob**: a draft whose top probability is below this is not proposed (the round ends);
- **free_k**: at most this many drafts that cost no model call from the previous suggestion's
  tokens (source ``AHEAD``);
- **lookup_k**: at most this many drafts from prompt lookup (source ``LOOKUP``; no model call);
- **drafter**: which drafter that pays a step per draft makes this round's ``k`` drafts, where
  there are two (``--drafter auto``): the draft model (``MODEL``) or the draft heads (``HEADS``);
- **branch**: the policy's gate for each **sibling** a drafter offers beside its first draft (its
  next choices at that position, verified as a token tree in the same forward), asked with the
  chain's confidences and the siblings already taken. A sibling costs no draft step, only a
  verified row: the gate weighs that row against the sibling's chance.

Each source keeps its own acceptance estimate in the policy: a draft model's, the previous
suggestion's and prompt lookup's drafts are right at very different rates.

Every rule reads the draft's numbers only, never the target's: the output is unchanged by them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

# Where a round's drafts came from (``Chain.source``, ``Round.source``).
MODEL = "model"  # a draft model's forwards
AHEAD = "ahead"  # the previous suggestion's tokens, while the output follows them (free)
LOOKUP = "lookup"  # prompt lookup: what followed the context's last n tokens before (free)
HEADS = "heads"  # draft heads over the target's own hidden state (one cheap step per draft)

# The policy's in-round gate: given the drafter's confidence in each draft of the round so far,
# whether one more draft is worth its forward.
Gate = Callable[[list[float]], bool]
# The policy's branch gate: given the chain's confidences and the siblings already taken at the
# first draft position, whether one more sibling is worth its verified row.
Branch = Callable[[list[float], int], bool]


@dataclass(frozen=True)
class DraftBudget:
    k: int
    gate: Gate | None = None
    min_prob: float = 0.0
    free_k: int = 0
    lookup_k: int = 0
    drafter: str = MODEL
    branch: Branch | None = None

    @property
    def wants_confidence(self) -> bool:
        """Whether the drafter must compute its confidence for these rules."""
        return self.gate is not None or self.min_prob > 0

    def may_draft(self, confidences: list[float]) -> bool:
        """Before the forward of draft ``len(confidences) + 1``."""
        n = len(confidences)
        if n >= self.k:
            return False
        return n == 0 or self.gate is None or self.gate(confidences)

    def keeps(self, confidence: float, index: int) -> bool:
        """Whether draft ``index`` (0-based), whose top probability is ``confidence``, is proposed;
        the first draft always is."""
        return index == 0 or confidence >= self.min_prob

    def may_branch(self, confidences: list[float], siblings: int) -> bool:
        """Whether a sibling is added beside the first of the chain drafts whose confidences are
        ``confidences``, ``siblings`` being there already (the drafter's width caps them)."""
        return bool(confidences) and (self.branch is None or self.branch(confidences, siblings))
