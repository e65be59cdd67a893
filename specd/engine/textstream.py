"""Tokens to text as they are verified: stop strings, guards that end a completion, deltas."""

from __future__ import annotations

from typing import Callable, Protocol, Sequence

from specd.models.tokenizer import Tokenizer


class Guard(Protocol):
    """A rule that ends a completion where its text goes wrong (see ``suffix.SuffixGuard``,
    ``endofcode.CodeEnd``)."""

    @property
    def active(self) -> bool: ...

    def cut(self, text: str, final: bool = False) -> int | None:
        """Where ``text`` must end, or None; until ``final`` the last line may still grow."""
        ...

    def may_grow_into_match(self, text: str) -> bool:
        """Whether the unfinished last line could still be cut (held back from streaming)."""
        ...


class TextStream:
    """Decodes tokens incrementally: applies stop strings and guards, emits text deltas, holds back
    an incomplete UTF-8 sequence (decoded as U+FFFD) until it completes."""

    def __init__(self, tokenizer: Tokenizer, stop: tuple[str, ...], on_delta: Callable[[str], None] | None,
                 guards: Sequence[Guard] = ()) -> None:
        self.tokenizer = tokenizer
        self.stop = stop
        self.on_delta = on_delta
        self.guards = [g for g in guards if g.active]
        self.sent = 0
        self.stopped_text: str | None = None

    def _cut(self, text: str, final: bool = False) -> tuple[str, bool]:
        hits = [i for s in self.stop if (i := text.find(s)) >= 0]
        hits += [i for g in self.guards if (i := g.cut(text, final)) is not None]
        return (text[: min(hits)], True) if hits else (text, False)

    def update(self, tokens: list[int]) -> bool:
        """Take all tokens so far; True when the text must end (a stop string or a guard)."""
        text, hit = self._cut(self.tokenizer.decode(tokens))
        if hit:
            self.stopped_text = text
        else:
            safe = len(text)
            if self.stop:  # hold back a possible partial stop string
                safe -= max(len(s) for s in self.stop) - 1
            if any(g.may_grow_into_match(text) for g in self.guards):
                safe = min(safe, max(text.rfind("\n"), 0))  # ... or a last line a guard may cut
            text = text[: max(safe, self.sent)].rstrip("\ufffd")
        self._emit(text)
        return hit

    def _emit(self, text: str) -> None:
        if self.on_delta is not None and len(text) > self.sent and text.startswith(text[: self.sent]):
            self.on_delta(text[self.sent :])
        self.sent = max(self.sent, len(text))

    def finish(self, tokens: list[int]) -> str:
        """The final text; emits what is left of it."""
        text = self.stopped_text if self.stopped_text is not None else self._cut(self.tokenizer.decode(tokens), True)[0]
        self._emit(text)
        return text
