"""The settings flags every command shares, generated from the settings declarations
(:class:`~specd.engine.config.EngineConfig`, :class:`~specd.daemon.config.DaemonConfig`), and the
settings they produce: the config file's table with the given flags on top."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Collection

from specd.config import engine_config as read_engine_config
from specd.config import load_toml
from specd.daemon.config import DaemonConfig, daemon_config as read_daemon_config
from specd.engine.config import EngineConfig
from specd.schema import add_flags, flag_argv, flag_names, flag_values

ENGINE_FLAG_NAMES = flag_names(EngineConfig)  # argparse dest names of the engine flags (besides --config)


def add_engine_flags(parser: argparse.ArgumentParser) -> None:
    """``--config`` and one flag per engine setting."""
    g = parser.add_argument_group("models and engine (override the config file)")
    g.add_argument("--config", type=Path, help="TOML config file (default: $XDG_CONFIG_HOME/specd/config.toml)")
    add_flags(g, EngineConfig)


def add_daemon_flags(parser: argparse.ArgumentParser) -> None:
    """One flag per daemon setting that has one (``--socket``, ``--drain-timeout``, ...)."""
    add_flags(parser.add_argument_group("daemon (override the config file)"), DaemonConfig)


def engine_config(args: argparse.Namespace, skip: Collection[str] = ()) -> EngineConfig:
    """The config file's ``[engine]`` table with the engine flags on top (``skip``: flags that
    mean something else to this command)."""
    table = load_toml(args.config).get("engine", {})
    return read_engine_config(table, flag_values(args, EngineConfig, skip))


def daemon_config(args: argparse.Namespace) -> DaemonConfig:
    """The config file's ``[daemon]`` table with the daemon flags on top."""
    table = load_toml(args.config).get("daemon", {})
    return read_daemon_config(table, flag_values(args, DaemonConfig))


def daemon_socket(args: argparse.Namespace) -> Path:
    """The socket a client command uses: its ``--socket``, else the config file's, else the
    default (the rest of the ``[daemon]`` table is the daemon's business)."""
    if args.socket is not None:
        return args.socket
    table = load_toml(args.config).get("daemon", {})
    return read_daemon_config({k: v for k, v in table.items() if k == "socket"}, {}).socket_path


def engine_argv(args: argparse.Namespace) -> list[str]:
    """``--config`` and the engine flags given to this command, for a ``specd serve`` it starts."""
    config = ["--config", str(args.config)] if getattr(args, "config", None) is not None else []
    return config + flag_argv(args, EngineConfig)
