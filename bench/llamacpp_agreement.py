"""Quality of specd's target runtimes against llama.cpp on the same GGUF: per-token agreement.

For each suite task, llama-server (specd's anchor build) writes its greedy continuation of
specd's own FIM prompt (token ids, so both see the same prompt). Each specd target runtime is then
teacher-forced along that continuation: at every position, does specd's argmax equal the token
llama.cpp chose? Positions after a disagreement still count (both are fed llama.cpp's tokens), so
one early divergence does not hide the rest. The same positions give top-1 agreement between
specd's runtimes (e.g. the GGUF-native target vs the INT8 one).

    python bench/llamacpp_agreement.py --quants gguf,int8 --tokens 32 --json agreement.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch

from specd.bench.llamacpp_bin import LlamaServer, find_binaries, unavailable_note
from specd.bench.tasks import load_tasks, select_tasks
from specd.engine.config import PromptWindows
from specd.engine.prompt import PromptBuilder
from specd.models.loader import load_model
from specd.models.pull import gguf_path
from specd.models.registry import PUBLISHED
from specd.engine.config import DEFAULT_TARGET


def llama_continuations(server: LlamaServer, prompts: list[list[int]], n: int) -> list[list[int]]:
    """llama.cpp's greedy continuation of each prompt (token ids), cold."""
    out = []
    for prompt in prompts:
        server.erase_slot()
        data = server.post("/completion", {"prompt": prompt, "n_predict": n, "temperature": 0.0, "top_k": 1,
                                            "cache_prompt": False, "return_tokens": True, "samplers": ["top_k"]},
                            timeout=600)
        out.append([int(t) for t in data.get("tokens", [])])
    return out


@torch.inference_mode()
def argmaxes(model, prompt: list[int], forced: list[int]) -> list[int]:
    """specd's greedy choice at each position of ``forced`` (teacher-forced), from a cold cache."""
    model.rollback(0)
    model.forward(torch.tensor(prompt[:-1], dtype=torch.long))
    logits = model.forward(torch.tensor(prompt[-1:] + forced[:-1], dtype=torch.long))  # [n, V]
    return [int(i) for i in torch.argmax(logits, dim=-1)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quants", default="gguf,int8", help="specd target quant modes to compare")
    ap.add_argument("--tasks", default=None, help="task filter (as `specd bench --tasks`); default: all")
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    bins = find_binaries()
    if bins is None:
        print(unavailable_note(), file=sys.stderr)
        return 2
    target = PUBLISHED[DEFAULT_TARGET]
    gguf = gguf_path(target)
    tasks = select_tasks(load_tasks(), args.tasks)
    quants = [q for q in args.quants.split(",") if q]

    loaded = load_model(target.name, quant=quants[0], max_len=4096)
    builder = PromptBuilder(loaded.tokenizer, PromptWindows())
    prompts = [builder.build(t.prefix, t.suffix) for t in tasks]

    t0 = time.perf_counter()
    with LlamaServer(bins, gguf, args.threads, ctx=4096) as server:
        forced = llama_continuations(server, prompts, args.tokens)
    print(f"llama.cpp continuations: {time.perf_counter() - t0:.0f} s", file=sys.stderr)

    choices: dict[str, list[list[int]]] = {}
    for q in quants:
        model = loaded.model if q == quants[0] else load_model(target.name, quant=q, max_len=4096).model
        choices[q] = [argmaxes(model, p, f) if f else [] for p, f in zip(prompts, forced)]
        del model
        print(f"{q}: teacher-forced", file=sys.stderr)
        loaded = None  # the first model is not needed again

    total = sum(len(f) for f in forced)
    report: dict = {"tasks": len(tasks), "positions": total, "tokens": args.tokens, "llama_cpp": bins.version,
                    "agreement_with_llama_cpp": {}, "first_divergence_median": {}, "top1_between": {}}
    for q in quants:
        same = sum(a == b for c, f in zip(choices[q], forced) for a, b in zip(c, f))
        report["agreement_with_llama_cpp"][q] = round(same / total, 4) if total else 0.0
        firsts = sorted(next((i for i, (a, b) in enumerate(zip(c, f)) if a != b), len(f))
                        for c, f in zip(choices[q], forced))
        report["first_divergence_median"][q] = firsts[len(firsts) // 2] if firsts else 0
    for i, a in enumerate(quants):
        for b in quants[i + 1:]:
            same = sum(x == y for ca, cb in zip(choices[a], choices[b]) for x, y in zip(ca, cb))
            report["top1_between"][f"{a}~{b}"] = round(same / total, 4) if total else 0.0
    print(json.dumps(report, indent=2))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
