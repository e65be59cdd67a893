"""Suggestions already shown, answered again without a request while the user types along them.

An editor asks again after every keystroke. When the text typed since a suggestion was shown is
the start of that suggestion (same document, same text after the cursor, the window's start
unchanged), the rest of it is still the answer the user is looking at: it is returned at once,
with no request to the daemon. Anything else (a character that departs from the suggestion, an
edit after the cursor, the window moving) misses, and a real request runs.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from specd.lsp.window import Window

SIZE = 32  # documents remembered (least recently used first out)


@dataclass(frozen=True)
class Shown:
    prefix: str  # the window's prefix when the suggestion was computed
    suffix: str
    raw: str  # the backend's text, before post-processing for display


class ShownSuggestions:
    def __init__(self, size: int = SIZE) -> None:
        self.size = size
        self._by_uri: OrderedDict[str, Shown] = OrderedDict()

    def remember(self, uri: str, window: Window, raw: str) -> None:
        self._by_uri[uri] = Shown(window.prefix, window.suffix, raw)
        self._by_uri.move_to_end(uri)
        while len(self._by_uri) > self.size:
            self._by_uri.popitem(last=False)

    def along(self, uri: str, window: Window) -> str | None:
        """The rest of the suggestion shown for ``uri`` when ``window`` types along it, else None."""
        shown = self._by_uri.get(uri)
        if shown is None or window.suffix != shown.suffix or not window.prefix.startswith(shown.prefix):
            return None
        typed = window.prefix[len(shown.prefix):]
        if not typed or not shown.raw.startswith(typed) or len(typed) >= len(shown.raw):
            return None
        self._by_uri.move_to_end(uri)
        return shown.raw[len(typed):]

    def forget(self, uri: str) -> None:
        self._by_uri.pop(uri, None)
