"""The bench's one error type: bad input, named clearly."""

from __future__ import annotations


class BenchError(ValueError):
    """Bad bench input (mode, task filter, task file, missing model): the message says what is
    missing and how to get it."""
