"""The acceptance rule keeps the target's distribution — exactly, then statistically end to end."""

from __future__ import annotations


import pytest
import torch
from hypothesis import given, settings, strategies as st

from specd.engine.drafters import ModelDrafter
from specd.engine.sampling import (
    SamplingParams,
    acceptance_probability,
    residual_distribution,
    verify_greedy,
    verify_stochastic,
    warp,
)
from specd.engine.policy import FixedK
from specd.engine.speculative import Decoding, generate
from tests.toy import TableLM, exact_joint, padded, table


def output_distribution(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """P(emitted token = x) for one draft position, computed exactly from the implementation's
    own acceptance and residual functions: sum_d q(d)·[accept(d)·1{x=d} + (1-accept(d))·r(x)]."""
    vocab = torch.arange(p.numel())
    accept = torch.zeros_like(p)
    support = q > 0
    accept[support] = acceptance_probability(p[vocab[support]], q[vocab[support]])
    reject_mass = (q * (1 - accept)).sum()
    return q * accept + reject_mass * residual_distribution(p, q)


def _dist(v: int, seed: int, zeros: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(v, generator=g, dtype=torch.float64) ** 3
    if zeros:
        x[torch.randperm(v, generator=g)[:zeros]] = 0
    return x / x.sum()


@pytest.mark.parametrize("seed", range(20))
def test_output_distribution_is_exactly_target(seed: int) -> None:
    p, q = _dist(16, seed), _dist(16, seed + 1000)
    torch.testing.assert_close(output_distribution(p, q), p, atol=1e-6, rtol=0)


@given(v=st.integers(2, 40), seed=st.integers(0, 10**6), zp=st.integers(0, 5), zq=st.integers(0, 5))
@settings(max_examples=200, deadline=None)
def test_output_distribution_exact_with_zeros(v: int, seed: int, zp: int, zq: int) -> None:
    """p_target(x) = 0 for a drafted x, and draft zeros (sub-vocabulary drafts) included."""
    p = _dist(v, seed, zeros=min(zp, v - 1))
    q = _dist(v, seed + 1, zeros=min(zq, v - 1))
    assert abs(float(output_distribution(p, q).sum()) - 1) < 1e-9
    torch.testing.assert_close(output_distribution(p, q), p, atol=1e-6, rtol=0)


def test_identical_models_accept_everything_without_nan() -> None:
    p = _dist(10, 3)
    r = residual_distribution(p, p.clone())
    assert torch.isfinite(r).all() and abs(float(r.sum()) - 1) < 1e-9
    assert bool((acceptance_probability(p, p) == 1).all())
    torch.testing.assert_close(output_distribution(p, p), p, atol=1e-12, rtol=0)
    # a whole chain drafted by the target's own distribution is always accepted
    g = torch.Generator().manual_seed(0)
    pk = torch.stack([_dist(10, s) for s in range(5)]).float()
    drafts = torch.multinomial(pk[:4], 1, generator=g)[:, 0]
    for _ in range(200):
        assert verify_stochastic(pk, pk[:4], drafts, g).accepted == 4


def test_zero_target_probability_is_always_rejected() -> None:
    p = torch.tensor([[0.0, 0.5, 0.5], [1 / 3, 1 / 3, 1 / 3]])
    q = torch.tensor([[1.0, 0.0, 0.0]])
    g = torch.Generator().manual_seed(1)
    for _ in range(100):
        v = verify_stochastic(p, q, torch.tensor([0]), g)
        assert v.accepted == 0 and v.next_token in (1, 2)


def test_greedy_verdict() -> None:
    logits = torch.tensor([[0.0, 5, 1], [3, 0, 1], [0, 0, 9]])
    assert verify_greedy(logits, torch.tensor([1, 0])).__dict__ == {"accepted": 2, "next_token": 2}
    assert verify_greedy(logits, torch.tensor([1, 2])).__dict__ == {"accepted": 1, "next_token": 0}
    assert verify_greedy(logits, torch.tensor([2, 0])).__dict__ == {"accepted": 0, "next_token": 1}


def test_warp_top_k_top_p_temperature() -> None:
    logits = torch.log(torch.tensor([0.5, 0.3, 0.15, 0.05]))
    torch.testing.assert_close(warp(logits, SamplingParams(temperature=1.0)), torch.tensor([0.5, 0.3, 0.15, 0.05]))
    top2 = warp(logits, SamplingParams(temperature=1.0, top_k=2))
    torch.testing.assert_close(top2, torch.tensor([0.625, 0.375, 0, 0]))
    nucleus = warp(logits, SamplingParams(temperature=1.0, top_p=0.8))  # 0.5 + 0.3 reach 0.8
    torch.testing.assert_close(nucleus, torch.tensor([0.625, 0.375, 0, 0]))
    cold = warp(logits, SamplingParams(temperature=0.5))
    assert float(cold[0]) > 0.5 and abs(float(cold.sum()) - 1) < 1e-6
    with pytest.raises(ValueError):
        SamplingParams(temperature=-1)
    with pytest.raises(ValueError):
        SamplingParams(top_p=0)


# -- end to end through the loop: chi-square over the joint distribution of 3 tokens ---------------

def _chi2_pvalue(observed: torch.Tensor, expected: torch.Tensor) -> float:
    keep = expected > 0
    assert float(observed[~keep].sum()) == 0, "sampled a token of probability zero"
    stat = float(((observed[keep] - expected[keep]) ** 2 / expected[keep]).sum())
    df = int(keep.sum()) - 1
    return float(torch.special.gammaincc(torch.tensor(df / 2, dtype=torch.float64),
                                         torch.tensor(stat / 2, dtype=torch.float64)))


@pytest.mark.slow
@pytest.mark.parametrize("k, min_prob", [(1, 0.0), (4, 0.0), (4, 0.5)])
def test_speculative_samples_follow_target(k: int, min_prob: float) -> None:
    """min_prob > 0: the draft stops early on low confidence; the output must not change."""
    vocab, n_new, samples = 4, 3, 100_000
    prompt = [1, 3, 0]
    tgt, drf = TableLM(table(16, vocab, seed=11)), TableLM(table(16, vocab, seed=12, scale=1.0))
    params = SamplingParams(temperature=1.0)
    exact = exact_joint(tgt, prompt, n_new)
    counts = torch.zeros_like(exact)
    g = torch.Generator().manual_seed(k)
    drafter = ModelDrafter(drf)
    for _ in range(samples):
        out, _ = generate(tgt, prompt, Decoding(n_new, params, generator=g), drafter,
                          k=FixedK(k, min_prob=min_prob))
        counts[tuple(out)] += 1
    assert _chi2_pvalue(counts.flatten(), exact.flatten() * samples) > 1e-4


@pytest.mark.slow
@pytest.mark.parametrize("k, target_rows, draft_rows, allowed", [
    (4, 6, 5, [True] * 4),  # the target padded further than the draft; a plain cut to 4 ids
    (2, 5, 7, [True] * 4 + [False]),  # the draft padded further; id 4 a [PADn] placeholder, masked
])
def test_speculative_samples_follow_target_on_a_padded_pair(k: int, target_rows: int, draft_rows: int,
                                                            allowed: list[bool]) -> None:
    """Draft and target with different numbers of padding rows (each padding logit high enough to
    take most of the mass if it were allowed): the output follows the target over its 4 real ids."""
    vocab, n_new, samples = 4, 3, 100_000
    prompt = [1, 3, 0]
    tgt = TableLM(padded(table(16, vocab, seed=11), target_rows))
    drf = TableLM(padded(table(16, vocab, seed=12, scale=1.0), draft_rows))
    params = SamplingParams(temperature=1.0, allowed=torch.tensor(allowed))
    exact = exact_joint(tgt, prompt, n_new, vocab)
    counts = torch.zeros_like(exact)
    g = torch.Generator().manual_seed(k)
    drafter = ModelDrafter(drf)
    drafted = 0
    for _ in range(samples):
        out, stats = generate(tgt, prompt, Decoding(n_new, params, generator=g), drafter, k=k)
        counts[tuple(out)] += 1
        drafted += stats.drafted
    assert drafted > samples
    assert _chi2_pvalue(counts.flatten(), exact.flatten() * samples) > 1e-4
