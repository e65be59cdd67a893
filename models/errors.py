"""Errors a user can act on: each message says what is wrong and what to do."""


class ModelError(Exception):
    """A model cannot be found, fetched, verified, converted or loaded."""
