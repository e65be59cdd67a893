"""Errors a user can act on: each message says what is wrong and what to do."""


class ModelError(Exception):
    """A model cannot be found, fetched, verified, converted or loaded."""


class KernelABIError(ModelError):
    """specd's compiled kernel library does not match the Python code that loads it (a stale or
    foreign build): its ABI version or function signatures differ, or it cannot be loaded."""
