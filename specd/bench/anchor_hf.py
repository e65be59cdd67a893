"""Anchor: transformers' generate on the same pair, fp32, target alone or with
``assistant_model`` (assisted generation, transformers' own schedule and defaults)."""

from __future__ import annotations

import time
from pathlib import Path

import torch

from specd.bench.measurement import Measurement, decode_ms_per_token
from specd.bench.modes import Mode
from specd.bench.rss import peak_rss_mb, reset_peak
from specd.bench.tasks import Task

INSTALL = "pip install transformers"


def unavailable(target_dir: Path, draft_dir: Path | None, mode: Mode) -> str | None:
    """Why this anchor cannot run here, or None."""
    try:  # an optional anchor: transformers may be missing, and it takes seconds to import
        import transformers  # noqa: F401
    except ImportError:
        return f"{mode.name}: transformers is not installed ({INSTALL})"
    for role, d in (("target", target_dir), ("draft", draft_dir if mode.kind == "hf-assisted" else target_dir)):
        if d is None:
            return f"{mode.name}: needs a draft model (--draft is none)"
        if not (d / "config.json").is_file() or not list(d.glob("*.safetensors")):
            return f"{mode.name}: {role} directory {d} is not a Hugging Face model (config.json, *.safetensors)"
    return None


class _FirstToken:
    """A generate() streamer that notes when the first new token arrives (the first put is the prompt)."""

    def __init__(self) -> None:
        self.puts = 0
        self.first: float | None = None

    def put(self, value: torch.Tensor) -> None:
        self.puts += 1
        if self.puts == 2 and self.first is None:
            self.first = time.perf_counter()

    def end(self) -> None:
        pass


class HFRunner:
    def __init__(self, mode: Mode, target_dir: Path, draft_dir: Path | None, stop_ids: frozenset[int]) -> None:
        from transformers import AutoModelForCausalLM  # imported here: see unavailable()

        self.mode = mode
        self.model = AutoModelForCausalLM.from_pretrained(str(target_dir), dtype=torch.float32).eval()
        self.assistant = None
        if mode.kind == "hf-assisted":
            self.assistant = AutoModelForCausalLM.from_pretrained(str(draft_dir), dtype=torch.float32).eval()
        self.stop_ids = sorted(stop_ids)
        self.settings = ""
        if self.assistant is not None:
            g = self.assistant.generation_config
            self.settings = (f"{mode.name}: transformers' defaults, num_assistant_tokens="
                             f"{getattr(g, 'num_assistant_tokens', None)}, schedule "
                             f"{getattr(g, 'num_assistant_tokens_schedule', None)}, assistant confidence "
                             f"threshold {getattr(g, 'assistant_confidence_threshold', None)}")

    def run(self, task: Task, prompt: list[int], max_tokens: int, rep: int, order: int) -> Measurement:
        ids = torch.tensor([prompt], dtype=torch.long)
        clock = _FirstToken()
        kwargs = dict(max_new_tokens=max_tokens, do_sample=False, streamer=clock,
                      attention_mask=torch.ones_like(ids))
        if self.stop_ids:
            kwargs.update(eos_token_id=self.stop_ids, pad_token_id=self.stop_ids[0])
        if self.assistant is not None:
            kwargs["assistant_model"] = self.assistant
        reset_peak()
        t0 = time.perf_counter()
        with torch.inference_mode():
            out = self.model.generate(ids, **kwargs)
        total = (time.perf_counter() - t0) * 1e3
        new = out[0, len(prompt):].tolist()
        stop = "max_tokens"
        if new and new[-1] in self.stop_ids:
            new, stop = new[:-1], "stop_token"
        ttft = ((clock.first or time.perf_counter()) - t0) * 1e3
        n = max(len(new), 1)
        return Measurement(
            task=task.id, category=task.category, mode=self.mode.name, rep=rep, order=order,
            prompt_tokens=len(prompt), new_tokens=len(new), prefill_ms=None, ttft_ms=ttft,
            decode_ms_per_token=decode_ms_per_token(total, None, ttft, n), total_ms=total,
            peak_rss_mb=peak_rss_mb(), stop_reason=stop, tokens=tuple(new),
        )
