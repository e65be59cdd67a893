"""K auto choosing between two drafters (``--drafter auto``): the draft model or the draft heads,
whichever its estimates and each one's own step cost say makes more tokens per millisecond; the
output stays exactly the target's."""

from __future__ import annotations

import torch

from specd.engine.budget import HEADS, LOOKUP, MODEL
from specd.engine.choice import ChoiceDrafter
from specd.engine.drafters import ModelDrafter
from specd.engine.eagle_drafter import EagleDrafter
from specd.engine.policy import CostModel, StructureK
from specd.engine.speculative import Decoding, generate
from tests.test_eagle_drafter import _eagle, exact_sources
from tests.tiny import tiny_decoder

# the default pair's curve on this 2-core machine (bench/RESULTS.md, session 20): the 0.5B draft's
# step ~9 ms, an EAGLE head's 1.8 ms, T(1) ~33 ms
CURVE = (33.0, 35.0, 37.5, 40.5, 44.0, 48.0, 52.0, 56.0, 60.0)
TWO = {MODEL: 9.0, HEADS: 1.8}


def _policy(**kw) -> StructureK:
    return StructureK(CostModel(9.0, CURVE), classify=lambda seq: "code", drafters=TWO, **kw)


def _rounds(policy: StructureK, n: int, accepted: dict[str, int], drafted: int = 4) -> list[str]:
    """``n`` rounds in which each drafter's first ``accepted[source]`` of ``drafted`` drafts are
    kept; the drafter chosen each round."""
    chosen = []
    for _ in range(n):
        budget = policy.budget([1, 2, 3], 100)
        chosen.append(budget.drafter)
        k = max(budget.k, 1)
        policy.observe(k, min(accepted[budget.drafter], k), budget.drafter)
    return chosen


def test_equal_acceptance_chooses_the_cheaper_drafter() -> None:
    policy = _policy()
    assert policy.budget([1, 2, 3], 100).drafter == HEADS  # same prior, a fifth of the step


def test_a_drafter_that_is_right_far_more_often_wins_despite_its_cost() -> None:
    """The heads' drafts always rejected, the model's always kept: the model drafts, and each
    drafter's estimate learned from its own rounds only."""
    policy = _policy()
    chosen = _rounds(policy, 60, {MODEL: 4, HEADS: 0})
    assert chosen[-20:].count(MODEL) >= 18  # at most an exploration or two of the heads
    code = {source: policies["code"] for source, policies in policy.by_drafter.items()}
    assert code[HEADS].alpha[0] < 0.4 < 0.9 < code[MODEL].alpha[0]  # from the prior 0.7 each


def test_the_other_drafter_is_explored_less_often_while_it_loses() -> None:
    policy = _policy(explore_every=4, explore_max=32)
    chosen = _rounds(policy, 200, {MODEL: 4, HEADS: 0})
    heads_at = [i for i, c in enumerate(chosen) if c == HEADS]
    assert len(heads_at) >= 4  # explored, not forgotten
    gaps = [b - a for a, b in zip(heads_at, heads_at[1:])]
    assert gaps[-1] >= 32 > gaps[0]  # the wait doubles up to explore_max


def test_an_explored_drafter_that_got_better_takes_over() -> None:
    policy = _policy(explore_every=4, explore_max=16)
    _rounds(policy, 40, {MODEL: 4, HEADS: 0})
    chosen = _rounds(policy, 200, {MODEL: 1, HEADS: 4})  # now the heads are right, the model less
    assert chosen[-40:].count(HEADS) >= 36


def test_each_drafter_keeps_its_own_step_cost() -> None:
    policy = _policy()
    for _ in range(60):
        policy.observe_costs(3, CURVE[2], 2, 2 * 20.0, MODEL)  # the model's steps now take 20 ms
    assert policy.live.steps[MODEL] > 15.0
    assert abs(policy.live.steps[HEADS] - 1.8) < 1e-9
    assert policy.by_drafter[MODEL]["code"].cost.draft_ms > 15.0
    assert abs(policy.by_drafter[HEADS]["code"].cost.draft_ms - 1.8) < 1e-9


def test_lookup_rounds_teach_neither_drafter() -> None:
    policy = _policy()
    before = {s: list(p["code"].alpha) for s, p in policy.by_drafter.items()}
    policy.budget([1, 2, 3], 100)
    policy.observe(4, 0, LOOKUP)
    assert {s: list(p["code"].alpha) for s, p in policy.by_drafter.items()} == before


def test_greedy_matches_target_with_the_drafter_chosen_per_round() -> None:
    """A tiny draft model and a random EAGLE head behind one ChoiceDrafter, K auto exploring
    often: both draft, and the text is the target's greedy text."""
    target = tiny_decoder(seed=0, dtype=torch.bfloat16)
    draft = tiny_decoder(seed=7, dtype=torch.bfloat16)
    prompt = [3, 17, 42, 8, 8, 61, 5, 3, 17, 42]
    plain, _ = generate(target, prompt, Decoding(60))
    target.reset()
    drafter = ChoiceDrafter(ModelDrafter(draft), EagleDrafter(target, _eagle(target)))
    # a verification far dearer than either draft step: drafting pays at any acceptance, and which
    # drafter drafts is the policy's choice, not K = 0
    curve = tuple(500.0 + n for n in range(9))
    policy = StructureK(CostModel(1.0, curve), classify=lambda seq: "code", drafters={MODEL: 1.0, HEADS: 0.5},
                        explore_every=2, explore_max=2)
    spec, stats = generate(target, prompt, Decoding(60), drafter, k=policy)
    assert spec == plain
    assert drafter.model_rounds > 0 and drafter.heads_rounds > 0
    assert set(stats.by_source) == {MODEL, HEADS}


def test_an_engine_with_drafter_auto_keeps_the_target_text() -> None:
    """``--drafter auto`` through the engine (prefix cache on, K auto, both drafters loaded):
    greedy speculative text == target-only text, request after request; the heads draft the
    first round (as cheap per draft and as trusted a priori), and lookup drafts where the text repeats."""
    from specd.engine.config import EngineConfig
    from specd.engine.engine import Engine
    from tests.tiny import tiny_tokenizer

    target = tiny_decoder(seed=0, dtype=torch.bfloat16, vocab=265)
    draft = tiny_decoder(seed=7, dtype=torch.bfloat16, vocab=265)
    costs = CostModel(1.0, tuple(500.0 + n for n in range(9)), heads_ms=0.5)
    engine = Engine(target, tiny_tokenizer(), draft, tiny_tokenizer(),
                    EngineConfig(drafter="auto", k="auto", prefix_cache_mb=8), costs=costs, heads=_eagle(target, seed=3))
    sources = exact_sources(engine)
    assert HEADS in sources and sources <= {MODEL, HEADS, LOOKUP}
