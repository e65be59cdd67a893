"""A suggestion being continued (the user typed what was shown) drafts under the same K policy
and gate as any other request once the previous suggestion's tokens run out, and the policy
learns from those rounds; the output stays exactly a cold request's."""

from __future__ import annotations

from specd.engine.engine import CompletionRequest
from specd.engine.policy import CostModel
from tests.tiny import tiny_engine

PREFIX = "def add(a, b):\n    "
FLAT = tuple(10.0 for _ in range(9))  # verifying n tokens costs what one does


def _continue(engine) -> tuple:
    first = engine.complete(CompletionRequest(PREFIX, max_tokens=12))
    assert len(first.text) > 3, first.text
    request = CompletionRequest(PREFIX + first.text[:2], max_tokens=40)
    continued = engine.complete(request)
    engine.reset()
    return continued, engine.complete(request)


def test_no_model_drafts_after_the_lookahead_when_drafting_does_not_pay() -> None:
    """Draft steps cost far more than they save: K auto chooses 0. The previous suggestion's
    tokens are still verified (they are free), but no model draft follows them."""
    engine = tiny_engine(k="auto", costs=CostModel(draft_ms=1e6, verify_ms=FLAT))
    continued, cold = _continue(engine)
    assert continued.lookahead > 0
    assert continued.stats.drafted <= continued.lookahead, continued.stats.as_dict()
    assert continued.tokens == cold.tokens


def test_the_policy_learns_from_the_rounds_after_the_lookahead() -> None:
    engine = tiny_engine(k="auto", costs=CostModel(draft_ms=0.01, verify_ms=FLAT))
    first = engine.complete(CompletionRequest(PREFIX, max_tokens=12))
    before = {kind: list(p.alpha) for kind, p in engine.policy.policies.items()}
    continued = engine.complete(CompletionRequest(PREFIX + first.text[:2], max_tokens=40))
    after = {kind: list(p.alpha) for kind, p in engine.policy.policies.items()}
    assert continued.lookahead > 0 and continued.stats.drafted > continued.lookahead
    assert after != before  # model-drafted rounds were observed
    assert max(len(continued.stats.drafted_at), 0) <= max(engine.policy.k_max, continued.lookahead)
