"""The adaptive debounce: how long a completion request waits before it goes to the daemon.

After Tabby's: the user's typing interval (the mean of the latest gaps between edits, gaps longer
than a typing gap left out) sets a base; the wait is ``rate · base − expected response``, where
``rate`` runs from ``rate_max`` down to ``rate_min`` as the context makes a suggestion more wanted
(the cursor after a non-word character, nothing after it on the line, nothing after it at all),
and the expected response is the mean of the latest daemon response times. Typing fast shortens
the base, so a request waits less, but the keys come faster still: most requests are replaced
by the next key before they leave. A request after a pause does not wait. A request that a newer edit or request replaces while it
waits never reaches the daemon.

:class:`AdaptiveDebounce` is the arithmetic on timestamps it is given; :class:`Debouncer` runs it on
the service's injected clock and sleep (``timing.py``), so its waits can run on a test's clock.
"""

from __future__ import annotations

import re
from collections import deque
from typing import Awaitable

from specd.lsp.settings import DebounceSettings
from specd.lsp.timing import Clock, Sleep
from specd.lsp.window import Window

_NON_WORD = re.compile(r"^\W*$")
# Tabby's weights: how much each sign that a suggestion is wanted lowers the rate
WEIGHT_TRIGGER, WEIGHT_LINE_END, WEIGHT_DOCUMENT_END = 0.5, 0.4, 0.1


def context_score(line_prefix: str, line_suffix: str, suffix: str) -> float:
    """0..1: how much the cursor's place asks for a suggestion."""
    score = WEIGHT_TRIGGER if _NON_WORD.match(line_prefix[-1:]) else 0.0
    score += WEIGHT_LINE_END if _NON_WORD.match(line_suffix) else 0.0
    score += WEIGHT_DOCUMENT_END if _NON_WORD.match(suffix) else 0.0
    return score


def debounce_ms(base_ms: float, score: float, expected_response_ms: float, s: DebounceSettings) -> float:
    """The wait: ``rate · base − expected response`` within ``[min_ms, max_ms]``."""
    rate = s.rate_max - (s.rate_max - s.rate_min) * min(1.0, max(0.0, score))
    return min(s.max_ms, max(s.min_ms, rate * base_ms - expected_response_ms))


class AdaptiveDebounce:
    """Typing intervals and response times as they come; the wait for a request now."""

    def __init__(self, settings: DebounceSettings) -> None:
        self.settings = settings
        self._last_edit: float | None = None
        self._typing = False  # the latest gap between edits was a typing gap, not a pause
        self._intervals: deque[float] = deque(maxlen=max(1, settings.window))
        self._responses: deque[float] = deque(maxlen=max(1, settings.response_window))

    def edited(self, now: float) -> None:
        """An edit at ``now`` (seconds, a monotonic clock)."""
        if self._last_edit is not None:
            gap_ms = (now - self._last_edit) * 1e3
            self._typing = 0 <= gap_ms <= self.settings.max_interval_ms
            if self._typing:
                self._intervals.append(gap_ms)
        self._last_edit = now

    def responded(self, ms: float) -> None:
        """A daemon answer took ``ms``."""
        self._responses.append(ms)

    def base_ms(self) -> float:
        s = self.settings
        if len(self._intervals) < s.min_samples:
            return s.base_ms
        mean = sum(self._intervals) / len(self._intervals)
        return min(s.max_interval_ms, max(s.min_interval_ms, mean))

    def expected_response_ms(self) -> float:
        return sum(self._responses) / len(self._responses) if self._responses else 0.0

    def wait_ms(self, line_prefix: str, line_suffix: str, suffix: str) -> float:
        """The wait for a request now; none when the user is not typing (the edit before the
        request came after a pause, or there was no edit): no next key is coming to replace it."""
        if not self.settings.enabled or not self._typing:
            return 0.0
        return debounce_ms(self.base_ms(), context_score(line_prefix, line_suffix, suffix),
                           self.expected_response_ms(), self.settings)


class Debouncer:
    """The adaptive debounce on a clock and a sleep: edits stamped now, waits slept, the backend's
    response times measured."""

    def __init__(self, settings: DebounceSettings, clock: Clock, sleep: Sleep) -> None:
        self.adaptive = AdaptiveDebounce(settings)
        self.clock = clock
        self.sleep = sleep

    def edited(self) -> None:
        self.adaptive.edited(self.clock())

    def wait_ms(self, settings: DebounceSettings, window: Window) -> float:
        """The wait for a request at ``window`` now, under the current ``settings``."""
        self.adaptive.settings = settings
        return self.adaptive.wait_ms(window.line_prefix, window.line_suffix, window.suffix)

    async def wait(self, ms: float) -> None:
        await self.sleep(ms / 1e3)

    async def timed(self, answer: Awaitable[str | None]) -> str | None:
        """``answer`` awaited; its time counts as a response time when it is an answer (not None)."""
        started = self.clock()
        raw = await answer
        if raw is not None:
            self.adaptive.responded((self.clock() - started) * 1e3)
        return raw
