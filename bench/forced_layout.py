#!/usr/bin/env python
"""Which prompt layout and suffix window make the target right most often? Teacher-forced, on dev.

A greedy answer is decided by its few near-ties, so the quality bench's few hundred whole answers
cannot tell two prompts apart unless they differ a lot (bench/RESULTS.md, session 24: the suffix
window 32 vs 128 on 126 dev sites, a gain carried by two sites). This script asks the question
underneath with every position of every real middle: fed the prompt and the real middle, how often
is the target's top token the real next one, how much probability does it give the real token, and
at how many sites is every token of the real first line the top token (the sites whose first line
greedy decoding writes exactly, up to tokenization)?

Layouts (``LAYOUT:SUFFIX_TOKENS``; the prefix window is the daemon's):

- ``psm``: ``<|fim_prefix|>{prefix}<|fim_suffix|>{suffix}<|fim_middle|>`` — Qwen2.5-Coder's
  documented order, and specd's. A keystroke changes the prefix's end, so every suffix token after
  it is computed again on every keystroke: the suffix window is kept short (32).
- ``spm``: ``<|fim_suffix|>{suffix}<|fim_prefix|>{prefix}<|fim_middle|>`` — the suffix first. A
  keystroke would leave the suffix's cache in place, so a long suffix would cost a keystroke
  nothing. Only worth it if the model reads this order as well as its own.
- ``spm-joint``: ``<|fim_prefix|><|fim_suffix|>{suffix}<|fim_middle|>{prefix}`` — the FIM paper's
  SPM, where the middle continues the prefix's text directly.

Per site the NLL sums and first-line results are kept, so layouts are compared pairwise (sign
tests on the sites where they differ).

    python bench/forced_layout.py --split dev --layouts psm:32,psm:128,spm:32,spm:128 --out layouts.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch

from specd.bench.machine import machine_info
from specd.bench.tasks import Task, load_tasks, quality_tasks_path, select_tasks
from specd.engine.config import DEFAULT_TARGET, PromptWindows
from specd.engine.prompt import PromptBuilder
from specd.models.loader import load_model
from specd.models.registry import PUBLISHED

# run as `python bench/forced_layout.py`: its own folder is first on sys.path
from forced_accuracy import sign_test

LAYOUTS = ("psm", "spm", "spm-joint")


@dataclass(frozen=True)
class Layout:
    order: str  # one of LAYOUTS
    suffix_tokens: int

    @property
    def name(self) -> str:
        return f"{self.order}:{self.suffix_tokens}"

    @classmethod
    def parse(cls, text: str) -> "Layout":
        order, _, n = text.partition(":")
        if order not in LAYOUTS or not n.isdigit():
            raise SystemExit(f"layout {text!r}: expected one of {', '.join(LAYOUTS)} then :SUFFIX_TOKENS")
        return cls(order, int(n))


def sequence(layout: Layout, b: PromptBuilder, tokenizer: Any, task: Task) -> tuple[list[int], range]:
    """The prompt in ``layout`` (``b``: a builder with its suffix window) followed by the real
    middle's tokens, and the rows whose logits predict the middle (row ``i`` predicts token ``i + 1``)."""
    p, s, m = b.fim
    pre = tokenizer.encode(b.window_prefix(task.prefix))
    suf = tokenizer.encode(b.window_suffix(task.suffix, task.prefix))
    prompt = {"psm": [p, *pre, s, *suf, m],
              "spm": [s, *suf, p, *pre, m],
              "spm-joint": [p, s, *suf, m, *pre]}[layout.order]
    middle = tokenizer.encode(task.expected)
    return prompt + middle, range(len(prompt) - 1, len(prompt) + len(middle) - 1)


def first_line_tokens(tokenizer: Any, middle: list[int]) -> int:
    """How many of the middle's tokens it takes to reach its first newline (all when there is none)."""
    for i, t in enumerate(middle):
        if "\n" in tokenizer.decode([t]):
            return i + 1
    return len(middle)


@torch.inference_mode()
def score(model: Any, tokenizer: Any, seq: list[int], rows: range) -> dict[str, Any]:
    model.rollback(0)
    logits = model.forward(torch.tensor(seq, dtype=torch.long)).float()  # [n, V]
    lp = torch.log_softmax(logits[rows.start : rows.stop, : tokenizer.vocab_size].double(), -1)  # [m, V]
    real = torch.tensor(seq[rows.start + 1 : rows.stop + 1])  # [m]
    hit = lp.argmax(-1) == real  # [m]
    nll = -lp.gather(1, real[:, None])[:, 0]  # [m]
    k = first_line_tokens(tokenizer, real.tolist())
    return {"n": len(rows), "hits": int(hit.sum()), "nll": float(nll.sum()),
            "first_line_tokens": k, "first_line_exact": bool(hit[:k].all()), "first_line_nll": float(nll[:k].sum()),
            "prompt_tokens": rows.start + 1}


