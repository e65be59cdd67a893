#!/usr/bin/env python
"""How much suffix does a keystroke need? Quality of completions against the suffix window.

In Qwen's FIM order (prefix, suffix, middle) a keystroke changes the end of the prefix, so every
suffix token after it must be computed again, by both models, on every keystroke: the suffix
window is the floor of a keystroke's prefill. This script measures what a smaller window costs in
quality: for each bench task and each window, the target model's greedy completion (through
llama.cpp on the same GGUF file, for speed: a proxy for specd's INT8 target), post-processed as
the LSP does, scored against the file's real middle (``bench/postprocess_rules.py``'s kept/junk).

    flock /tmp/specd-heavy.lock python bench/suffix_window.py --windows 0,32,256 --tasks 12
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from pathlib import Path

from specd.bench.modes import parse_modes
from specd.bench.tasks import load_tasks
from specd.engine.prompt import PromptBuilder, PromptWindows
from specd.lsp.postprocess import postprocess
from specd.models.loader import resolve
from specd.models.pull import gguf_path
from specd.models.registry import PUBLISHED
from specd.engine.config import DEFAULT_TARGET
from specd.models.tokenizer import Tokenizer

# run as `python bench/suffix_window.py`: its own folder is first on sys.path, for postprocess_rules
from postprocess_rules import score


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=DEFAULT_TARGET)
    ap.add_argument("--windows", default="0,32,256", help="suffix windows in tokens")
    ap.add_argument("--tasks", type=int, default=12, help="how many tasks (an even spread over categories)")
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    windows = [int(w) for w in args.windows.split(",")]
    tasks = load_tasks()
    rng = random.Random(args.seed)
    by_cat: dict[str, list] = {}
    for t in tasks:
        by_cat.setdefault(t.category, []).append(t)
    chosen = []
    while len(chosen) < min(args.tasks, len(tasks)):
        for cat in sorted(by_cat):
            if by_cat[cat] and len(chosen) < args.tasks:
                chosen.append(by_cat[cat].pop(rng.randrange(len(by_cat[cat]))))
    tok = Tokenizer.from_file(resolve(args.model) / "tokenizer.json")
    from specd.bench.anchor_llamacpp import LlamaCppRunner

    builders = {w: PromptBuilder(tok, PromptWindows(max_suffix_tokens=w)) for w in windows}
    runner = LlamaCppRunner(parse_modes("llamacpp", 0)[0], gguf_path(PUBLISHED[args.model]),
                            threads=os.cpu_count() or 1, n_ctx=4096, stop_ids=builders[windows[0]].stop_ids)
    rows = []
    for t in chosen:
        for w in windows:
            prompt = builders[w].build(t.prefix, "" if w == 0 else t.suffix)
            t0 = time.perf_counter()
            m = runner.run(t, prompt, args.max_tokens, 0, 0)
            raw = tok.decode(list(m.tokens))
            out = postprocess(raw, t.prefix.rsplit("\n", 1)[-1], t.suffix.split("\n", 1)[0], t.suffix)
            kept, junk = score(out, t.expected)
            suffix_tokens = prompt.index(builders[w].fim[2]) - prompt.index(builders[w].fim[1]) - 1
            rows.append({"task": t.id, "category": t.category, "window": w, "suffix_tokens": suffix_tokens,
                         "kept": kept, "junk": junk, "expected_chars": len(t.expected),
                         "exact": out.rstrip() == t.expected.rstrip(), "seconds": time.perf_counter() - t0})
            print(f"{t.id} window {w}: suffix {suffix_tokens} tok, kept {kept}/{len(t.expected)}, junk {junk}",
                  file=sys.stderr, flush=True)
    print(f"{len(chosen)} tasks, greedy {args.max_tokens} tokens, llama.cpp on {args.model}'s GGUF, LSP post-processing")
    print("| suffix window (tokens) | suffix tokens (mean) | kept (share of original) | junk chars / task | exact |")
    print("|---|---|---|---|---|")
    for w in windows:
        rs = [r for r in rows if r["window"] == w]
        total = sum(r["expected_chars"] for r in rs)
        print(f"| {w} | {sum(r['suffix_tokens'] for r in rs) / len(rs):.0f} | {sum(r['kept'] for r in rs) / total:.3f} | "
              f"{sum(r['junk'] for r in rs) / len(rs):.1f} | {sum(r['exact'] for r in rs)} |")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
