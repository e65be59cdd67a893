"""Anchor: llama.cpp through llama-cpp-python on the same GGUF files, target alone or with prompt
lookup drafting. Greedy; prompt = specd's FIM token ids.

``llamacpp-lookup`` is our own prompt-lookup loop on llama-cpp-python's low-level calls, not
``LlamaPromptLookupDecoding``: in llama-cpp-python 0.3.36 a ``draft_model`` forces per-token
logits while ``Llama.scores`` stays sized for ``n_batch`` rows, so ``Llama.eval`` fails writing
logits past row ``n_batch`` (a (0,)-shaped slice). The loop follows llama.cpp's n-gram drafting
(``ngram-simple``: the newest earlier occurrence of the sequence's last n tokens, the tokens after
it as the draft), trying n = 3, 2, 1, and verifies each draft in one target batch."""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np

from specd.bench.measurement import Measurement, decode_ms_per_token
from specd.bench.modes import Mode
from specd.bench.rss import peak_rss_mb, reset_peak
from specd.bench.tasks import Task
from specd.engine.ngram import lookup

INSTALL = ("pip install llama-cpp-python (PyPI ships a source archive: it builds llama.cpp, "
           "~10-20 min on 2 cores, needs cmake and a C++ compiler)")
MAX_NGRAM = 3  # lookup n-gram sizes tried, longest first, down to 1


def unavailable(gguf: Path | None, mode: Mode) -> str | None:
    try:  # an optional anchor: llama-cpp-python is usually not installed
        import llama_cpp  # noqa: F401
    except ImportError as e:
        return f"{mode.name}: llama-cpp-python is not installed ({e}); {INSTALL}"
    if gguf is None or not gguf.is_file():
        return (f"{mode.name}: no GGUF file for the target ({gguf or 'the target was not given as a GGUF'}); "
                "use a published name (`specd models pull`) or --target FILE.gguf")
    return None


class LlamaCppRunner:
    def __init__(self, mode: Mode, gguf: Path, threads: int, n_ctx: int, stop_ids: frozenset[int]) -> None:
        from llama_cpp import Llama  # imported here: see unavailable()

        self.mode = mode
        self.llm = Llama(model_path=str(gguf), n_ctx=n_ctx, n_threads=threads or os.cpu_count() or 1,
                         n_batch=512, verbose=False)
        self.stop_ids = stop_ids | {self.llm.token_eos()}

    def run(self, task: Task, prompt: list[int], max_tokens: int, rep: int, order: int) -> Measurement:
        if self.mode.kind == "llamacpp-lookup":
            return self._run_lookup(task, prompt, max_tokens, rep, order)
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

    def _verify(self, tokens: list[int]) -> list[int]:
        """Decode ``tokens`` after the cached ones in one batch, logits for every row; the greedy
        next token after each of them."""
        llm = self.llm
        n_past, n = llm.n_tokens, len(tokens)
        llm._batch.set_batch(batch=tokens, n_past=n_past, logits_all=True)
        llm._ctx.decode(llm._batch)
        llm.input_ids[n_past:n_past + n] = tokens
        llm.n_tokens = n_past + n
        logits = np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(n, llm.n_vocab()))
        return logits.argmax(axis=1).tolist()

    def _run_lookup(self, task: Task, prompt: list[int], max_tokens: int, rep: int, order: int) -> Measurement:
        """Greedy prompt-lookup decoding: each round drafts by the engine's n-gram ``lookup``
        (n = 3 .. 1, at most mode.k tokens, never past max_tokens), evaluates [last token +
        drafts] in one batch, keeps drafts while they equal the target's argmax, appends the first
        differing argmax (or the bonus token after all drafts), and drops the rejected drafts from
        the KV cache."""
        llm = self.llm
        stop_ids = self.stop_ids
        k = self.mode.k or 10
        llm.reset()
        reset_peak()
        t0 = time.perf_counter()
        llm.eval(prompt[:-1])  # prefill: all but the last token, last-row logits only, as llamacpp
        prefill = (time.perf_counter() - t0) * 1e3
        seq = list(prompt)  # prompt + emitted tokens; seq[-1] is not in the KV cache yet
        new: list[int] = []
        ttft = 0.0
        stop = "max_tokens"
        rounds = drafted = accepted = 0
        drafted_at: list[int] = []
        accepted_at: list[int] = []
        while len(new) < max_tokens:
            draft = lookup(seq, min(k, max_tokens - len(new) - 1), MAX_NGRAM, 1)
            base = llm.n_tokens
            best = self._verify([seq[-1], *draft])
            m = 0
            while m < len(draft) and best[m] == draft[m]:
                m += 1
            if m < len(draft):  # the rejected drafts' KV entries go; [last token + m drafts] stay
                llm._ctx.kv_cache_seq_rm(0, base + 1 + m, -1)
                llm.n_tokens = base + 1 + m
            rounds += 1
            drafted += len(draft)
            accepted += m
            drafted_at.extend([0] * (len(draft) - len(drafted_at)))
            accepted_at.extend([0] * (len(draft) - len(accepted_at)))
            for i in range(len(draft)):
                drafted_at[i] += 1
                accepted_at[i] += i < m
            if rounds == 1:
                ttft = (time.perf_counter() - t0) * 1e3
            emitted = [*draft[:m], best[m]]
            seq += emitted
            hit = next((i for i, t in enumerate(emitted) if t in stop_ids), None)
            if hit is not None:
                new += emitted[:hit]
                stop = "stop_token"
                break
            new += emitted
        new = new[:max_tokens]
        total = (time.perf_counter() - t0) * 1e3
        return Measurement(
            task=task.id, category=task.category, mode=self.mode.name, rep=rep, order=order,
            prompt_tokens=len(prompt), new_tokens=len(new), prefill_ms=prefill, ttft_ms=ttft,
            decode_ms_per_token=decode_ms_per_token(total, prefill, ttft, len(new)), total_ms=total,
            rounds=rounds, drafted=drafted, accepted=accepted,
            acceptance_rate=accepted / drafted if drafted else 0.0,
            mean_accepted_len=1.0 + accepted / rounds if rounds else 0.0,
            accepted_at=tuple(accepted_at), drafted_at=tuple(drafted_at),
            peak_rss_mb=peak_rss_mb(), stop_reason=stop, tokens=tuple(new),
        )
