"""``specd bench``: the command-line entry (argument parsing, outputs on disk, the printed table)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import shlex
import sys
import time
from pathlib import Path
from typing import Any

from specd.bench.errors import BenchError
from specd.bench.modes import HELP, parse_modes
from specd.bench.plots import draw_all, unavailable
from specd.bench.report import markdown, text_table
from specd.bench.tasks import load_tasks, quick_tasks, select_tasks
from specd.cli.flags import add_engine_flags, engine_config
from specd.config import load_toml
from specd.remote.config import RemoteConfig
from specd.schema import add_flags, entries, flag_values, from_table


def register(subparsers: Any) -> None:
    b = subparsers.add_parser(
        "bench", help="measure latency on real-code completion tasks (specd modes and anchors)",
        description="Run fill-in-the-middle tasks cut from real code through specd's modes and optional "
                    "anchors, interleaved; print a table; write JSON (every raw measurement), Markdown and PNG plots.")
    b.add_argument("--modes", default=None, help=HELP + " (default: target,spec)")
    b.add_argument("--tasks", default=None,
                   help="subset: comma-separated task ids, id globs ('py-*'), categories (boilerplate, logic, "
                        "docs), languages or kinds (default: all; with --quick one task per category)")
    b.add_argument("--tasks-file", type=Path, default=None, help="task file (default: the tasks shipped with specd)")
    b.add_argument("--reps", type=int, default=None, help="repetitions per task and mode (default 3; --quick 2)")
    b.add_argument("--max-tokens", type=int, default=None, help="new tokens per completion (default 64; --quick 32)")
    b.add_argument("--out", type=Path, default=None,
                   help="output folder (default: ./specd-bench/<time>, under the current directory)")
    b.add_argument("--quick", action="store_true",
                   help="a smoke run (< 3 min on 2 cores): one task per category, 2 reps, 32 tokens, warm KV, "
                        "prompts cut to 384 prefix / 64 suffix tokens")
    b.add_argument("--verify-curve", action="store_true",
                   help="also time one target/draft forward over n = 1,2,3,5,9,17 new tokens")
    b.add_argument("--verify-reps", type=int, default=5, help="repetitions per n for --verify-curve")
    b.add_argument("--no-warmup", dest="warmup", action="store_false", help="skip the untimed warm-up runs")
    b.add_argument("--kv", choices=["cold", "warm"], default=None,
                   help="cold (default; --quick: warm): every run prefills its prompt; warm: each task's prompt "
                        "is prefilled once, untimed, and every run reuses it (a daemon after the first keystroke)")
    b.add_argument("--no-plots", dest="plots", action="store_false", help="skip the PNG plots")
    b.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bar on stderr")
    b.add_argument("--scenario", choices=["tasks", "editor", "profile", "quality"], default="tasks",
                   help="tasks (default): the FIM task suite; editor: four real files typed key by key through the "
                        "socket, specd lsp and llama-server's /infill (--quick: a few keys per file); profile: "
                        "where each token's time goes in the daemon (draft, verify, layers, attention, head, "
                        "waiting for the thread team, Python), per-request overhead and the step's spread; "
                        "quality: suggestions scored against real code in seven languages, specd's daemon "
                        "beside llama-server's /infill on the same model (exact line, edit similarity, "
                        "accepted characters)")
    b.add_argument("--profile", dest="scenario", action="store_const", const="profile",
                   help="the same as --scenario profile")
    b.add_argument("--socket", type=Path, default=None,
                   help="profile and quality scenarios: use the daemon already serving at this socket (default: start "
                        "specd serve with this command's engine flags)")
    b.add_argument("--split", choices=["dev", "test", "all"], default="test",
                   help="quality scenario: the task split (dev: where settings are chosen; test, default: "
                        "where figures are reported)")
    b.add_argument("--systems", default=None,
                   help="quality scenario: comma-separated among specd, llama-server (default: both)")
    b.add_argument("--per-kind", type=int, default=0, metavar="N",
                   help="quality scenario: the first N tasks of each language and cursor kind (0, default: all)")
    b.add_argument("--editor-preset", choices=["quick", "short", "full"], default=None,
                   help="editor scenario: keys per file visit and pauses (default full; --quick: quick)")
    b.add_argument("--paths", default=None,
                   help="editor scenario: comma-separated paths among socket, lsp, llama-server (default: all)")
    add_engine_flags(b)
    add_flags(b.add_argument_group("mode remote: the server (as specd serve --backend)"), RemoteConfig)
    b.set_defaults(func=cmd_bench)


def _default_out() -> Path:
    """``./specd-bench/<time>``: under the current directory, wherever specd is installed (never
    inside the package or its source checkout)."""
    return Path.cwd() / "specd-bench" / time.strftime("%Y%m%d-%H%M%S")


def _out_dir(args: argparse.Namespace) -> Path:
    """``--out`` (default :func:`_default_out`), created; BenchError when it cannot be."""
    out = args.out or _default_out()
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise BenchError(f"--out {out}: {e}") from e
    return out


def _tasks(args: argparse.Namespace) -> list:
    """The tasks ``--tasks-file`` / ``--tasks`` select (``--quick`` without ``--tasks``: one per category)."""
    tasks = select_tasks(load_tasks(args.tasks_file), args.tasks)
    return quick_tasks(tasks) if args.quick and not args.tasks else tasks


def remote_config(args: argparse.Namespace) -> RemoteConfig:
    """The remote server's settings for mode ``remote``: the config file's ``[daemon]`` keys (as
    ``specd serve`` reads them) with the flags on top."""
    names = {e.name for e in entries(RemoteConfig)}
    table = {k: v for k, v in load_toml(args.config).get("daemon", {}).items() if k in names}
    return from_table(RemoteConfig, "daemon", table, flag_values(args, RemoteConfig))


def cmd_bench(args: argparse.Namespace) -> int:
    try:
        return _bench(args)
    except BenchError as e:
        print(f"specd: error: {e}", file=sys.stderr)
        return 2


def _bench(args: argparse.Namespace) -> int:
    if args.scenario == "editor":
        from specd.cli.bench_editor import editor_bench

        return editor_bench(args, _out_dir)
    if args.scenario == "profile":
        return profile_bench(args)
    if args.scenario == "quality":
        from specd.cli.bench_quality import quality_bench

        return quality_bench(args, _out_dir)
    # imported here: the bench session builds engines (torch, the models), which the other
    # commands need not load
    from specd.bench.session import BenchConfig, run_bench

    config = engine_config(args)
    if args.quick:  # short prompts: a cold prefill is most of a run's time on a small CPU
        w = config.windows
        config = config.replace(windows=dataclasses.replace(
            w, max_prefix_tokens=min(w.max_prefix_tokens, 384), max_suffix_tokens=min(w.max_suffix_tokens, 64)))
    kv = args.kv or ("warm" if args.quick else "cold")
    modes = parse_modes(args.modes or "target,spec", config.k)
    tasks = _tasks(args)
    reps = args.reps if args.reps is not None else (2 if args.quick else 3)
    max_tokens = args.max_tokens if args.max_tokens is not None else (32 if args.quick else 64)
    if any(m.auto for m in modes):
        config = config.replace(k="auto")  # the engine builds its K policy; fixed-K modes name K per request
    if not any(m.needs_draft for m in modes):
        config = config.replace(draft=None)  # nothing drafts: do not load the draft
    bench = BenchConfig(engine=config, modes=modes, tasks=tuple(tasks), reps=reps, max_tokens=max_tokens,
                        verify_curve=args.verify_curve, verify_reps=args.verify_reps, warmup=args.warmup, kv=kv,
                        progress=args.progress, command=shlex.join(["specd", *sys.argv[1:]]),
                        remote=remote_config(args))
    bench.check()  # bad input fails before any model loads
    plots, plots_note = args.plots, None
    if plots:  # an optional dependency (the bench extra): checked before any work, skipped with a note
        plots_note = unavailable()
        if plots_note:
            plots = False
            print(f"specd bench: note: {plots_note}", file=sys.stderr, flush=True)
    out = _out_dir(args)
    doc = run_bench(bench)
    if plots_note:
        doc["notes"].append(plots_note)
    write_outputs(doc, out, plots=plots)
    print(text_table(doc))
    for n in doc["notes"]:
        print(f"note: {n}")
    print(f"wrote {out}/results.json, {out}/report.md" + (" and plots" if plots else ""))
    return 0


def write_outputs(doc: dict, out: Path, plots: bool = True) -> list[str]:
    (out / "results.json").write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n")
    names = []
    if plots:
        names = draw_all(doc, out)
    (out / "report.md").write_text(markdown(doc, names))
    return names


def profile_bench(args: argparse.Namespace) -> int:
    """``--scenario profile``: profiled requests through a real daemon (``specd.bench.profile``)."""
    from specd.bench import profile
    from specd.bench.machine import machine_info
    from specd.cli.flags import engine_argv
    from specd.daemon.client import AsyncClient

    tasks = _tasks(args)
    modes = tuple(m.strip() for m in (args.modes or "target,spec").split(",") if m.strip())
    out = _out_dir(args)
    flags = engine_argv(args)
    serve = None if args.socket else (lambda sock: [sys.executable, "-m", "specd", "serve", "--socket", str(sock), *flags])
    bench = profile.ProfileBench(
        tasks=tuple(tasks), connect=AsyncClient.connect, modes=modes,
        reps=args.reps if args.reps is not None else (1 if args.quick else 2),
        max_tokens=args.max_tokens if args.max_tokens is not None else (24 if args.quick else 48),
        serve_argv=serve, socket=args.socket, log_dir=out,
        log=(lambda m: print(f"specd bench: {m}", file=sys.stderr, flush=True)) if args.progress else None)
    doc = profile.run(bench)
    doc["command"] = shlex.join(["specd", *sys.argv[1:]])
    machine = machine_info()
    doc["machine"] = machine
    (out / "results.json").write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n")
    (out / "report.md").write_text(profile.markdown(doc, machine))
    print(profile.text_table(doc))
    print(f"wrote {out}/results.json, {out}/report.md")
    return 0
