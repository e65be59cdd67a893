"""``specd lsp``: the language server over stdio (or TCP for debugging), answering from the daemon
(started in the background when none runs) or from an engine in this process (``--in-process``).

Over the daemon, nothing here imports torch: the engine is imported only with ``--in-process``.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Any

from specd.cli.flags import add_engine_flags, daemon_socket, engine_argv, engine_config
from specd.lsp.autostart import DaemonSpawner
from specd.lsp.backend import Backend
from specd.lsp.daemon_backend import DaemonBackend
from specd.lsp.settings import LspSettings


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("lsp", help="language server for editors (completions from the daemon)")
    p.add_argument("--socket", type=Path, help="the daemon's socket (default: as `specd serve`)")
    p.add_argument("--in-process", action="store_true", help="embed the engine instead of using the daemon")
    p.add_argument("--no-autostart", dest="autostart", action="store_false",
                   help="do not start a daemon when none is running")
    p.add_argument("--tcp", type=int, metavar="PORT", help="listen on 127.0.0.1:PORT instead of stdio (debugging)")
    p.add_argument("--max-tokens", type=int, default=64, help="longest suggestion, in tokens")
    p.add_argument("--line-budget-ms", type=float, default=LspSettings.line_budget_ms, metavar="MS",
                   help="end a multi-line suggestion at the first line end after MS ms of generation "
                        "(llama.vim's t_max_predict_ms; 0: one line; default: %(default)s)")
    p.add_argument("--max-message-bytes", type=int, default=None, metavar="N",
                   help="largest message body read; larger ones are skipped (default: 64 MiB)")
    p.add_argument("--log-file", type=Path, help="write the server's log here (default: stderr)")
    p.add_argument("--verbose", action="store_true")
    add_engine_flags(p)
    p.set_defaults(func=cmd_lsp)


def make_backend(args: argparse.Namespace, log: Any) -> Backend:
    if args.in_process:
        # imported here: only --in-process loads the engine (torch, the models)
        from specd.app import build_engine
        from specd.lsp.inprocess import InProcessBackend

        config = engine_config(args)  # config errors surface now, before the editor waits
        return InProcessBackend(lambda: build_engine(config))
    path = daemon_socket(args)
    spawner = None
    if args.autostart:
        argv = [sys.executable, "-m", "specd", "serve", "--socket", str(path), *engine_argv(args)]
        spawner = DaemonSpawner(argv, path.parent / "daemon.log")
    return DaemonBackend(path, spawner, log)


def cmd_lsp(args: argparse.Namespace) -> int:
    # imported here: pygls and lsprotocol take most of a second, which `specd complete` need not pay
    from specd.lsp.framing import MAX_MESSAGE_BYTES
    from specd.lsp.server import build_server

    handler: logging.Handler = logging.FileHandler(args.log_file) if args.log_file else logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING, handlers=[handler])
    logging.getLogger("specd.lsp").setLevel(logging.DEBUG if args.verbose else logging.INFO)
    if args.max_tokens < 1:
        raise SystemExit("specd: error: --max-tokens must be at least 1")
    if args.max_message_bytes is not None and args.max_message_bytes < 1:
        raise SystemExit("specd: error: --max-message-bytes must be at least 1")
    if args.line_budget_ms is not None and args.line_budget_ms < 0:
        raise SystemExit("specd: error: --line-budget-ms must be >= 0")
    settings = LspSettings(max_tokens=args.max_tokens, line_budget_ms=args.line_budget_ms)
    holder: list[Any] = []
    backend = make_backend(args, lambda m: holder[0].log_info(m) if holder else None)
    server = build_server(backend, settings, args.max_message_bytes or MAX_MESSAGE_BYTES)
    holder.append(server)
    if args.tcp is not None:
        server.start_tcp("127.0.0.1", args.tcp)
    else:
        server.start_io()
    return 0
