"""Prompt-lookup drafting: what it proposes, and that the output stays the target's."""

from __future__ import annotations

import pytest
import torch

from specd.engine.engine import CompletionRequest
from specd.engine.ngram import HybridDrafter, NgramDrafter, find, lookup
from specd.engine.sampling import SamplingParams
from specd.engine.speculative import Decoding, generate
from tests.test_sampling import _chi2_pvalue, output_distribution
from tests.tiny import tiny_engine
from tests.toy import TableLM, exact_joint, table


def test_lookup_takes_the_latest_longest_match() -> None:
    seq = [1, 2, 3, 9, 1, 2, 3, 7, 8, 5, 2, 3]
    assert lookup(seq, 3) == [7, 8, 5]  # "2 3" last seen before 7
    assert lookup([5, 6, 7, 5, 6], 4) == [7, 5, 6]
    assert lookup([1, 2, 3, 4], 3) == []  # no repeated tail
    assert lookup([4, 4], 3, min_ngram=1) == [4]
    assert find(seq) == (2, 5)  # the match's length and where its latest earlier occurrence starts
    assert find([1, 2, 3, 4, 9, 1, 2, 3, 4]) == (4, 0) and find([1, 2, 3, 4]) == (0, -1)


def test_one_hot_drafts_keep_the_target_distribution_exactly() -> None:
    g = torch.Generator().manual_seed(0)
    p = torch.rand(12, generator=g, dtype=torch.float64)
    p /= p.sum()
    for d in range(12):
        q = torch.zeros(12, dtype=torch.float64)
        q[d] = 1.0
        torch.testing.assert_close(output_distribution(p, q), p, atol=1e-12, rtol=0)


@pytest.mark.parametrize("drafter", ["ngram", "both"])
def test_greedy_matches_target_with_lookup_drafts(drafter: str) -> None:
    engine = tiny_engine(k=4, drafter=drafter)
    prefix = "x = foo(a, b)\ny = foo(a, b)\nz = foo("
    spec = engine.complete(CompletionRequest(prefix, "\nfoo(a, b)\n", max_tokens=30))
    plain = engine.complete(CompletionRequest(prefix, "\nfoo(a, b)\n", max_tokens=30, mode="target"))
    assert spec.tokens == plain.tokens


def test_repetitive_text_is_drafted_by_lookup() -> None:
    """A target that repeats a cycle: lookup drafts are accepted, with no draft model at all."""
    t = table(64, 6, seed=1)
    for pos in range(64):
        for tok in range(6):
            t[pos, tok, (tok + 1) % 6] = 50.0  # always continue the cycle 0 1 2 3 4 5 0 ...
    target = TableLM(t)
    out, stats = generate(target, [0, 1, 2, 3, 4, 5, 0, 1], Decoding(20), NgramDrafter(), k=4)
    assert out == [(2 + i) % 6 for i in range(20)]
    assert stats.accepted > 10 and stats.rounds < 10


def test_hybrid_rounds_say_where_their_drafts_came_from() -> None:
    """Lookup where the context repeats, the model where it finds nothing; each round is labelled
    with its source, so the policy learns lookup's acceptance apart from the model's."""
    from specd.engine.budget import LOOKUP, MODEL, DraftBudget
    from specd.engine.drafters import ModelDrafter
    from specd.engine.speculative import speculative_round

    target, draft = TableLM(table(64, 10, seed=3)), TableLM(table(64, 10, seed=4))
    hybrid = HybridDrafter(NgramDrafter(), ModelDrafter(draft))
    budget = DraftBudget(k=2, lookup_k=3)
    seq = [1, 2, 3, 4]
    for drafter in (hybrid,):
        drafter.prefill(seq[:-1])
    target.forward(torch.tensor(seq[:-1]))
    r = speculative_round(target, hybrid, seq, budget, Decoding(8))
    assert (r.source, r.drafted) == (MODEL, 2)  # no repeated tail: the model drafts
    seq = seq + r.tokens
    repeat = [5, 6, 7, 5, 6]
    seq += repeat
    target.forward(torch.tensor(seq[target.cache_len : -1]))
    r = speculative_round(target, hybrid, seq, budget, Decoding(8))
    assert (r.source, r.drafted) == (LOOKUP, 3)  # "5 6" seen before: what followed it, lookup_k of it
    assert (hybrid.ngram_rounds, hybrid.model_rounds) == (1, 1)


def test_a_completion_counts_its_drafts_by_source() -> None:
    """The request's stats (and the daemon's) split rounds, drafts and acceptance by source."""
    engine = tiny_engine(k=4, drafter="both")
    prefix = "x = foo(a, b)\ny = foo(a, b)\nz = foo(a, b)\nw = foo("
    stats = engine.complete(CompletionRequest(prefix, "", max_tokens=30)).stats
    by = stats.as_dict()["by_source"]
    assert set(by) <= {"model", "lookup"} and by
    assert sum(s["rounds"] for s in by.values()) <= stats.rounds
    assert sum(s["drafted"] for s in by.values()) == stats.drafted
    assert sum(s["accepted"] for s in by.values()) == stats.accepted


@pytest.mark.slow
def test_lookup_drafts_sample_from_the_target() -> None:
    vocab, n_new, samples = 3, 3, 100_000
    prompt = [0, 1, 2, 0, 1]
    tgt = TableLM(table(16, vocab, seed=21))
    exact = exact_joint(tgt, prompt, n_new)
    counts = torch.zeros_like(exact)
    g = torch.Generator().manual_seed(3)
    drafter = HybridDrafter(NgramDrafter(min_ngram=1), NgramDrafter(min_ngram=1))
    for _ in range(samples):
        out, _ = generate(tgt, prompt, Decoding(n_new, SamplingParams(temperature=1.0), generator=g),
                          drafter, k=3)
        counts[tuple(out)] += 1
    assert _chi2_pvalue(counts.flatten(), exact.flatten() * samples) > 1e-4
