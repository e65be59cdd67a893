"""``--backend``: ``local`` (the models in this process) or ``DRIVER:URL`` (a remote server)."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

LOCAL = "local"
DRIVERS = ("llama-server", "openai")
EXAMPLES = "local, llama-server:http://HOST:PORT or openai:http://HOST:PORT/v1"


@dataclass(frozen=True)
class RemoteSpec:
    driver: str  # one of DRIVERS
    url: str  # scheme, host, port and base path, without a trailing slash

    @property
    def host(self) -> str:
        return urlsplit(self.url).hostname or ""

    @property
    def port(self) -> int:
        parts = urlsplit(self.url)
        return parts.port or (443 if parts.scheme == "https" else 80)

    @property
    def base_path(self) -> str:
        return urlsplit(self.url).path.rstrip("/")

    @property
    def https(self) -> bool:
        return urlsplit(self.url).scheme == "https"

    def __str__(self) -> str:
        return f"{self.driver}:{self.url}"


def parse_backend(text: str) -> RemoteSpec | None:
    """None for ``local``; the remote server for ``DRIVER:URL``. Raises ValueError naming what is
    wrong (an unknown driver, a URL that is not http(s)://HOST[:PORT][/PATH])."""
    if text == LOCAL:
        return None
    driver, sep, url = text.partition(":")
    if not sep or driver not in DRIVERS:
        raise ValueError(f"unknown backend {text!r}: expected {EXAMPLES}")
    try:
        parts = urlsplit(url)
        port = parts.port  # raises ValueError on a port that is not a number in range
    except ValueError as e:
        raise ValueError(f"backend {text!r}: bad URL: {e}") from None
    if parts.scheme not in ("http", "https"):
        raise ValueError(f"backend {text!r}: the URL's scheme must be http or https, got {parts.scheme or 'none'!r}")
    if not parts.hostname:
        raise ValueError(f"backend {text!r}: the URL names no host")
    if parts.query or parts.fragment or parts.username or parts.password:
        raise ValueError(f"backend {text!r}: give the server's base URL only (no query, fragment or credentials; "
                         "the API key comes from the environment or the config file)")
    del port
    return RemoteSpec(driver, url.rstrip("/"))


def check_backend(text: str) -> str | None:
    """A settings check (:mod:`specd.schema`): the problem with ``text``, or None."""
    try:
        parse_backend(text)
    except ValueError as e:
        return str(e)
    return None
