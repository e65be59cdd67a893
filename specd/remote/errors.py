"""What goes wrong with a remote server, said plainly (the daemon answers the request with it and serves on)."""

from __future__ import annotations

from typing import Any


class RemoteError(Exception):
    """The remote server could not serve a request: down, slow, an HTTP error, malformed JSON, a
    model without FIM tokens. The message names the server and what is wrong. ``data``: facts the
    daemon adds to its error answer (JSON values), or None."""

    data: dict[str, Any] | None = None


class RemoteUnreachable(RemoteError):
    """No connection, or none in time: worth a bounded retry."""


class CannotConnect(RemoteUnreachable):
    """Not even a connection: while the server is in this state requests fail at once and a
    background check watches for its return (each request would otherwise wait its connect
    timeouts)."""


class StreamBroken(RemoteError):
    """The connection broke while a streamed answer was being read (reset, a cut chunk)."""


class IncompleteAnswer(RemoteError):
    """A streamed answer that stopped before the server's end marker: cut, stalled, past its
    deadline or garbled. What already streamed to the client stays as it was; ``data`` says the
    answer is incomplete, how many tokens had streamed and the text the client was sent."""

    def __init__(self, message: str, tokens: int, streamed: str) -> None:
        super().__init__(message)
        self.data = {"incomplete": True, "streamed_tokens": tokens, "streamed_text": streamed}
