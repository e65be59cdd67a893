"""The K policy: K from measured costs and running acceptance; output unchanged."""

from __future__ import annotations

import pytest

from specd.engine.drafters import ModelDrafter
from specd.engine.engine import CompletionRequest
from specd.engine.budget import AHEAD, LOOKUP
from specd.engine.policy import AdaptiveK, CostModel, FixedK, StructureK, convex_curve, measure_costs
from specd.engine.speculative import Decoding, generate
from tests.tiny import tiny_decoder, tiny_engine
from tests.toy import TableLM, table


def test_k_zero_when_verification_costs_n_steps() -> None:
    """Verifying n tokens costs n target steps: no K can pay, whatever the acceptance."""
    policy = AdaptiveK(CostModel(draft_ms=1.0, verify_ms=tuple(10.0 * n for n in range(1, 18))), prior=0.95)
    assert policy.choose() == 0


def test_large_k_when_verification_is_cheap_and_drafts_are_accepted() -> None:
    policy = AdaptiveK(CostModel(draft_ms=0.5, verify_ms=tuple(10.0 + 0.5 * n for n in range(1, 18))), prior=0.9)
    assert policy.choose() >= 6


def test_acceptance_estimates_follow_observations() -> None:
    policy = AdaptiveK(CostModel(draft_ms=2.0, verify_ms=tuple(10.0 + 2 * n for n in range(1, 18))))
    k_before = policy.choose()
    for _ in range(int(5 / policy.decay)):  # ~5 memory lengths: the prior is forgotten
        policy.observe(drafted=4, accepted=0)  # the first draft is always rejected
    assert policy.alpha[0] < 0.05 and policy.choose() == 0 < k_before
    for _ in range(int(5 / policy.decay)):
        policy.observe(drafted=4, accepted=4)
    assert policy.choose() > 0


# the 7B-shaped target with the 0.5B draft on this 2-core machine (bench/RESULTS.md, session 10): a
# draft step ~14 ms, T(n) compute-bound (T(5) ~1.9 T(1)); break-even acceptance at K = 1 ~0.3
SEVEN_B = CostModel(draft_ms=14.0, verify_ms=(164.0, 200.0, 236.0, 272.0, 316.0, 360.0, 400.0, 440.0, 480.0))


def _rounds(policy: AdaptiveK, n: int, accepted) -> list[int]:
    """K per round as the speculative loop uses a policy: a round that drafted is observed."""
    ks = []
    for r in range(n):
        k = policy.budget([], 10_000).k
        ks.append(k)
        if k:
            policy.observe(k, accepted(r, k))
    return ks


def test_a_pair_that_never_accepts_settles_on_k_zero_in_a_few_rounds() -> None:
    """Random target weights: the draft is never accepted. K auto reaches K = 0 within a handful
    of rounds, and afterwards drafts only one-token probes, ever rarer."""
    ks = _rounds(AdaptiveK(SEVEN_B), 4000, lambda r, k: 0)
    settled = ks.index(0)
    assert settled <= 8 and sum(ks[:settled]) <= 3 * 8
    probes = [r for r in range(settled, len(ks)) if ks[r]]
    assert all(ks[r] == 1 for r in probes)
    assert 3 <= len(probes) <= 12  # waits of 16, 32, ..., 512 rounds
    gaps = [b - a for a, b in zip(probes, probes[1:])]
    assert gaps == sorted(gaps) and gaps[-1] == 512
    # what the probes cost over the run: each one draft step + T(2) - T(1), against T(1) a round
    waste = len(probes) * (SEVEN_B.draft_ms + SEVEN_B.target(2) - SEVEN_B.target(1))
    assert waste / (len(ks) * SEVEN_B.target(1)) < 0.005


def test_no_probes_where_no_acceptance_could_make_drafting_pay() -> None:
    dear = AdaptiveK(CostModel(draft_ms=1e6, verify_ms=SEVEN_B.verify_ms))
    assert _rounds(dear, 2000, lambda r, k: k) == [0] * 2000


