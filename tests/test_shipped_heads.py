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


@pytest.mark.parametrize("kind, fmt", [("eagle", heads.EAGLE_FORMAT), ("medusa", heads.FORMAT)])
def test_the_default_target_ships_the_recorded_heads(kind: str, fmt: str) -> None:
    path = heads.shipped(DEFAULT_TARGET, kind)
    assert path is not None, f"no {kind} draft heads shipped for the default target"
    assert hashlib.sha256(path.read_bytes()).hexdigest() == heads.SHIPPED_SHA256[path.name]
    found, info = heads.read_info(path)
    assert found == fmt and info.target == DEFAULT_TARGET
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


@pytest.mark.parametrize("kind", ["", "medusa"])
def test_the_shipped_heads_draft_alone_and_agree_with_the_target(kind: str) -> None:
    """The heads alone (K = 3 every round; the EAGLE head when none is named, then the Medusa
    heads) on real code: the text is the target's, and the trained heads' drafts are accepted
    (heads that learned nothing would not be)."""
    from specd.app import build_engine

    alone = build_engine(EngineConfig(drafter="heads", heads=kind, k=3, max_len=2048, prefix_cache_mb=0))
    accepted = drafted = first_accepted = first_drafted = 0
    for prefix, suffix in PROMPTS:
        target = alone.complete(CompletionRequest(prefix, suffix, max_tokens=32, mode="target"))
        spec = alone.complete(CompletionRequest(prefix, suffix, max_tokens=32, mode="spec"))
        assert spec.tokens == target.tokens, (spec.text, target.text)
        accepted += spec.stats.accepted
        drafted += spec.stats.drafted
        first_accepted += spec.stats.accepted_at[0] if spec.stats.accepted_at else 0
        first_drafted += spec.stats.drafted_at[0] if spec.stats.drafted_at else 0
    assert drafted > 0 and first_drafted > 0
    # Medusa's heads 2 and 3 guess 3 and 4 tokens ahead from one state, without the tokens between:
    # its first head's drafts are held to the bar, the EAGLE head's every draft
    rate = first_accepted / first_drafted if kind == "medusa" else accepted / drafted
    assert rate > 0.2, (kind, accepted, drafted, first_accepted, first_drafted)
