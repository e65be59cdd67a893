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
from dataclasses import dataclass, replace
from typing import Callable

import torch

from specd.engine import tree
from specd.engine.budget import HEADS, MODEL, DraftBudget
from specd.engine.drafters import Chain, Drafter, Tree
from specd.engine.policy import FixedK, KPolicy
from specd.engine.prefill import prefill as prefill_cache
from specd.engine.results import GenerationStats, Round
from specd.engine.sampling import SamplingParams, restrict, sample, verify_greedy, verify_stochastic, warp_restricted
from specd.engine.timeline import NO_TIMELINE, NoTimeline, Timeline
from specd.models.protocol import CausalLM


# The ids allowed next (``[n]`` bool over the shared vocabulary) after a sequence (the prompt, then
# tokens generated or drafted), or None where nothing is constrained; once None for a sequence, None
# for every sequence extending it. Token healing's: the first tokens must cover the text taken out of
# the prompt (``specd.engine.healing``).
Constraint = Callable[[list[int]], "torch.Tensor | None"]


@dataclass(frozen=True)
class Decoding:
    """What to generate: at most ``max_new_tokens``, chosen by ``params``; a token in
    ``stop_ids`` ends generation and is not returned; ``generator`` seeds sampling;
    ``constraint`` masks the target's rows it applies to, in verification as in a target step, so
    every token follows the constrained target (drafts it disallows are rejected)."""

    max_new_tokens: int
    params: SamplingParams = SamplingParams()
    stop_ids: frozenset[int] = frozenset()
    generator: torch.Generator | None = None
    constraint: Constraint | None = None


# Called after each round with all tokens generated so far; returning True stops generation
# (stop strings). To cancel, raise from it.
RoundCallback = Callable[[list[int]], bool]
# Brings the caches (the target's, and the drafter's when the flag says drafts are made) up to all
# prompt tokens but the last; returns the target tokens reused. The engine's goes through its prefix
# cache, in chunks.
Prefill = Callable[[list[int], bool], int]


def generate(
    target: CausalLM,
    prompt: list[int],
    decoding: Decoding,
    drafter: Drafter | None = None,
    k: "int | KPolicy" = 0,
    on_round: RoundCallback | None = None,
    prefill: Prefill | None = None,
    timeline: Timeline | NoTimeline = NO_TIMELINE,
) -> tuple[list[int], GenerationStats]:
    """Generate after ``prompt``; returns (new tokens, stats). ``k``: drafts per round, or the
    policy that chooses them; 0 (or no drafter) is target-only decoding through the same loop.
    ``prefill``: how the caches reach the prompt (default: reuse the live caches, one forward).
    ``timeline``: where the time goes, phase by phase (``specd.engine.timeline``)."""
    if not prompt:
        raise ValueError("empty prompt")
    policy = FixedK(k) if isinstance(k, int) else k
    if drafter is None or policy.k_max <= 0:
        drafter = None
    stats = GenerationStats(mode="spec" if drafter else "target", prompt_tokens=len(prompt))
    t0 = time.perf_counter()
    with timeline.span("prefill"):
        stats.prefill_reused = (prefill(prompt, drafter is not None) if prefill is not None
                                else _prefill(target, drafter, prompt))
    stats.prefill_ms = (time.perf_counter() - t0) * 1e3
    with timeline.span("decode"):
        out = _decode(target, prompt, decoding, drafter, policy, on_round, timeline, stats, t0)
    stats.new_tokens = len(out)
    stats.total_ms = (time.perf_counter() - t0) * 1e3
    return out, stats


