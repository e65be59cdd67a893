"""Token trees keep the contract: greedy output is the target's, sampled output follows the target
exactly (an exact check of the recursive rejection rule, then chi-square on the code path)."""

from __future__ import annotations

import itertools

import pytest
import torch

from specd.engine import tree
from specd.engine.drafters import ModelDrafter
from specd.engine.sampling import SamplingParams, acceptance_probability, residual_distribution
from specd.engine.speculative import Decoding, generate
from tests.tiny import tiny_decoder
from tests.toy import TableLM, exact_joint, padded, table
from tests.test_sampling import _chi2_pvalue, _dist


def test_mask_positions_and_children() -> None:
    # root -> a -> b, and c a sibling of a, d a sibling of b
    parents = [-1, 0, -1, 0]
    assert tree.depths(parents) == [1, 2, 1, 2]
    assert tree.children(parents) == {-1: [0, 2], 0: [1, 3], 1: [], 2: [], 3: []}
    mask = tree.attention_mask(parents).int().tolist()
    assert mask == [[1, 0, 0, 0, 0], [1, 1, 0, 0, 0], [1, 1, 1, 0, 0], [1, 0, 0, 1, 0], [1, 1, 0, 0, 1]]
    with pytest.raises(ValueError):
        tree.children([1, -1])  # a child before its parent


def test_greedy_walks_the_matching_branch() -> None:
    # rows: root, a(0), b(1), c(2); the target wants c after the root, then 7 after c
    logits = torch.full((4, 10), -1.0)
    logits[0, 5] = 1  # root row: argmax 5 = node c's token
    logits[3, 7] = 1  # c's row: bonus 7
    verdict = tree.verify_tree_greedy(logits, torch.tensor([4, 6, 5]), [-1, 0, -1])
    assert verdict.path == [2] and verdict.next_token == 7
    logits[0, 4] = 2  # now the root wants a (4); a's row wants 0 (no child 0): recovered 0
    logits[1, 0] = 1
    verdict = tree.verify_tree_greedy(logits, torch.tensor([4, 6, 5]), [-1, 0, -1])
    assert verdict.path == [0] and verdict.next_token == 0


def _reference_first_token(p: torch.Tensor, q: torch.Tensor, m: int) -> torch.Tensor:
    """Slow reference: the distribution of the first emitted token when a node has ``m`` candidates
    drawn i.i.d. from ``q`` and verified by recursive rejection — every candidate tuple enumerated,
    the acceptance events integrated analytically."""
    vocab = p.numel()
    out = torch.zeros(vocab, dtype=torch.float64)
    for xs in itertools.product(range(vocab), repeat=m):
        weight = float(torch.prod(q[list(xs)]))
        if weight == 0:
            continue
        target, alive = p, 1.0
        for x in xs:
            a = float(acceptance_probability(target[x], q[x]))
            out[x] += weight * alive * a
            alive *= 1 - a
            target = residual_distribution(target, q)
        out += weight * alive * target  # all rejected: recovered from the last residual
    return out


@pytest.mark.parametrize("m", [1, 2, 3])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_recursive_rejection_is_exact(m: int, seed: int) -> None:
    p, q = _dist(5, seed), _dist(5, seed + 100)
    torch.testing.assert_close(_reference_first_token(p, q, m), p, atol=1e-6, rtol=0)
    # q with a zero where p is not, and p with a zero where q is not
    q0 = q.clone(); q0[1] = 0; q0 /= q0.sum()
    p0 = p.clone(); p0[3] = 0; p0 /= p0.sum()
    torch.testing.assert_close(_reference_first_token(p0, q0, m), p0, atol=1e-6, rtol=0)


def test_verify_tree_stochastic_samples_follow_target() -> None:
    """The code path itself, one node with three candidates drawn from q: chi-square vs p."""
    vocab, samples = 6, 20_000
    p, q = _dist(vocab, 7).float(), _dist(vocab, 8).float()
    g = torch.Generator().manual_seed(0)
    counts = torch.zeros(vocab, dtype=torch.float64)
    P = torch.stack([p, torch.full((vocab,), 1.0 / vocab)])  # root row, then the (unused) leaf rows
    P = torch.cat([P[:1], P[1:].expand(3, vocab)])  # [4, V]
    for _ in range(samples):
        cands = torch.multinomial(q, 3, replacement=True, generator=g)
        v = tree.verify_tree_stochastic(P, q.expand(3, vocab), cands, [-1, -1, -1], g)
        first = int(cands[v.path[0]]) if v.path else v.next_token
        counts[first] += 1
    assert _chi2_pvalue(counts, p.double() * samples) > 1e-4


