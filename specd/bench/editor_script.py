"""The editor scenario's script: real files typed key by key, with the kinds of keystroke an
editor sees, and how a shown suggestion is scored against the file's real text.

Files are the bench's own Python tasks (cut from installed packages: specd's held-out set), each
whole excerpt ``prefix + middle + suffix``; a stretch from the task's cursor is removed when the
file opens and typed back. Visits go through the files in turn: the first visit of each opens it
(``didOpen``, then the idle time, then the first key: kind ``open``); later visits switch to it
(kind ``switch``). Inside a visit keys are ``type`` (a character within a line) or ``newline``; one
key in the middle of each visit comes after a pause (``pause``); at the end of the first visit
the shown suggestion is accepted, and the next request is ``accept``.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass

from specd.bench.tasks import Task

KINDS = ("type", "newline", "pause", "open", "switch", "accept")
WAITED = ("pause", "open", "switch", "accept")  # the user looks: the bench waits for the answer
DEFAULT_TASKS = ("py-logic-block_body-2", "py-boile-repetitive-1", "py-docs-comment-2", "py-logic-expression-2")


@dataclass(frozen=True)
class EditorFile:
    uri: str
    path: str  # as the model sees it (the package's path)
    language: str
    original: str  # the real text
    start: int  # where the typed stretch starts in ``original``
    typed: str  # the stretch typed back, key by key

    @property
    def opened_text(self) -> str:
        return self.original[:self.start] + self.original[self.start + len(self.typed):]


@dataclass(frozen=True)
class Key:
    file: int
    offset: int  # index into the file's ``typed``
    kind: str
    pause_before_s: float = 0.0
    accept_after: bool = False  # accept the suggestion shown for this key, then ask again


@dataclass(frozen=True)
class Preset:
    rounds: int  # visits of every file
    keys_per_visit: int
    gap_s: float  # between keys while typing
    idle_s: float  # after opening a file, before its first key
    pause_s: float
    max_tokens: int


PRESETS = {
    "quick": Preset(rounds=2, keys_per_visit=3, gap_s=0.15, idle_s=0.5, pause_s=0.6, max_tokens=16),
    "short": Preset(rounds=2, keys_per_visit=4, gap_s=0.15, idle_s=2.0, pause_s=1.0, max_tokens=32),
    "full": Preset(rounds=2, keys_per_visit=8, gap_s=0.15, idle_s=2.0, pause_s=1.0, max_tokens=32),
}


def editor_files(tasks: list[Task], keys: int) -> list[EditorFile]:
    files = []
    for i, t in enumerate(tasks):
        original = t.prefix + t.expected + t.suffix
        start = len(t.prefix)
        typed = original[start:start + keys]
        files.append(EditorFile(f"file:///bench/{t.package}/{t.file}", f"{t.package}/{t.file}", t.language,
                                original, start, typed))
    return files


def script(n_files: int, preset: Preset) -> list[Key]:
    keys: list[Key] = []
    for r in range(preset.rounds):
        for f in range(n_files):
            base = r * preset.keys_per_visit
            for j in range(preset.keys_per_visit):
                if j == 0:
                    kind = "open" if r == 0 else "switch"
                elif j == preset.keys_per_visit // 2 + 1 and preset.keys_per_visit >= 3:
                    kind = "pause"
                else:
                    kind = "type"
                last = j == preset.keys_per_visit - 1
                keys.append(Key(f, base + j, kind, preset.pause_s if kind == "pause" else 0.0,
                                accept_after=last and r == 0 and f == 0))
    return keys


def key_kind(key: Key, char: str) -> str:
    """The kind reported: a typed newline is ``newline`` unless the key is a waited kind."""
    return "newline" if key.kind == "type" and char in "\r\n" else key.kind


def first_content_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


@dataclass(frozen=True)
class Quality:
    exact: bool  # the suggestion's first line with content == the real text's, at the cursor
    similarity: float  # difflib ratio of the two lines (0..1)


def quality(suggestion: str, real_rest: str) -> Quality:
    """``suggestion`` shown at a cursor after which the real file holds ``real_rest``."""
    a, b = first_content_line(suggestion), first_content_line(real_rest)
    return Quality(bool(a) and a == b, difflib.SequenceMatcher(None, a, b).ratio() if (a or b) else 1.0)