def _decode(target: CausalLM, prompt: list[int], decoding: Decoding, drafter: Drafter | None, policy: KPolicy,
            on_round: RoundCallback | None, timeline: Timeline | NoTimeline, stats: GenerationStats,
            t0: float) -> list[int]:
    """The rounds after the prefill; returns the new tokens (``stats`` counts them)."""
    seq, out = list(prompt), []
    capacity = min(target.max_len, drafter.max_len) if drafter else target.max_len
    budget = min(decoding.max_new_tokens, capacity - len(seq))  # the caches must hold every token fed
    while len(out) < budget:
        if drafter:
            r = speculative_round(target, drafter, seq, policy.budget(seq, budget - len(out)), decoding, timeline)
            if r.drafted:  # (a tree's chain: how far along it the path went)
                policy.observe(r.drafted, r.on_chain if r.tree_nodes else r.accepted, r.source)
            if r.siblings_tried:
                policy.observe_branch(r.siblings_tried, r.branch_hit, r.source)
            if r.rows:  # what the round cost, for a policy that follows this machine's speed
                stepped = r.source in (MODEL, HEADS)  # drafts that paid a step each (lookup's are free)
                policy.observe_costs(r.rows, r.verify_ms, r.drafted if stepped else 0, r.draft_ms, r.source)
        else:
            r = Round([_target_step(target, seq, decoding, timeline)])
        stats.add(r)
        if stats.rounds == 1:
            stats.ttft_ms = (time.perf_counter() - t0) * 1e3
        stop = next((i for i, t in enumerate(r.tokens) if t in decoding.stop_ids), None)
        new = r.tokens if stop is None else r.tokens[:stop]
        out += new
        seq += new
        if stop is not None:
            stats.stop_reason = "stop_token"
        elif on_round is not None:
            with timeline.span("stream"):
                if on_round(out):
                    stats.stop_reason = "stop_string"
        timeline.round_done(len(new), r.drafted, r.accepted)
        if stats.stop_reason:
            break
    else:
        stats.stop_reason = "max_tokens" if budget == decoding.max_new_tokens else "context"
    return out


def _prefill(target: CausalLM, drafter: Drafter | None, prompt: list[int]) -> int:
    """Bring the caches up to all prompt tokens but the last, reusing the longest cached prefix;
    returns the target tokens reused."""
    context = torch.tensor(prompt[:-1], dtype=torch.long)
    reused = prefill_cache(target, "target", context, None, max(1, len(context))).reused  # one forward
    if drafter is not None:
        drafter.prefill(prompt[:-1])
    return reused


def _target_step(target: CausalLM, seq: list[int], decoding: Decoding,
                 timeline: Timeline | NoTimeline = NO_TIMELINE) -> int:
    params = decoding.params
    with timeline.span("verify"):
        row = target.forward(torch.tensor(seq[-1:], dtype=torch.long))[-1]  # [V]
    with timeline.span("accept"):
        logits = constrain(restrict(row, params)[None], decoding, seq, [[]])[0]  # [n]: the shared vocabulary
        if params.greedy:
            return int(torch.argmax(logits))
        return sample(warp_restricted(logits, params), decoding.generator)


def speculative_round(target: CausalLM, drafter: Drafter, seq: list[int], budget: DraftBudget,
                      decoding: Decoding, timeline: Timeline | NoTimeline = NO_TIMELINE) -> Round:
    """Draft under ``budget``, verify in one target forward, roll both caches back to what holds."""
    t0 = time.perf_counter()
    with timeline.span("draft"):
        proposal = drafter.propose(seq, budget, decoding.params, decoding.generator)
    t1 = time.perf_counter()
    draft_ms = (t1 - t0) * 1e3 - proposal.catch_up_ms
    if isinstance(proposal, Tree):
        return replace(tree_round(target, drafter, seq, proposal, decoding, timeline), draft_ms=draft_ms)
    if len(proposal) == 0:
        token = _target_step(target, seq, decoding, timeline)
        return Round([token], rows=1, verify_ms=(time.perf_counter() - t1) * 1e3, draft_ms=draft_ms)
    return replace(chain_round(target, drafter, seq, proposal, decoding, timeline), draft_ms=draft_ms)


def chain_round(target: CausalLM, drafter: Drafter, seq: list[int], chain: Chain, decoding: Decoding,
                timeline: Timeline | NoTimeline = NO_TIMELINE) -> Round:
    """Verify a chain of drafts; keep the accepted prefix in both caches."""
    params = decoding.params
    drafts = chain.tokens  # [k]
    k, n = len(chain), len(seq)
    t0 = time.perf_counter()
    with timeline.span("verify"):
        scores = target.forward(torch.cat([torch.tensor(seq[-1:], dtype=torch.long), drafts]))  # [k+1, V]
    verify_ms = (time.perf_counter() - t0) * 1e3
    with timeline.span("accept"):
        logits = restrict(scores, params)  # [k+1, n]
        if decoding.constraint is not None:
            logits = constrain(logits, decoding, seq, [drafts[:i].tolist() for i in range(k + 1)])
        if params.greedy:
            verdict = verify_greedy(logits, drafts)
        else:
            p = warp_restricted(logits, params)  # [k+1, n]
            q = chain.probs if chain.probs is not None else _one_hot(drafts, p.shape[-1])  # [k, V]
            verdict = verify_stochastic(p, q, drafts, decoding.generator)
    a = verdict.accepted
    with timeline.span("rollback"):
        target.rollback(n + a)  # cache: seq + d_1..d_a; the next token is fed next round
        drafter.commit(n + a)
    return Round(drafts[:a].tolist() + [verdict.next_token], k, a, chain.source, rows=k + 1, verify_ms=verify_ms)


