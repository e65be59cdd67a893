"""A time budget on multi-line completions: llama.vim's ``t_max_predict_ms``, as a text guard.

Once the completion has been generating for ``ms`` milliseconds, it ends at the next line end: a
suggestion that is still writing a block when the budget runs out is cut to its whole lines, so
the editor gets the first line(s) at once instead of waiting for a block it may never take.
Newlines before the completion's first non-blank character (an empty first line) do not count.
With ``ms`` 0 the completion ends at its first line end. The clock starts at the first verified
round (after the prompt's prefill, like llama-server's ``t_gen_ms``).
"""

from __future__ import annotations

import time
from typing import Callable


class LineBudget:
    def __init__(self, ms: float | None, clock: Callable[[], float] = time.monotonic) -> None:
        self.ms = ms
        self.clock = clock
        self.start: float | None = None
        self.checked = 0  # text before this offset was judged (its newlines came within the budget)
        self.at: int | None = None  # where the completion was cut, once it was

    @property
    def active(self) -> bool:
        return self.ms is not None

    def cut(self, text: str, final: bool = False) -> int | None:
        if self.at is not None:
            return self.at if self.at <= len(text) else None
        now = self.clock()
        if self.start is None:
            self.start = now
        body = len(text) - len(text.lstrip())  # an empty first line is not a line end
        nl = text.find("\n", max(self.checked, body))
        if nl >= 0 and (now - self.start) * 1000.0 >= self.ms:
            self.at = nl
            return nl
        self.checked = max(self.checked, text.rfind("\n") + 1)
        return None

    def may_grow_into_match(self, text: str) -> bool:
        return False  # it cuts only at a newline already written: nothing to hold back
