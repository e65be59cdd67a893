"""Drafting with an EAGLE head (specd.engine.eagle_drafter): the output stays exactly the target's,
and the head's context is the target's own features at the right positions."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from specd.engine.eagle_drafter import EagleDrafter
from specd.engine.sampling import SamplingParams
from specd.engine.speculative import Decoding, generate
from specd.models.eagle import EagleHead, EagleShape
from specd.models.heads import HeadsInfo, load
from tests.test_sampling import _chi2_pvalue
from tests.tiny import tiny_decoder


def _eagle(target, seed: int = 0, scale: float = 0.3, vocab: int | None = None) -> EagleHead:
    """A random EAGLE head over ``target``'s own output rows and embeddings."""
    g = torch.Generator().manual_seed(seed)
    v, h = target.vocab_size, target.config.hidden_size
    ids = torch.arange(v) if vocab is None else torch.randperm(v, generator=g)[:vocab].sort().values
    torch.manual_seed(seed)
    head = EagleHead(EagleShape(h, heads=4, kv_heads=2, head_dim=8, width=48), target.lm_head.weight.float()[ids],
                     ids, lambda rows: target.embed[rows].float(),
                     out_rows=lambda rows: target.lm_head.weight.float()[rows])
    with torch.no_grad():
        head.wo.normal_(0, scale)
        head.down.normal_(0, scale)
    return head


@pytest.mark.parametrize("k", [1, 3, 5])
@pytest.mark.parametrize("vocab", [None, 40])
@pytest.mark.parametrize("bias", [0.0, 2.0])
@pytest.mark.parametrize("width", [1, 3])
def test_greedy_matches_target_with_eagle_drafts(k: int, vocab: int | None, bias: float, width: int) -> None:
    """Whatever the drafts lean to (``context_bias``: the context's tokens, some outside the
    sub-vocabulary), and with siblings beside the first draft (``width``: token trees), greedy
    output is the target's."""
    target = tiny_decoder(seed=0, dtype=torch.bfloat16)
    prompt = [3, 17, 42, 8, 8, 61, 5]
    plain, _ = generate(target, prompt, Decoding(40))
    target.reset()
    drafter = EagleDrafter(target, _eagle(target, vocab=vocab), context_bias=bias, width=width)
    spec, stats = generate(target, prompt, Decoding(40), drafter, k=k)
    assert spec == plain
    assert stats.drafted > 0 and set(stats.by_source) == {"heads"}
    assert drafter.rounds_without_state == 0  # the prefill handed its features over: even round 1 drafts
    assert (stats.tree_nodes > stats.drafted) == (width > 1)  # siblings went with the chains


def test_siblings_are_the_heads_next_choices_and_some_are_right() -> None:
    """``width`` 3: beside the first draft the tree holds the head's 2nd and 3rd choices at that
    position, and on a head that is often wrong some rounds are won by a sibling (a branch hit)."""
    target = tiny_decoder(seed=1, dtype=torch.bfloat16)
    head = _eagle(target, seed=1)  # (random: right about 1 round in 60, a sibling as often)
    drafter = EagleDrafter(target, head, width=3)
    trees: list = []
    propose = drafter.propose

    def recorded(seq, *a, **kw):
        proposal = propose(seq, *a, **kw)
        if proposal.tokens.numel():  # (none where no draft fits the tokens left)
            trees.append(proposal)
        return proposal

    drafter.propose = recorded
    out, stats = generate(target, [3, 17, 42, 8, 8, 61, 5], Decoding(60), drafter, k=2)
    assert trees and all(t.parents[:2] in ([-1, 0], [-1, -1]) for t in trees)
    for t in trees:
        siblings = [int(x) for x, p in zip(t.tokens, t.parents) if p == -1][1:]
        assert len(siblings) == 2 and int(t.tokens[0]) not in siblings
    assert stats.branch_hits > 0


def test_the_policy_takes_siblings_while_their_rows_are_cheap() -> None:
    """K auto's branch gate: on a curve flat over five rows every sibling that fits is taken; where
    a row costs a tenth of a step, an unlikely sibling is not; rejected siblings lower the
    estimate until even cheap rows are refused."""
    from specd.engine.policy import AdaptiveK, CostModel
    from specd.engine.budget import HEADS

    flat = AdaptiveK(CostModel(2.0, (30.0, 30.1, 30.2, 30.3, 30.4, 34.0, 38.0)), source=HEADS)
    assert flat.keep_branching([0.4], 0) and flat.keep_branching([0.4], 1) and flat.keep_branching([0.4, 0.5], 1)
    assert not flat.keep_branching([0.4, 0.5, 0.5], 1)  # the sixth row costs 3.6 ms
    assert not flat.keep_branching([], 0)
    steep = AdaptiveK(CostModel(2.0, tuple(30.0 + 3.0 * i for i in range(8))), source=HEADS)
    assert not steep.keep_branching([0.4], 0)
    assert steep.keep_branching([0.01], 0) or True  # (the gain is the sibling's estimate, 0.1 here)
    for _ in range(200):
        flat.observe_branch(2, False, HEADS)
    assert flat.sibling[0] < 0.05 and not flat.keep_branching([0.4, 0.5], 1)
    flat.observe_branch(1, True, "lookup")  # another source's rounds teach nothing
    assert flat.sibling[0] < 0.05


