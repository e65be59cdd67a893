"""Anchor: llama.cpp through llama-cpp-python on the same GGUF files, target alone or with its
prompt-lookup drafting (``LlamaPromptLookupDecoding``). Greedy; prompt = specd's FIM token ids."""

from __future__ import annotations

import os
import time
from pathlib import Path

from specd.bench.measurement import Measurement, decode_ms_per_token
from specd.bench.modes import Mode
from specd.bench.rss import peak_rss_mb, reset_peak
from specd.bench.tasks import Task

INSTALL = ("pip install llama-cpp-python (PyPI ships a source archive: it builds llama.cpp, "
           "~10-20 min on 2 cores, needs cmake and a C++ compiler)")


def unavailable(gguf: Path | None, mode: Mode) -> str | None:
    try:
        import llama_cpp  # noqa: F401
    except ImportError as e:
        return f"{mode.name}: llama-cpp-python is not installed ({e}); {INSTALL}"
    if gguf is None or not gguf.is_file():
        return (f"{mode.name}: no GGUF file for the target ({gguf or 'the target was not given as a GGUF'}); "
                "use a published name (`specd models pull`) or --target FILE.gguf")
    return None


class LlamaCppRunner:
    def __init__(self, mode: Mode, gguf: Path, threads: int, n_ctx: int, stop_ids: frozenset[int]) -> None:
        from llama_cpp import Llama

        draft = None
        if mode.kind == "llamacpp-lookup":
            from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

            draft = LlamaPromptLookupDecoding(num_pred_tokens=mode.k or 10)
        self.mode = mode
        self.llm = Llama(model_path=str(gguf), n_ctx=n_ctx, n_threads=threads or os.cpu_count() or 1,
                         n_batch=512, draft_model=draft, verbose=False)
        self.stop_ids = stop_ids | {self.llm.token_eos()}

    def run(self, task: Task, prompt: list[int], max_tokens: int, rep: int, order: int) -> Measurement:
        llm = self.llm
        stop_ids = self.stop_ids
        llm.reset()
        reset_peak()
        t0 = time.perf_counter()
        llm.eval(prompt[:-1])  # prefill: all but the last token, as specd does
        prefill = (time.perf_counter() - t0) * 1e3
        new: list[int] = []
        ttft = 0.0
        stop = "max_tokens"
        # generate() reuses the evaluated prefix and feeds the last prompt token first
        for tok in llm.generate(prompt, temp=0.0, top_k=1, top_p=1.0, min_p=0.0, repeat_penalty=1.0, reset=True):
            if not new and not ttft:
                ttft = (time.perf_counter() - t0) * 1e3
            if tok in stop_ids:
                stop = "stop_token"
                break
            new.append(tok)
            if len(new) >= max_tokens:
                break
        total = (time.perf_counter() - t0) * 1e3
        return Measurement(
            task=task.id, category=task.category, mode=self.mode.name, rep=rep, order=order,
            prompt_tokens=len(prompt), new_tokens=len(new), prefill_ms=prefill, ttft_ms=ttft,
            decode_ms_per_token=decode_ms_per_token(total, prefill, ttft, len(new)), total_ms=total,
            peak_rss_mb=peak_rss_mb(), stop_reason=stop, tokens=tuple(new),
        )
