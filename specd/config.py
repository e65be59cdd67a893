"""Configuration: frozen dataclasses, read from TOML (``$XDG_CONFIG_HOME/specd/config.toml``),
overridden by command-line flags."""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any

from specd.engine.engine import EngineConfig
from specd.engine.prompt import PromptWindows


class ConfigError(ValueError):
    pass


def parse_k(text: str) -> int | str:
    """A ``--k`` value: an integer, or "auto"."""
    if text == "auto":
        return text
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"expected an integer or 'auto', got {text!r}") from None


def default_config_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "specd" / "config.toml"


_ENGINE_KEYS = {"target": str, "draft": (str, type(None)), "target_quant": str, "draft_quant": str,
                "device": str, "draft_head_vocab": int, "drafter": str, "k": (int, str), "draft_min_prob": float, "max_len": int, "threads": int,
                "target_backend": str, "draft_backend": str, "tree": str, "tree_width": int,
                "tree_branch_below": float}
_WINDOW_KEYS = {"max_prefix_tokens": int, "max_suffix_tokens": int}


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
    values: dict[str, Any] = {}
    windows: dict[str, Any] = {}
    for key, value in {**table, **{k: v for k, v in overrides.items() if v is not None}}.items():
        if key in _ENGINE_KEYS:
            if not isinstance(value, _ENGINE_KEYS[key]) or isinstance(value, bool):
                raise ConfigError(f"engine.{key}: wrong type {type(value).__name__}")
            if key == "k" and isinstance(value, str) and value != "auto":
                raise ConfigError(f"engine.k: an integer or \"auto\", got {value!r}")
            values[key] = value
        elif key in _WINDOW_KEYS:
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"engine.{key}: must be a positive integer")
            windows[key] = value
        else:
            raise ConfigError(f"engine.{key}: unknown setting")
    if values.get("draft") in ("", "none"):
        values["draft"] = None
    return EngineConfig(windows=PromptWindows(**windows), **values)
