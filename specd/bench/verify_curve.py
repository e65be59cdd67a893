"""The cost of one forward over n new tokens, through the model's public ``forward``: what a
verification of K drafts (n = K + 1) costs relative to a single decoding step (n = 1)."""

from __future__ import annotations

import time
from typing import Callable

import torch

from specd.bench.stats import spread
from specd.models.protocol import CausalLM

SIZES = (1, 2, 3, 5, 9, 17)


def forward_ms(model: CausalLM, context: list[int], sizes: tuple[int, ...], reps: int,
               tick: Callable[[], None] | None = None) -> dict[int, list[float]]:
    """Milliseconds per forward over n tokens after ``context`` (cached), ``reps`` times each, the
    sizes interleaved within each repetition; one untimed warm-up pass first."""
    ctx = torch.tensor(context, dtype=torch.long)
    feed = torch.tensor((context * (1 + max(sizes) // max(len(context), 1)))[: max(sizes)], dtype=torch.long)
    model.rollback(0)
    model.forward(ctx)
    times: dict[int, list[float]] = {n: [] for n in sizes}
    for rep in range(reps + 1):
        for n in sizes:
            model.rollback(len(context))
            t0 = time.perf_counter()
            model.forward(feed[:n])
            dt = (time.perf_counter() - t0) * 1e3
            if rep > 0:
                times[n].append(dt)
            if tick is not None:
                tick()
    model.rollback(0)
    return times


def verify_curve(target: CausalLM, draft: CausalLM | None, context: list[int], reps: int = 5,
                 sizes: tuple[int, ...] = SIZES, tick: Callable[[], None] | None = None) -> dict:
    """{"context_tokens", "sizes", "models": {role: {"raw": {n: [ms]}, "median": {n: ms},
    "p25", "p75", "ratio_to_1": {n: T(n)/T(1)}}}, "draft_over_target_step"}."""
    out: dict = {"context_tokens": len(context), "sizes": list(sizes), "reps": reps, "models": {}}
    for role, model in (("target", target), ("draft", draft)):
        if model is None:
            continue
        raw = forward_ms(model, context, sizes, reps, tick)
        s = {n: spread(v) for n, v in raw.items()}
        out["models"][role] = {
            "raw": {str(n): [round(x, 3) for x in v] for n, v in raw.items()},
            "median": {str(n): round(s[n]["median"], 3) for n in sizes},
            "p25": {str(n): round(s[n]["p25"], 3) for n in sizes},
            "p75": {str(n): round(s[n]["p75"], 3) for n in sizes},
            "ratio_to_1": {str(n): round(s[n]["median"] / s[sizes[0]]["median"], 3) for n in sizes},
        }
    m = out["models"]
    if "draft" in m:
        first = str(sizes[0])
        out["draft_over_target_step"] = round(m["draft"]["median"][first] / m["target"]["median"][first], 3)
    return out
