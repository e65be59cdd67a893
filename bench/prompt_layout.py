#!/usr/bin/env python
"""Prompt layout, windows and repository context, measured on the real pair in-process.

Three studies (each prints a markdown table; ``--json`` keeps the rows):

* ``quality``: greedy target-only completions (same text as greedy spec) for each variant,
  post-processed as the LSP does, scored on the cursor line: exact line and edit similarity
  (1 - Levenshtein / longer length), plus how many suggestions came out empty. Task sets: ``lines``
  (single-line tasks cut from real code, ``bench/line_tasks.py``; ``--split test`` is the reported
  split) and ``bench`` (the 36-task suite; scored on the first line of its middle).
  Variants: ``--layouts psm,spm``, ``--prefix-tokens 512,1024``, ``--suffix-tokens 32``,
  ``--contexts none,header,files`` (no repository context; the LSP's repository header alone; the
  header with two sibling files of the task's file, as the LSP sends recently edited documents).
* ``typing``: speculative requests while a new line is typed (the prompt a keystroke sends:
  the line being written is absent from the suffix): one at the end of the line before, one
  after Enter (the line change, cursor after the indentation), then one per typed character;
  prefill tokens computed (target) and ms per request, for each layout.
* ``tokens``: no model, the tokenizer only: each task's whole line typed a character at a time;
  the prompt tokens after the part shared with the keystroke before, per layout.
* ``cold``: cold speculative requests (caches reset) for each prefix window: prompt tokens, prefill
  and time to first token.

    flock /tmp/specd-cpu.lock python bench/prompt_layout.py quality,typing --tasks lines --split test
    flock /tmp/specd-cpu.lock python bench/prompt_layout.py cold --cold-prefix-tokens 256,512,1024,2048
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from specd.app import build_engine, model_directory
from specd.bench.quality import similarity
from specd.bench.tasks import load_tasks
from specd.engine.config import EngineConfig, PromptWindows
from specd.engine.prompt import PromptBuilder
from specd.lsp.context import ContextLimits, OtherFile, repo_context
from specd.lsp.postprocess import is_mid_line, postprocess
from specd.engine.config import DEFAULT_TARGET
from specd.models.tokenizer import Tokenizer
from specd.requests import CompletionRequest

sys.path.insert(0, str(Path(__file__).parent))
from line_tasks import build_line_tasks  # noqa: E402


@dataclass(frozen=True)
class Case:
    id: str
    split: str
    file: str
    prefix: str
    suffix: str
    target: str  # the expected rest of the cursor line
    before: str  # text before the cursor line
    after: str  # text after the cursor line


def cases(kind: str, split: str) -> list[Case]:
    if kind == "lines":
        # the line is being written: the text after the cursor is the rest of the file after it
        out = [Case(t.id, t.split, t.file, t.prefix, t.after, t.target, t.before, t.after)
               for t in build_line_tasks()]
    else:
        out = []
        for t in load_tasks():
            line_prefix = t.prefix.rsplit("\n", 1)[-1]
            first = (t.expected + t.suffix).split("\n", 1)[0]
            before = t.prefix[: len(t.prefix) - len(line_prefix)]
            rest = (t.expected + t.suffix)[len(first):]
            # suite tasks: Python was tuned on in earlier sessions, JavaScript and C held out
            out.append(Case(t.id, "dev" if t.language == "python" else "test", t.file, t.prefix, t.suffix,
                            first, before, rest))
    return [c for c in out if split == "all" or c.split == split]


def context_for(case: Case, kind: str) -> str:
    if kind == "none":
        return ""
    path = Path(case.file)
    repo = path.parent.name
    others: list[OtherFile] = []
    if kind == "files":
        sibs = sorted(p for p in path.parent.glob("*" + path.suffix) if p != path and p.stat().st_size > 500)
        for p in sibs[:2]:
            others.append(OtherFile(p.name, p.read_text(encoding="utf-8", errors="replace"), 0))
    return repo_context(repo, path.name, others, ContextLimits())


class SpmBuilder(PromptBuilder):
    """``<|fim_suffix|>{suffix}<|fim_prefix|>{prefix}<|fim_middle|>`` (suffix first: typing only
    changes the prompt's tail). Qwen2.5-Coder documents PSM only; measured, not shipped."""

    def build(self, prefix: str, suffix: str = "", context: str = "") -> list[int]:
        prefix, suffix = self.window_prefix(prefix), self.window_suffix(suffix)
        p, s, m = self.fim
        return [*self.encode_context(context), s, *self.tokenizer.encode(suffix), p,
                *self.tokenizer.encode(prefix), m]


# psm: specd's prompt; spm: bench-only (psm-line, measured in bench/RESULTS.md session 7, was removed)
LAYOUTS = {"psm": PromptBuilder, "spm": SpmBuilder}


def builder_for(layout: str, tokenizer, windows: PromptWindows) -> PromptBuilder:
    return LAYOUTS[layout](tokenizer, windows)


def set_windows(engine, layout: str = "psm", **changes) -> None:
    engine.prompts = builder_for(layout, engine.tokenizer, PromptWindows(**changes))


def mid_word(case: Case) -> bool:
    """The cursor splits a word (an identifier or number)."""
    left, right = case.prefix[-1:], case.target[:1]
    return (left.isalnum() or left == "_") and (right.isalnum() or right == "_")


def request(prefix: str, suffix: str, mode: str, max_tokens: int, context: str = "",
            one_line: bool = False) -> CompletionRequest:
    """As the LSP asks (one line mid-line); ``one_line``: always stop at the line's end (the
    scored line is the same: greedy text does not depend on where it stops)."""
    line_suffix = suffix.split("\n", 1)[0]
    stop = ("\n",) if one_line or is_mid_line(line_suffix) else ()
    return CompletionRequest(prefix=prefix, suffix=suffix, max_tokens=max_tokens, temperature=0.0, stop=stop,
                             mode=mode, context=context)


def quality(engine, args, chosen: list[Case]) -> list[dict]:
    rows = []
    variants = [(lay, pt, st, cx) for lay in args.layouts.split(",") for pt in _ints(args.prefix_tokens)
                for st in _ints(args.suffix_tokens) for cx in args.contexts.split(",")]
    for c in chosen:
        line_prefix = c.prefix.rsplit("\n", 1)[-1]
        line_suffix = c.suffix.split("\n", 1)[0]
        seen: dict[tuple, dict] = {}
        for lay, pt, st, cx in variants:  # same task in a row: later variants reuse its cached KV
            set_windows(engine, max_prefix_tokens=pt, max_suffix_tokens=st, layout=lay)
            ctx = context_for(c, cx)
            prompt = tuple(engine.prompts.build(c.prefix, c.suffix, ctx))
            if prompt in seen:  # the same tokens (e.g. the cursor at a line start): the same answer
                r = dict(seen[prompt], layout=lay, prefix_tokens=pt, suffix_tokens=st, context=cx)
                rows.append(r)
                continue
            engine.forget_suggestion()
            t0 = time.perf_counter()
            out = engine.complete(request(c.prefix, c.suffix, "target", args.max_tokens, ctx, one_line=True))
            raw = out.text
            shown = postprocess(raw, line_prefix, line_suffix, c.suffix)
            line = shown.split("\n", 1)[0].rstrip()
            r = {"task": c.id, "layout": lay, "prefix_tokens": pt, "suffix_tokens": st, "context": cx,
                 "mid_word": mid_word(c), "prompt_tokens": len(prompt), "exact": line == c.target.rstrip(),
                 "similarity": similarity(line, c.target.rstrip()), "empty": not shown.strip(), "raw": raw, "line": line, "target": c.target.rstrip(),
                 "seconds": time.perf_counter() - t0}
            seen[prompt] = r
            rows.append(r)
            print(f"{c.id} {lay} p{pt} s{st} {cx}: {'=' if r['exact'] else ' '} {r['similarity']:.2f} "
                  f"{line!r} | {c.target.rstrip()!r}", file=sys.stderr, flush=True)
    print(f"\n{len(chosen)} tasks ({args.tasks}, split {args.split}), greedy target-only, max {args.max_tokens} "
          "tokens, LSP post-processing, scored on the cursor line (completions end at its end; empty: nothing left to show)")
    print("| layout | prefix window | suffix window | context | exact line | edit similarity | empty | prompt tokens |")
    print("|---|---|---|---|---|---|---|---|")
    for lay, pt, st, cx in variants:
        rs = [r for r in rows if (r["layout"], r["prefix_tokens"], r["suffix_tokens"], r["context"]) == (lay, pt, st, cx)]
        print(f"| {lay} | {pt} | {st} | {cx} | {sum(r['exact'] for r in rs)}/{len(rs)} | "
              f"{statistics.mean(r['similarity'] for r in rs):.3f} | {sum(r['empty'] for r in rs)} | "
              f"{statistics.mean(r['prompt_tokens'] for r in rs):.0f} |")
    print("\nBy cursor position (mid-word: the cursor splits an identifier or number)")
    print("| layout | context | cursor | tasks | exact line | edit similarity |")
    print("|---|---|---|---|---|---|")
    for lay, pt, st, cx in variants:
        for where in (True, False):
            rs = [r for r in rows if (r["layout"], r["prefix_tokens"], r["suffix_tokens"], r["context"]) ==
                  (lay, pt, st, cx) and r["mid_word"] == where]
            if rs:
                print(f"| {lay} | {cx} | {'mid-word' if where else 'word boundary'} | {len(rs)} | "
                      f"{sum(r['exact'] for r in rs)} | {statistics.mean(r['similarity'] for r in rs):.3f} |")
    return rows


def typing(engine, args, chosen: list[Case]) -> list[dict]:
    """Type each task's cursor line into a document that lacks it."""
    rows = []
    for lay in args.layouts.split(","):
        set_windows(engine, layout=lay)
        for c in chosen:
            line = c.before.rsplit("\n", 1)[0]  # text up to the previous line's end
            typed = c.prefix[len(c.before):] + c.target
            indent = typed[: len(typed) - len(typed.lstrip())]
            after = c.after
            steps = [("previous line", line, after)]
            steps.append(("line change", c.before + indent, after))
            for n in range(1, args.n + 1):
                steps.append((f"keystroke", c.before + typed[: len(indent) + n], after))
            engine.reset()
            for i, (what, prefix, suffix) in enumerate(steps):
                engine.forget_suggestion()
                out = engine.complete(request(prefix, suffix, "spec", args.typing_max_tokens))
                s = out.stats
                if i == 0:
                    continue  # the cold request that fills the caches
                rows.append({"task": c.id, "layout": lay, "step": what, "prompt_tokens": s.prompt_tokens,
                             "computed": s.prompt_tokens - s.prefill_reused, "prefill_ms": s.prefill_ms,
                             "ttft_ms": s.ttft_ms, "total_ms": s.total_ms})
            print(f"{c.id} {lay}: " + " ".join(f"{r['computed']}" for r in rows[-(len(steps) - 1):]),
                  file=sys.stderr, flush=True)
    print(f"\n{len(chosen)} tasks ({args.tasks}), speculative (default pair), max {args.typing_max_tokens} tokens; medians")
    print("| layout | step | target tokens computed | prefill ms | time to first token ms | total ms |")
    print("|---|---|---|---|---|---|")
    for lay in args.layouts.split(","):
        for what in ("line change", "keystroke"):
            rs = [r for r in rows if r["layout"] == lay and r["step"] == what]
            print(f"| {lay} | {what} | {statistics.median(r['computed'] for r in rs):.0f} | "
                  f"{statistics.median(r['prefill_ms'] for r in rs):.0f} | {statistics.median(r['ttft_ms'] for r in rs):.0f} | "
                  f"{statistics.median(r['total_ms'] for r in rs):.0f} |")
    return rows


def cold(engine, args, chosen: list[Case]) -> list[dict]:
    rows = []
    modes = args.cold_modes.split(",")
    for c in chosen:
        for pt in _ints(args.cold_prefix_tokens):
            for mode in modes:  # spec prefills both models, target the target alone
                set_windows(engine, max_prefix_tokens=pt)
                engine.reset()
                out = engine.complete(request(c.prefix, c.suffix, mode, args.typing_max_tokens))
                s = out.stats
                rows.append({"task": c.id, "mode": mode, "prefix_tokens": pt, "prompt_tokens": s.prompt_tokens,
                             "prefill_ms": s.prefill_ms, "ttft_ms": s.ttft_ms, "total_ms": s.total_ms})
                print(f"{c.id} {mode} p{pt}: {s.prompt_tokens} tokens, prefill {s.prefill_ms:.0f} ms",
                      file=sys.stderr, flush=True)
    print(f"\n{len(chosen)} tasks ({args.tasks}), cold requests (caches reset), max {args.typing_max_tokens} tokens; medians")
    print("| mode | prefix window | prompt tokens | prefill ms | ms per prompt token | time to first token ms | total ms |")
    print("|---|---|---|---|---|---|---|")
    for mode in modes:
        for pt in _ints(args.cold_prefix_tokens):
            rs = [r for r in rows if r["prefix_tokens"] == pt and r["mode"] == mode]
            print(f"| {mode} | {pt} | {statistics.median(r['prompt_tokens'] for r in rs):.0f} | "
                  f"{statistics.median(r['prefill_ms'] for r in rs):.0f} | "
                  f"{statistics.median(r['prefill_ms'] / r['prompt_tokens'] for r in rs):.1f} | "
                  f"{statistics.median(r['ttft_ms'] for r in rs):.0f} | "
                  f"{statistics.median(r['total_ms'] for r in rs):.0f} |")
    return rows


def tokens(tokenizer, args, chosen: list[Case]) -> list[dict]:
    """Tokenizer only: type each task's whole line, a character per keystroke, and count the
    prompt tokens after the longest prefix shared with the keystroke before (what a KV cache
    holding the previous prompt must compute, the last token included)."""
    rows = []
    for lay in args.layouts.split(","):
        builder = builder_for(lay, tokenizer, PromptWindows())
        for c in chosen:
            typed = c.prefix[len(c.before):] + c.target
            indent = len(typed) - len(typed.lstrip())
            prev = builder.build(c.before.rsplit("\n", 1)[0], c.after)
            for n in range(indent, len(typed) + 1):
                ids = builder.build(c.before + typed[:n], c.after)
                same = next((i for i, (a, b) in enumerate(zip(prev, ids)) if a != b), min(len(prev), len(ids)))
                same = min(same, len(ids) - 1)
                rows.append({"task": c.id, "layout": lay, "step": "line change" if n == indent else "keystroke",
                             "computed": len(ids) - same, "prompt_tokens": len(ids)})
                prev = ids
    print(f"\n{len(chosen)} tasks ({args.tasks}), each line typed a character at a time into a document without it")
    print("| layout | step | requests | prompt tokens computed: median | mean | p90 |")
    print("|---|---|---|---|---|---|")
    for lay in args.layouts.split(","):
        for what in ("line change", "keystroke"):
            xs = sorted(r["computed"] for r in rows if r["layout"] == lay and r["step"] == what)
            print(f"| {lay} | {what} | {len(xs)} | {statistics.median(xs):.0f} | {statistics.mean(xs):.1f} | "
                  f"{xs[int(0.9 * (len(xs) - 1))]} |")
    return rows


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",")]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("study", help="quality, typing, cold or tokens; several of the first three, comma-separated, share one model load")
    ap.add_argument("--tasks", choices=("lines", "bench"), default="lines")
    ap.add_argument("--split", choices=("dev", "test", "all"), default="test")
    ap.add_argument("--only", default="", help="comma-separated task ids")
    ap.add_argument("--first", type=int, default=0, help="the first N chosen tasks only (0: all)")
    ap.add_argument("--skip", type=int, default=0, help="skip the first N chosen tasks")
    ap.add_argument("--layouts", default="psm", help="psm (specd's prompt) and/or spm (bench-only), comma-separated")
    ap.add_argument("--prefix-tokens", default="1024")
    ap.add_argument("--suffix-tokens", default="32")
    ap.add_argument("--cold-prefix-tokens", default="256,512,1024,2048", help="cold: prefix windows")
    ap.add_argument("--cold-modes", default="spec", help="cold: spec (both models' prefill), target, or both")
    ap.add_argument("--contexts", default="none")
    ap.add_argument("--max-tokens", type=int, default=24)
    ap.add_argument("--n", type=int, default=6, help="typing: keystrokes per line")
    ap.add_argument("--typing-max-tokens", type=int, default=8, help="typing and cold: completion length")
    ap.add_argument("--typing-tasks", type=int, default=8, help="typing and cold: the first N chosen tasks")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    unknown = [lay for lay in args.layouts.split(",") if lay not in LAYOUTS]
    if unknown:
        ap.error(f"unknown layout {unknown[0]!r}: use {', '.join(LAYOUTS)}")
    chosen = cases(args.tasks, args.split)
    if args.only:
        keep = set(args.only.split(","))
        chosen = [c for c in chosen if c.id in keep]
    chosen = chosen[args.skip:]
    if args.first:
        chosen = chosen[: args.first]
    rows = {}
    if args.study == "tokens":
        rows["tokens"] = tokens(Tokenizer.from_file(model_directory(DEFAULT_TARGET) / "tokenizer.json"), args, chosen)
        if args.json:
            args.json.write_text(json.dumps(rows, indent=1))
        return 0
    engine = build_engine(EngineConfig())
    studies = {"quality": quality, "typing": typing, "cold": cold}
    for study in args.study.split(","):
        rows[study] = studies[study](engine, args, chosen[: args.typing_tasks] if study != "quality" else chosen)
        if args.json:
            args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
