"""``specd serve``: load the models once (or reach a remote server: ``--backend``) and serve completions on
the daemon's Unix socket."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from typing import Any, Awaitable, Callable

from specd.cli.flags import add_daemon_flags, add_engine_flags, daemon_config, engine_config
from specd.daemon.backend import Backend
from specd.daemon.config import DaemonConfig
from specd.daemon.listener import Listener, ListenerError
from specd.daemon.model_thread import ModelThread
from specd.daemon.server import Server, log
from specd.engine.config import EngineConfig
from specd.remote.build import build_remote
from specd.remote.errors import RemoteError


def register(subparsers: Any) -> None:
    s = subparsers.add_parser("serve", help="keep the models loaded and serve completions on a Unix socket")
    add_daemon_flags(s)
    add_engine_flags(s)
    s.set_defaults(func=cmd_serve)


def cmd_serve(args: argparse.Namespace) -> int:
    _log_to_stderr()
    config = daemon_config(args)  # a bad --backend fails here, before anything starts
    settings = engine_config(args)
    listener = Listener(config.socket_path)
    try:
        listener.open()  # before loading: a second daemon is refused at once
    except ListenerError as e:
        print(f"specd: error: {e}", file=sys.stderr)
        return 2
    try:
        thread = ModelThread()  # builds the models and then runs every job: one OpenMP pool
        try:
            backend = thread.call(lambda: build_backend(config, settings))
        except RemoteError as e:
            print(f"specd: error: {e}", file=sys.stderr)
            return 2
        server = Server(backend, config, listener, thread)
        return run_on_event_loop(server.serve)
    finally:
        listener.close()


def build_backend(config: DaemonConfig, settings: EngineConfig) -> Backend:
    """The local engine (``--backend local``), or a remote server's driver (no torch imported)."""
    remote = config.remote
    if remote.spec is not None:
        log(f"serving from {remote.spec}")
        return build_remote(remote, settings.windows, tokenizer=settings.target, max_len=settings.max_len, log=log)
    # imported here: `specd complete` and `specd lsp` share this module's parser but not the engine,
    # and a remote backend needs no torch
    from specd.app import build_engine
    from specd.daemon.local import LocalBackend

    log(f"loading {settings.target} (draft {settings.draft})")
    return LocalBackend(build_engine(settings))


def _log_to_stderr() -> None:
    """The daemon's log lines on stderr, as ``specd: <message>``."""
    logger = logging.getLogger("specd.daemon")
    if logger.handlers:
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("specd: %(message)s"))
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False


def run_on_event_loop(main: Callable[[], Awaitable[int]]) -> int:
    """Run ``main()`` on a uvloop event loop, or plain asyncio (with a warning) without uvloop."""
    try:
        # imported here: only the daemon runs an event loop; and it may be missing (the fallback)
        import uvloop

        factory = uvloop.new_event_loop
    except ImportError:
        log("warning: uvloop is not installed; using the plain asyncio event loop")
        factory = asyncio.new_event_loop
    loop = factory()
    try:
        asyncio.set_event_loop(loop)
        return loop.run_until_complete(main())
    finally:
        asyncio.set_event_loop(None)
        loop.close()
