"""``specd bench --scenario quality``: are specd's suggestions as right as llama-server's, per language?

The tasks (``specd/bench/data/quality.jsonl.gz``, built by ``bench/quality_tasks.py``) are
fill-in-the-middle sites in real code of seven languages, with a dev split (settings are chosen on
it) and a test split (figures are reported on it). For each task both systems get the same text
around the cursor and cut their own windows from it, in the same run, requests alternating which
goes first: a real ``specd serve`` over its socket (greedy, its default K) and llama-server's
``/infill`` on the same target GGUF (greedy, llama.vscode's CPU settings). Mid-line both stop at
the line's end (the LSP shows one line there); elsewhere both write up to ``max_tokens``.

Each answer is scored raw and as shown: shown is the answer after the LSP's post-processing
(``specd.lsp.postprocess``: one line mid-line, the block by indentation, no text repeating the
suffix), applied alike to both systems. Metrics, per answer:

- **exact line**: the answer's first line equals the real first line (trailing spaces ignored);
- **edit similarity**: 1 - Levenshtein / longer length, between the answer's first n lines and the
  real n lines (n: the lines the real middle spans);
- **accepted characters**: the longest prefix of the answer that matches the real middle: what a
  user could take with Tab before the suggestion goes wrong (text past the middle is already in
  the buffer, the suffix: repeating it is no gain).

Post-processing is counted too: answers it shortens or empties, and how many of those cuts lost
nothing right (the cut text did not continue the real text).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import statistics
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from specd.bench.daemon_process import Connect, DaemonClient, call, daemon_client, request
from specd.bench.errors import BenchError
from specd.bench.tasks import Task
from specd.percentile import percentile
# (raw answer, cursor line before the cursor, the line after it, the suffix) -> what is shown;
# the LSP's post-processing, passed in by the command (the bench does not import the LSP)
PostProcess = Callable[[str, str, str, str], str]

SYSTEMS = ("specd", "llama-server")


# ---- scoring ---------------------------------------------------------------------------------


def first_line(text: str) -> str:
    return text.split("\n", 1)[0].rstrip()


def levenshtein(a: str, b: str) -> int:
    if len(a) < len(b):
        a, b = b, a
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i]
        for j, cb in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb)))
        prev = cur
    return prev[-1]


def similarity(a: str, b: str) -> float:
    """1 - Levenshtein distance / the longer length (1 for two empty strings)."""
    longest = max(len(a), len(b))
    return 1.0 if longest == 0 else 1.0 - levenshtein(a, b) / longest


def edit_similarity(answer: str, expected: str) -> float:
    """Between the answer's first n lines and the expected n lines (trailing spaces ignored)."""
    n = expected.count("\n") + 1
    a = "\n".join(x.rstrip() for x in answer.split("\n")[:n])
    e = "\n".join(x.rstrip() for x in expected.split("\n"))
    return similarity(a, e)


def accepted_chars(answer: str, real: str) -> int:
    """The length of the longest prefix of ``answer`` that ``real`` starts with."""
    n = 0
    for x, y in zip(answer, real):
        if x != y:
            break
        n += 1
    return n


def line_around(task: Task) -> tuple[str, str]:
    """The cursor line's text before and after the cursor."""
    before = task.prefix[task.prefix.rfind("\n") + 1 :]
    rest = task.expected + task.suffix
    return before, rest.split("\n", 1)[0]


def shown(task: Task, raw: str, post: PostProcess) -> str:
    """What the LSP would show for ``raw``: its post-processing, with the line as the task has it.
    The answer replaces the real middle, so the text after the cursor is the task's suffix."""
    before, _ = line_around(task)
    line_suffix = task.suffix.split("\n", 1)[0]
    return post(raw, before, line_suffix, task.suffix)


def score(task: Task, text: str) -> dict[str, Any]:
    return {"exact": first_line(text) == first_line(task.expected),
            "similarity": round(edit_similarity(text, task.expected), 4),
            "accepted": accepted_chars(text, task.expected)}


