"""``specd complete``: one completion, from the daemon when one serves the same models and
settings, else in this process.

The daemon path imports no torch: the request, the settings and the client are light, and the
engine is built (``specd.app``) only when the completion runs here.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

from specd.cli.flags import add_engine_flags, daemon_socket, engine_config
from specd.daemon.client import Client, DaemonError
from specd.daemon.protocol import INVALID_PARAMS
from specd.engine.config import EngineConfig
from specd.requests import CompletionRequest, RequestError
from specd.schema import add_flags, flag_values


def register(subparsers: Any) -> None:
    c = subparsers.add_parser("complete", help="complete code once and print the result")
    src = c.add_mutually_exclusive_group(required=True)
    src.add_argument("--prefix", help="text before the cursor")
    src.add_argument("--prefix-file", type=Path)
    suf = c.add_mutually_exclusive_group()
    suf.add_argument("--suffix", help="text after the cursor")
    suf.add_argument("--suffix-file", type=Path)
    r = c.add_argument_group("request")
    add_flags(r, CompletionRequest)  # --max-tokens, --temperature, --top-p, --top-k, --seed, --mode
    r.add_argument("--stop", action="append", help="stop string (repeatable)")
    c.add_argument("--json", action="store_true", help="print {text, stats} as one JSON object")
    c.add_argument("--socket", type=Path, help="use the daemon listening here (default: the configured or "
                   "default socket, when a daemon listens there); runs in-process when none does")
    c.add_argument("--no-daemon", dest="no_daemon", action="store_true", help="always run in-process")
    add_engine_flags(c)  # --k N names this request's K; --k auto is the engine's setting
    c.set_defaults(func=cmd_complete)


def _read_text(text: str | None, path: Path | None, name: str) -> str:
    if path is not None:
        try:
            return path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise SystemExit(f"specd: error: --{name}-file {path}: {e}")
    return text or ""


def cmd_complete(args: argparse.Namespace) -> int:
    explicit_k = isinstance(args.k, int)
    request = CompletionRequest(
        prefix=_read_text(args.prefix, args.prefix_file, "prefix"),
        suffix=_read_text(args.suffix, args.suffix_file, "suffix"),
        stop=tuple(args.stop or ()), k=args.k if explicit_k else None,
        **{k: v for k, v in flag_values(args, CompletionRequest).items() if v is not None},
    )
    config = engine_config(args, skip=("k",) if explicit_k else ())
    if request.mode == "target":
        config = config.replace(draft=None)
    request.validate(config.max_len)  # fail on bad input before loading models
    out = None if args.no_daemon else complete_via_daemon(daemon_socket(args), args.socket is not None,
                                                          request_params(request, config), config)
    if out is None:
        # imported here: the engine (torch, the models) loads only when the completion runs here
        from specd.app import build_engine

        completion = build_engine(config).complete(request)
        out = {"text": completion.text, "stats": completion.stats.as_dict()}
    if args.json:
        print(json.dumps(out, ensure_ascii=False))
    else:
        sys.stdout.write(out["text"])
        if not out["text"].endswith("\n"):
            sys.stdout.write("\n")
    return 0


def request_params(request: CompletionRequest, config: EngineConfig) -> dict[str, Any]:
    """The daemon's ``complete`` parameters for ``request`` (K: the request's, else the setting)."""
    params = {k: v for k, v in dataclasses.asdict(request).items() if v is not None}
    params["stop"] = list(request.stop)
    params["k"] = config.k if request.k is None else request.k
    return params


def comparable(config: dict[str, Any], mode: str, explicit_k: bool) -> dict[str, Any]:
    """The settings that decide a completion's text (threads do not; the draft does not in
    target mode; K does not when the request names it)."""
    skip = {"threads"} | ({"k"} if explicit_k else set()) | (
        {"draft", "draft_quant", "draft_backend"} if mode == "target" else set())
    return {k: v for k, v in config.items() if k not in skip}


def complete_via_daemon(socket_path: Path, explicit: bool, request_params: dict[str, Any],
                        engine_config: EngineConfig) -> dict[str, Any] | None:
    """The daemon's ``{text, stats}`` for the request, or None when no daemon listens at
    ``socket_path`` or it serves other models (the caller then runs in-process)."""
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
            theirs = comparable(health.get("engine", {}), mode, explicit_k)
            # a daemon in front of a remote server (specd serve --backend ...): that server's model
            # is the one configured for this machine, there is no local pair to compare
            remote = (health.get("backend") or {}).get("backend", "local") != "local"
            if not remote and theirs != comparable(mine, mode, explicit_k):
                if explicit:
                    print(f"specd: the daemon on {socket_path} serves other models or settings; "
                          "running in-process", file=sys.stderr)
                return None
            client.sock.settimeout(None)
            return client.call("complete", request_params)
        except DaemonError as e:
            if e.code == INVALID_PARAMS:
                raise RequestError((e.data or {}).get("field", "params"), e.message) from None
            raise SystemExit(f"specd: error: daemon: {e}")
        except (OSError, ValueError) as e:
            raise SystemExit(f"specd: error: daemon on {socket_path}: {e}")
