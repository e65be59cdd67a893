"""The ``[daemon]`` settings: a frozen dataclass read from the config file's ``[daemon]`` table,
with command-line overrides on top (the ``[engine]`` table is read by :mod:`specd.config`); the
settings are declared once, on :class:`DaemonConfig` (:mod:`specd.schema`), the remote backend's
(``backend``, ``remote_model``, ...) on :class:`specd.remote.config.RemoteConfig`, nested in it."""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specd.remote.config import RemoteConfig
from specd.schema import from_table, nested, setting


def default_socket_path() -> Path:
    """``$XDG_RUNTIME_DIR/specd/specd.sock``, else a per-user directory under the temp dir."""
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime:
        return Path(runtime) / "specd" / "specd.sock"
    return Path(tempfile.gettempdir()) / f"specd-{os.getuid()}" / "specd.sock"


def _at_least_64(value: int) -> str | None:
    return None if value >= 64 else "must be at least 64"


def _not_negative(value: float) -> str | None:
    return None if value >= 0 else "must be >= 0"


def _path(value: str) -> Path:
    return Path(value).expanduser()


@dataclass(frozen=True)
class DaemonConfig:
    socket: Path | None = setting(None, convert=_path, shown_default="$XDG_RUNTIME_DIR/specd/specd.sock, else a "
                                  "per-user temp dir", help="socket path")
    max_message_bytes: int = setting(1 << 20, check=_at_least_64,
                                     help="longest request line accepted, newline excluded; longer ones get -32001")
    drain_timeout_s: float = setting(10.0, flag="--drain-timeout", check=_not_negative,
                                     help="on SIGTERM/SIGINT: seconds in-flight requests may still run before "
                                          "they are cancelled")
    reuse: bool = setting(True, flag="--no-reuse",
                          help="keep KV caches and the last suggestion across requests; --no-reuse runs every "
                               "request cold (for measurements)")
    max_write_buffer_bytes: int = setting(16 << 20, flag=None, check=_at_least_64,
                                          help="a client that does not read is disconnected past this many unsent "
                                               "bytes")
    remote: RemoteConfig = nested(RemoteConfig)  # backend = "local" | "llama-server:URL" | "openai:URL", ...

    @property
    def socket_path(self) -> Path:
        return self.socket if self.socket is not None else default_socket_path()


def daemon_config(table: dict[str, Any], overrides: dict[str, Any]) -> DaemonConfig:
    """``[daemon]`` table values, then non-None ``overrides`` (command-line flags) on top."""
    return from_table(DaemonConfig, "daemon", table, overrides)
