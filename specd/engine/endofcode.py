"""Stop when a completion leaves code for chat: a markdown fence.

Instruct-tuned code models, given a prefix with nothing after it (the end of a file), often finish
the function and then go on as if answering in a chat: a closing fence followed by prose (````\\n\\n
In this code, ...``). ``CodeEnd.cut(text)`` finds the first line of the completion that opens or
closes a fence at column 0; the engine stops there and returns the text before that line.

The rule stays off when the text before the cursor already holds a fence (a Markdown file, a
docstring with fenced examples): there a fence is content. ``bench/end_of_code.py`` measures how
often it would cut real code.
"""

from __future__ import annotations

FENCES = ("```", "~~~")


def _fence_at(line: str) -> bool:
    return line.startswith(FENCES)


class CodeEnd:
    def __init__(self, prefix: str) -> None:
        self.active = not any(f in prefix for f in FENCES)

    def cut(self, text: str, final: bool = False) -> int | None:
        """Index in ``text`` of the start of the first fence line (the newline before it is cut
        too), or None. Until ``final`` the last line may still grow: it counts once it holds a
        whole fence marker."""
        if not self.active:
            return None
        offset = 0
        for line in text.split("\n"):
            if _fence_at(line):
                return max(0, offset - 1) if offset else 0
            offset += len(line) + 1
        return None

    def may_grow_into_match(self, text: str) -> bool:
        """Whether the unfinished last line could still become a fence (hold it back from
        streaming until it is decided)."""
        if not self.active:
            return False
        last = text.rsplit("\n", 1)[-1]  # empty after a newline: the next line may be a fence
        return any(f.startswith(last) for f in FENCES)
