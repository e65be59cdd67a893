"""What goes wrong with a remote server, said plainly (the daemon answers the request with it and serves on)."""

from __future__ import annotations


class RemoteError(Exception):
    """The remote server could not serve a request: down, slow, an HTTP error, malformed JSON, a
    model without FIM tokens. The message names the server and what is wrong."""


class RemoteUnreachable(RemoteError):
    """No connection, or none in time: worth a bounded retry."""