@pytest.mark.parametrize("branch_below", [1.0, 0.6])
def test_greedy_tree_matches_target(branch_below: float) -> None:
    target = tiny_decoder(seed=21, dtype=torch.bfloat16, hidden=64, heads=4, kv_heads=2, max_len=512)
    draft = tiny_decoder(seed=22, dtype=torch.bfloat16, hidden=64, heads=4, kv_heads=2, max_len=512)
    prompt = torch.randint(0, target.vocab_size, (300,), generator=torch.Generator().manual_seed(3)).tolist()
    plain, _ = generate(target, prompt, Decoding(40), k=0)
    drafter = ModelDrafter(draft, branch=3, branch_below=branch_below)
    spec, stats = generate(target, prompt, Decoding(40), drafter, k=4)
    assert spec == plain
    assert stats.tree_nodes > stats.drafted  # extra candidates were verified
    # the caches hold exactly the accepted sequence
    seq = prompt + spec
    assert target.cache.tokens[: target.cache_len].tolist() == seq[: target.cache_len]
    assert draft.cache.tokens[: draft.cache_len].tolist() == seq[: draft.cache_len]


def test_tree_takes_the_sibling_when_the_target_prefers_it() -> None:
    """A draft whose second choice is the target's choice: the tree accepts the sibling and emits
    the bonus from its row, so rounds emit more tokens than a chain of the same depth would."""
    vocab = 8
    t = table(40, vocab, seed=31, scale=4.0)
    d = t.clone()
    # the draft swaps the target's top two tokens everywhere
    top2 = torch.topk(t, 2, dim=-1).indices
    first, second = top2[..., 0:1], top2[..., 1:2]
    d.scatter_(-1, first, torch.gather(t, -1, second)).scatter_(-1, second, torch.gather(t, -1, first))
    target, draft = TableLM(t), TableLM(d)
    plain, _ = generate(target, [1, 2], Decoding(20), k=0)
    spec, stats = generate(target, [1, 2], Decoding(20), ModelDrafter(draft, branch=2), k=3)
    assert spec == plain
    assert stats.branch_hits > 0


@pytest.mark.slow
@pytest.mark.parametrize("target_rows, draft_rows", [(4, 4), (6, 5)])
def test_tree_samples_follow_target(target_rows: int, draft_rows: int) -> None:
    """End to end through the loop: trees with three candidates at every depth, sampled; also on
    a padded pair (padding rows that would dominate if allowed, more of them in the target)."""
    vocab, n_new, samples = 4, 3, 30_000
    prompt = [1, 3, 0]
    tgt = TableLM(padded(table(16, vocab, seed=41), target_rows))
    drf = TableLM(padded(table(16, vocab, seed=42, scale=1.0), draft_rows))
    exact = exact_joint(tgt, prompt, n_new, vocab)
    counts = torch.zeros_like(exact)
    g = torch.Generator().manual_seed(5)
    drafter = ModelDrafter(drf, branch=3)
    allowed = torch.ones(vocab, dtype=torch.bool) if target_rows > vocab else None
    for _ in range(samples):
        out, _ = generate(tgt, prompt, Decoding(n_new, SamplingParams(temperature=1.0, allowed=allowed), generator=g),
                          drafter, k=2)
        counts[tuple(out)] += 1
    assert _chi2_pvalue(counts.flatten(), exact.flatten() * samples) > 1e-4


def test_engine_with_trees_on_matches_target_only() -> None:
    from specd.engine.engine import CompletionRequest
    from tests.tiny import tiny_engine

    engine = tiny_engine(tree="on", tree_width=3, tree_branch_below=1.0)
    request = CompletionRequest(prefix="def add(a, b):\n    return ", suffix="\n", max_tokens=24)
    spec = engine.complete(request)
    plain = engine.complete(CompletionRequest(prefix=request.prefix, suffix=request.suffix,
                                              max_tokens=24, mode="target"))
    assert spec.text == plain.text
    assert spec.stats.tree_nodes > 0


def test_tree_config_from_toml_and_flags() -> None:
    from specd.config import engine_config

    config = engine_config({"tree": "on", "tree_width": 2}, {"tree_width": 4})
    assert (config.tree, config.tree_width) == ("on", 4)
    from tests.tiny import tiny_engine

    with pytest.raises(ValueError, match="tree"):
        tiny_engine(tree="maybe")
