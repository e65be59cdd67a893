"""Stop when the completion starts writing what already follows the cursor.

A fill-in-the-middle model that has finished the middle often goes on to reproduce the suffix (the
next line of the file, the closing bracket of the cursor line). Those tokens are wasted time and, in
an editor, duplicated text. ``SuffixGuard.cut(text)`` finds where the completion begins repeating
the suffix; the engine stops generating there and returns the text before it.

Two signals, both conservative (a false stop loses a suggestion; a missed one only costs time):

- **next lines**: a completed line after the first that equals the first non-blank line following
  the cursor line (stripped). A short line (``}``, ``)``, ``end``) matches only together with the
  non-blank line after it, since a completion closes its own blocks with such lines too.
- **rest of the cursor line**: when the cursor is mid-line and the completion's first line ends
  with that rest (``)`` or ``):``) and then breaks the line, the rest was reproduced.

The cut text ends where the suffix begins (the newline before a repeated line is dropped: the
suffix supplies it).
"""

from __future__ import annotations

SHORT = 6  # a next line shorter than this (stripped) needs its follower to match too


class SuffixGuard:
    def __init__(self, suffix: str) -> None:
        cursor_rest, _, after = suffix.partition("\n")
        self.rest = cursor_rest.strip()
        self.next_lines = [ln.strip() for ln in after.split("\n") if ln.strip()][:2] if "\n" in suffix else []

    @property
    def active(self) -> bool:
        return bool(self.rest or self.next_lines)

    def cut(self, text: str, final: bool = False) -> int | None:
        """Index in ``text`` where the repetition of the suffix begins, or None. Until ``final``
        the last line may still grow and is not judged."""
        lines = text.split("\n")
        if self.rest and len(lines) > 1:
            first = lines[0].rstrip()
            if first.endswith(self.rest) and len(first) > len(self.rest):
                return len(first) - len(self.rest)
        if not self.next_lines:
            return None
        want = self.next_lines if len(self.next_lines[0]) < SHORT else self.next_lines[:1]
        if len(want) == 2 and len(self.next_lines) < 2:
            return None
        complete = lines if final else lines[:-1]
        offset = len(lines[0])  # index of the newline that ends line 0
        for i in range(1, len(complete)):
            if complete[i].strip() == want[0]:
                if len(want) == 1:
                    return offset
                nxt = next((ln.strip() for ln in complete[i + 1:] if ln.strip()), None)
                if nxt == want[1]:
                    return offset
            offset += 1 + len(complete[i])
        return None

    def may_grow_into_match(self, text: str) -> bool:
        """Whether the unfinished last line could still become a repeated line (hold it back
        from streaming until it is decided)."""
        if not self.next_lines or "\n" not in text:
            return False
        last = text.rsplit("\n", 1)[1].strip()
        return self.next_lines[0].startswith(last)  # an indentation-only line may grow into one
