#!/usr/bin/env python
"""Which prompt settings make the default target's suggestions right most often? A study on the
quality tasks' DEV split (``specd bench --scenario quality`` reports on the test split).

Each variant is a specd prompt (``specd.engine.prompt.PromptBuilder``: prefix and suffix windows in
tokens, or in lines as llama.vim counts them, and an optional header in Qwen's repository format)
built here with specd's tokenizer and sent as token ids to llama-server's ``/completion`` on the
same GGUF file: the model sees exactly specd's prompt, computed by llama.cpp (faster here than a
daemon per variant, and the same weights; the settings chosen are then checked through the
daemon on test). ``infill`` is llama-server's own ``/infill`` prompt from the same text, the
reference specd is compared with. Variants of one task run back to back, ordered so that those
sharing a prompt head reuse llama-server's cache.

Scored as the quality scenario scores (``specd.bench.quality``): exact first line, edit
similarity, accepted characters, raw and after the LSP's post-processing.

    flock /tmp/specd-cpu.lock python bench/quality_prompts.py --out bench/out/quality-prompts.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from specd.bench.llamacpp_bin import LlamaServer, find_binaries, infill_body
from specd.bench.machine import machine_info
from specd.bench.quality import score_answer, stop_for, summarize
from specd.bench.tasks import load_tasks, quality_tasks_path
from specd.cli.bench_quality import task_repo
from specd.engine.config import PromptWindows
from specd.engine.prompt import PromptBuilder
from specd.lsp.context import file_header
from specd.lsp.postprocess import postprocess
from specd.models.loader import resolve
from specd.models.pull import gguf_path
from specd.models.registry import PUBLISHED
from specd.engine.config import DEFAULT_TARGET
from specd.models.tokenizer import Tokenizer

LLAMA_HEADER = "<|repo_name|>myproject\n<|file_sep|>filename\n"  # what llama-server's /infill prepends


@dataclass(frozen=True)
class Variant:
    name: str
    prefix_tokens: int = 384
    suffix_tokens: int = 32
    header: str = "none"  # none | llama (llama-server's fixed one) | file (the task's repository and path)
    prefix_lines: int = 0  # >0: the prefix cut to this many lines first (llama.vim's n_prefix)
    suffix_lines: int = 0
    spm: bool = False  # suffix first: <|fim_suffix|>suffix<|fim_prefix|>prefix<|fim_middle|> (llama-server --spm-infill)


VARIANTS = (
    Variant("s32"), Variant("s64", suffix_tokens=64), Variant("s128", suffix_tokens=128),
    Variant("s32+file", header="file"), Variant("s64+file", suffix_tokens=64, header="file"),
    Variant("s128+file", suffix_tokens=128, header="file"),
    Variant("s128+llama", suffix_tokens=128, header="llama"),
    Variant("p768+s128+file", prefix_tokens=768, suffix_tokens=128, header="file"),
    Variant("spm128+file", suffix_tokens=128, header="file", spm=True),
    Variant("spm32+file", suffix_tokens=32, header="file", spm=True),
    Variant("lines64/16+file", prefix_tokens=1024, suffix_tokens=256, header="file", prefix_lines=64, suffix_lines=16),
)


def repo_and_path(task) -> tuple[str, str]:
    """A repository name for the task's source (its package name) and the file's path in it."""
    return task_repo(task), task.file


def prompt_ids(builders: dict, tok: Tokenizer, v: Variant, task) -> list[int]:
    prefix, suffix = task.prefix, task.suffix
    if v.prefix_lines:
        prefix = "".join(prefix.splitlines(keepends=True)[-v.prefix_lines - 1 :])  # + the cursor line's start
    if v.suffix_lines:
        suffix = "".join(suffix.splitlines(keepends=True)[: v.suffix_lines + 1])
    context = {"none": "", "llama": LLAMA_HEADER, "file": file_header(*repo_and_path(task))}[v.header]
    b = builders[v.name]
    if not v.spm:
        return b.build(prefix, suffix, context)
    p, sfx, m = b.fim
    return [*b.encode_context(context), sfx, *tok.encode(b.window_suffix(suffix)), p,
            *tok.encode(b.window_prefix(prefix)), m]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--split", default="dev")
    ap.add_argument("--variants", default=",".join(v.name for v in VARIANTS) + ",infill")
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--limit", type=int, default=0, help="at most this many tasks per language (0: all)")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    wanted = args.variants.split(",")
    variants = [v for v in VARIANTS if v.name in wanted]
    tasks = [t for t in load_tasks(quality_tasks_path()) if t.split == args.split]
    if args.limit:  # the first --limit tasks of each language
        per: Counter[str] = Counter()
        kept = []
        for t in tasks:
            per[t.language] += 1
            if per[t.language] <= args.limit:
                kept.append(t)
        tasks = kept
    model = gguf_path(PUBLISHED[DEFAULT_TARGET])
    tok = Tokenizer.from_file(resolve(DEFAULT_TARGET).directory / "tokenizer.json")
    builders = {v.name: PromptBuilder(tok, PromptWindows(max_prefix_tokens=v.prefix_tokens,
                                                         max_suffix_tokens=v.suffix_tokens,
                                                         max_context_tokens=64)) for v in variants}
    bins = find_binaries()
    if bins is None:
        raise SystemExit("no llama-server: python -m specd.bench.llamacpp_build")
    answers = []
    t_start = time.time()
    with LlamaServer(bins, model, threads=os.cpu_count() or 2, log_path=args.out.with_suffix(".llama.log")) as server:
        for i, task in enumerate(tasks):
            for name in wanted:
                if name == "infill":
                    body = infill_body(task.prefix, task.suffix, args.max_tokens, cache_prompt=True)
                    path, n_prompt = "/infill", None
                else:
                    v = next(v for v in variants if v.name == name)
                    ids = prompt_ids(builders, tok, v, task)
                    body = {"prompt": ids, "n_predict": args.max_tokens, "cache_prompt": True, "temperature": 0.0,
                            "top_k": 1, "stream": False}
                    path, n_prompt = "/completion", len(ids)
                if stop_for(task):
                    body["stop"] = stop_for(task)
                t0 = time.perf_counter()
                data = server.post(path, body, timeout=600)
                ms = (time.perf_counter() - t0) * 1000
                text = str(data.get("content", ""))
                answers.append({"task": task.id, "language": task.language, "kind": task.kind, "system": name,
                                "prompt_tokens": n_prompt or (data.get("timings") or {}).get("prompt_n"),
                                "text": text, "ms": round(ms, 1), **score_answer(task, text, postprocess)})
            print(f"{i + 1}/{len(tasks)} {task.id} {time.time() - t_start:.0f}s", file=sys.stderr, flush=True)
    table = summarize(answers)  # per variant (the answers' "system"), view and language
    doc = {"command": " ".join(sys.argv), "machine": machine_info(), "split": args.split,
           "max_tokens": args.max_tokens, "variants": [v.__dict__ for v in variants], "table": table,
           "answers": answers}
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    langs = sorted({a["language"] for a in answers})
    print(f"{'variant':<18}" + "".join(f"{lang[:6]:>8}" for lang in langs) + f"{'all':>8}{'sim':>7}{'acc':>7}")
    for name in wanted:
        row = table[name]["shown"]
        print(f"{name:<18}" + "".join(f"{row[lang]['exact']:>8}" for lang in langs)
              + f"{row['all']['exact']:>8}{row['all']['similarity']:>7.3f}{row['all']['accepted']:>7.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
