"""Drafters propose the tokens the target verifies. The engine's loop does not care where they
come from: a small model today; n-gram lookup and token trees plug in here."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Protocol

import torch

from specd.engine.sampling import SamplingParams, sample, warp
from specd.models.protocol import CausalLM


@dataclass(frozen=True)
class Proposal:
    """``tokens``: ``[k]`` drafts; ``probs``: ``[k, V]`` the draft distributions they were drawn
    from, or None when drafting was greedy/deterministic (one-hot on each draft).

    ``parents`` None: a chain, each draft follows the previous one. Otherwise a token tree
    (``specd.engine.tree``): ``parents[j]`` is node ``j``'s parent (``-1``: the last emitted token),
    the chain comes first (node ``i`` at depth ``i + 1``) and the extra candidates after it."""

    tokens: torch.Tensor
    probs: torch.Tensor | None
    parents: list[int] | None = None

    @property
    def chain_len(self) -> int:
        """Leading nodes that form a chain (all of them without ``parents``)."""
        if self.parents is None:
            return int(self.tokens.numel())
        n = 0
        while n < len(self.parents) and self.parents[n] == n - 1:
            n += 1
        return n


# Asked by a drafter before each draft after the first, with its confidence (top probability) in
# each draft of the round so far: whether to draft another (see policy.AdaptiveK).
KeepDrafting = Callable[[list[float]], bool]


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
        self, seq: list[int], k: int, params: SamplingParams, generator: torch.Generator | None,
        keep: KeepDrafting | None = None,
    ) -> Proposal:
        """Up to ``k`` tokens that follow ``seq``; ``keep`` may end the round early (drafters
        without a confidence ignore it)."""
        ...

    def commit(self, valid: int) -> None:
        """Only ``seq[:valid]`` is final: forget anything past it."""
        ...


class ModelDrafter:
    """A small language model as the drafter; its KV cache follows the accepted sequence."""

    def __init__(self, model: CausalLM, min_prob: float = 0.0, branch: int = 1,
                 branch_below: float = 1.0) -> None:
        self.model = model
        # stop drafting a round once the draft's probability of its own next token is below this
        self.min_prob = min_prob
        # token trees: where the draft's top probability is below ``branch_below``, propose
        # ``branch`` candidates instead of one (the chain continues from the first)
        if branch < 1:
            raise ValueError(f"branch must be >= 1, got {branch}")
        self.branch = branch
        self.branch_below = branch_below

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
        self, seq: list[int], k: int, params: SamplingParams, generator: torch.Generator | None,
        keep: KeepDrafting | None = None,
    ) -> Proposal:
        model = self.model
        feed = torch.tensor(seq[model.cache_len :], dtype=torch.long)  # catch-up + last token
        tokens: list[int] = []
        rows: list[torch.Tensor] = []
        extra: list[tuple[int, int, torch.Tensor | None]] = []  # (depth index, token, q row)
        tops: list[float] = []  # the draft's top probability at each chain position
        for i in range(k):
            # the next draft's forward is paid only if ``keep`` says the drafts so far are worth
            # following (decided on the draft's distribution, never on the target)
            if i > 0 and keep is not None and not keep(tops):
                break
            logits = model.forward(feed)[-1]  # [V]
            # Stop (and branch) on the draft's confidence at this position (its top probability),
            # decided before sampling: a rule that looked at the sampled token itself would bias
            # which drafts get verified, and the output would no longer follow the target exactly.
            if params.greedy:
                want = self.min_prob > 0 or self.branch > 1 or keep is not None
                top = float(torch.softmax(logits, -1).max()) if want else 1.0
                if i > 0 and top < self.min_prob:
                    break
                width = self.branch if top < self.branch_below else 1
                best = torch.topk(logits, width).indices.tolist()
                d = best[0]
                extra += [(i, t, None) for t in best[1:]]
            else:
                q = warp(logits, params)
                top = float(q.max())
                if i > 0 and top < self.min_prob:
                    break
                d = sample(q, generator)
                rows.append(q)
                if top < self.branch_below:  # more candidates drawn independently from q
                    extra += [(i, sample(q, generator), q) for _ in range(self.branch - 1)]
            tokens.append(d)
            tops.append(top)
            feed = torch.tensor([d], dtype=torch.long)
        # the cache now holds seq + d_1..d_{k-1} (k = drafts kept; an early stop also fed d_k)
        parents = None
        if extra:  # a tree: the chain, then each extra candidate as a sibling of chain node i
            parents = list(range(-1, len(tokens) - 1)) + [i - 1 for i, _, _ in extra]
            tokens += [t for _, t, _ in extra]
            if rows:
                rows += [q for _, _, q in extra]
        probs = torch.stack(rows) if rows else None  # [k, V] (tree: [T, V])
        return Proposal(torch.tensor(tokens, dtype=torch.long), probs, parents)

    def commit(self, valid: int) -> None:
        if self.model.cache_len > valid:
            self.model.rollback(valid)
