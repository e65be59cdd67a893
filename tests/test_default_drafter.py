"""``--drafter default``: the shipped head with prompt lookup where the target has draft heads at
hand, the draft model with prompt lookup elsewhere; and the default target's greedy text under it."""

from __future__ import annotations

from dataclasses import replace

import pytest

from specd.app import heads_at_hand, resolved
from specd.engine.config import DEFAULT_TARGET, EngineConfig, resolve_drafter
from tests.tiny import tiny_engine


@pytest.mark.parametrize("drafter", ["model", "ngram", "both", "heads", "heads+ngram", "auto"])
def test_a_named_drafter_is_kept(drafter: str) -> None:
    assert resolve_drafter(drafter, True) == resolve_drafter(drafter, False) == drafter


def test_default_is_the_heads_where_they_are_at_hand_else_the_draft_model() -> None:
    assert resolve_drafter("default", True) == "heads+ngram"
    assert resolve_drafter("default", False) == "both"


def test_an_engine_without_heads_runs_default_as_both() -> None:
    engine = tiny_engine(k=3, drafter="default")
    assert engine.drafter == "both" and engine.config.drafter == "default"  # as configured: what clients compare
    assert engine._draft_cached is not None  # the draft model follows the prompt


def test_heads_are_at_hand_only_where_they_can_draft(tmp_path) -> None:
    base = EngineConfig(drafter="default")
    assert not heads_at_hand(replace(base, target_backend="ort"))  # ONNX Runtime hands over no hidden states
    assert not heads_at_hand(replace(base, device="cuda"))
    assert not heads_at_hand(replace(base, target=str(tmp_path / "no-such-model.gguf")))
    assert resolved(replace(base, target_backend="ort")).drafter == "both"
    assert resolved(replace(base, drafter="model")).drafter == "model"


@pytest.mark.real_models
def test_the_default_target_drafts_with_its_shipped_head_by_default() -> None:
    from specd.app import build_engine, footprints
    from specd.engine.engine import CompletionRequest
    from tests.test_real_pair import PROMPTS

    config = EngineConfig(max_len=2048)
    assert config.target == DEFAULT_TARGET and resolved(config).drafter == "heads+ngram"
    assert [role for role, _ in footprints(config)] == ["target"]  # no draft model to load
    engine = build_engine(config)
    assert engine.draft is None and engine.drafter == "heads+ngram" and engine.config.drafter == "default"
    for prefix, suffix in PROMPTS[:2]:
        spec = engine.complete(CompletionRequest(prefix=prefix, suffix=suffix, max_tokens=24, temperature=0))
        engine.reset()  # no answer remembered from the first request
        target = engine.complete(CompletionRequest(prefix=prefix, suffix=suffix, max_tokens=24, temperature=0,
                                                   mode="target"))
        assert spec.text == target.text
