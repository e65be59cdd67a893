"""The speculative decoding loop.

Contract: the tokens produced follow exactly the target model's (warped) distribution; in greedy
mode they are exactly the target's greedy tokens. ``k = 0`` (or no drafter) is plain target-only
decoding through the same code.

Cache invariant at the top of each round: the target's cache holds ``seq[:-1]``; ``seq[-1]`` (the
last emitted token) is fed together with the drafts, so one target forward over ``K + 1`` tokens
yields the ``K + 1`` distributions that verify ``d_1..d_K`` and give the bonus token.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

import torch

from specd.engine import tree
from specd.engine.drafters import Drafter, KeepDrafting, Proposal
from specd.engine.sampling import (
    SamplingParams,
    Verdict,
    restrict,
    sample,
    verify_greedy,
    verify_stochastic,
    warp,
)
from specd.engine.policy import FixedK, KPolicy
from specd.models.protocol import CausalLM


@dataclass
class GenerationStats:
    mode: str = "spec"
    prompt_tokens: int = 0
    prefill_reused: int = 0  # target prompt tokens whose KV came from the previous request
    new_tokens: int = 0
    rounds: int = 0
    drafted: int = 0
    accepted: int = 0
    drafted_at: list[int] = field(default_factory=list)  # per draft position i: rounds that drafted it
    accepted_at: list[int] = field(default_factory=list)  # ... and rounds that accepted it
    tree_nodes: int = 0  # token-tree rounds: nodes verified (chain + extra candidates)
    branch_hits: int = 0  # ... rounds whose accepted path left the chain for another candidate
    prefill_ms: float = 0.0
    ttft_ms: float = 0.0
    total_ms: float = 0.0
    stop_reason: str = ""  # "stop_token" | "max_tokens" | "stop_string" | "context" | "cancelled"

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0

    @property
    def mean_accepted_len(self) -> float:
        """Tokens emitted per round: 1 + accepted / rounds (the recovered/bonus token counts)."""
        return 1.0 + self.accepted / self.rounds if self.rounds else 0.0

    @property
    def decode_ms_per_token(self) -> float:
        return (self.total_ms - self.prefill_ms) / self.new_tokens if self.new_tokens else 0.0

    def as_dict(self) -> dict:
        return {
            "mode": self.mode,
            "prompt_tokens": self.prompt_tokens,
            "prefill_reused": self.prefill_reused,
            "new_tokens": self.new_tokens,
            "rounds": self.rounds,
            "drafted": self.drafted,
            "accepted": self.accepted,
            "acceptance_rate": round(self.acceptance_rate, 4),
            "mean_accepted_len": round(self.mean_accepted_len, 4),
            "accepted_at": list(self.accepted_at),
            "drafted_at": list(self.drafted_at),
            "tree_nodes": self.tree_nodes,
            "branch_hits": self.branch_hits,
            "prefill_ms": round(self.prefill_ms, 3),
            "ttft_ms": round(self.ttft_ms, 3),
            "decode_ms_per_token": round(self.decode_ms_per_token, 3),
            "total_ms": round(self.total_ms, 3),
            "stop_reason": self.stop_reason,
        }


# Called after each round with all tokens generated so far; returning True stops generation
# (stop strings). To cancel, raise from it.
RoundCallback = Callable[[list[int]], bool]


def generate(
    target: CausalLM,
    prompt: list[int],
    *,
    max_new_tokens: int,
    params: SamplingParams = SamplingParams(),
    drafter: Drafter | None = None,
    k: "int | KPolicy" = 4,
    stop_ids: frozenset[int] = frozenset(),
    generator: torch.Generator | None = None,
    on_round: RoundCallback | None = None,
) -> tuple[list[int], GenerationStats]:
    """Generate up to ``max_new_tokens`` after ``prompt``; returns (new tokens, stats).

    A token in ``stop_ids`` ends generation and is not returned.
    """
    if not prompt:
        raise ValueError("empty prompt")
    policy = FixedK(k) if isinstance(k, int) else k
    speculate = drafter is not None and policy.k_max > 0
    stats = GenerationStats(mode="spec" if speculate else "target", prompt_tokens=len(prompt))
    t0 = time.perf_counter()

    # -- prefill: reuse the longest cached prefix, compute the rest (all but the last token)
    context = torch.tensor(prompt[:-1], dtype=torch.long)
    reused = target.common_prefix(context)
    target.rollback(reused)
    if reused < len(context):
        target.forward(context[reused:])
    stats.prefill_reused = reused
    if speculate:
        drafter.prefill(prompt[:-1])
    stats.prefill_ms = (time.perf_counter() - t0) * 1e3

    seq = list(prompt)
    out: list[int] = []
    capacity = min(target.max_len, drafter.max_len) if speculate else target.max_len
    room = capacity - len(seq)  # the caches must hold every token fed
    budget = min(max_new_tokens, room)
    while len(out) < budget:
        remaining = budget - len(out)
        if speculate:
            # never draft past the budget: K drafts + 1 recovered/bonus token
            kr = min(policy.choose(seq), remaining - 1)
            drafted_before, accepted_before = stats.drafted, stats.accepted
            keep = policy.keep_drafting if policy.gated else None
            new = _speculative_round(target, drafter, seq, kr, params, generator, stats, keep)
            policy.observe(stats.drafted - drafted_before, stats.accepted - accepted_before)
        else:
            new = [_target_step(target, seq, params, generator).next_token]
        stats.rounds += 1
        if stats.rounds == 1:
            stats.ttft_ms = (time.perf_counter() - t0) * 1e3
        stop_here = next((i for i, t in enumerate(new) if t in stop_ids), None)
        if stop_here is not None:
            out += new[:stop_here]
            seq += new[:stop_here]
            stats.stop_reason = "stop_token"
            break
        out += new
        seq += new
        if on_round is not None and on_round(out):
            stats.stop_reason = "stop_string"
            break
    else:
        stats.stop_reason = "max_tokens" if budget == max_new_tokens else "context"
    stats.new_tokens = len(out)
    stats.total_ms = (time.perf_counter() - t0) * 1e3
    return out, stats


def _target_step(
    target: CausalLM, seq: list[int], params: SamplingParams, generator: torch.Generator | None
) -> Verdict:
    logits = restrict(target.forward(torch.tensor(seq[-1:], dtype=torch.long))[-1], params)  # [V]
    if params.greedy:
        return Verdict(0, int(torch.argmax(logits)))
    return Verdict(0, sample(warp(logits, params), generator))


def _speculative_round(
    target: CausalLM,
    drafter: Drafter,
    seq: list[int],
    k: int,
    params: SamplingParams,
    generator: torch.Generator | None,
    stats: GenerationStats,
    keep: KeepDrafting | None = None,
) -> list[int]:
    """One round; returns the emitted tokens: accepted drafts, then the recovered/bonus token."""
    if k <= 0:
        return [_target_step(target, seq, params, generator).next_token]
    proposal = drafter.propose(seq, k, params, generator, keep)
    if proposal.parents is not None:
        return _tree_round(target, drafter, seq, proposal, params, generator, stats)
    drafts = proposal.tokens  # [k]
    k = int(drafts.numel())
    n = len(seq)
    logits = restrict(target.forward(torch.cat([torch.tensor(seq[-1:], dtype=torch.long), drafts])), params)  # [k+1, V]
    if params.greedy:
        verdict = verify_greedy(logits, drafts)
    else:
        p = warp(logits, params)  # [k+1, V]
        q = proposal.probs if proposal.probs is not None else _one_hot(drafts, p.shape[-1])  # [k, V]
        verdict = verify_stochastic(p, q, drafts, generator)
    a = verdict.accepted
    target.rollback(n + a)  # cache: seq + d_1..d_a; the next token is fed next round
    drafter.commit(n + a)
    _count(stats, k, a)
    return drafts[:a].tolist() + [verdict.next_token]


def _tree_round(
    target: CausalLM,
    drafter: Drafter,
    seq: list[int],
    proposal: Proposal,
    params: SamplingParams,
    generator: torch.Generator | None,
    stats: GenerationStats,
) -> list[int]:
    """Verify a token tree in one target forward; keep the accepted path in both caches."""
    n = len(seq)
    fits = target.max_len - n  # the forward writes root + nodes at slots n-1 .. n-1+T
    tokens, parents = proposal.tokens[:fits], proposal.parents[:fits]  # [T]; the chain comes first
    probs = proposal.probs[:fits] if proposal.probs is not None else None  # [T, V]
    t = int(tokens.numel())
    positions = (n - 1) + torch.tensor([0] + tree.depths(parents))  # [T+1]
    feed = torch.cat([torch.tensor(seq[-1:], dtype=torch.long), tokens])  # [T+1]
    logits = restrict(target.forward(feed, positions, tree.attention_mask(parents)), params)  # [T+1, V]
    if params.greedy:
        verdict = tree.verify_tree_greedy(logits, tokens, parents)
    else:
        q = probs if probs is not None else _one_hot(tokens, logits.shape[-1])  # [T, V]
        verdict = tree.verify_tree_stochastic(warp(logits, params), q, tokens, parents, generator)
    path = verdict.path
    target.keep(n, torch.tensor(path, dtype=torch.long))  # cache: seq + the accepted path
    chain = proposal.chain_len
    on_chain = 0
    while on_chain < len(path) and path[on_chain] == on_chain:
        on_chain += 1
    drafter.commit(n + on_chain)  # the drafter's cache holds chain drafts only
    stats.tree_nodes += t
    stats.branch_hits += int(on_chain < len(path))
    _count(stats, min(chain, t), len(path))
    return tokens[path].tolist() + [verdict.next_token]


def _one_hot(tokens: torch.Tensor, vocab: int) -> torch.Tensor:
    """The draft distribution of deterministic drafts (n-gram lookup, greedy): one-hot rows."""
    return torch.zeros(int(tokens.numel()), vocab).scatter_(1, tokens[:, None], 1.0)


def _count(stats: GenerationStats, drafted: int, accepted: int) -> None:
    """Per round: ``drafted`` draft positions (a tree's depth), ``accepted`` of them kept."""
    stats.drafted += drafted
    stats.accepted += accepted
    _grow(stats.drafted_at, drafted)
    _grow(stats.accepted_at, drafted)
    for i in range(drafted):
        stats.drafted_at[i] += 1
    for i in range(accepted):
        stats.accepted_at[i] += 1


def _grow(counts: list[int], n: int) -> None:
    counts.extend([0] * (n - len(counts)))
