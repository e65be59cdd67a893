"""The ``[daemon]`` settings: a frozen dataclass read from the config file's ``[daemon]`` table,
with command-line overrides on top (the ``[engine]`` table is read by :mod:`specd.config`)."""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specd.config import ConfigError


def default_socket_path() -> Path:
    """``$XDG_RUNTIME_DIR/specd/specd.sock``, else a per-user directory under the temp dir."""
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime:
        return Path(runtime) / "specd" / "specd.sock"
    return Path(tempfile.gettempdir()) / f"specd-{os.getuid()}" / "specd.sock"


@dataclass(frozen=True)
class DaemonConfig:
    socket: Path | None = None  # None: default_socket_path()
    max_message_bytes: int = 1 << 20  # one request line, newline excluded
    drain_timeout_s: float = 10.0  # graceful stop: time in-flight work may take before it is cancelled
    reuse: bool = True  # keep KV caches and the last suggestion across requests
    max_write_buffer_bytes: int = 16 << 20  # a client that does not read is disconnected past this

    @property
    def socket_path(self) -> Path:
        return self.socket if self.socket is not None else default_socket_path()


_KEYS: dict[str, tuple[type, ...]] = {
    "socket": (str,), "max_message_bytes": (int,), "drain_timeout_s": (int, float), "reuse": (bool,),
    "max_write_buffer_bytes": (int,),
}


def daemon_config(table: dict[str, Any], overrides: dict[str, Any]) -> DaemonConfig:
    """``[daemon]`` table values, then non-None ``overrides`` (command-line flags) on top."""
    values: dict[str, Any] = {}
    for key, value in {**table, **{k: v for k, v in overrides.items() if v is not None}}.items():
        if key not in _KEYS:
            raise ConfigError(f"daemon.{key}: unknown setting")
        types = _KEYS[key]
        if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
            raise ConfigError(f"daemon.{key}: wrong type {type(value).__name__}")
        values[key] = value
    if "socket" in values:
        values["socket"] = Path(values["socket"]).expanduser()
    for key in ("max_message_bytes", "max_write_buffer_bytes"):
        if key in values and values[key] < 64:
            raise ConfigError(f"daemon.{key}: must be at least 64")
    if values.get("drain_timeout_s", 0) < 0:
        raise ConfigError("daemon.drain_timeout_s: must be >= 0")
    return DaemonConfig(**values)