def summarize(layouts: list[Layout], per_task: list[dict[str, Any]]) -> dict[str, Any]:
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for t in per_task:
        groups[t["language"]].append(t)
        groups[f"cursor:{t['cursor']}"].append(t)
        groups["all"].append(t)
    base = layouts[0].name
    out: dict[str, Any] = {}
    for group, tasks in sorted(groups.items()):
        row: dict[str, Any] = {"sites": len(tasks)}
        for lay in layouts:
            r = [t["layouts"][lay.name] for t in tasks]
            n = sum(x["n"] for x in r)
            entry = {"positions": n, "top1": round(sum(x["hits"] for x in r) / n, 4),
                     "nll": round(sum(x["nll"] for x in r) / n, 4),
                     "first_line_exact": sum(x["first_line_exact"] for x in r),
                     "prompt_tokens_mean": round(sum(x["prompt_tokens"] for x in r) / len(r), 1)}
            if lay.name != base:
                b = [t["layouts"][base] for t in tasks]
                better = sum(x["nll"] < y["nll"] - 1e-9 for x, y in zip(r, b))
                worse = sum(x["nll"] > y["nll"] + 1e-9 for x, y in zip(r, b))
                gained = sum(x["first_line_exact"] and not y["first_line_exact"] for x, y in zip(r, b))
                lost = sum(y["first_line_exact"] and not x["first_line_exact"] for x, y in zip(r, b))
                entry[f"vs {base}"] = {"sites_nll_lower": better, "sites_nll_higher": worse,
                                       "nll_sign_test_p": sign_test(better, worse),
                                       "first_lines_gained": gained, "first_lines_lost": lost,
                                       "first_line_sign_test_p": sign_test(gained, lost)}
            row[lay.name] = entry
        out[group] = row
    return out


def table(layouts: list[Layout], summary: dict[str, Any]) -> str:
    base = layouts[0].name
    lines = ["| sites | layout | positions | top-1 | NLL | first lines exact (forced) | "
             f"sites NLL lower / higher than {base} (p) | first lines gained / lost (p) |",
             "|---|---|---|---|---|---|---|---|"]
    for group, row in summary.items():
        for lay in layouts:
            e = row[lay.name]
            vs = e.get(f"vs {base}")
            cmp1 = f"{vs['sites_nll_lower']} / {vs['sites_nll_higher']} ({vs['nll_sign_test_p']})" if vs else ""
            cmp2 = f"{vs['first_lines_gained']} / {vs['first_lines_lost']} ({vs['first_line_sign_test_p']})" if vs else ""
            lines.append(f"| {group} ({row['sites']}) | {lay.name} | {e['positions']} | {e['top1']} | {e['nll']} | "
                         f"{e['first_line_exact']} | {cmp1} | {cmp2} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--split", default="dev", choices=["dev", "test", "all"])
    ap.add_argument("--tasks", default=None, help="task filter (as `specd bench --tasks`)")
    ap.add_argument("--layouts", default="psm:32,psm:128,spm:32,spm:128",
                    help="comma-separated LAYOUT:SUFFIX_TOKENS; the first is the baseline the others are compared to")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    layouts = [Layout.parse(x) for x in args.layouts.split(",")]

    tasks = load_tasks(quality_tasks_path())
    if args.split != "all":
        tasks = [t for t in tasks if t.split == args.split]
    tasks = select_tasks(tasks, args.tasks)
    loaded = load_model(PUBLISHED[DEFAULT_TARGET].name, max_len=4096)
    # one builder per layout: each caches the tokenizer's longest token, a pass over the vocabulary
    builders = {lay: PromptBuilder(loaded.tokenizer, replace(PromptWindows(), max_suffix_tokens=lay.suffix_tokens))
                for lay in layouts}

    per_task = []
    t0 = time.perf_counter()
    for i, task in enumerate(tasks):
        scores = {}
        for lay in layouts:
            seq, rows = sequence(lay, builders[lay], loaded.tokenizer, task)
            scores[lay.name] = score(loaded.model, loaded.tokenizer, seq, rows)
        per_task.append({"task": task.id, "language": task.language, "cursor": task.cursor, "layouts": scores})
        print(f"{i + 1}/{len(tasks)} {task.id} ({time.perf_counter() - t0:.0f} s)", file=sys.stderr, flush=True)
    summary = summarize(layouts, per_task)
    print(table(layouts, summary))
    if args.out:
        doc = {"command": " ".join(["bench/forced_layout.py", *(argv if argv is not None else sys.argv[1:])]),
               "machine": machine_info(), "layouts": [l.name for l in layouts], "tasks": len(tasks),
               "summary": summary, "per_task": per_task}
        args.out.write_text(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
