#!/usr/bin/env python
"""Two runtimes of one model side by side in one process, interleaved: T(n) for n new tokens
after a 300-token context, each (runtime, n) measured once per round, median and min over the
rounds. Interleaving cancels the machine's drift, which on this shared 2-core machine is larger
than the difference between runtimes measured one after the other (bench/backend_speed.py, deleted;
in commit 9e79d9f).

    flock /tmp/specd-heavy.lock python bench/backend_ab.py target:int8 torch,ort --rounds 9
    flock /tmp/specd-heavy.lock python bench/backend_ab.py draft:int4 ort,ort@32768,llamacpp

A runtime is ``torch``, ``ort`` or ``auto``, optionally ``/QUANT`` for another quantization than
the model argument's and ``@N`` for an N-token sub-vocabulary head (drafts), e.g.
``torch/int8@32768``; ``torch-loop`` is the torch runtime with its layers in the Python loop
instead of fused in C (``specd.models.fused_layers``); or ``llamacpp``: llama.cpp (llama-cpp-python) on the model's pulled GGUF file, its
own quantization (Q4_K_M target), as a same-run reference for the step cost.
"""
import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from specd.models.loader import load_model, resolve
from specd.engine.config import DEFAULT_DRAFT, DEFAULT_TARGET
from specd.models.tokenizer import Tokenizer

SIZES = (1, 2, 3, 5, 9, 17)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", help="role:quant, e.g. target:int8")
    ap.add_argument("backends", help="comma-separated runtimes, e.g. torch,ort")
    ap.add_argument("--rounds", type=int, default=9)
    args = ap.parse_args()
    torch.set_num_threads(2)
    role, quant = args.model.split(":")
    spec = DEFAULT_TARGET if role == "target" else DEFAULT_DRAFT
    models = {b: _load(spec, quant, b) for b in args.backends.split(",")}
    ids = Tokenizer.from_file(resolve(spec) / "tokenizer.json").encode(Path(json.__file__).read_text())
    for m in models.values():
        m.model.forward(torch.tensor(ids[:300]))
    times: dict[tuple[str, int], list[float]] = {(b, n): [] for b in models for n in SIZES}
    for _ in range(args.rounds):
        for n in SIZES:
            for b, m in models.items():
                t = time.perf_counter()
                m.model.forward(torch.tensor(ids[300 : 300 + n]))
                times[(b, n)].append((time.perf_counter() - t) * 1e3)
                (m if isinstance(m, LlamaCppStep) else m.model).rollback(300)
    for b in models:
        med = {n: statistics.median(times[(b, n)]) for n in SIZES}
        print(json.dumps({"model": args.model, "backend": b, "rounds": args.rounds,
                          "median_ms": {n: round(v, 1) for n, v in med.items()},
                          "min_ms": {n: round(min(times[(b, n)]), 1) for n in SIZES},
                          "t5_over_t1": round(med[5] / med[1], 2)}), flush=True)


class LlamaCppStep:
    """llama.cpp behind the two calls this script makes: ``forward(tokens)`` (one batch, logits
    for every row, as specd's verification needs) and ``rollback(n)``."""

    def __init__(self, gguf: Path) -> None:
        from llama_cpp import Llama

        self.llm = Llama(model_path=str(gguf), n_ctx=1024, n_threads=2, n_batch=512, verbose=False)
        self.model = self

    def forward(self, tokens: torch.Tensor) -> None:
        llm = self.llm
        toks = tokens.tolist()
        n_past = llm.n_tokens
        llm._batch.set_batch(batch=toks, n_past=n_past, logits_all=True)
        llm._ctx.decode(llm._batch)
        llm.n_tokens = n_past + len(toks)

    def rollback(self, n: int) -> None:
        self.llm._ctx.kv_cache_seq_rm(0, n, -1)
        self.llm.n_tokens = n


def _load(spec: str, quant: str, runtime: str):
    if runtime == "llamacpp":
        return LlamaCppStep(resolve(spec).parent / "model.gguf")
    backend, _, head = runtime.partition("@")
    backend, _, own_quant = backend.partition("/")
    loop = backend == "torch-loop"
    lm = load_model(spec, quant=own_quant or quant, max_len=1024, backend="torch" if loop else backend,
                    threads=2, head_vocab=int(head or 0))
    if loop:
        lm.model.fused = None
    return lm


if __name__ == "__main__":
    main()