def tree_round(target: CausalLM, drafter: Drafter, seq: list[int], proposal: Tree, decoding: Decoding,
               timeline: Timeline | NoTimeline = NO_TIMELINE) -> Round:
    """Verify a token tree in one target forward; keep the accepted path in both caches."""
    params = decoding.params
    n = len(seq)
    fits = target.max_len - n  # the forward writes root + nodes at slots n-1 .. n-1+T
    tokens, parents = proposal.tokens[:fits], proposal.parents[:fits]  # [T]; the chain comes first
    probs = proposal.probs[:fits] if proposal.probs is not None else None  # [T, V]
    t = int(tokens.numel())
    positions = (n - 1) + torch.tensor([0] + tree.depths(parents))  # [T+1]
    feed = torch.cat([torch.tensor(seq[-1:], dtype=torch.long), tokens])  # [T+1]
    t0 = time.perf_counter()
    with timeline.span("verify"):
        scores = target.forward(feed, positions, tree.attention_mask(parents))  # [T+1, V]
    verify_ms = (time.perf_counter() - t0) * 1e3
    with timeline.span("accept"):
        logits = restrict(scores, params)  # [T+1, n]
        if decoding.constraint is not None:
            logits = constrain(logits, decoding, seq, [[]] + tree.paths(tokens.tolist(), parents))
        if params.greedy:
            verdict = tree.verify_tree_greedy(logits, tokens, parents)
        else:
            q = probs if probs is not None else _one_hot(tokens, logits.shape[-1])  # [T, V]
            verdict = tree.verify_tree_stochastic(warp_restricted(logits, params), q, tokens, parents,
                                                  decoding.generator)
    path = verdict.path
    with timeline.span("rollback"):
        target.keep(n, torch.tensor(path, dtype=torch.long))  # cache: seq + the accepted path
        on_chain = 0
        while on_chain < len(path) and path[on_chain] == on_chain:
            on_chain += 1
        drafter.commit(n + on_chain)  # the drafter's cache holds chain drafts only
    chain = min(proposal.chain_len, t)
    # the candidates beside the first draft, judged in turn once it missed (the last one tried
    # is the path's first node when the path left the chain there)
    beside = [j for j in range(t) if parents[j] == -1 and j != 0]
    tried = 0
    if chain and on_chain == 0:
        tried = beside.index(path[0]) + 1 if path else len(beside)
    return Round(tokens[path].tolist() + [verdict.next_token], chain, len(path), proposal.source,
                 tree_nodes=t, branch_hit=on_chain < len(path), on_chain=on_chain, siblings_tried=tried,
                 rows=t + 1, verify_ms=verify_ms)


def constrain(logits: torch.Tensor, decoding: Decoding, seq: list[int], extras: list[list[int]]) -> torch.Tensor:
    """``logits`` ``[R, n]`` under ``decoding.constraint``: row ``r`` predicts the token after
    ``seq + extras[r]``, its disallowed ids at ``-inf``. The same tensor, uncopied, when nothing
    after ``seq`` is constrained (every round once token healing's text is covered)."""
    c = decoding.constraint
    if c is None or c(seq) is None:
        return logits
    out = logits.clone()
    for r, extra in enumerate(extras):
        mask = c(seq + extra)  # [n'] or None
        if mask is not None:
            n = min(int(mask.numel()), out.shape[-1])
            out[r, :n].masked_fill_(~mask[:n], float("-inf"))
            out[r, n:] = float("-inf")
    return out


def _one_hot(tokens: torch.Tensor, vocab: int) -> torch.Tensor:
    """The draft distribution of deterministic drafts (n-gram lookup, greedy): one-hot rows."""
    return torch.zeros(int(tokens.numel()), vocab).scatter_(1, tokens[:, None], 1.0)
