"""One bench run: load the engine and the anchors, run every task in every mode interleaved
(A B A B per task, so machine drift hits all modes alike), measure the forward-cost curve, and
assemble the result document every output is written from."""

from __future__ import annotations

import dataclasses
import os
import time
from dataclasses import dataclass
from pathlib import Path

from specd.bench import anchor_hf, anchor_llamacpp, anchor_llamacpp_server, anchor_remote
from specd.bench.errors import BenchError
from specd.bench.machine import git_commit, machine_info
from specd.bench.measurement import Measurement
from specd.bench.modes import Mode
from specd.bench.progress import Progress, note
from specd.bench.runner import Runner, SpecdRunner
from specd.bench.stats import per_task, summarize
from specd.bench.tasks import Task
from specd.bench.verify_curve import SIZES, verify_curve
from specd.app import build_engine, gguf_file, model_directory
from specd.engine.config import EngineConfig
from specd.engine.engine import Engine
from specd.remote.config import RemoteConfig
from specd.requests import CompletionRequest


@dataclass(frozen=True)
class BenchConfig:
    engine: EngineConfig
    modes: tuple[Mode, ...]
    tasks: tuple[Task, ...]
    reps: int = 3
    max_tokens: int = 64
    verify_curve: bool = False
    verify_reps: int = 5
    warmup: bool = True
    kv: str = "cold"  # cold: every run prefills its prompt; warm: prompts primed once per task, reused
    progress: bool = True
    command: str = ""
    remote: RemoteConfig | None = None  # the server mode ``remote`` runs through (--backend ...)

    def check(self) -> None:
        if not self.tasks:
            raise BenchError("the task set is empty: check --tasks / --tasks-file")
        if self.reps < 1:
            raise BenchError("--reps must be at least 1")
        if self.kv not in ("cold", "warm"):
            raise BenchError(f"--kv must be cold or warm, got {self.kv!r}")
        if self.max_tokens < 1:
            raise BenchError("--max-tokens must be at least 1")
        for m in self.modes:
            if m.needs_draft and not self.engine.draft:
                raise BenchError(f"mode {m.name} needs a draft model but --draft is none: "
                                 "give --draft or drop the mode from --modes")


def _anchor(mode: Mode, config: BenchConfig, engine: Engine) -> tuple[Runner | None, str | None]:
    """The anchor's runner, or None and a note saying why it is skipped."""
    stop = engine.prompts.stop_ids
    try:
        if mode.kind == "remote":  # a shared inference server, through specd's remote backend
            why = anchor_remote.unavailable(config.remote, mode)
            assert why or config.remote is not None
            return (None, why) if why else (anchor_remote.RemoteRunner(mode, config.remote, config.engine), None)
        if mode.kind.startswith("hf-"):
            target_dir = model_directory(config.engine.target)
            draft_dir = model_directory(config.engine.draft) if config.engine.draft else None
            why = anchor_hf.unavailable(target_dir, draft_dir, mode)
            return (None, why) if why else (anchor_hf.HFRunner(mode, target_dir, draft_dir, stop), None)
        gguf = gguf_file(config.engine.target)
        n_ctx = max(len(engine.prompts.build(t.prefix, t.suffix)) for t in config.tasks) + config.max_tokens + 16
        if mode.kind == "llamacpp-server":  # llama.cpp's own binaries, built once into specd's cache
            why = anchor_llamacpp_server.unavailable(gguf, mode)
            return (None, why) if why else (anchor_llamacpp_server.LlamaServerRunner(
                mode, gguf, config.engine.threads, n_ctx), None)
        why = anchor_llamacpp.unavailable(gguf, mode)
        if why:
            return None, why
        # n_ctx: the longest prompt and its completion; lookup drafts never reach past max_tokens
        return anchor_llamacpp.LlamaCppRunner(mode, gguf, config.engine.threads, n_ctx, stop), None
    except Exception as e:  # an anchor that fails to load is skipped, never faked
        return None, f"{mode.name}: skipped, failed to load: {type(e).__name__}: {e}"


def _loadavg() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def _engine_dict(config: EngineConfig) -> dict:
    """Every engine setting, windows flattened (whatever fields this version's EngineConfig has)."""
    d = dataclasses.asdict(config)
    d.update(d.pop("windows", {}))
    return d


def _run_or_drop(runner: Runner, runners: list[Runner], notes: list[str], where: str, task: Task,
                 prompt: list[int], max_tokens: int, rep: int, order: int) -> Measurement | None:
    """One run; an anchor that fails is dropped from ``runners`` with a note (None), specd's own
    modes fail the bench."""
    try:
        return runner.run(task, prompt, max_tokens, rep, order)
    except Exception as e:
        if not runner.mode.is_anchor:
            raise
        notes.append(f"{runner.mode.name}: dropped after an error {where}: {type(e).__name__}: {e}")
        runners.remove(runner)
        return None


