"""Medians, quartiles and the per-mode / per-task / per-category summaries of a run. Quartiles are
:func:`specd.percentile.percentile`'s (nearest rank), medians ``statistics.median``'s."""

from __future__ import annotations

import math
import statistics
from typing import Iterable

from specd.bench.measurement import Measurement
from specd.percentile import percentile

METRICS = ("prefill_ms", "ttft_ms", "decode_ms_per_token", "total_ms", "new_tokens",
           "acceptance_rate", "mean_accepted_len", "peak_rss_mb")


def spread(values: Iterable[float | None]) -> dict:
    v = sorted(float(x) for x in values if x is not None)
    if not v:
        return {"n": 0}
    return {"n": len(v), "median": statistics.median(v), "p25": percentile(v, 25), "p75": percentile(v, 75),
            "min": v[0], "max": v[-1]}


def _round(d: dict) -> dict:
    return {k: (round(x, 4) if isinstance(x, float) else x) for k, x in d.items()}


def position_acceptance(runs: list[Measurement]) -> list[float]:
    """Per draft position i: rounds that accepted draft i / rounds that drafted it (all runs)."""
    acc: list[int] = []
    drafted: list[int] = []
    for r in runs:
        for counts, a in ((acc, r.accepted_at), (drafted, r.drafted_at)):
            counts.extend([0] * (len(a) - len(counts)))
            for i, x in enumerate(a):
                counts[i] += x
    return [round(a / d, 4) if d else 0.0 for a, d in zip(acc, drafted)]


def per_task(runs: list[Measurement]) -> dict[tuple[str, str], dict]:
    """(task, mode) -> medians of every metric over that task's repetitions."""
    groups: dict[tuple[str, str], list[Measurement]] = {}
    for r in runs:
        groups.setdefault((r.task, r.mode), []).append(r)
    return {key: {m: spread(getattr(r, m) for r in rs).get("median") for m in METRICS} | {"reps": len(rs)}
            for key, rs in groups.items()}


CONTINUE_BASELINE = "target:continue"


def summarize(runs: list[Measurement], modes: list[str], baseline: str = "target") -> dict:
    """Per mode: the spread of every metric over all runs; acceptance by position; speedups vs the
    baseline, computed per task from medians of the same task (paired), then spread over tasks;
    the fraction of runs whose tokens equal the baseline's on the same task. A ``...:continue``
    mode is compared with ``target:continue`` (the same continued prompt) when that ran."""
    tasks = per_task(runs)
    task_ids = sorted({r.task for r in runs})
    category = {r.task: r.category for r in runs}
    out: dict = {}
    for mode in modes:
        rs = [r for r in runs if r.mode == mode]
        if not rs:
            continue
        base = CONTINUE_BASELINE if mode.endswith(":continue") and CONTINUE_BASELINE in modes else baseline
        base_tokens = {r.task: r.tokens for r in runs if r.mode == base}
        entry: dict = {"runs": len(rs), "metrics": {m: _round(spread(getattr(r, m) for r in rs)) for m in METRICS}}
        entry["acceptance_at"] = position_acceptance(rs)
        same = [r.tokens == base_tokens[r.task] for r in rs if r.task in base_tokens]
        entry["same_tokens_as_target"] = [sum(same), len(same)]
        sp_dec, sp_e2e, by_cat = [], [], {}
        for t in task_ids:
            a, b = tasks.get((t, base)), tasks.get((t, mode))
            if not a or not b or not b["decode_ms_per_token"] or not b["total_ms"]:
                continue
            d = a["decode_ms_per_token"] / b["decode_ms_per_token"]
            sp_dec.append(d)
            sp_e2e.append(a["total_ms"] / b["total_ms"])
            by_cat.setdefault(category[t], []).append(d)
        entry["speedup_decode"] = _round(spread(sp_dec)) | {"geomean": _geomean(sp_dec)}
        entry["speedup_e2e"] = _round(spread(sp_e2e)) | {"geomean": _geomean(sp_e2e)}
        entry["speedup_decode_by_category"] = {c: _round(spread(v)) for c, v in sorted(by_cat.items())}
        out[mode] = entry
    return out


def _geomean(v: list[float]) -> float | None:
    return round(math.exp(sum(math.log(x) for x in v) / len(v)), 4) if v and all(x > 0 for x in v) else None
