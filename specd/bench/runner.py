"""A runner completes one task in one mode and returns a Measurement; specd's own runner."""

from __future__ import annotations

import dataclasses
from typing import Protocol

from specd.bench.measurement import Measurement, decode_ms_per_token
from specd.bench.modes import Mode
from specd.bench.rss import peak_rss_mb, reset_peak
from specd.bench.tasks import Task
from specd.engine.engine import Engine
from specd.requests import CompletionRequest


class Runner(Protocol):
    mode: Mode

    def run(self, task: Task, prompt: list[int], max_tokens: int, rep: int, order: int) -> Measurement:
        """Complete ``task`` from a cold cache; ``prompt`` is specd's FIM prompt (token ids),
        which anchors feed as is so every mode sees the same tokens."""
        ...


class SpecdRunner:
    """specd's engine in one mode (target alone, or speculative with K drafts). By default every
    run starts cold (``Engine.reset``: empty KV caches, no remembered suggestion), so prefill and
    time to first token are those of a fresh prompt; with ``warm`` the prompt's KV is reused. A
    repetition never replays the previous answer."""

    def __init__(self, engine: Engine, mode: Mode, warm: bool = False) -> None:
        self.engine = engine
        self.mode = mode
        # warm: the KV caches keep the task's prompt from an untimed priming run (an editor's
        # daemon after the first keystroke); the last suggestion is still forgotten
        self.warm = warm

    def run(self, task: Task, prompt: list[int], max_tokens: int, rep: int, order: int) -> Measurement:
        engine = self.engine
        if self.warm:
            engine.forget_suggestion()
        else:
            engine.reset()
        request = CompletionRequest(prefix=task.prefix, suffix=task.suffix, max_tokens=max_tokens,
                                    temperature=0.0, mode=self.mode.kind, k=self.mode.k,
                                    tree=self.mode.tree if self.mode.kind == "spec" else None)
        if self.mode.continued:  # untimed: the suggestion shown; the user types its start
            shown = engine.complete(request).text
            request = dataclasses.replace(request, prefix=task.prefix + typed_along(shown))
        reset_peak()
        completion = engine.complete(request)
        if self.mode.continued and self.warm:  # untimed: leave the task's own prompt cached
            engine.complete(dataclasses.replace(request, prefix=task.prefix, max_tokens=1))
            engine.forget_suggestion()
        s = completion.stats
        spec = s.mode == "spec"
        return Measurement(
            task=task.id, category=task.category, mode=self.mode.name, rep=rep, order=order,
            prompt_tokens=s.prompt_tokens, new_tokens=s.new_tokens, prefill_ms=s.prefill_ms,
            ttft_ms=s.ttft_ms, decode_ms_per_token=decode_ms_per_token(s.total_ms, s.prefill_ms, s.ttft_ms, s.new_tokens),
            total_ms=s.total_ms, rounds=s.rounds,
            drafted=s.drafted if spec else None, accepted=s.accepted if spec else None,
            acceptance_rate=s.acceptance_rate if spec else None,
            mean_accepted_len=s.mean_accepted_len if spec else None,
            accepted_at=tuple(s.accepted_at), drafted_at=tuple(s.drafted_at), peak_rss_mb=peak_rss_mb(),
            stop_reason=s.stop_reason, text=completion.text, tokens=tuple(completion.tokens),
            prefill_reused=s.prefill_reused,
        )


def typed_along(shown: str) -> str:
    """What a user typed of a shown suggestion before asking again: half of its first line (at
    least one character; nothing when the suggestion is empty)."""
    first = shown.split("\n", 1)[0]
    return shown[: max(1, len(first) // 2)] if shown else ""