def run_bench(config: BenchConfig) -> dict:
    config.check()
    notes: list[str] = []
    started = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    load_start = _loadavg()
    note(f"loading target {config.engine.target} and draft {config.engine.draft}")
    engine = build_engine(config.engine)
    prompts = {t.id: engine.prompts.build(t.prefix, t.suffix) for t in config.tasks}
    longest = max(len(p) for p in prompts.values())
    if longest + config.max_tokens > config.engine.max_len:
        raise BenchError(f"the longest prompt ({longest} tokens) plus --max-tokens exceeds --max-len "
                         f"{config.engine.max_len}")
    runners: list[Runner] = []
    for mode in config.modes:
        if not mode.is_anchor:
            runners.append(SpecdRunner(engine, mode, warm=config.kv == "warm"))
            continue
        note(f"loading anchor {mode.name}")
        runner, why = _anchor(mode, config, engine)
        if runner is None:
            notes.append(why)
            note(why)
        else:
            runners.append(runner)
            if getattr(runner, "settings", ""):
                notes.append(runner.settings)

    per_rep = len(runners)
    curve_steps = (config.verify_reps + 1) * len(SIZES) * (2 if engine.draft else 1) if config.verify_curve else 0
    bar = Progress(len(config.tasks) * config.reps * per_rep + (per_rep if config.warmup else 0) + curve_steps,
                   enabled=config.progress)
    if config.warmup:  # first calls pay one-time costs (allocation, kernel selection): not measured
        first = config.tasks[0]
        for r in list(runners):
            _run_or_drop(r, runners, notes, "in its warm-up", first, prompts[first.id], min(8, config.max_tokens),
                         rep=-1, order=-1)
            bar.step(f"warm-up {r.mode.name}")

    runs: list[Measurement] = []
    order = 0
    primed: dict[str, float] = {}
    for task in config.tasks:
        if config.kv == "warm":  # one untimed cold run fills both KV caches with the prompt
            engine.reset()
            c = engine.complete(CompletionRequest(prefix=task.prefix, suffix=task.suffix, max_tokens=1))
            primed[task.id] = round(c.stats.prefill_ms, 3)
        for rep in range(config.reps):
            for r in list(runners):
                m = _run_or_drop(r, runners, notes, f"on {task.id}", task, prompts[task.id], config.max_tokens,
                                 rep=rep, order=order)
                if m is None:
                    continue
                if not m.text and m.tokens:
                    m = dataclasses.replace(m, text=engine.tokenizer.decode(list(m.tokens)))
                runs.append(m)
                order += 1
                bar.step(f"{task.id} {r.mode.name} rep {rep + 1}: {m.decode_ms_per_token:.0f} ms/tok")

    curve = None
    if config.verify_curve:
        context = prompts[config.tasks[0].id][:-1]
        curve = verify_curve(engine.target, engine.draft, context, config.verify_reps,
                             tick=lambda: bar.step("forward-cost curve"))
    bar.close()

    modes = [r.mode.name for r in runners if any(m.mode == r.mode.name for m in runs)]
    tasks_meta = {t.id: t for t in config.tasks}
    medians = per_task(runs)
    per_task_rows = []
    for t in config.tasks:
        per_task_rows.append({
            "task": t.id, "category": t.category, "kind": t.kind, "language": t.language,
            "cursor": t.cursor, "provenance": t.provenance(), "prompt_tokens": len(prompts[t.id]),
            "cold_prefill_ms": primed.get(t.id),  # --kv warm: the priming run's prefill (both models)
            "modes": {m: medians[(t.id, m)] for m in modes if (t.id, m) in medians},
        })
    load_end = _loadavg()
    if load_start and load_end and max(load_start[0], load_end[0]) > (machine_info()["cores"] or 1) + 0.5:
        notes.append(f"the machine was busy: 1-minute load average {load_start[0]:.1f} at the start and "
                     f"{load_end[0]:.1f} at the end on {machine_info()['cores']} cores; absolute times are "
                     "inflated, ratios between interleaved modes less so")
    if any(m.startswith("hf-") for m in modes):
        notes.append("hf-*: transformers' generate() does not expose its prefill; there, decode ms/token is "
                     "(end-to-end − TTFT) / (new tokens − 1), and acceptance is not reported")
    if any(m.startswith("llamacpp-lookup") for m in modes):
        notes.append("llamacpp-lookup: specd's own greedy prompt-lookup loop on llama-cpp-python (the newest "
                     "earlier match of the last 3, 2 or 1 tokens drafts up to k tokens, verified in one batch, "
                     "rejected drafts dropped from the KV cache), since LlamaPromptLookupDecoding fails in "
                     "llama-cpp-python 0.3.36; its prefill is plain llamacpp's")
    if any(r.peak_rss_mb for r in runs):
        notes.append("peak RSS is this process's high-water mark during each run (Linux VmHWM, reset before "
                     "each run): it includes every model loaded in the process, anchors too")
    return {
        "schema": 1,
        "created": started,
        "command": config.command,
        "git": git_commit(Path(__file__).resolve().parents[2]),
        "machine": machine_info() | {"load_avg_start": load_start, "load_avg_end": load_end},
        "config": {
            "engine": _engine_dict(config.engine),
            "modes": modes,
            "requested_modes": [m.name for m in config.modes],
            "tasks": [t.id for t in config.tasks],
            "reps": config.reps,
            "max_tokens": config.max_tokens,
            "warmup": config.warmup,
            "kv": config.kv,
            "sampling": "greedy",
        },
        "notes": notes,
        "tasks": {tid: {"category": t.category, "provenance": t.provenance(), "expected": t.expected}
                  for tid, t in tasks_meta.items()},
        "runs": [m.as_dict() for m in runs],
        "summary": summarize(runs, modes),
        "per_task": per_task_rows,
        "verify_curve": curve,
    }
