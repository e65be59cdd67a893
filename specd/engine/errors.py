"""Errors the engine raises while it is put together, importable without torch (the CLI names
them in one error line)."""

from __future__ import annotations


class VocabularyMismatch(ValueError):
    """A draft whose token ids do not mean what the target's mean."""


class UnsupportedDrafter(ValueError):
    """A drafter the target runtime cannot serve (an EAGLE head over a runtime that keeps its hidden
    states to itself)."""
