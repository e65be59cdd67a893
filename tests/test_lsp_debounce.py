"""The adaptive debounce follows the user's typing speed (pure functions, a fake clock)."""

from __future__ import annotations

import asyncio

import pytest

from specd.lsp.debounce import AdaptiveDebounce, Debouncer, context_score, debounce_ms
from specd.lsp.settings import DebounceSettings
from tests.fake_time import FakeTime

S = DebounceSettings()


def typed(gaps_ms: list[float], settings: DebounceSettings = S) -> AdaptiveDebounce:
    d = AdaptiveDebounce(settings)
    now = 100.0
    d.edited(now)
    for gap in gaps_ms:
        now += gap / 1e3
        d.edited(now)
    return d


def test_the_wait_grows_with_the_typing_interval_within_the_measured_range() -> None:
    waits = [typed([gap] * 30).wait_ms("x", "", "") for gap in (120, 200, 300, 390)]
    assert waits == sorted(waits) and waits[0] < waits[-1]


def test_the_base_is_the_mean_interval_clamped_and_pauses_are_not_typing() -> None:
    assert typed([250.0] * 10).base_ms() == pytest.approx(250.0)
    assert typed([20.0] * 10).base_ms() == S.min_interval_ms  # very fast typing: clamped
    assert typed([250.0] * 10 + [5000.0]).base_ms() == pytest.approx(250.0)  # the pause left out
    assert typed([250.0] * (S.min_samples - 1)).base_ms() == S.base_ms  # too few intervals yet


def test_a_request_after_a_pause_or_without_an_edit_does_not_wait() -> None:
    assert AdaptiveDebounce(S).wait_ms("x", "", "") == 0.0
    assert typed([100.0] * 10 + [2000.0]).wait_ms("x", "", "") == 0.0
    assert typed([100.0] * 10).wait_ms("x", "", "") > 0.0


def test_the_expected_response_time_is_subtracted() -> None:
    d = typed([300.0] * 10)
    before = d.wait_ms("x", "", "")
    d.responded(100.0)
    d.responded(200.0)
    assert d.expected_response_ms() == pytest.approx(150.0)
    assert d.wait_ms("x", "", "") == pytest.approx(max(S.min_ms, before - 150.0))


def test_the_rate_is_lower_where_a_suggestion_is_wanted() -> None:
    assert context_score("x = (", "", "") == pytest.approx(1.0)  # after a symbol, nothing after the cursor
    assert context_score("foo", "bar)", "bar)\nmore") == 0.0
    wanted = debounce_ms(200.0, context_score("x = (", "", ""), 0.0, S)
    mid_word = debounce_ms(200.0, context_score("foo", "bar)", "bar)\nmore"), 0.0, S)
    assert wanted == pytest.approx(S.rate_min * 200.0) and mid_word == pytest.approx(S.rate_max * 200.0)


def test_the_wait_is_clamped_and_can_be_switched_off() -> None:
    assert debounce_ms(400.0, 0.0, 0.0, S) == min(S.max_ms, S.rate_max * 400.0)
    assert debounce_ms(100.0, 1.0, 10_000.0, S) == S.min_ms
    off = DebounceSettings(enabled=False)
    assert typed([100.0] * 10, off).wait_ms("x", "", "") == 0.0


async def test_the_debouncer_stamps_and_waits_on_its_injected_clock_and_sleep() -> None:
    fake = FakeTime()
    d = Debouncer(S, fake.clock, fake.sleep)
    d.edited()
    for _ in range(10):
        await fake.advance(0.3)
        d.edited()
    assert d.adaptive.base_ms() == pytest.approx(300.0)

    async def answer() -> str:
        await fake.sleep(0.1)
        return "x"

    assert await fake.run(d.timed(answer())) == "x"
    assert d.adaptive.expected_response_ms() == pytest.approx(100.0)
    waiting = asyncio.ensure_future(d.wait(250.0))
    await fake.advance(0.249)
    assert not waiting.done()
    await fake.advance(0.002)
    assert waiting.done()
