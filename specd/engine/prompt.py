"""Prompts: Qwen's fill-in-the-middle format, bounded windows, stop tokens.

``<|fim_prefix|>{prefix}<|fim_suffix|>{suffix}<|fim_middle|>`` — the model writes the middle.
The prefix window keeps the last ``max_prefix_tokens`` tokens before the cursor, cut at a line
start; the suffix window keeps the first ``max_suffix_tokens`` after it (``mid_line_suffix_tokens``
where text precedes the cursor on its line), cut at a line end.
"""

from __future__ import annotations

from functools import cached_property
from typing import Callable

from specd.engine.config import PromptWindows
from specd.models.tokenizer import FIM_MIDDLE, FIM_PREFIX, FIM_SUFFIX, STOP_TOKENS, Tokenizer

__all__ = ["FIM_MIDDLE", "FIM_PREFIX", "FIM_SUFFIX", "FIM_TOKENS", "STOP_TOKENS", "PromptBuilder"]
FIM_TOKENS = 3  # <|fim_prefix|>, <|fim_suffix|>, <|fim_middle|> in every prompt


def quantized_cut(n: int, keep: int, step: int) -> int:
    """Where ``n`` tokens start to leave at most ``keep``: the excess rounded up to whole steps, so
    the start holds while the text grows by up to a step (0 when everything fits)."""
    excess = n - keep
    return 0 if excess <= 0 else min(n, -(-excess // step) * step)


class PromptBuilder:
    def __init__(self, tokenizer: Tokenizer, windows: PromptWindows = PromptWindows()) -> None:
        self.tokenizer = tokenizer
        self.windows = windows
        ids = {t: tokenizer.token_id(t) for t in (FIM_PREFIX, FIM_SUFFIX, FIM_MIDDLE)}
        self.fim = None if None in ids.values() else (ids[FIM_PREFIX], ids[FIM_SUFFIX], ids[FIM_MIDDLE])
        self.stop_ids = frozenset(i for t in STOP_TOKENS if (i := tokenizer.token_id(t)) is not None)

    @cached_property
    def _token_chars(self) -> int:
        """At most this many characters make one token (the longest token's byte count)."""
        return max(1, max((len(t) for t in self.tokenizer.vocab()), default=1))

    def _span(self, limit: int) -> int:
        """Characters that hold at least ``2 * limit`` tokens: text beyond them is never encoded,
        so an enormous document costs what a window-sized one does."""
        return 2 * limit * self._token_chars

    def window_prefix(self, prefix: str) -> str:
        """The tail of ``prefix`` that fits the window, starting at a line start when cut.

        The cut moves in steps of a quarter window: while the user types, the window's start (and
        so the cached KV of everything after it) stays put for ``limit / 4`` tokens instead of
        moving with every keystroke and invalidating the whole prompt's cache."""
        limit = self.windows.max_prefix_tokens
        span = self._span(limit)
        if len(prefix) > 2 * span:  # an enormous document: only a tail of at least 2 * limit tokens
            quantum = span // 2  # its start moves in whole quanta, so it holds while the user types
            prefix = prefix[(len(prefix) - span) // quantum * quantum :]
        ids = self.tokenizer.encode(prefix)
        if len(ids) <= limit:
            return prefix
        cut = quantized_cut(len(ids), limit, max(1, limit // 4))
        tail = self.tokenizer.decode(ids[cut:])
        nl = tail.find("\n")
        return tail[nl + 1 :] if 0 <= nl < len(tail) - 1 else tail

    def window_suffix(self, suffix: str, prefix: str) -> str:
        """The head of ``suffix`` that fits the window for a cursor after ``prefix``
        (:meth:`PromptWindows.suffix_tokens`), ending at a line end when cut."""
        limit = self.windows.suffix_tokens(prefix)
        ids = self.tokenizer.encode(suffix[: self._span(limit)])
        if len(ids) <= limit:
            return suffix
        head = self.tokenizer.decode(ids[:limit])
        nl = head.rfind("\n")
        return head[: nl + 1] if nl > 0 else head

    def build(self, prefix: str, suffix: str = "") -> list[int]:
        return self.build_healed(prefix, suffix)[0]

    def build_healed(self, prefix: str, suffix: str = "",
                     heal: Callable[[list[int]], int] | None = None) -> tuple[list[int], list[int]]:
        """The prompt, with the last ``heal(ids)`` tokens of the text before the cursor (``ids``:
        the prefix's tokens) taken out, and the tokens taken out
        (token healing, ``specd.engine.healing``; ``heal`` None: none)."""
        prefix, suffix = self.window_prefix(prefix), self.window_suffix(suffix, prefix)
        if self.fim is None:  # no FIM tokens: plain left-to-right completion
            return _cut(self.tokenizer.encode(prefix), heal)
        p, s, m = self.fim
        pre, removed = _cut(self.tokenizer.encode(prefix), heal)
        return [p, *pre, s, *self.tokenizer.encode(suffix), m], removed


def _cut(ids: list[int], heal: Callable[[list[int]], int] | None) -> tuple[list[int], list[int]]:
    """``ids`` without its last ``heal(ids)`` tokens, and those tokens."""
    n = heal(ids) if heal is not None and ids else 0
    return ids[: len(ids) - n], ids[len(ids) - n :]
