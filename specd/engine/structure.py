"""What kind of text the completion is in, from the code just before the draft position.

The K policy keeps acceptance statistics per kind (``specd.engine.policy.StructureK``): drafts run
far through boilerplate — imports, argument lists, closing brackets, lines the file already has —
and stay short where the model is inventing (logic, names) or writing prose (comments, docstrings).

- ``boilerplate``: an import/include line; inside an open bracket on the current line (argument
  lists, literals); a line holding only closing brackets; or the last tokens repeat an earlier
  n-gram of the context (prompt lookup would find them).
- ``text``: a comment line, or inside a docstring (an odd number of triple quotes in the tail).
- ``code``: everything else.
"""

from __future__ import annotations

from typing import Callable

from specd.engine.ngram import lookup
from specd.models.tokenizer import Tokenizer

KINDS = ("boilerplate", "code", "text")
IMPORTS = ("import ", "from ", "#include", "using ", "package ", "require", "use ")
COMMENTS = ("#", "//", "/*", "*", "--", ";")
OPENERS, CLOSERS = "([{", ")]}"

Classifier = Callable[[list[int]], str]


def classify_text(tail: str) -> str:
    """The kind of the position right after ``tail`` (the text before it, a few lines)."""
    line = tail.rsplit("\n", 1)[-1]
    stripped = line.lstrip()
    if (tail.count('"""') + tail.count("'''")) % 2 == 1:
        return "text"
    if stripped.startswith(COMMENTS) and not stripped.startswith("#include"):
        return "text"
    if stripped.startswith(IMPORTS):
        return "boilerplate"
    depth = 0
    for ch in line:
        if ch in OPENERS:
            depth += 1
        elif ch in CLOSERS:
            depth = max(0, depth - 1)
    if depth > 0:
        return "boilerplate"
    if stripped and all(ch in CLOSERS + ",;: " for ch in stripped):
        return "boilerplate"
    return "code"


def make_classifier(tokenizer: Tokenizer, tail_tokens: int = 48, repeat_ngram: int = 3) -> Classifier:
    """A classifier over token ids: decodes the last ``tail_tokens`` and checks for a repeated
    ``repeat_ngram``-gram in the whole sequence."""

    def classify(seq: list[int]) -> str:
        if len(seq) > repeat_ngram and lookup(seq, 1, repeat_ngram, repeat_ngram):
            return "boilerplate"
        return classify_text(tokenizer.decode(seq[-tail_tokens:]))

    return classify
