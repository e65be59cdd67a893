"""The completion service's time sources, injected: a monotonic clock and an asynchronous sleep.

Every wait the service takes (a debounced request, the pause before a warm) goes through ``Sleep``
and every instant it stamps (typing gaps, response times) comes from ``Clock``, so a test can run
the service on a clock it moves itself.
"""

from __future__ import annotations

from typing import Awaitable, Callable

Clock = Callable[[], float]  # seconds, monotonic
Sleep = Callable[[float], Awaitable[None]]  # waits that many seconds (asyncio.sleep's signature)
