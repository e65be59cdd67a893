#!/usr/bin/env python
"""Is specd's target, on the same GGUF, as often right about real code as llama.cpp's? Teacher-forced.

The quality bench (``specd bench --scenario quality``) compares whole suggestions: a few hundred
greedy answers, where a near-tie between two tokens that falls differently in the two systems
changes a whole line. This script asks the question underneath, with thousands of positions
instead of hundreds of answers: fed the same real code, how often is each system's top token the
real next token, and how much probability does it give the real token?

For each quality task (``--split``, default ``test``): specd's own FIM prompt for the task
(``PromptBuilder``, the daemon's windows) followed by the real middle's tokens, one cold forward
per system over the whole sequence. Positions are counted in two regions:

- **prefix**: inside the text before the cursor (plain next-token prediction over real code);
- **middle**: the real middle after ``<|fim_middle|>``, the positions a suggestion is made of.

Systems, all on the default target's GGUF blocks and specd's token ids:

- ``specd``: the target as the daemon runs it (``--target-quant auto``: specd's GGUF kernels);
- ``llama.cpp``: llama-cpp-python's bindings of the same llama.cpp release specd's anchor
  llama-server is built from (native CPU build, every position's logits);
- ``reference`` (on the first ``--reference N`` tasks): specd's ``fp32`` mode, the same blocks
  dequantized (matrices rounded to bfloat16, as every float mode holds them) and run in float32,
  without the 8-bit activations both kernel paths use. Each system's distance from it (top-1
  agreement, KL) says whose arithmetic strays further from the model the file describes.

Reported per system and region: top-1 accuracy against the real token, mean negative log-likelihood
of the real token; between specd and llama.cpp: top-1 agreement and, where they disagree, how often
each was the one right (a paired count: equal counts mean the disagreements are near-ties that
fall either way, not a weaker model).

    python bench/forced_accuracy.py --split test --reference 40 --out forced.json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import torch

from specd.bench.machine import machine_info
from specd.bench.tasks import Task, load_tasks, quality_tasks_path, select_tasks
from specd.engine.config import DEFAULT_TARGET, PromptWindows
from specd.engine.prompt import PromptBuilder
from specd.models.loader import load_model
from specd.models.pull import gguf_path
from specd.models.registry import PUBLISHED

REGIONS = ("prefix", "middle")


def sequence(builder: PromptBuilder, tokenizer: Any, task: Task) -> tuple[list[int], dict[str, range]]:
    """The task's FIM prompt and real middle as token ids, and which rows predict which region
    (row ``i``'s logits predict token ``i + 1``)."""
    prompt = builder.build(task.prefix, task.suffix)  # [<|fim_prefix|>, *prefix, <|fim_suffix|>, ...]
    prefix_len = prompt.index(builder.fim[1]) - 1
    seq = prompt + tokenizer.encode(task.expected)
    # rows 0 .. prefix_len - 1 predict the prefix's tokens 1 .. prefix_len (row 0: <|fim_prefix|>)
    return seq, {"prefix": range(1, prefix_len), "middle": range(len(prompt) - 1, len(seq) - 1)}


@torch.inference_mode()
def specd_logits(model: Any, seq: list[int]) -> torch.Tensor:
    model.rollback(0)
    return model.forward(torch.tensor(seq, dtype=torch.long)).float()  # [n, V]


class LlamaCpp:
    """llama-cpp-python on the same GGUF, every position's logits."""

    def __init__(self, gguf: Path, threads: int, ctx: int) -> None:
        from llama_cpp import Llama

        self.llm = Llama(model_path=str(gguf), n_ctx=ctx, n_batch=512, n_ubatch=512, n_threads=threads,
                         n_threads_batch=threads, logits_all=True, verbose=False)

    def logits(self, seq: list[int]) -> torch.Tensor:
        self.llm.reset()
        self.llm.eval(seq)
        return torch.from_numpy(self.llm.scores[: len(seq)].copy())  # [n, V]


def score_task(seq: list[int], regions: dict[str, range], logits: dict[str, torch.Tensor]) -> dict[str, Any]:
    """Per region: per system the argmax hits and NLL sums; pairwise agreement; vs the reference."""
    out: dict[str, Any] = {}
    for region, rows in regions.items():
        if len(rows) == 0:
            continue
        real = torch.tensor(seq[rows.start + 1 : rows.stop + 1])  # [n]
        r: dict[str, Any] = {"n": len(rows)}
        top: dict[str, torch.Tensor] = {}
        logp: dict[str, torch.Tensor] = {}
        for name, lg in logits.items():
            lp = torch.log_softmax(lg[rows.start : rows.stop].double(), -1)  # [n, V]
            logp[name] = lp
            top[name] = lp.argmax(-1)
            r[name] = {"hits": int((top[name] == real).sum()),
                       "nll": float(-lp.gather(1, real[:, None]).sum())}
        if "specd" in top and "llama.cpp" in top:
            s, l = top["specd"], top["llama.cpp"]
            differ = s != l
            r["pair"] = {"agree": int((~differ).sum()), "only_specd_right": int((differ & (s == real)).sum()),
                         "only_llama_right": int((differ & (l == real)).sum())}
        if "reference" in logp:
            ref = logp["reference"]
            for name in ("specd", "llama.cpp"):
                if name in logp:
                    kl = (ref.exp() * (ref - logp[name])).sum(-1)  # [n]
                    r[name]["ref_agree"] = int((top[name] == top["reference"]).sum())
                    r[name]["ref_kl"] = float(kl.sum())
            r["reference"]["ref_agree"], r["reference"]["ref_kl"] = r["n"], 0.0
        out[region] = r
    return out


def summarize(per_task: list[dict[str, Any]]) -> dict[str, Any]:
    """Sums over tasks, by language and overall, turned into rates."""
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for t in per_task:
        groups[t["language"]].append(t)
        groups["all"].append(t)
    summary: dict[str, Any] = {}
    for lang, tasks in sorted(groups.items()):
        s: dict[str, Any] = {}
        for region in REGIONS:
            acc: dict[str, Any] = defaultdict(float)
            for t in tasks:
                r = t["scores"].get(region)
                if not r:
                    continue
                acc["n"] += r["n"]
                for name in ("specd", "llama.cpp", "reference"):
                    if name in r:
                        acc[f"{name}.hits"] += r[name]["hits"]
                        acc[f"{name}.nll"] += r[name]["nll"]
                        acc[f"{name}.n"] += r["n"]
                        if "ref_agree" in r[name]:
                            acc[f"{name}.ref_agree"] += r[name]["ref_agree"]
                            acc[f"{name}.ref_kl"] += r[name]["ref_kl"]
                            acc[f"{name}.ref_n"] += r["n"]
                            acc[f"{name}.ref_hits"] += r[name]["hits"]
                for k, v in r.get("pair", {}).items():
                    acc[f"pair.{k}"] += v
            if not acc["n"]:
                continue
            row: dict[str, Any] = {"positions": int(acc["n"])}
            for name in ("specd", "llama.cpp", "reference"):
                n = acc[f"{name}.n"]
                if n:
                    row[name] = {"top1": round(acc[f"{name}.hits"] / n, 4), "nll": round(acc[f"{name}.nll"] / n, 4),
                                 "positions": int(n)}
                    if acc[f"{name}.ref_n"]:
                        rn = acc[f"{name}.ref_n"]
                        row[name]["agree_with_reference"] = round(acc[f"{name}.ref_agree"] / rn, 4)
                        row[name]["kl_from_reference"] = round(acc[f"{name}.ref_kl"] / rn, 5)
                        row[name]["reference_positions"] = int(rn)
                        row[name]["top1_on_reference_positions"] = round(acc[f"{name}.ref_hits"] / rn, 4)
            if acc["pair.agree"] or acc["pair.only_specd_right"] or acc["pair.only_llama_right"]:
                a, b = int(acc["pair.only_specd_right"]), int(acc["pair.only_llama_right"])
                row["pair"] = {"top1_agreement": round(acc["pair.agree"] / acc["n"], 4),
                               "only_specd_right": a, "only_llama_right": b, "sign_test_p": sign_test(a, b)}
            s[region] = row
        summary[lang] = s
    return summary


def sign_test(a: int, b: int) -> float:
    """Two-sided exact binomial test of a vs b successes at p = 1/2."""
    n = a + b
    if n == 0:
        return 1.0
    k = min(a, b)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2 ** n
    return round(min(1.0, 2 * tail), 4)


def table(summary: dict[str, Any]) -> str:
    lines = ["| language | region | positions | specd top-1 | llama.cpp top-1 | specd NLL | llama.cpp NLL | "
             "top-1 agreement | only specd right | only llama.cpp right | p (sign test) |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for lang, s in summary.items():
        for region, row in s.items():
            sp, ll, pr = row.get("specd", {}), row.get("llama.cpp", {}), row.get("pair", {})
            lines.append(f"| {lang} | {region} | {row['positions']} | {sp.get('top1', '')} | {ll.get('top1', '')} | "
                         f"{sp.get('nll', '')} | {ll.get('nll', '')} | {pr.get('top1_agreement', '')} | "
                         f"{pr.get('only_specd_right', '')} | {pr.get('only_llama_right', '')} | {pr.get('sign_test_p', '')} |")
    ref = [(lang, region, row) for lang, s in summary.items() for region, row in s.items()
           if "agree_with_reference" in row.get("specd", {})]
    if ref:
        lines += ["", "| language | region | positions | specd ~ reference top-1 | llama.cpp ~ reference | "
                  "specd KL | llama.cpp KL | top-1 vs real: specd | llama.cpp | reference |", "|---|---|---|---|---|---|---|---|---|---|"]
        for lang, region, row in ref:
            sp, ll, rf = row["specd"], row.get("llama.cpp", {}), row.get("reference", {})
            lines.append(f"| {lang} | {region} | {sp['reference_positions']} | {sp['agree_with_reference']} | "
                         f"{ll.get('agree_with_reference', '')} | {sp['kl_from_reference']} | "
                         f"{ll.get('kl_from_reference', '')} | {sp['top1_on_reference_positions']} | "
                         f"{ll.get('top1_on_reference_positions', '')} | {rf.get('top1_on_reference_positions', '')} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--split", default="test", choices=["dev", "test", "all"])
    ap.add_argument("--tasks", default=None, help="task filter (as `specd bench --tasks`)")
    ap.add_argument("--limit", type=int, default=0, help="the first N tasks (0: all)")
    ap.add_argument("--reference", type=int, default=0,
                    help="also run the float32 reference on the first N tasks (slow: ~10 s a task)")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--out", type=Path, default=None, help="JSON with every task's counts and the summary")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)

    tasks = load_tasks(quality_tasks_path())
    if args.split != "all":
        tasks = [t for t in tasks if t.split == args.split]
    tasks = select_tasks(tasks, args.tasks)
    if args.limit:
        tasks = tasks[: args.limit]
    target = PUBLISHED[DEFAULT_TARGET]
    loaded = load_model(target.name, max_len=4096)
    builder = PromptBuilder(loaded.tokenizer, PromptWindows())
    seqs = [sequence(builder, loaded.tokenizer, t) for t in tasks]
    longest = max(len(s) for s, _ in seqs)
    llama = LlamaCpp(gguf_path(target), args.threads, ctx=max(512, longest + 16))
    reference = load_model(target.name, quant="fp32", backend="torch", max_len=longest + 16).model if args.reference else None

    per_task = []
    t0 = time.perf_counter()
    for i, (task, (seq, regions)) in enumerate(zip(tasks, seqs)):
        logits = {"specd": specd_logits(loaded.model, seq), "llama.cpp": llama.logits(seq)}
        if reference is not None and i < args.reference:
            logits["reference"] = specd_logits(reference, seq)
        vocab = min(lg.shape[1] for lg in logits.values())  # the GGUF's rows beyond the tokenizer's
        logits = {k: v[:, :vocab] for k, v in logits.items()}
        per_task.append({"task": task.id, "language": task.language, "cursor": task.cursor,
                         "tokens": len(seq), "scores": score_task(seq, regions, logits)})
        print(f"{i + 1}/{len(tasks)} {task.id} ({len(seq)} tokens, {time.perf_counter() - t0:.0f} s)",
              file=sys.stderr, flush=True)
    summary = summarize(per_task)
    print(table(summary))
    if args.out:
        doc = {"command": " ".join(["bench/forced_accuracy.py", *(argv if argv is not None else sys.argv[1:])]),
               "machine": machine_info(), "tasks": len(tasks), "summary": summary, "per_task": per_task}
        args.out.write_text(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
