"""Drafters propose the tokens the target verifies. The loop does not care where they come from:
a small model (:class:`ModelDrafter`), prompt lookup (``ngram.py``), the previous suggestion
(``continuation.py``).

A proposal is a :class:`Chain` (each draft follows the previous one) or a :class:`Tree` (several
candidates where the draft is unsure; ``specd.engine.tree``); the loop verifies each with its own
function. How far a round drafts is decided by its :class:`~specd.engine.budget.DraftBudget`, which
the drafter asks before each draft and after seeing each draft's distribution.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Protocol

import torch

from specd.engine.budget import MODEL, DraftBudget
from specd.engine.sampling import SamplingParams, restrict, sample, warp_restricted
from specd.models.protocol import CausalLM


@dataclass(frozen=True)
class Chain:
    """``tokens``: ``[k]`` drafts, each following the previous one; ``probs``: ``[k, V]`` the draft
    distributions they were drawn from, or None when drafting was deterministic (one-hot).
    ``source``: where they came from (``MODEL``, ``HEADS``, ``AHEAD``, ``LOOKUP``). ``catch_up_ms``:
    time the drafter spent on context it had not seen (a new prompt's rows of an EAGLE head's
    cache; the tokens another drafter drafted, which a draft model's first forward takes in beyond
    an ordinary step's): part of the round's wall time, but prefill-like work that the cost of a
    draft step, which K auto learns from the rounds, must not carry."""

    tokens: torch.Tensor
    probs: torch.Tensor | None
    source: str = MODEL
    catch_up_ms: float = 0.0

    def __len__(self) -> int:
        return int(self.tokens.numel())


class OrdinaryForward:
    """A drafter's running mean of an ordinary forward's time (0: none timed yet), and the
    catch-up a larger forward carries: its time beyond that mean (see ``Chain.catch_up_ms``)."""

    def __init__(self) -> None:
        self.ms = 0.0

    def observe(self, ms: float) -> None:
        """An ordinary forward took ``ms``."""
        self.ms = ms if not self.ms else 0.9 * self.ms + 0.1 * ms

    def catch_up(self, ms: float, untimed: float = 0.0) -> float:
        """The catch-up in a larger forward that took ``ms``; ``untimed`` before any ordinary one."""
        return max(0.0, ms - self.ms) if self.ms else untimed


@dataclass(frozen=True)
class Tree:
    """A token tree: ``parents[j]`` is node ``j``'s parent (``-1``: the last emitted token); the
    chain comes first (node ``i`` at depth ``i + 1``), the extra candidates after it.
    ``tokens``: ``[T]``; ``probs``: ``[T, V]`` or None (deterministic: each node's draft
    distribution one-hot on its own token). ``source`` and ``catch_up_ms`` as in ``Chain``."""

    tokens: torch.Tensor
    probs: torch.Tensor | None
    parents: list[int]
    source: str = MODEL
    catch_up_ms: float = 0.0

    @property
    def chain_len(self) -> int:
        """Leading nodes that form a chain."""
        n = 0
        while n < len(self.parents) and self.parents[n] == n - 1:
            n += 1
        return n


Proposal = Chain | Tree


def with_siblings(tokens: list[int], confidences: list[float], others: list[int], budget: DraftBudget,
                  source: str, catch_up_ms: float = 0.0) -> Proposal:
    """One-hot chain drafts ``tokens`` (their drafter's ``confidences``) with the drafter's next
    choices at the first draft position, ``others`` in rank order, beside the first draft as
    **siblings**, as many as the budget's branch gate takes: a :class:`Tree`, or a
    :class:`Chain` when it takes none."""
    siblings: list[int] = []
    for other in others:
        if not budget.may_branch(confidences, len(siblings)):
            break
        siblings.append(other)
    drafts = torch.tensor(tokens + siblings, dtype=torch.long)  # [k + s], one-hot proposals
    if not siblings:
        return Chain(drafts, None, source, catch_up_ms=catch_up_ms)
    parents = list(range(-1, len(tokens) - 1)) + [-1] * len(siblings)
    return Tree(drafts, None, parents, source, catch_up_ms=catch_up_ms)


class Drafter(Protocol):
    @property
    def max_len(self) -> int:
        """Longest sequence (prompt + generated + drafts) the drafter can hold."""
        ...

    def prefill(self, context: list[int]) -> int:
        """Bring internal state up to ``context`` (all prompt tokens but the last); return how
        many were reused from the previous request."""
        ...

    def propose(self, seq: list[int], budget: DraftBudget, params: SamplingParams,
                generator: torch.Generator | None) -> Proposal:
        """Tokens that follow ``seq``, as many as ``budget`` allows."""
        ...

    def commit(self, valid: int) -> None:
        """Only ``seq[:valid]`` is final: forget anything past it."""
        ...


class ModelDrafter:
    """A small language model as the drafter; its KV cache follows the accepted sequence.
    ``branch > 1``: where the draft's top probability is below ``branch_below``, it proposes
    ``branch`` candidates instead of one (a token tree; the chain continues from the first)."""

    # a forward over more tokens than the last one and a draft: the model catching up on tokens
    # another drafter (lookup, the heads) had drafted; its time beyond one step is reported apart
    CATCH_UP_ROWS = 2

    def __init__(self, model: CausalLM, branch: int = 1, branch_below: float = 1.0) -> None:
        if branch < 1:
            raise ValueError(f"branch must be >= 1, got {branch}")
        self.model = model
        self.branch = branch
        self.branch_below = branch_below
        self.step = OrdinaryForward()  # an ordinary draft step's time

    @property
    def max_len(self) -> int:
        return self.model.max_len

    def prefill(self, context: list[int]) -> int:
        ids = torch.tensor(context, dtype=torch.long)
        reused = self.model.common_prefix(ids)
        self.model.rollback(reused)
        if reused < len(context):
            self.model.forward(ids[reused:], logits=False)
        return reused

    def propose(self, seq: list[int], budget: DraftBudget, params: SamplingParams,
                generator: torch.Generator | None) -> Proposal:
        model = self.model
        feed = torch.tensor(seq[model.cache_len :], dtype=torch.long)  # catch-up + last token
        tokens: list[int] = []
        rows: list[torch.Tensor] = []
        extra: list[tuple[int, int, torch.Tensor | None]] = []  # (depth index, token, q row)
        tops: list[float] = []  # the draft's top probability at each chain position
        want_top = budget.wants_confidence or self.branch > 1
        catch_up_ms = 0.0
        while budget.may_draft(tops):  # decided before the forward is paid
            i = len(tokens)
            t0 = time.perf_counter()
            # [n]: the shared vocabulary, so a draft never proposes a padding row (which the
            # target, with fewer rows, could not even embed)
            logits = restrict(model.forward(feed)[-1], params)
            ms = (time.perf_counter() - t0) * 1e3
            if feed.numel() > self.CATCH_UP_ROWS:
                catch_up_ms = self.step.catch_up(ms)
            else:
                self.step.observe(ms)
            # Stop (and branch) on the draft's confidence at this position (its top probability),
            # decided before sampling: a rule that looked at the sampled token itself would bias
            # which drafts get verified, and the output would no longer follow the target exactly.
            if params.greedy:
                top = float(torch.softmax(logits, -1).max()) if want_top else 1.0
                if not budget.keeps(top, i):
                    break
                width = self.branch if top < self.branch_below else 1
                best = torch.topk(logits, width).indices.tolist()
                d = best[0]
                extra += [(i, t, None) for t in best[1:]]
            else:
                q = warp_restricted(logits, params)
                top = float(q.max())
                if not budget.keeps(top, i):
                    break
                d = sample(q, generator)
                rows.append(q)
                if top < self.branch_below:  # more candidates drawn independently from q
                    extra += [(i, sample(q, generator), q) for _ in range(self.branch - 1)]
            tokens.append(d)
            tops.append(top)
            feed = torch.tensor([d], dtype=torch.long)
        # the cache now holds seq + d_1..d_{k-1} (k = drafts kept; an early stop also fed d_k)
        if not extra:
            return Chain(torch.tensor(tokens, dtype=torch.long), torch.stack(rows) if rows else None,  # [k], [k, V]
                         catch_up_ms=catch_up_ms)
        # a tree: the chain, then each extra candidate as a sibling of chain node i
        parents = list(range(-1, len(tokens) - 1)) + [i - 1 for i, _, _ in extra]
        tokens += [t for _, t, _ in extra]
        if rows:
            rows += [q for _, _, q in extra]
        return Tree(torch.tensor(tokens, dtype=torch.long), torch.stack(rows) if rows else None, parents)  # [T], [T, V]

    def commit(self, valid: int) -> None:
        if self.model.cache_len > valid:
            self.model.rollback(valid)
