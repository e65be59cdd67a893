"""The config file (``$XDG_CONFIG_HOME/specd/config.toml``): its ``[engine]`` table read into an
:class:`~specd.engine.config.EngineConfig`, with command-line flags on top. The settings
themselves are declared once, on the dataclasses (:mod:`specd.schema`); the ``[daemon]`` table is
read by :mod:`specd.daemon.config`."""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any

from specd.engine.config import EngineConfig, parse_k
from specd.schema import ConfigError, from_table

__all__ = ["ConfigError", "default_config_path", "engine_config", "load_toml", "parse_k"]


def default_config_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "specd" / "config.toml"


def load_toml(path: Path | None) -> dict[str, Any]:
    """The parsed file, or {} when the default file does not exist."""
    explicit = path is not None
    path = path or default_config_path()
    if not path.exists():
        if explicit:
            raise ConfigError(f"config file {path} does not exist")
        return {}
    try:
        return tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path}: {e}") from e


def engine_config(table: dict[str, Any], overrides: dict[str, Any]) -> EngineConfig:
    """``[engine]`` table values, then non-None ``overrides`` (command-line flags) on top."""
    return from_table(EngineConfig, "engine", table, overrides)