def test_drafts_lean_to_the_contexts_last_tokens(monkeypatch: pytest.MonkeyPatch) -> None:
    """``context_bias``: a bias large enough makes every draft one of the sequence's last
    ``CONTEXT`` tokens, read before the round; without it the same head drafts others too."""
    from specd.engine import eagle_drafter

    target = tiny_decoder(seed=0, dtype=torch.bfloat16)
    prompt = [3, 17, 42, 8, 8, 61, 5, 29, 30, 31]

    def drafts(bias: float, context: int) -> list[tuple[int, set[int]]]:
        target.reset()
        drafter = EagleDrafter(target, _eagle(target, vocab=40), context_bias=bias)
        seen: list[tuple[int, set[int]]] = []
        propose = drafter.propose

        def recorded(seq, *a, **kw):
            chain = propose(seq, *a, **kw)
            seen.extend((int(t), set(seq[-context:])) for t in chain.tokens)
            return chain

        drafter.propose = recorded
        generate(target, prompt, Decoding(30), drafter, k=3)
        return seen

    leaning = drafts(1e4, eagle_drafter.CONTEXT)
    assert len(leaning) > 10 and all(t in ctx for t, ctx in leaning)
    plain = drafts(0.0, eagle_drafter.CONTEXT)
    assert any(t not in ctx for t, ctx in plain)
    monkeypatch.setattr(eagle_drafter, "CONTEXT", 2)
    narrow = drafts(1e4, 2)
    assert narrow and all(t in ctx for t, ctx in narrow)  # the window is the last CONTEXT tokens


@pytest.mark.parametrize("width", [1, 3])
def test_the_heads_context_is_the_targets_features_in_order(width: int) -> None:
    """After decoding (rollbacks, a second request that shares a prefix; with ``width`` 3 token
    trees whose accepted path left the chain for a sibling), each row of the head's cache is what
    the head computes from the target's own features over the final sequence: the drafter fed the
    right feature and token at every position."""
    target = tiny_decoder(seed=1, dtype=torch.bfloat16)
    head = _eagle(target, seed=1)  # (a seed whose siblings win rounds in both requests)
    drafter = EagleDrafter(target, head, width=width)
    first, stats1 = generate(target, [9, 4, 33, 12, 12, 7], Decoding(20), drafter, k=3)
    prompt = [9, 4, 33, 12, 12, 7] + first[:5] + [50, 51]  # same start, then new tokens
    out, stats = generate(target, prompt, Decoding(20), drafter, k=3)
    assert stats.drafted > 0
    assert (stats1.branch_hits + stats.branch_hits > 0) == (width > 1)
    assert drafter.rounds_without_state == 0  # a sibling's round left the features in order
    seq = prompt + out
    c = drafter.cache
    rows = c.length - 1  # the last row was the last round's own (its feature, the round's token)
    assert c.start == 0 and rows > len(prompt)
    target.reset()  # the features of the whole sequence from one fresh forward
    target.forward(torch.tensor(seq[: rows + 1]))
    feats = target.last_hidden().states  # [rows + 1, H]
    fresh = head.new_cache(256)
    head.extend(fresh, feats[:rows], seq[1 : rows + 1])
    torch.testing.assert_close(c.k[:, :rows].float(), fresh.k[:, :rows].float(), atol=0.05, rtol=0.05)
    torch.testing.assert_close(c.v[:, :rows].float(), fresh.v[:, :rows].float(), atol=0.05, rtol=0.05)


def test_a_shorter_request_after_a_long_one_drafts_from_its_own_rows() -> None:
    """The head's cache keeps the last ``window`` rows of a long request; a later, shorter request
    must not start from there (the daemon failed with an empty head forward: its cache began
    beyond the position the round drafts from)."""
    target = tiny_decoder(seed=3, dtype=torch.bfloat16)
    drafter = EagleDrafter(target, _eagle(target, seed=4), window=8)
    generate(target, list(range(3, 63)), Decoding(10), drafter, k=2)
    assert drafter.cache.start > 20  # the long request's window
    target.reset()
    prompt = [60, 61, 62, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15]
    plain, _ = generate(target, prompt, Decoding(16))
    target.reset()
    out, stats = generate(target, prompt, Decoding(16), drafter, k=2)
    assert out == plain
    assert stats.drafted > 0 and drafter.cache.start <= len(prompt)