def score_answer(task: Task, raw: str, post: PostProcess) -> dict[str, Any]:
    cut = shown(task, raw, post)
    return {"raw": score(task, raw), "shown": score(task, cut),
            "cut": None if cut == raw.rstrip() else {
                "emptied": not cut.strip(), "lost_right": accepted_chars(raw, task.expected) > len(cut)}}


# ---- the run ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class QualityBench:
    tasks: tuple[Task, ...]
    connect: Connect  # socket -> the daemon's client (specd.daemon.client.AsyncClient.connect)
    systems: tuple[str, ...] = SYSTEMS
    max_tokens: int = 48
    serve_argv: Callable[[Path], list[str]] | None = None  # socket -> `specd serve`; None: use `socket`
    socket: Path | None = None
    llama: Any = None  # a started specd.bench.llamacpp_bin.LlamaServer when "llama-server" is in systems
    post: PostProcess = lambda raw, before, after, suffix: raw  # what the editor shows of an answer
    log_dir: Path | None = None
    log: Callable[[str], None] | None = None

    def check(self) -> None:
        bad = [s for s in self.systems if s not in SYSTEMS]
        if bad or not self.systems:
            raise BenchError(f"quality scenario: choose systems among {', '.join(SYSTEMS)}, got {bad}")
        if not self.tasks:
            raise BenchError("no tasks selected")
        if self.max_tokens < 2:
            raise BenchError("--max-tokens must be >= 2")


def first_per_kind(tasks: list[Task], n: int) -> list[Task]:
    """The first ``n`` tasks of each language and cursor kind, in file order."""
    counts: Counter[tuple[str, str]] = Counter()
    chosen = []
    for t in tasks:
        if counts[(t.language, t.kind)] < n:
            counts[(t.language, t.kind)] += 1
            chosen.append(t)
    return chosen


def stop_for(task: Task) -> list[str]:
    """Mid-line the LSP shows one line: both systems stop at its end."""
    return ["\n"] if task.cursor == "mid_line" else []


def specd_params(task: Task, max_tokens: int) -> dict[str, Any]:
    params: dict[str, Any] = {"prefix": task.prefix, "suffix": task.suffix, "max_tokens": max_tokens,
                              "temperature": 0.0}
    if stop_for(task):
        params["stop"] = stop_for(task)
    return params


async def _specd(client: DaemonClient, task: Task, bench: QualityBench) -> dict[str, Any]:
    t0 = time.perf_counter()
    msg = await request(client, "complete", specd_params(task, bench.max_tokens))
    wall = (time.perf_counter() - t0) * 1000.0
    if "error" in msg:
        raise BenchError(f"the daemon refused a completion for {task.id}: {msg['error'].get('message')}")
    r = msg["result"]
    return {"text": r["text"], "ms": wall, "tokens": r["stats"]["new_tokens"]}


def _llama(server: Any, task: Task, bench: QualityBench) -> dict[str, Any]:
    stop = stop_for(task)
    r = server.infill(task.prefix, task.suffix, bench.max_tokens, extra={"stop": stop} if stop else None)
    return {"text": r.text, "ms": r.wall_ms, "tokens": r.predicted_n}


async def run_quality(bench: QualityBench) -> dict[str, Any]:
    bench.check()
    if "llama-server" in bench.systems and bench.llama is None:
        raise BenchError("quality scenario: llama-server is not running")
    answers: list[dict[str, Any]] = []
    health: dict[str, Any] = {}
    async with contextlib.AsyncExitStack() as stack:
        client = None
        if "specd" in bench.systems:
            client = await stack.enter_async_context(daemon_client(
                bench.connect, bench.serve_argv, bench.socket, bench.log_dir / "daemon.log" if bench.log_dir else None,
                bench.log, tag="sdq-"))
            health = await call(client, "health")
        for i, task in enumerate(bench.tasks):
            _say(bench, f"task {i + 1}/{len(bench.tasks)}: {task.id}")
            order = list(bench.systems) if i % 2 == 0 else list(reversed(bench.systems))
            for system in order:
                if system == "specd":
                    a = await _specd(client, task, bench)
                else:
                    a = await asyncio.to_thread(_llama, bench.llama, task, bench)
                answers.append({"task": task.id, "language": task.language, "kind": task.kind,
                                "system": system, **a, **score_answer(task, a["text"], bench.post)})
    return {"scenario": "quality", "engine": health.get("engine"), "max_tokens": bench.max_tokens,
            "systems": list(bench.systems),
            "tasks": [t.id for t in bench.tasks], "answers": answers, "summary": summarize(answers)}


