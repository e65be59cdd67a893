"""``specd serve`` and the daemon path of ``specd complete``."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any


def register(subparsers: Any) -> None:
    s = subparsers.add_parser("serve", help="keep the models loaded and serve completions on a Unix socket")
    s.add_argument("--socket", type=Path,
                   help="socket path (default: $XDG_RUNTIME_DIR/specd/specd.sock, else a per-user temp dir)")
    s.add_argument("--k", type=_k_arg, help="draft tokens per round, or 'auto' (requests may override)")
    s.add_argument("--max-message-bytes", dest="max_message_bytes", type=int,
                   help="largest request line accepted (default 1 MiB)")
    s.add_argument("--drain-timeout", dest="drain_timeout_s", type=float,
                   help="on SIGTERM/SIGINT: seconds in-flight requests may still run (default 10)")
    s.add_argument("--no-reuse", dest="reuse", action="store_const", const=False,
                   help="run every request cold: no KV reuse, no continuation (for measurements)")
    from specd.cli import _add_engine_flags

    _add_engine_flags(s)
    s.set_defaults(func=cmd_serve)


def _k_arg(text: str) -> int | str:
    from specd.config import parse_k

    try:
        return parse_k(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _daemon_config(args: argparse.Namespace):
    from specd.config import load_toml
    from specd.daemon.config import daemon_config

    table = load_toml(args.config).get("daemon", {})
    overrides = {name: getattr(args, name, None) for name in
                 ("socket", "max_message_bytes", "drain_timeout_s", "reuse")}
    if overrides["socket"] is not None:
        overrides["socket"] = str(overrides["socket"])
    return daemon_config(table, overrides)


def cmd_serve(args: argparse.Namespace) -> int:
    from specd.cli import _engine_config
    from specd.daemon.listener import Listener, ListenerError
    from specd.daemon.server import Server, log
    from specd.app import build_engine

    config = _daemon_config(args)
    engine_config = _engine_config(args, k=args.k)
    listener = Listener(config.socket_path)
    try:
        listener.open()  # before loading: a second daemon is refused at once
    except ListenerError as e:
        print(f"specd: error: {e}", file=sys.stderr)
        return 2
    try:
        log(f"loading {engine_config.target} (draft {engine_config.draft})")
        engine = build_engine(engine_config)
        server = Server(engine, config, listener)
        return _run_on_event_loop(server.serve)
    finally:
        listener.close()


def _run_on_event_loop(main: Any) -> int:
    """Run ``main()`` on a uvloop event loop, or plain asyncio (with a warning) without uvloop."""
    import asyncio

    from specd.daemon.server import log

    try:
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


# -- specd complete through the daemon ------------------------------------------------------------

def _comparable(config: dict[str, Any], mode: str, explicit_k: bool) -> dict[str, Any]:
    """The settings that decide a completion's text (threads do not; the draft does not in
    target mode; K does not when the request names it)."""
    skip = {"threads"} | ({"k"} if explicit_k else set()) | ({"draft", "draft_quant", "draft_backend"} if mode == "target" else set())
    return {k: v for k, v in config.items() if k not in skip}


def complete_via_daemon(socket_path: Path, explicit: bool, request_params: dict[str, Any],
                        engine_config: Any) -> dict[str, Any] | None:
    """The daemon's ``{text, stats}`` for the request, or None when no daemon listens at
    ``socket_path`` or it serves other models (the caller then runs in-process)."""
    import dataclasses

    from specd.daemon.client import Client, DaemonError
    from specd.daemon.protocol import INVALID_PARAMS

    try:
        client = Client(socket_path, timeout=10.0)
    except OSError:
        if explicit:
            print(f"specd: no daemon on {socket_path}; running in-process", file=sys.stderr)
        return None
    with client:
        try:
            health = client.call("health")
            mine = json.loads(json.dumps(dataclasses.asdict(engine_config), default=str))
            mode = request_params.get("mode", "spec")
            k = request_params.get("k")
            explicit_k = isinstance(k, int) and not isinstance(k, bool)
            if not explicit_k:  # e.g. "auto": the daemon's own setting must be the same
                request_params = {n: v for n, v in request_params.items() if n != "k"}
            theirs = _comparable(health.get("engine", {}), mode, explicit_k)
            if theirs != _comparable(mine, mode, explicit_k):
                if explicit:
                    print(f"specd: the daemon on {socket_path} serves other models or settings; "
                          "running in-process", file=sys.stderr)
                return None
            client.sock.settimeout(None)
            return client.call("complete", request_params)
        except DaemonError as e:
            if e.code == INVALID_PARAMS:
                from specd.engine.engine import RequestError

                raise RequestError((e.data or {}).get("field", "params"), e.message) from None
            raise SystemExit(f"specd: error: daemon: {e}")
        except (OSError, ValueError) as e:
            raise SystemExit(f"specd: error: daemon on {socket_path}: {e}")
