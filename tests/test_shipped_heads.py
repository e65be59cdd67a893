"""The draft heads shipped for the default target: the recorded file, and exact greedy text with
every drafter that reads them, on the real pair."""

from __future__ import annotations

import hashlib

import pytest

from specd.engine.config import DEFAULT_TARGET, EngineConfig
from specd.engine.engine import CompletionRequest
from specd.models import heads
from tests.test_real_pair import PROMPTS

pytestmark = pytest.mark.real_models


def test_the_default_target_ships_the_recorded_heads() -> None:
    path = heads.shipped(DEFAULT_TARGET)
    assert path is not None, "no draft heads shipped for the default target"
    assert hashlib.sha256(path.read_bytes()).hexdigest() == heads.SHIPPED_SHA256[DEFAULT_TARGET]
    fmt, info = heads.read_info(path)
    assert fmt == heads.EAGLE_FORMAT and info.target == DEFAULT_TARGET
    assert path.stat().st_size <= 64 << 20  # the bound for a file in the repository


@pytest.fixture(scope="module")
def auto_engine():
    from specd.app import build_engine

    return build_engine(EngineConfig(drafter="auto", max_len=2048))


@pytest.mark.parametrize("prompt", range(len(PROMPTS)))
def test_drafter_auto_keeps_the_targets_greedy_text(auto_engine, prompt: int) -> None:
    """No --heads: the shipped file is loaded beside the draft model, and whichever drafts, the
    text is the target's."""
    prefix, suffix = PROMPTS[prompt]
    target = auto_engine.complete(CompletionRequest(prefix, suffix, max_tokens=32, mode="target"))
    spec = auto_engine.complete(CompletionRequest(prefix, suffix, max_tokens=32, mode="spec"))
    assert spec.tokens == target.tokens, (spec.text, target.text)
    assert spec.stats.accepted > 0


def test_the_shipped_heads_draft_alone_and_agree_with_the_target() -> None:
    """The heads alone (K = 3 every round) on real code: the text is the target's, and the
    trained head's drafts are accepted (a head that learned nothing would not be)."""
    from specd.app import build_engine

    alone = build_engine(EngineConfig(drafter="heads", k=3, max_len=2048, prefix_cache_mb=0))
    accepted = drafted = 0
    for prefix, suffix in PROMPTS:
        target = alone.complete(CompletionRequest(prefix, suffix, max_tokens=32, mode="target"))
        spec = alone.complete(CompletionRequest(prefix, suffix, max_tokens=32, mode="spec"))
        assert spec.tokens == target.tokens, (spec.text, target.text)
        accepted += spec.stats.accepted
        drafted += spec.stats.drafted
    assert drafted > 0 and accepted / drafted > 0.2, (accepted, drafted)
