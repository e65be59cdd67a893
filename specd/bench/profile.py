"""``specd bench --scenario profile``: where a completion's time goes, token by token, in the daemon.

A real ``specd serve`` (started here with the bench's engine flags, or the one at ``--socket``)
answers profiled requests (``profile: true``, see ``specd.engine.timeline``) on real FIM tasks:
per task and mode, an untimed ``warm`` of the prompt, then ``reps`` profiled completions whose
first request-suffix differs from the previous one's (so no answer comes from the continuation
cache). Reported per mode:

- the per-token timeline: every phase's ms per emitted token (median over requests, p10, p90);
  ``team_wait`` and ``preempted`` are thread-ms (two threads waiting 1 ms each count 2);
- the per-request overhead: ``prompt``, ``finish``, and the daemon's own (its latency minus the
  engine's phases: the queue, the socket, JSON);
- the step's spread: in target-only mode each round is one target step; per request the p90/p10
  of its steps, and over all steps.
"""

from __future__ import annotations

import asyncio
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from specd.bench.daemon_process import Connect, DaemonClient, call, daemon_client, request
from specd.bench.errors import BenchError
from specd.bench.tasks import Task
from specd.engine.results import add_source, source_counts
from specd.percentile import percentile

MODES = ("target", "spec")
# the phases shown in the table, in order; the JSON keeps every one the timeline has
SHOWN = ("round", "draft", "verify", "accept", "stream", "loop", "target.forward", "target.layers",
         "target.matmul", "target.attention", "target.head", "target.team_wait", "target.preempted",
         "draft.forward", "draft.head")


@dataclass(frozen=True)
class ProfileBench:
    tasks: tuple[Task, ...]
    connect: Connect  # socket -> the daemon's client (specd.daemon.client.AsyncClient.connect)
    modes: tuple[str, ...] = MODES
    reps: int = 2
    max_tokens: int = 48
    serve_argv: Callable[[Path], list[str]] | None = None  # socket -> `specd serve`; None: use `socket`
    socket: Path | None = None
    log_dir: Path | None = None
    log: Callable[[str], None] | None = None

    def check(self) -> None:
        bad = [m for m in self.modes if m not in MODES]
        if bad or not self.modes:
            raise BenchError(f"--modes for the profile scenario: choose among {', '.join(MODES)}, got {bad}")
        if not self.tasks:
            raise BenchError("no tasks selected")
        if self.reps < 1 or self.max_tokens < 2:
            raise BenchError("--reps must be >= 1 and --max-tokens >= 2")


async def run_profile(bench: ProfileBench) -> dict[str, Any]:
    """Every profiled answer (raw) and the summary per mode."""
    bench.check()
    async with daemon_client(bench.connect, bench.serve_argv, bench.socket, _daemon_log(bench.log_dir), bench.log,
                             tag="sdp-") as client:
        health = await call(client, "health")
        runs = await _runs(bench, client)
        after = await call(client, "health")  # K auto's curve once the daemon's rounds have shifted it
    doc = {"scenario": "profile", "engine": health.get("engine"), "max_tokens": bench.max_tokens,
           "reps": bench.reps, "tasks": [t.id for t in bench.tasks], "runs": runs,
           "summary": {mode: summarize([r for r in runs if r["mode"] == mode]) for mode in bench.modes}}
    costs = (health.get("backend") or {}).get("step_costs")
    if costs:
        doc["step_costs"] = costs
        doc["prediction"] = prediction(costs, runs)
        moved = (after.get("backend") or {}).get("step_costs")
        if moved:
            doc["step_costs_after"] = moved
    return doc


