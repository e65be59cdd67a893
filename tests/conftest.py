from __future__ import annotations

import pytest


def _real_pair_present() -> bool:
    from specd.models.pull import is_pulled
    from specd.models.registry import PUBLISHED

    return all(is_pulled(m) for m in PUBLISHED.values())


@pytest.fixture(scope="session")
def real_engine():
    """The default pair, loaded once per test session (pulled by `specd models pull`), drafting
    with the draft model and prompt lookup (``both``: the default drafter is the shipped head, which
    tests/test_shipped_heads.py and tests/test_default_drafter.py run)."""
    if not _real_pair_present():
        pytest.skip("the default pair is not pulled: run `specd models pull` (the README's test command does)")
    from specd.app import build_engine
    from specd.engine.engine import EngineConfig

    return build_engine(EngineConfig(drafter="both"))
