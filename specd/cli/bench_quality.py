"""``specd bench --scenario quality``: the command's side of ``specd.bench.quality`` (it composes the
bench with the LSP's post-processing, which the bench itself does not import)."""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from pathlib import Path
from typing import Any, Callable

from specd.bench.errors import BenchError
from specd.bench.tasks import load_tasks, quality_tasks_path, select_tasks
from specd.lsp.postprocess import postprocess


def quality_bench(args: argparse.Namespace, out_dir: Callable[[argparse.Namespace], Path]) -> int:
    from specd.bench import quality
    from specd.bench.llamacpp_bin import LlamaServer, find_binaries, unavailable_note
    from specd.bench.machine import machine_info
    from specd.cli.flags import engine_argv, engine_config
    from specd.daemon.client import AsyncClient
    from specd.models.pull import gguf_path
    from specd.models.registry import PUBLISHED

    path = args.tasks_file or quality_tasks_path()
    tasks = load_tasks(path)
    split = args.split
    if split != "all":
        tasks = [t for t in tasks if t.split == split]
        if not tasks:
            raise BenchError(f"{path} has no {split!r} tasks")
    tasks = select_tasks(tasks, args.tasks)
    if args.per_kind > 0:
        tasks = quality.first_per_kind(tasks, args.per_kind)
    systems = tuple(s.strip() for s in (args.systems or ",".join(quality.SYSTEMS)).split(",") if s.strip())
    out = out_dir(args)
    flags = engine_argv(args)
    serve = None if args.socket else (lambda sock: [sys.executable, "-m", "specd", "serve", "--socket", str(sock), *flags])
    say = (lambda m: print(f"specd bench: {m}", file=sys.stderr, flush=True)) if args.progress else None
    llama = None
    if "llama-server" in systems:
        bins = find_binaries()
        if bins is None:
            raise BenchError(f"the quality scenario compares with llama-server: {unavailable_note()} "
                             "(or pass --systems specd)")
        name = engine_config(args).target  # the flag, else the config file's, else the default
        if name in PUBLISHED:
            target = gguf_path(PUBLISHED[name])
        elif name.endswith(".gguf"):
            target = Path(name)
        else:
            raise BenchError(f"llama-server needs the target as a GGUF file; {name!r} is not one "
                             "(or pass --systems specd)")
        llama = LlamaServer(bins, target, threads=os.cpu_count() or 2, log_path=out / "llama-server.log")

    def bench(server: Any) -> quality.QualityBench:
        return quality.QualityBench(
            tasks=tuple(tasks), connect=AsyncClient.connect, systems=systems,
            max_tokens=args.max_tokens if args.max_tokens is not None else 48,
            serve_argv=serve, socket=args.socket, llama=server, post=postprocess,
            log_dir=out, log=say)

    if llama is None:
        doc = quality.run(bench(None))
    else:
        bench(None).check()  # bad input fails before llama-server loads
        if say:
            say("starting llama-server")
        with llama:
            doc = quality.run(bench(llama))
    doc["command"] = shlex.join(["specd", *sys.argv[1:]])
    doc["split"] = split
    machine = machine_info()
    doc["machine"] = machine
    quality.write(doc, out, machine)
    print(quality.text_table(doc))
    print(f"wrote {out}/results.json, {out}/report.md")
    return 0