async def _runs(bench: ProfileBench, client: DaemonClient) -> list[dict[str, Any]]:
    runs = []
    for i, task in enumerate(bench.tasks):
        _say(bench, f"task {i + 1}/{len(bench.tasks)}: {task.id}")
        await _call(client, "warm", {"prefix": task.prefix, "suffix": task.suffix})
        for rep in range(bench.reps):
            for mode in bench.modes:
                # a 1-token request with another suffix first: the next answer is computed, not
                # continued from the previous suggestion; the prompt stays cached
                await _call(client, "complete", {"prefix": task.prefix, "suffix": task.suffix + f"\n# {rep}{mode}",
                                                 "max_tokens": 1})
                answer = await _call(client, "complete", {"prefix": task.prefix, "suffix": task.suffix,
                                                          "max_tokens": bench.max_tokens, "mode": mode,
                                                          "profile": True})
                runs.append({"task": task.id, "mode": mode, "rep": rep, "stats": answer["stats"],
                             "timeline": answer["timeline"]})
    return runs


async def _call(client: DaemonClient, method: str, params: dict[str, Any]) -> dict[str, Any]:
    msg = await request(client, method, params)
    if "error" in msg:
        raise BenchError(f"the daemon refused {method}: {msg['error'].get('message')}")
    return msg["result"]


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per-token phases (median, p10, p90 over requests with tokens), per-request overhead and the
    target step's spread."""
    timed = [r for r in runs if r["stats"]["new_tokens"] > 0 and r["timeline"]["rounds"]]
    phases: dict[str, list[float]] = {}
    for r in timed:
        for k, v in r["timeline"]["per_token_ms"].items():
            phases.setdefault(k, []).append(v)
    overhead: dict[str, list[float]] = {"prompt": [], "finish": [], "daemon": []}
    for r in runs:
        t = r["timeline"]
        req = t["request_ms"]
        overhead["prompt"].append(req.get("prompt", 0.0))
        overhead["finish"].append(req.get("finish", 0.0))
        overhead["daemon"].append(t["daemon_ms"]["latency"] - sum(req.values()))
    spread = [s for s in (_step_spread(r) for r in timed) if s is not None]
    steps = sorted(x["models"]["target"]["forward"] for r in timed for x in r["timeline"]["rounds"]
                   if x["models"].get("target", {}).get("forwards") == 1 and x["drafted"] == 0)
    by_source: dict[str, list[int]] = {}
    for r in runs:
        for source, c in r["stats"].get("by_source", {}).items():
            add_source(by_source, source, c["rounds"], c["drafted"], c["accepted"])
    return {
        "requests": len(runs), "tokens": sum(r["stats"]["new_tokens"] for r in runs),
        "per_token_ms": {k: _dist(v) for k, v in phases.items()},
        "overhead_ms": {k: _dist(v) for k, v in overhead.items()},
        "target_step_ms": _dist(steps) if steps else None,
        "step_p90_over_p10": {"per_request": _dist(spread) if spread else None,
                              "all_steps": round(percentile(steps, 90) / percentile(steps, 10), 3) if len(steps) >= 10 else None},
        "by_source": source_counts(by_source),
    }


ACCEPTANCE = (0.5, 0.6, 0.7, 0.8, 0.9)