def run(bench: QualityBench) -> dict[str, Any]:
    return asyncio.run(run_quality(bench))


def _say(bench: QualityBench, message: str) -> None:
    if bench.log:
        bench.log(message)


# ---- the report ------------------------------------------------------------------------------


def _group(answers: list[dict[str, Any]], view: str) -> dict[str, Any]:
    n = len(answers)
    if not n:
        return {"n": 0}
    cuts = [a["cut"] for a in answers if a.get("cut")]
    ms = sorted(a["ms"] for a in answers)
    return {"n": n,
            "exact": sum(a[view]["exact"] for a in answers),
            "similarity": round(statistics.fmean(a[view]["similarity"] for a in answers), 3),
            "accepted": round(statistics.fmean(a[view]["accepted"] for a in answers), 1),
            "ms_p50": round(percentile(ms, 50), 1), "ms_p90": round(percentile(ms, 90), 1),
            "cut": len(cuts), "emptied": sum(c["emptied"] for c in cuts),
            "cut_lost_nothing": sum(not c["lost_right"] for c in cuts)}


def summarize(answers: list[dict[str, Any]]) -> dict[str, Any]:
    """Per system, view (raw, shown) and language (plus "all"): the metrics' totals and means."""
    out: dict[str, Any] = {}
    for system in sorted({a["system"] for a in answers}):
        mine = [a for a in answers if a["system"] == system]
        langs = sorted({a["language"] for a in mine})
        out[system] = {view: {**{lang: _group([a for a in mine if a["language"] == lang], view) for lang in langs},
                              "all": _group(mine, view)} for view in ("raw", "shown")}
    return out


def text_table(doc: dict[str, Any], view: str = "shown") -> str:
    s = doc["summary"]
    systems = [x for x in SYSTEMS if x in s]
    langs = sorted({lang for x in systems for lang in s[x][view]} - {"all"}) + ["all"]
    head = f"{'language':<11} {'n':>3} " + " ".join(
        f"{x + ' exact':>18} {'sim':>5} {'acc.ch':>6} {'p50 ms':>7}" for x in systems)
    rows = [f"quality ({view}): exact first lines, mean edit similarity, mean accepted characters, request p50",
            head]
    for lang in langs:
        cells = []
        n = 0
        for x in systems:
            g = s[x][view].get(lang, {"n": 0})
            n = g["n"] or n
            cells.append(f"{g.get('exact', 0):>14}/{g['n']:<3} {g.get('similarity', 0):>5.3f} "
                         f"{g.get('accepted', 0):>6.1f} {g.get('ms_p50', 0):>7.0f}")
        rows.append(f"{lang:<11} {n:>3} " + " ".join(cells))
    if "specd" in s:
        g = s["specd"]["shown"]["all"]
        rows.append(f"post-processing (specd): {g['cut']} answers cut, {g['emptied']} emptied, "
                    f"{g['cut_lost_nothing']} of the cuts lost nothing right")
    return "\n".join(rows)


def markdown(doc: dict[str, Any], machine: dict[str, Any]) -> str:
    lines = ["# specd bench: quality", "", f"command: `{doc.get('command', '')}`", "",
             f"machine: {machine.get('cpu', '')} [{machine.get('cpu_id', '')}] ({', '.join(machine.get('isa', []))})", ""]
    for view in ("shown", "raw"):
        lines += ["```", text_table(doc, view), "```", ""]
    return "\n".join(lines) + "\n"


def write(doc: dict[str, Any], out: Path, machine: dict[str, Any]) -> None:
    (out / "results.json").write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n")
    (out / "report.md").write_text(markdown(doc, machine))
