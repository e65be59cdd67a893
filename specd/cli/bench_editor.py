"""``specd bench --scenario editor``: wires the editor bench (``specd.bench.editor``) to the LSP's
request shaping, the daemon's client and the commands that start ``specd serve`` and ``specd lsp``."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Callable

from specd.bench.editor import PATHS, EditorBench, markdown, run_editor
from specd.bench.editor_script import DEFAULT_TASKS, PRESETS, editor_files, script
from specd.bench.errors import BenchError
from specd.bench.tasks import load_tasks, select_tasks
from specd.cli.flags import engine_argv, engine_config
from specd.daemon.client import AsyncClient
from specd.lsp.settings import LspSettings
from specd.lsp.shaping import RequestShaper
from specd.remote.config import RemoteConfig
from specd.schema import flag_argv


def editor_bench(args: argparse.Namespace, out_dir: Callable[[argparse.Namespace], Path]) -> int:
    from specd.app import gguf_file  # here: specd.app reaches the engine (torch), which the other commands need not load

    preset = PRESETS[args.editor_preset or ("quick" if args.quick else "full")]
    if args.max_tokens is not None:
        preset = type(preset)(**{**preset.__dict__, "max_tokens": args.max_tokens})
    paths = tuple(p.strip() for p in (args.paths or ",".join(PATHS)).split(",") if p.strip())
    bad = [p for p in paths if p not in PATHS]
    if bad or not paths:
        raise BenchError(f"--paths {args.paths!r}: choose among {', '.join(PATHS)}")
    config = engine_config(args)
    tasks = select_tasks(load_tasks(args.tasks_file), args.tasks or ",".join(DEFAULT_TASKS))
    keys_needed = preset.rounds * preset.keys_per_visit
    files = tuple(editor_files(tasks, keys_needed))
    short = [f.path for f in files if len(f.typed) < keys_needed]
    if short:
        raise BenchError(f"files too short to type {keys_needed} keys from the task cursor: {', '.join(short)}")
    out = out_dir(args)
    flags = engine_argv(args) + flag_argv(args, RemoteConfig)  # --backend ...: the daemon serves from a remote server
    bench = EditorBench(
        files=files, keys=tuple(script(len(files), preset)), preset=preset,
        shaper=lambda n: RequestShaper(LspSettings(max_tokens=n)),
        serve_argv=lambda sock: [sys.executable, "-m", "specd", "serve", "--socket", str(sock), *flags],
        lsp_argv=lambda sock: [sys.executable, "-m", "specd", "lsp", "--socket", str(sock), "--no-autostart",
                               "--max-tokens", str(preset.max_tokens)],
        connect=AsyncClient.connect,
        gguf=gguf_file(config.target), paths=paths, log_dir=out,
        log=(lambda m: print(f"specd bench: {m}", file=sys.stderr, flush=True)) if args.progress else None)
    partial = out / "results.partial.json"  # what a run cut short leaves
    doc = asyncio.run(run_editor(bench, lambda d: partial.write_text(json.dumps(d, indent=1, ensure_ascii=False))))
    partial.unlink(missing_ok=True)
    doc["command"] = " ".join(["specd", *sys.argv[1:]])
    (out / "results.json").write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n")
    report = markdown(doc)
    (out / "report.md").write_text(report)
    print(report)
    print(f"wrote {out}/results.json, {out}/report.md")
    return 0