def test_probes_bring_drafting_back_when_the_draft_agrees_again() -> None:
    policy = AdaptiveK(SEVEN_B)
    _rounds(policy, 300, lambda r, k: 0)
    assert policy.best_k() == 0
    ks = _rounds(policy, 600, lambda r, k: k)  # from now on every draft is accepted
    back = next(r for r, k in enumerate(ks) if k > 1)
    assert back < 300 and all(k > 0 for k in ks[back:])


def test_cost_model_extends_beyond_measurements() -> None:
    cost = CostModel(1.0, (10.0, 12.0, 14.0))
    assert cost.target(5) == 18.0 and CostModel.from_json(cost.to_json()) == cost


def test_measured_costs_are_positive_and_leave_caches_empty() -> None:
    target, draft = tiny_decoder(seed=0), tiny_decoder(seed=1)
    cost = measure_costs(target, draft, sizes=(1, 3), context=16, reps=1)
    assert len(cost.verify_ms) == 3 and all(t > 0 for t in cost.verify_ms) and cost.draft_ms > 0
    assert target.cache_len == 0 and draft.cache_len == 0


def test_measured_cost_curve_never_decreases() -> None:
    """Timing noise can make one forward over 2 tokens faster than one over 1; the curve the
    policy uses does not: T(n) is non-decreasing in n. Here a model whose 2-token forward really
    is the fastest (sleeps of 20 / 2 / 30 ms for 1 / 2 / 3 tokens)."""
    import time

    class Uneven(TableLM):
        def forward(self, tokens, positions=None, attn_mask=None, *, logits=True):
            if len(self.tokens) >= 16:  # not the context prefill
                time.sleep({1: 0.020, 2: 0.002, 3: 0.030}[int(tokens.numel())])
            return super().forward(tokens, positions, attn_mask)

    cost = measure_costs(Uneven(table(64, 10, seed=1)), None, sizes=(1, 2, 3), context=16, reps=3)
    assert cost.verify_ms[1] >= cost.verify_ms[0] >= 20.0 and cost.verify_ms[2] >= 30.0
    assert cost.draft_ms == float("inf")