@pytest.mark.slow
def test_the_prompts_rows_come_with_its_prefill() -> None:
    """The drafter's prefill brings the head over the prompt (the engine's prefill and ``warm``
    call it), so no round, the first included, pays for the prompt's rows."""
    target = tiny_decoder(seed=0, dtype=torch.bfloat16)
    drafter = EagleDrafter(target, _eagle(target))
    prompt = list(range(3, 60))
    target.reset()
    target.forward(torch.tensor(prompt[:-1]))
    drafter.prefill(prompt[:-1])
    assert drafter.cache.length == len(prompt) - 2  # rows 0 .. len - 3; the first round adds its own
    rounds = []
    generate(target, prompt, Decoding(12), drafter, k=2, on_round=lambda r: rounds.append(drafter.catch_up_ms))
    assert rounds and all(ms == 0.0 for ms in rounds)


@pytest.mark.slow
def test_rows_a_round_catches_up_on_are_not_draft_cost() -> None:
    """Where the prefill did not bring the head over the prompt (here: the target's alone), the
    first round does, and reports that time apart (K auto would otherwise price every draft step
    as a prefill); a round that only adds its predecessor's tokens reports none."""
    target = tiny_decoder(seed=0, dtype=torch.bfloat16)
    drafter = EagleDrafter(target, _eagle(target))
    rounds = []

    def target_only(prompt: list[int], with_draft: bool) -> int:
        target.reset()
        target.forward(torch.tensor(prompt[:-1]))
        return 0

    generate(target, list(range(3, 60)), Decoding(12), drafter, k=2,
             on_round=lambda r: rounds.append(drafter.catch_up_ms), prefill=target_only)
    assert rounds[0] > 0  # 55 prompt rows in the first round
    assert all(ms == 0.0 for ms in rounds[1:])  # later rounds add at most their predecessor's drafts + 1


def test_a_round_pays_one_head_forward_per_draft() -> None:
    """The rows a round catches up on share the first draft's forward, and a draft the budget
    stops after pays no forward for the row after it: a round of ``d`` drafts runs the head ``d``
    times (a separate catch-up forward would make every draft step look dearer to K auto)."""
    target = tiny_decoder(seed=0, dtype=torch.bfloat16)
    head = _eagle(target)
    calls: list[int] = []
    extend = head.extend
    head.extend = lambda *a, **kw: (calls.append(1), extend(*a, **kw))[1]  # counts, runs the real one
    drafter = EagleDrafter(target, head)
    per_round: list[tuple[int, int]] = []  # (head forwards, drafts) per round
    propose = drafter.propose

    def counted(*a, **kw):
        calls.clear()
        chain = propose(*a, **kw)
        per_round.append((len(calls), chain.tokens.numel()))
        return chain

    drafter.propose = counted
    generate(target, list(range(3, 20)), Decoding(30), drafter, k=3)
    per_round = per_round[1:]  # the first round's forward also brought the head over the prompt
    assert len(per_round) > 3
    assert all(n == d for n, d in per_round), str(per_round)


