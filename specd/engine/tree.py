"""Token trees: several drafts verified in one target forward.

A tree's nodes are draft tokens; node ``j``'s parent is ``parents[j]`` (``-1``: the root, which is
the last emitted token). Nodes are topologically ordered (a parent precedes its children), and the
children of a node are its **candidates**, tried in order. The target scores the root and every
node in one forward with a tree attention mask (each node sees the cache, its ancestors and
itself) at positions ``root + depth``; row ``0`` is the root's, row ``j + 1`` node ``j``'s.

Verification walks down from the root, using the glossary of ``specd.engine.sampling``:

- greedy: the child equal to the target's argmax at the current row is **accepted**; when no child
  matches, the argmax is the **recovered** token; at a leaf the argmax is the **bonus** token.
- stochastic: the candidates ``x_1..x_m`` of a node were drawn independently from the same draft
  distribution ``q``. Candidate ``x_i`` is accepted with probability ``min(1, p_i(x_i) / q(x_i))``
  where ``p_1`` is the target's distribution at the node and, after each rejection,
  ``p_{i+1} = norm(relu(p_i - q))`` (recursive rejection sampling, SpecInfer). When all are
  rejected the recovered token is drawn from the last residual; each step is one speculative
  sampling step of target ``p_i`` with draft ``q``, so every emitted token follows ``p`` exactly
  (tested exactly and by chi-square in ``tests/test_tree.py``).

Only the accepted path enters the caches: both are compacted to it after verification.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from specd.engine.sampling import acceptance_probability, residual_distribution, sample


@dataclass(frozen=True)
class TreeVerdict:
    """``path``: the accepted nodes, root to leaf; ``next_token``: recovered or bonus."""

    path: list[int]
    next_token: int


def children(parents: list[int]) -> dict[int, list[int]]:
    """Node -> its children in order (``-1``: the root)."""
    out: dict[int, list[int]] = {-1: []}
    for j, p in enumerate(parents):
        if p >= j:
            raise ValueError(f"tree nodes must follow their parents: node {j} has parent {p}")
        out.setdefault(p, []).append(j)
        out.setdefault(j, [])
    return out


def paths(tokens: list[int], parents: list[int]) -> list[list[int]]:
    """Each node's tokens from the root's child down to the node itself."""
    out: list[list[int]] = []
    for j, parent in enumerate(parents):
        out.append((out[parent] if parent >= 0 else []) + [tokens[j]])
    return out


def depths(parents: list[int]) -> list[int]:
    d: list[int] = []
    for p in parents:
        d.append(1 if p < 0 else d[p] + 1)
    return d


def attention_mask(parents: list[int]) -> torch.Tensor:
    """``[T+1, T+1]`` bool over (root, nodes): each sees the root, its ancestors and itself."""
    t = len(parents)
    mask = torch.zeros(t + 1, t + 1, dtype=torch.bool)
    mask[:, 0] = True
    for j, p in enumerate(parents):
        row = j + 1
        if p >= 0:
            mask[row] = mask[p + 1]
        mask[row, row] = True
    return mask


def verify_tree_greedy(logits: torch.Tensor, tokens: torch.Tensor, parents: list[int]) -> TreeVerdict:
    """``logits``: ``[T+1, V]`` (root row first); ``tokens``: ``[T]``."""
    best = torch.argmax(logits, dim=-1).tolist()  # [T+1]
    toks = tokens.tolist()
    kids = children(parents)
    path: list[int] = []
    node = -1
    while True:
        want = best[node + 1]
        match = next((j for j in kids[node] if toks[j] == want), None)
        if match is None:
            return TreeVerdict(path, want)
        path.append(match)
        node = match


def verify_tree_stochastic(
    p: torch.Tensor,
    q: torch.Tensor,
    tokens: torch.Tensor,
    parents: list[int],
    generator: torch.Generator | None,
) -> TreeVerdict:
    """``p``: target probabilities ``[T+1, V]``; ``q``: ``[T, V]``, row ``j`` the draft
    distribution node ``j`` was drawn from (the same for all children of a node)."""
    toks = tokens.tolist()
    kids = children(parents)
    path: list[int] = []
    node = -1
    while True:
        target = p[node + 1]  # [V]
        accepted = None
        for j in kids[node]:
            x = toks[j]
            a = float(acceptance_probability(target[x], q[j, x]))
            if float(torch.rand(1, generator=generator, dtype=torch.float64)) < a:
                accepted = j
                break
            target = residual_distribution(target, q[j])  # [V]
        if accepted is None:
            return TreeVerdict(path, sample(target, generator))  # recovered (or bonus at a leaf)
        path.append(accepted)
        node = accepted
