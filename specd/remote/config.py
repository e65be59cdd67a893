"""The remote backend's settings, declared once (:mod:`specd.schema`): nested in the daemon's
settings, so each is a ``[daemon]`` key of the config file and a ``specd serve`` flag alike
(``backend`` / ``--backend``, ``remote_model`` / ``--remote-model``, ...).

The API key is read from the environment variable ``remote_api_key_env`` names, else from the
config file's ``remote_api_key`` (never a flag: command lines show in ``ps``); it is held as a
:class:`Secret`, whose repr hides it, and never reported in ``health``, ``describe`` or a log.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from specd.remote.spec import LOCAL, RemoteSpec, check_backend, parse_backend
from specd.schema import setting

DEFAULT_API_KEY_ENV = "SPECD_REMOTE_API_KEY"


class Secret:
    """A string that does not show itself: ``repr``/``str`` say ``***``; ``reveal()`` gives it."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "Secret('***')"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)


def _positive(value: float) -> str | None:
    return None if value > 0 else "must be > 0"


def _not_negative(value: float) -> str | None:
    return None if value >= 0 else "must be >= 0"


def _retries(value: int) -> str | None:
    return None if 0 <= value <= 10 else "must be in 0..10"


def _env_name(value: str) -> str | None:
    return None if value and "=" not in value else "must be an environment variable's name"


@dataclass(frozen=True)
class RemoteConfig:
    backend: str = setting(LOCAL, check=check_backend,
                           help="where completions come from: local (the models in this process), "
                                "llama-server:http://HOST:PORT (its /infill) or openai:http://HOST:PORT/v1 "
                                "(/v1/completions: vLLM, llama-cpp-python's server, ...)")
    remote_model: str | None = setting(None, help="the model name sent to an OpenAI-compatible server (vLLM needs "
                                                  "the served name; none: the server's first listed model)")
    remote_api_key_env: str = setting(DEFAULT_API_KEY_ENV, check=_env_name,
                                      help="environment variable holding the remote server's API key (sent as "
                                           "'Authorization: Bearer'; never logged)")
    remote_api_key: Secret | None = setting(None, flag=None, accepts=(str,), convert=Secret,
                                            help="the API key, in the config file (the environment variable wins)")
    remote_connect_timeout_s: float = setting(3.0, check=_positive, flag="--remote-connect-timeout",
                                              help="seconds to connect to the remote server")
    remote_timeout_s: float = setting(30.0, check=_positive, flag="--remote-timeout",
                                      help="seconds the remote server may stay silent (before the first token, "
                                           "between chunks) before the request fails")
    remote_deadline_s: float = setting(60.0, check=_not_negative, flag="--remote-deadline",
                                       help="seconds a whole remote request may take, from connecting to its last "
                                            "token, however the server trickles (0: no limit); past it the request "
                                            "fails (an incomplete answer, once text has streamed) and its connection "
                                            "is closed")
    remote_retries: int = setting(1, check=_retries,
                                  help="retries of a request that found the server unreachable (before any "
                                       "answer; never after text has streamed)")
    remote_max_predict_ms: int = setting(0, check=_not_negative,
                                         help="llama-server's t_max_predict_ms: stop generating after this many "
                                              "ms once a newline is out (0: no limit)")
    remote_tokenizer: str = setting("", help="tokenizer.json, a directory holding one, or a published model name, "
                                             "whose token counts bound the prompt windows (empty: the engine's "
                                             "target's, when pulled)")

    @property
    def spec(self) -> RemoteSpec | None:
        """The remote server, or None for the local backend."""
        return parse_backend(self.backend)

    def api_key(self) -> str | None:
        """The key from the environment, else the config file; None when neither gives one."""
        key = os.environ.get(self.remote_api_key_env)
        if key:
            return key
        return self.remote_api_key.reveal() if self.remote_api_key is not None else None
