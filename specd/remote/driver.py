"""What a remote driver does: one server API, turned into requests and read back as chunks."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from specd.remote.errors import RemoteError
from specd.remote.http import Cancel, HttpClient
from specd.remote.prompt import RemotePrompt
from specd.requests import CompletionRequest


@dataclass(frozen=True)
class Chunk:
    """One streamed event: new text, and, once known, why it ended and what the server counted."""

    text: str = ""
    stop_reason: str | None = None  # GenerationStats' words: stop_token | max_tokens | stop_string
    prompt_tokens: int | None = None
    cached_tokens: int | None = None  # prompt tokens the server reused from its cache
    new_tokens: int | None = None


class Driver(Protocol):
    name: str
    path: str  # the completion endpoint, under the server's base URL
    end_marker: str  # what ends a complete streamed answer, in words (for errors)

    def ended(self, final: bool, how: str | None) -> bool:
        """Whether a streamed answer ended as the server ends a complete one: ``final``, a chunk
        with a ``stop_reason`` was seen; ``how``, how the body ended (:attr:`Response.ended`:
        ``done``, ``json`` or ``eof``; None while it is still being read: True then means the
        answer is complete whatever follows)."""
        ...

    def body(self, request: CompletionRequest, prompt: RemotePrompt, stream: bool = True) -> dict[str, Any]:
        """The request body for ``request``."""
        ...

    def warm_body(self, request: CompletionRequest, prompt: RemotePrompt) -> dict[str, Any]:
        """A request that makes the server compute and cache the prompt, generating (almost) nothing."""
        ...

    def parse(self, event: Any) -> Chunk:
        """One event of the stream (or the whole answer of a non-streamed request)."""
        ...

    def prompt_tokens(self, request: CompletionRequest, prompt: RemotePrompt) -> int | None:
        """The prompt's length in tokens where specd lays it out (for servers that do not say)."""
        ...

    def stop_strings(self) -> tuple[str, ...]:
        """Strings that end the text besides the request's (the FIM stop tokens, where the
        server may print them)."""
        ...

    def check(self, http: HttpClient, prompt: RemotePrompt, cancelled: Cancel = None) -> dict[str, Any]:
        """Ask the server whether it can serve: facts for ``health``/``describe`` (``max_len``,
        ``model``); raises RemoteError naming what is wrong (down, no FIM tokens)."""
        ...


def need(obj: Any, key: str, kind: type | tuple[type, ...], what: str) -> Any:
    """``obj[key]`` of type ``kind``, or a RemoteError saying the server's answer is malformed."""
    if not isinstance(obj, dict) or not isinstance(obj.get(key), kind):
        raise RemoteError(f"{what}: malformed answer: expected {key!r} in {str(obj)[:200]}")
    return obj[key]


def optional_int(obj: Any, key: str) -> int | None:
    value = obj.get(key) if isinstance(obj, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None
