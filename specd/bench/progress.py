"""A progress bar on stderr: done/total, the current item, elapsed and remaining time."""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    def __init__(self, total: int, stream: TextIO | None = None, width: int = 24, enabled: bool = True) -> None:
        self.total = max(total, 1)
        self.done = 0
        self.stream = stream or sys.stderr
        self.width = width
        self.enabled = enabled
        self.t0 = time.monotonic()
        self.tty = getattr(stream, "isatty", lambda: False)()
        self._last_line = 0.0

    def step(self, label: str = "") -> None:
        self.done += 1
        self.show(label)

    def show(self, label: str = "") -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        elapsed = now - self.t0
        frac = min(self.done / self.total, 1.0)
        eta = elapsed / frac - elapsed if frac > 0 else 0.0
        bar = "#" * int(frac * self.width) + "-" * (self.width - int(frac * self.width))
        line = f"[{bar}] {self.done}/{self.total} {elapsed:5.0f}s elapsed, ~{eta:4.0f}s left  {label}"
        if self.tty:
            self.stream.write("\r" + line[:118].ljust(118))
        elif now - self._last_line >= 5 or self.done >= self.total:  # logs: one line every 5 s
            self.stream.write(line + "\n")
            self._last_line = now
        self.stream.flush()

    def close(self) -> None:
        if self.enabled and self.tty:
            self.stream.write("\n")
            self.stream.flush()


def note(message: str, stream: TextIO | None = None) -> None:
    stream = stream or sys.stderr
    stream.write(f"specd bench: {message}\n")
    stream.flush()