def test_greedy_matches_target_with_adaptive_k(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("SPECD_CACHE_DIR", str(tmp_path))
    engine = tiny_engine(k="auto")
    prefix = "def add(a, b):\n    return "
    spec = engine.complete(CompletionRequest(prefix, max_tokens=30))
    plain = engine.complete(CompletionRequest(prefix, max_tokens=30, mode="target"))
    assert spec.tokens == plain.tokens
    assert list((tmp_path / "costs").glob("*.json"))  # measured once, cached per machine and pair


@pytest.mark.parametrize("policy", [FixedK(3, min_prob=0.6),
                                    AdaptiveK(CostModel(0.1, (1.0, 1.05, 1.1, 1.15, 1.2)), k_max=4, min_prob=0.6)])
def test_greedy_identity_with_early_stopping_drafter(policy) -> None:
    t = table(64, 10, seed=9)
    target, draft = TableLM(t), TableLM(t + 0.5 * table(64, 10, seed=10))
    plain, _ = generate(target, [1, 2, 3], Decoding(25))
    target.rollback(0)
    out, stats = generate(target, [1, 2, 3], Decoding(25), ModelDrafter(draft), k=policy)
    assert out == plain


@pytest.mark.parametrize("tail, kind", [
    ("import os\nfrom collections import ", "boilerplate"),
    ("    parser.add_argument('--name', type=str, ", "boilerplate"),
    ("        return x\n    }", "boilerplate"),
    ('def f():\n    """Compute the ', "text"),
    ("x = 1\n    # the number of ", "text"),
    ("    if total > limit:\n        total = ", "code"),
])
def test_structure_classifier(tail: str, kind: str) -> None:
    from specd.engine.structure import classify_text

    assert classify_text(tail) == kind


def test_structure_k_drafts_further_on_boilerplate_than_on_prose() -> None:
    """Same costs, same observations per kind as a real run would give them: boilerplate
    accepted, prose rejected. The policy drafts far on the first and not at all on the second,
    and the kinds do not mix their statistics."""
    from specd.engine.policy import StructureK

    kinds = iter([])
    policy = StructureK(CostModel(draft_ms=2.0, verify_ms=tuple(10.0 + 1.0 * n for n in range(1, 18))),
                        classify=lambda seq: next(kinds))
    kinds = iter(["boilerplate", "text"] * 100)
    for _ in range(100):
        policy.choose([0]); policy.observe(drafted=6, accepted=6)
        policy.choose([0]); policy.observe(drafted=6, accepted=0)
    kinds = iter(["boilerplate", "text", "code"])
    k_boiler, k_text, k_code = policy.choose([0]), policy.choose([0]), policy.choose([0])
    assert k_boiler >= 6 and k_text == 0 and 0 < k_code < k_boiler


def test_structure_k_keeps_greedy_output() -> None:
    from specd.engine.policy import StructureK
    from specd.engine.structure import make_classifier
    from tests.tiny import tiny_tokenizer

    target, draft = tiny_decoder(seed=3), tiny_decoder(seed=4)
    prompt = list(range(20, 60))
    plain, _ = generate(target, prompt, Decoding(24), k=0)
    policy = StructureK(CostModel(draft_ms=1.0, verify_ms=tuple(10.0 + n for n in range(1, 18))),
                        make_classifier(tiny_tokenizer()))
    spec, _ = generate(target, prompt, Decoding(24), ModelDrafter(draft), k=policy)
    assert spec == plain and sum(policy.rounds.values()) > 0


def test_cost_cache_is_keyed_by_the_runtime_that_runs(tmp_path, monkeypatch) -> None:
    """The same configuration names on another runtime (``auto`` resolving to torch or ONNX
    Runtime) must not reuse the other's measured curve."""
    from specd.app import build_engine, costs_path
    from specd.engine.engine import EngineConfig
    from tests.tiny import save_tiny_model

    monkeypatch.setenv("SPECD_CACHE_DIR", str(tmp_path / "cache"))
    t, d = save_tiny_model(tmp_path / "t", seed=0), save_tiny_model(tmp_path / "d", seed=1)
    engines = [build_engine(EngineConfig(target=str(t), draft=str(d), target_quant="int8", draft_quant="int4",
                                        max_len=256, target_backend=b, draft_backend="torch"))
               for b in ("torch", "ort")]
    paths = {costs_path(e.config, e.target, e.draft) for e in engines}
    assert len(paths) == 2


def test_gate_drafts_on_only_when_the_last_draft_is_likely_accepted() -> None:
    """The zero-cost gate: a second draft costs one draft step plus one verified row; it is
    worth it only when the first draft is likely to be accepted (high confidence)."""
    cost = CostModel(draft_ms=19.0, verify_ms=(111.5, 111.5, 118.9, 142.7, 181.2))
    policy = AdaptiveK(cost, prior=0.76)
    assert policy.keep_drafting([0.9])
    assert not policy.keep_drafting([0.2])
    # the break-even confidence, from S * a * t > E * dt: c * 0.76 * 130.5 > (1 + c) * 26.4
    assert not policy.keep_drafting([0.35])
    assert policy.keep_drafting([0.38])
    # free drafts and free rows: always worth drafting on (up to k_max)
    free = AdaptiveK(CostModel(draft_ms=0.0, verify_ms=(10.0,) * 9), k_max=3)
    assert free.keep_drafting([0.05]) and free.keep_drafting([0.05, 0.05]) and not free.keep_drafting([0.05, 0.05, 1.0])


def test_fixed_k_is_not_gated() -> None:
    assert not FixedK(3).gated and FixedK(3).keep_drafting([0.0])


def test_gated_rounds_stop_early_and_keep_the_target_output() -> None:
    """A draft that is rarely confident: the gate ends rounds after one draft (no second forward
    paid), and the output is still exactly the target's greedy output."""
    t = table(64, 10, seed=11)
    target, draft = TableLM(t), TableLM(0.1 * table(64, 10, seed=12))  # near-uniform: never sure
    plain, _ = generate(target, [1, 2, 3], Decoding(30))
    target.rollback(0)
    cost = CostModel(draft_ms=19.0, verify_ms=(111.5, 111.5, 118.9, 142.7, 181.2))
    gated = AdaptiveK(cost, k_max=4, prior=0.95)  # K = 2..4 chosen: the gate must cut rounds
    out, stats = generate(target, [1, 2, 3], Decoding(30), ModelDrafter(draft), k=gated)
    assert out == plain
    assert stats.drafted < stats.rounds * 2  # some rounds stopped after their first draft


def test_free_drafts_are_priced_by_the_verification_curve() -> None:
    """The rest of a suggestion costs no draft step, but each verified row costs what the curve
    says: K auto verifies as many as pay, and fewer once they are seen rejected early."""
    from specd.engine.policy import StructureK

    flat = StructureK(CostModel(19.0, tuple(75.0 for _ in range(9))), classify=lambda seq: "code")
    steep = StructureK(CostModel(19.0, (75, 77, 80, 90, 100, 112, 125, 138, 150)), classify=lambda seq: "code")
    assert flat.choose_free() == StructureK.LOOKAHEAD_MAX  # verifying more rows is free: all of them
    first = steep.choose_free()
    assert 1 <= first < StructureK.LOOKAHEAD_MAX
    for _ in range(40):
        steep.observe(drafted=first, accepted=0, source=AHEAD)
    assert steep.choose_free() < first
    assert steep.budget([0], tokens_left=3).free_k <= 2  # never past the tokens left


def test_each_draft_source_teaches_only_its_own_estimate() -> None:
    """A draft model's, the previous suggestion's and prompt lookup's drafts are right at different
    rates: rejected lookup drafts turn lookup's K down and leave the model's K and the
    suggestion's as they were (and the other way round)."""
    steep = CostModel(19.0, (75, 77, 80, 90, 100, 112, 125, 138, 150))
    policy = StructureK(steep, classify=lambda seq: "code")
    model_k, free_k, lookup_k = policy.choose([0]), policy.choose_free(), policy.choose_lookup()
    assert 1 <= lookup_k <= StructureK.LOOKUP_MAX
    for _ in range(100):  # one more verified row costs 2 ms of 75: lookup pays down to ~3 % acceptance
        policy.observe(drafted=lookup_k, accepted=0, source=LOOKUP)
    assert policy.choose_lookup() == 0
    assert (policy.choose([0]), policy.choose_free()) == (model_k, free_k)
    for _ in range(40):
        policy.observe(drafted=model_k, accepted=0)  # a draft model's rounds (the default source)
    assert policy.choose([0]) == 0 and policy.choose_free() == free_k
    budget = policy.budget([0], tokens_left=20)
    assert (budget.k, budget.lookup_k) == (0, 0)


def test_lookup_drafts_cost_no_draft_step() -> None:
    """Where the draft model's step is too dear for drafting to pay, lookup still drafts: its
    drafts cost only the extra verified rows."""
    dear = CostModel(500.0, (75, 77, 80, 90, 100, 112, 125, 138, 150))
    policy = StructureK(dear, classify=lambda seq: "code")
    budget = policy.budget([0], tokens_left=20)
    assert budget.k == 0 and budget.lookup_k >= 1
    assert FixedK(3).budget([0], tokens_left=20).lookup_k == 3  # --k N: N lookup drafts too


def test_predicted_speedup_follows_the_cost_curve() -> None:
    from specd.engine.policy import CostModel

    free = CostModel(0.0, tuple([10.0] * 9))  # drafts and extra verified rows cost nothing
    speed, k = free.predicted_speedup(0.999)
    assert k == 8 and speed == pytest.approx(sum(0.999 ** i for i in range(9)), rel=1e-6)
    assert free.predicted_speedup(0.0) == (1.0, 0)  # nothing accepted: target-only
    steep = CostModel(5.0, tuple(10.0 * n for n in range(1, 10)))  # verifying n rows costs n steps
    assert steep.predicted_speedup(0.9) == (1.0, 0)  # never pays, whatever the acceptance


def test_a_stored_cost_curve_that_no_longer_holds_is_measured_again(tmp_path, monkeypatch) -> None:
    """A curve stored while something else took the CPU (seen here: 2,008 ms for a ~50 ms step,
    believed by every daemon after) is checked against a few timed steps at load and replaced;
    one that holds is kept as stored."""
    from specd.app import costs_path, read_costs, step_costs, write_costs
    from specd.engine.engine import EngineConfig
    from specd.engine.policy import costs_hold

    monkeypatch.setenv("SPECD_CACHE_DIR", str(tmp_path / "cache"))
    target, draft = tiny_decoder(seed=3), tiny_decoder(seed=4)
    config = EngineConfig(k="auto", max_len=256)
    fresh = step_costs(config, target, draft)
    stale = CostModel(fresh.draft_ms * 1000, tuple(v * 1000 for v in fresh.verify_ms))
    assert not costs_hold(stale, target, draft)
    assert costs_hold(fresh, target, draft, tolerance=1e6)
    path = costs_path(config, target, draft)
    write_costs(path, stale)
    again = step_costs(config, target, draft)
    assert again.target(1) < stale.target(1) / 10 and again.draft_ms < stale.draft_ms / 10
    assert read_costs(path) == again  # the new measurement replaced the stale file
    slow_check = CostModel(again.draft_ms, again.verify_ms)
    monkeypatch.setattr("specd.app.costs_hold", lambda *a, **k: True)
    assert step_costs(config, target, draft) == slow_check  # a curve that holds is read, not measured


def test_a_bump_in_the_timed_curve_is_spread_over_its_neighbours() -> None:
    """measure_costs' curve is non-decreasing and convex (each further row costs at least what the
    one before did): the curve timed here on a noisy host (T(3) = T(4) = 71.1 after T(2) = 47.8)
    becomes the least-squares convex fit, T(1) and the end kept; a curve already convex is
    unchanged, a dip is raised."""
    timed = (39.7, 47.8, 71.1, 71.1, 90.0, 94.8, 112.6, 121.2, 121.2)
    fit = convex_curve(timed)
    rises = [b - a for a, b in zip(fit, fit[1:])]
    assert fit[0] == timed[0] and abs(fit[-1] - timed[-1]) < 1e-9
    assert all(r >= 0 for r in rises) and all(b >= a - 1e-9 for a, b in zip(rises, rises[1:]))
    assert fit[1] == timed[1] and 55 < fit[2] < 62 and 65 < fit[3] < 72  # the bump at n = 3 spread
    convex = (50.0, 52.0, 57.0, 64.0, 72.0, 80.0)
    assert convex_curve(convex) == convex
    assert convex_curve((50.0, 48.0, 60.0)) == (50.0, 50.0, 60.0)
    assert convex_curve(()) == ()


# the stored curve vs this machine's own rounds (LiveCosts)

STORED = CostModel(draft_ms=10.2, verify_ms=(39.7, 47.8, 58.3, 68.8, 79.3, 89.7, 100.2, 110.7, 121.2))


def test_live_costs_shift_the_curve_by_what_the_forwards_take() -> None:
    """Forwards that run 20 ms slower than the stored curve says move every T(n) by ~20 ms and keep
    the extra rows' costs; measured draft steps replace the stored one; a curve that holds stays.
    (The row counts the rounds verified take their own difference, exactly 20 here; the others
    the running difference of all rounds, which still remembers its stored prior a little.)"""
    from specd.engine.policy import LiveCosts

    live = LiveCosts(STORED)
    moved = [live.observe(rows, STORED.target(rows) + 20.0, 3, 3 * 8.0) for rows in (2, 4, 2, 3) * 30]
    now = live.current()
    assert any(moved) and abs(now.target(1) - 59.7) < 1.0 and abs(now.draft_ms - 8.0) < 0.2
    assert all(abs(now.target(n) - (STORED.target(n) + 20.0)) < 1e-9 for n in (2, 3, 4))
    assert all(abs(now.target(n) - (STORED.target(n) + live.offset)) < 1e-9 for n in (1, 5, 6, 7, 8, 9))
    assert 19.9 < live.offset < 20.0
    assert all(abs((now.target(n + 1) - now.target(n)) - (STORED.target(n + 1) - STORED.target(n))) < 0.1
               for n in range(1, 9))
    steady = LiveCosts(STORED)
    assert not any(steady.observe(2, STORED.target(2), 2, 2 * STORED.draft_ms) for _ in range(50))
    assert steady.current() == STORED
    fast = LiveCosts(STORED)
    for _ in range(200):
        fast.observe(1, 1.0)
    assert fast.current().target(1) == 0.5 * STORED.target(1)  # never under half the stored step


def test_live_costs_learn_which_rows_cost_this_hour() -> None:
    """The stored curve says four and five verified rows cost +13 % and +33 % (timed in an hour
    when the host's memory was fast); this hour the rounds' forwards take the same at one to
    five rows. After enough rounds of each, the curve is theirs: flat to five rows, and K auto
    verifies more. Row counts never verified stay as stored, shifted; the curve never falls."""
    from specd.engine.policy import LiveCosts

    stored = CostModel(2.2, (25.8, 25.8, 25.8, 29.1, 34.2, 39.6, 44.9, 50.3, 55.6))
    live = LiveCosts(stored)
    for _ in range(20):
        for rows in (1, 2, 3, 4, 5):
            live.observe(rows, 30.0)
    now = live.current()
    assert all(abs(now.target(n) - 30.0) < 1e-9 for n in (1, 2, 3, 4, 5))
    assert all(now.target(n + 1) >= now.target(n) for n in range(1, 9))
    assert abs(now.target(7) - (stored.target(7) + live.offset)) < 1e-9
    assert now.predicted_speedup(0.7)[1] > stored.predicted_speedup(0.7)[1]
    few = LiveCosts(stored)
    for _ in range(7):  # fewer rounds of a row count than `shaped`: the shared shift only
        few.observe(5, 30.0)
    assert abs(few.current().target(5) - (stored.target(5) + few.offset)) < 1e-9


def test_k_auto_drafts_more_when_the_machine_is_slower_than_its_stored_curve() -> None:
    """On the curve timed at a fast moment extra rows look as dear as draft steps (K = 1 at an
    acceptance of 0.8); when the daemon's forwards take 20 ms more (a contended memory bus slows
    the one-token step, not the rows' arithmetic) the K auto policy's curve follows and more drafts
    pay."""
    policy = StructureK(STORED, classify=lambda seq: "code")
    assert STORED.predicted_speedup(0.8)[1] == 1
    for rows in (2, 3) * 40:
        policy.observe_costs(rows, STORED.target(rows) + 20.0, rows - 1, (rows - 1) * 10.2)
    for p in (*policy.policies.values(), policy.lookup, policy.lookahead):
        assert abs(p.cost.target(1) - 59.7) < 0.04 * 59.7  # (passed on when it has moved 3 %)
    assert policy.policies["code"].cost.predicted_speedup(0.8)[1] >= 2
    assert policy.lookup.cost.draft_ms == 0.0  # free drafts stay free


def test_the_engine_times_its_rounds_for_k_auto() -> None:
    engine = tiny_engine(k="auto", costs=CostModel(draft_ms=0.01, verify_ms=tuple(0.2 + 0.01 * n for n in range(9))))
    engine.complete(CompletionRequest("def f(x):\n    return", max_tokens=24))
    live = engine.policy.live
    assert live.forwards > 0 and live.drafts > 0
    assert live.offset != 0.0  # a tiny model's real forwards are not the made-up curve's


def test_a_convex_curve_is_a_fixed_point_of_the_fit() -> None:
    """What convex_curve returns comes back unchanged, to the bit (a stored curve is fitted again
    when read: the read must equal what was measured and stored)."""
    import random

    from specd.engine.policy import convex_curve

    rng = random.Random(7)
    for _ in range(200):
        timed = tuple(rng.uniform(0.1, 100.0) for _ in range(9))
        fitted = convex_curve(timed)
        assert convex_curve(fitted) == fitted
        steps = [b - a for a, b in zip(fitted, fitted[1:])]
        assert all(s >= 0 for s in steps) and all(b >= a - 1e-9 * fitted[-1] for a, b in zip(steps, steps[1:]))
