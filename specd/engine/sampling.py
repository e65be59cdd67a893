"""The speculative sampling rule (Leviathan et al. 2023; Chen et al. 2023).

Glossary, used throughout the engine:

- **draft tokens** ``d_1..d_K``: proposed by the drafter, each sampled from the draft distribution
  ``q_i`` (after the same warping as the target: temperature, top-k, top-p).
- **accepted**: ``d_i`` is kept with probability ``min(1, p_i(d_i) / q_i(d_i))``, where ``p_i`` is
  the target's distribution at that position. Acceptance stops at the first rejection.
- **recovered**: at the first rejected position ``j`` the token is drawn from the residual
  ``norm(relu(p_j - q_j))`` instead.
- **bonus**: when all ``K`` drafts are accepted, one more token is drawn from ``p_{K+1}``, the
  target's last row, which the verification forward computed anyway.

Every round thus emits ``accepted + 1`` tokens, and each emitted token is distributed exactly as the
target's ``p`` (tested exactly in ``tests/test_sampling.py``). In greedy mode (temperature 0) a
draft is accepted while it equals the target's argmax, and the recovered/bonus token is the argmax:
the output is the target's greedy output.

A deterministic drafter (n-gram lookup) has ``q_i`` one-hot on its proposal: the same rule applies.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from specd.requests import GREEDY_BELOW, MAX_TEMPERATURE, CompletionRequest


@dataclass(frozen=True)
class SamplingParams:
    """How tokens are chosen. ``temperature`` 0 (or below :data:`GREEDY_BELOW`) is greedy.

    ``allowed``: a boolean row ``[n]`` over the **shared vocabulary**, the ids ``0..n-1`` both
    models give the same meaning; the ids it marks may be produced (the tokenizer's real tokens,
    not the embedding's padding rows). Every row at or past ``n`` (a model's padding rows, which
    draft and target may have in different numbers) is cut off, so draft and target logits come
    out the same width. None: every row is allowed (the models then have the same row count).
    Draft and target are restricted alike, so the output follows the target's distribution over
    the allowed ids."""

    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    allowed: torch.Tensor | None = field(default=None, compare=False, repr=False)
    # every id below len(allowed) is allowed: restricting is a slice, no mask (decided once here)
    _cut_only: bool = field(default=False, init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        if not 0.0 <= self.temperature <= MAX_TEMPERATURE:
            raise ValueError(f"temperature must be in [0, {MAX_TEMPERATURE:g}] (0 = greedy), got {self.temperature}")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0, got {self.top_k}")
        if self.allowed is not None:
            object.__setattr__(self, "_cut_only", bool(self.allowed.all()))

    @property
    def greedy(self) -> bool:
        return self.temperature < GREEDY_BELOW


def sampling_params(request: CompletionRequest, allowed: torch.Tensor | None = None) -> SamplingParams:
    """How a validated request's tokens are chosen (``allowed``: see :class:`SamplingParams`)."""
    return SamplingParams(float(request.temperature), float(request.top_p), int(request.top_k), allowed)