def prediction(costs: dict[str, Any], runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The speedup over target-only that the daemon's measured step costs predict at acceptance
    0.5 .. 0.9 and at the acceptance this run measured (drafts accepted / drafted, spec mode)."""
    from specd.engine.policy import CostModel

    cost = CostModel(float(costs["draft_ms"]), tuple(float(v) for v in costs["verify_ms"]))
    rounds = [x for r in runs if r["mode"] == "spec" for x in r["timeline"]["rounds"] if x["drafted"]]
    drafted = sum(x["drafted"] for x in rounds)
    measured = sum(x["accepted"] for x in rounds) / drafted if drafted else None
    points = list(ACCEPTANCE) + ([round(measured, 3)] if measured is not None else [])
    return {"measured_acceptance": measured,
            "speedup_at": {str(a): dict(zip(("speedup", "k"), (round(sp, 3), k)))
                           for a in points for sp, k in [cost.predicted_speedup(min(a, 0.999))]}}


def _step_spread(run: dict[str, Any]) -> float | None:
    """p90/p10 of a request's one-token target steps (rounds without drafts), when it has 10+."""
    steps = [x["models"]["target"]["forward"] for x in run["timeline"]["rounds"]
             if x["drafted"] == 0 and x["models"].get("target", {}).get("forwards") == 1]
    if len(steps) < 10:
        return None
    return percentile(steps, 90) / percentile(steps, 10)


def _dist(values: list[float]) -> dict[str, float]:
    v = sorted(values)
    return {"median": round(statistics.median(v), 3), "p10": round(percentile(v, 10), 3),
            "p90": round(percentile(v, 90), 3), "n": len(v)}


def _costs_text(c: dict[str, Any]) -> str:
    """A step-cost curve as the report prints it: the draft step and T(n) at n = 1, 2, 3, 5."""
    shown = [c["verify_ms"][i] for i in (0, 1, 2, 4) if i < len(c["verify_ms"])]
    return f"draft {c['draft_ms']:.1f} ms, target over n = 1, 2, 3, 5 tokens {', '.join(f'{v:.1f}' for v in shown)} ms"


def text_table(doc: dict[str, Any]) -> str:
    """The summary as a plain-text table: phases down, modes across (median [p10-p90] ms)."""
    modes = list(doc["summary"])
    lines = [f"{'ms per token':<20}" + "".join(f"{m:>26}" for m in modes)]

    def cell(d: dict | None) -> str:
        return f"{d['median']:8.2f} [{d['p10']:.1f}-{d['p90']:.1f}]" if d else "-"

    for phase in SHOWN:
        row = [doc["summary"][m]["per_token_ms"].get(phase) for m in modes]
        if any(row):
            lines.append(f"{phase:<20}" + "".join(f"{cell(c):>26}" for c in row))
    lines.append(f"{'per request (ms)':<20}")
    for k in ("prompt", "finish", "daemon"):
        lines.append(f"{'  ' + k:<20}" + "".join(f"{cell(doc['summary'][m]['overhead_ms'][k]):>26}" for m in modes))
    for m in modes:
        s = doc["summary"][m]
        if s["target_step_ms"]:
            sp = s["step_p90_over_p10"]
            per = sp["per_request"]
            lines.append(f"{m}: one-token target step {cell(s['target_step_ms'])} ms over {s['target_step_ms']['n']} steps; "
                         f"p90/p10 per request {per['median'] if per else '-'} (median), over all steps {sp['all_steps']}")
        if s.get("by_source"):
            lines.append(f"{m}: drafts by source: " + ", ".join(
                f"{src} {c['accepted']}/{c['drafted']} accepted in {c['rounds']} rounds" for src, c in s["by_source"].items()))
    if doc.get("prediction"):
        p = doc["prediction"]
        lines.append(f"step costs measured by the daemon: {_costs_text(doc['step_costs'])}")
        if doc.get("step_costs_after"):
            lines.append(f"after the runs (shifted by the daemon's own rounds): {_costs_text(doc['step_costs_after'])}")
        acc = p["measured_acceptance"]
        lines.append("predicted speedup over target-only (a prediction from those costs, i.i.d. acceptance): " +
                     ", ".join(f"{a}: {v['speedup']:.2f}x (K={v['k']})" for a, v in p["speedup_at"].items()) +
                     (f"; this run's acceptance {acc:.3f}" if acc is not None else ""))
    return "\n".join(lines)


def markdown(doc: dict[str, Any], machine: dict[str, Any]) -> str:
    return "\n".join(["# specd bench --scenario profile", "", f"machine: {machine}", "",
                      f"command: `{doc.get('command', '')}`", "", "```", text_table(doc), "```", ""])


def _daemon_log(log_dir: Path | None) -> Path | None:
    return log_dir / "daemon.log" if log_dir else None


def _say(bench: ProfileBench, message: str) -> None:
    if bench.log is not None:
        bench.log(message)


def run(bench: ProfileBench) -> dict[str, Any]:
    return asyncio.run(run_profile(bench))