@pytest.mark.parametrize(("bias", "width"), [(0.0, 1), (3.0, 1), (0.0, 3)])
def test_eagle_drafts_sample_from_the_target(bias: float, width: int) -> None:
    """Sampling: the joint distribution of the first two tokens with EAGLE drafts is the target's
    exact one (chi-square), with the drafts leaning to the context's tokens too, and with
    siblings beside the first draft (one-hot candidates tried in turn on the residual)."""
    target = tiny_decoder(seed=4, vocab=10, hidden=16)
    head = _eagle(target, seed=5, scale=1.0)
    prompt, v, samples = [1, 2, 3], 10, 20_000
    with torch.no_grad():
        target.reset()
        p1 = torch.softmax(target.forward(torch.tensor(prompt)).double()[-1], -1)
        exact = torch.zeros(v, v, dtype=torch.float64)
        for t1 in range(v):
            target.reset()
            exact[t1] = p1[t1] * torch.softmax(target.forward(torch.tensor(prompt + [t1])).double()[-1], -1)
    g = torch.Generator().manual_seed(0)
    counts = torch.zeros(v, v, dtype=torch.float64)
    drafted = 0
    drafter = EagleDrafter(target, head, context_bias=bias, width=width)
    hits = 0
    for _ in range(samples):
        target.reset()
        out, stats = generate(target, prompt, Decoding(3, SamplingParams(temperature=1.0), generator=g), drafter, k=2)
        counts[out[0], out[1]] += 1
        drafted += stats.drafted
        hits += stats.branch_hits
    assert drafted > samples // 2
    assert (hits > samples // 20) == (width > 1)
    assert _chi2_pvalue(counts.flatten(), exact.flatten() * samples) > 1e-4


@pytest.mark.parametrize("drafter", ["heads", "heads+ngram"])
def test_an_engine_drafts_with_an_eagle_file(tmp_path: Path, drafter: str) -> None:
    """An EAGLE head file, loaded as ``--drafter heads --heads FILE`` loads it, through the engine
    with the prefix cache on: greedy speculative text == target-only text, request after request;
    with prompt lookup in front (``heads+ngram``) too."""
    from specd.engine.config import EngineConfig
    from specd.engine.engine import Engine
    from tests.tiny import tiny_tokenizer

    target = tiny_decoder(seed=0, dtype=torch.bfloat16, vocab=265)
    head = _eagle(target, seed=3)
    path = tmp_path / "eagle.safetensors"
    head.save(path, HeadsInfo("tiny", "", 48, target.config.hidden_size, target.vocab_size))
    back = load(path, lambda rows: target.lm_head.weight.float()[rows], lambda rows: target.embed[rows].float())
    assert isinstance(back, EagleHead) and back.shape == head.shape
    # K fixed: K auto would follow this tiny target's real step times (LiveCosts), against which
    # a random head's drafts may not pay, and draft nothing some runs
    config = EngineConfig(draft=None, drafter=drafter, k=4, prefix_cache_mb=8)
    engine = Engine(target, tiny_tokenizer(), config=config, heads=back)
    sources = exact_sources(engine)
    assert sources == ({"heads", "lookup"} if drafter == "heads+ngram" else {"heads"})


def test_a_short_request_after_a_prefix_cache_restore_is_served() -> None:
    """The daemon's failing sequence, through the engine with the prefix cache on: a request in
    one file, one in another, a longer one back in the first (its prompt's start restored from
    the prefix cache, which holds no features: the head's context begins late), then a short one
    elsewhere, whose sequence ends before that."""
    from specd.engine.config import EngineConfig
    from specd.engine.engine import CompletionRequest, Engine
    from tests.tiny import tiny_tokenizer

    target = tiny_decoder(seed=0, dtype=torch.bfloat16, vocab=265)
    config = EngineConfig(draft=None, drafter="heads", k=3, prefix_cache_mb=8, prefix_block_tokens=16)
    engine = Engine(target, tiny_tokenizer(), config=config, heads=_eagle(target, seed=3))
    body = "".join(f"def f{i}(a, b):\n    return a * {i} + b\n\n" for i in range(6))
    for prefix in (body, "y = 2\n", body + "def g(x):\n    return x", "z = 3\n"):
        spec = engine.complete(CompletionRequest(prefix, "\n", max_tokens=12))
        plain = engine.complete(CompletionRequest(prefix, "\n", max_tokens=12, mode="target"))
        assert spec.tokens == plain.tokens


def test_k_auto_times_one_eagle_step() -> None:
    """K auto's cost of an EAGLE draft (``specd.app.head_step``): one step of the head over a full
    context, leaving the timed cache as it found it, so every timed step costs the same."""
    from specd.app import head_step
    from specd.engine.policy import measure_costs

    target = tiny_decoder(seed=0, dtype=torch.bfloat16, vocab=265)
    head = _eagle(target, seed=3)
    step = head_step(head, context=32)
    d = step()
    assert len(d.tokens) == 1 and 0.0 < d.probs[0] <= 1.0
    assert step().tokens == d.tokens  # the same state, the same cache: the same draft
    cost = measure_costs(target, None, sizes=(1, 2), context=16, reps=2, draft_step=step)
    assert cost.draft_ms > 0


def exact_sources(engine) -> set[str]:
    """Three requests (the last one repetitive, for prompt lookup), each greedy speculative ==
    target-only with drafts made; the draft sources they used."""
    from specd.engine.engine import CompletionRequest

    sources: set[str] = set()
    for prefix in ("def add(a, b):\n    return a", "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n",
                   "x = 1\ny = 2\nx = 1\ny = 2\nx = 1\ny = 2\nx = 1\n"):
        spec = engine.complete(CompletionRequest(prefix, "\n", max_tokens=24))
        plain = engine.complete(CompletionRequest(prefix, "\n", max_tokens=24, mode="target"))
        assert spec.tokens == plain.tokens
        assert spec.stats.drafted > 0
        sources |= set(spec.stats.by_source)
    return sources