def restrict(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """Logits ``[..., V]`` → ``[..., n]``: cut to the shared vocabulary (``n = len(params.allowed)``,
    a view), the ids it does not allow at ``-inf``; unchanged when ``allowed`` is None. A model
    with fewer rows than ``n`` keeps its own ``V`` (a caller pairing models sizes ``allowed`` to
    the smaller: ``specd.engine.vocabulary``)."""
    allowed = params.allowed
    if allowed is None:
        return logits
    n = min(int(allowed.numel()), logits.shape[-1])
    logits = logits[..., :n]
    if params._cut_only:
        return logits
    return logits.masked_fill(~allowed[:n], float("-inf"))


def warp(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """Logits ``[..., V]`` → probabilities ``[..., V]`` after the allowed ids, temperature, top-k
    and top-p.

    Applied identically to draft and target, so the output follows the warped target distribution.
    The temperature divides logits shifted so their maximum is 0, which cannot overflow.
    """
    return warp_restricted(restrict(logits, params), params)


def warp_restricted(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """:func:`warp` of logits that :func:`restrict` has already cut to the shared vocabulary and
    masked (the decoding loop restricts each forward's logits once, then warps them)."""
    logits = logits.float()
    if params.temperature > 0:
        logits = (logits - logits.max(dim=-1, keepdim=True).values) / params.temperature
    if params.top_k and params.top_k < logits.shape[-1]:
        kth = torch.topk(logits, params.top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = torch.softmax(logits, dim=-1)
    if params.top_p < 1.0:
        sorted_p, order = torch.sort(probs, dim=-1, descending=True)
        before = torch.cumsum(sorted_p, dim=-1) - sorted_p  # mass strictly above each token
        sorted_p = sorted_p.masked_fill(before >= params.top_p, 0.0)
        probs = torch.zeros_like(probs).scatter_(-1, order, sorted_p)
        probs = probs / probs.sum(-1, keepdim=True)
    return probs


def acceptance_probability(p_x: torch.Tensor, q_x: torch.Tensor) -> torch.Tensor:
    """``min(1, p(x) / q(x))`` for a drafted ``x`` (``q(x) > 0``, since ``x`` was drawn from ``q``)."""
    return torch.clamp(p_x / q_x, max=1.0)


def residual_distribution(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """``norm(relu(p - q))`` over the last dim: where a recovered token is drawn from.

    The residual mass is the total-variation distance between ``p`` and ``q``; a rejection can only
    happen when it is positive. Should rounding leave it at zero anyway (``p == q`` up to float
    error), ``p`` itself is returned: the recovered token then follows the target, never NaN.
    """
    r = torch.clamp(p - q, min=0.0)
    mass = r.sum(-1, keepdim=True)
    return torch.where(mass > 0, r / torch.where(mass > 0, mass, 1.0), p)


def sample(probs: torch.Tensor, generator: torch.Generator | None) -> int:
    """One token from a probability row ``[V]`` (inverse CDF: one uniform draw, no token of
    probability zero can come out; several times faster than ``torch.multinomial`` here)."""
    cdf = torch.cumsum(probs, dim=-1)  # [V]
    u = torch.rand(1, generator=generator, dtype=cdf.dtype) * cdf[-1]
    return min(int(torch.searchsorted(cdf, u, right=True)), probs.shape[-1] - 1)


@dataclass(frozen=True)
class Verdict:
    """The outcome of verifying one round: ``accepted`` drafts kept, then ``next_token``
    (recovered if ``accepted < K``, else bonus)."""

    accepted: int
    next_token: int


def verify_greedy(target_logits: torch.Tensor, draft_tokens: torch.Tensor) -> Verdict:
    """Greedy: accept while the draft equals the target's argmax; then take the argmax.

    ``target_logits``: ``[K+1, V]``; ``draft_tokens``: ``[K]``.
    """
    best = torch.argmax(target_logits, dim=-1)  # [K+1]
    k = int(draft_tokens.numel())
    mismatch = (best[:k] != draft_tokens).nonzero()
    accepted = int(mismatch[0, 0]) if mismatch.numel() else k
    return Verdict(accepted, int(best[accepted]))


def verify_stochastic(
    p: torch.Tensor,
    q: torch.Tensor,
    draft_tokens: torch.Tensor,
    generator: torch.Generator | None,
) -> Verdict:
    """Rejection sampling over one chain of drafts.

    ``p``: target probabilities ``[K+1, V]``; ``q``: draft probabilities ``[K, V]``;
    ``draft_tokens``: ``[K]``.
    """
    k = int(draft_tokens.numel())
    idx = torch.arange(k)
    accept_p = acceptance_probability(p[idx, draft_tokens], q[idx, draft_tokens])  # [K]
    u = torch.rand(k, generator=generator, dtype=accept_p.dtype)  # [K]
    rejected = (u >= accept_p).nonzero()
    if rejected.numel() == 0:
        return Verdict(k, sample(p[k], generator))  # bonus
    j = int(rejected[0, 0])
    return Verdict(j, sample(residual_distribution(p[j], q[j]), generator))  # recovered
