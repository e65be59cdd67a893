#!/usr/bin/env python
"""A draft head's acceptance in decoding, through the engine: the gate issue 26 means.

``specd heads train`` reports held-out acceptance where the corpus's next token is the target's
greedy one, a subset that leans to predictable positions (bench/RESULTS.md, session 19: 0.584
there, 0.47 here for the same head). This script drafts as the daemon does instead: the engine
with ``--drafter heads --heads FILE`` at a fixed K (1 by default: every round drafts one token, so
accepted / drafted is the first draft's acceptance), greedy, over

- held-out windows of the heads data (``--windows N``, every ``--every``-th): the window's first
  ``--prefix-tokens`` tokens as the prefix, and as the suffix the ``--suffix-tokens`` after the
  next ``--skip`` (none by default: the suffix empty); or
- FIM tasks (``--tasks JSONL``, ``bench/race_tasks.py``'s format): their prefix and suffix.

Per prompt it runs ``--short`` and ``--long`` new tokens, so the acceptance of the tokens right
after the prompt (the first ``short``) and of the later ones is reported apart.

    python bench/heads_acceptance.py --heads ~/.cache/specd/heads/qwen2.5-coder-1.5b/eagle.safetensors
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from specd.app import build_engine
from specd.bench.machine import machine_info
from specd.engine.config import DEFAULT_TARGET, EngineConfig
from specd.engine.engine import CompletionRequest
from specd.heads import train
from specd.models.registry import cache_root


def prompts(args: argparse.Namespace, decode) -> list[tuple[str, str, str]]:
    """(id, prefix, suffix) per prompt."""
    if args.tasks is not None:
        rows = [json.loads(line) for line in args.tasks.read_text().splitlines() if line.strip()]
        return [(r["id"], r["prefix"], r["suffix"]) for r in rows[: args.windows]]
    data = args.data or cache_root() / "heads" / Path(DEFAULT_TARGET).name / "data"
    _, val = train.load(data, 1)
    count = val.starts.numel() - 1
    out = []
    for w in range(0, count, args.every)[: args.windows]:
        a, b = int(val.starts[w]), int(val.starts[w + 1])
        cursor = a + args.prefix_tokens
        suffix = val.tokens[cursor + args.skip : min(b, cursor + args.skip + args.suffix_tokens)].tolist()
        out.append((f"held-out-{w}", decode(val.tokens[a:cursor].tolist()), decode(suffix) if suffix else ""))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--heads", type=Path, required=True)
    ap.add_argument("--data", type=Path, default=None, help="heads data directory (default: the target's)")
    ap.add_argument("--tasks", type=Path, default=None, help="FIM tasks JSONL instead of held-out windows")
    ap.add_argument("--windows", type=int, default=8, help="prompts in all")
    ap.add_argument("--every", type=int, default=5, help="held-out windows: take every N-th")
    ap.add_argument("--prefix-tokens", type=int, default=300)
    ap.add_argument("--suffix-tokens", type=int, default=0, help="held-out windows: suffix tokens (default: none)")
    ap.add_argument("--skip", type=int, default=8, help="held-out windows: tokens between the cursor and the suffix")
    ap.add_argument("--k", type=int, default=1)
    ap.add_argument("--short", type=int, default=12)
    ap.add_argument("--long", type=int, default=40)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--context-bias", type=float, default=EngineConfig().head_context_bias,
                    help="EAGLE drafts' lean toward the context's tokens (the engine's head_context_bias; 0: off)")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    engine = build_engine(EngineConfig(drafter="heads", heads=str(args.heads), k=args.k, threads=args.threads,
                                      head_context_bias=args.context_bias))
    rows = []
    for pid, prefix, suffix in prompts(args, engine.tokenizer.decode):
        row = {"id": pid}
        for n in (args.short, args.long):
            # no free drafts from the remembered answer to the same prompt (the continuation cache)
            engine.complete(CompletionRequest(prefix, suffix + "\n#", max_tokens=1, temperature=0))
            s = engine.complete(CompletionRequest(prefix, suffix, max_tokens=n, temperature=0)).stats
            row[n] = {"new_tokens": s.new_tokens, "drafted": s.drafted, "accepted": s.accepted}
        rows.append(row)
        print(pid, row[args.short], row[args.long], flush=True)

    def rate(n: int, minus: int | None = None) -> float | None:
        d = sum(r[n]["drafted"] - (r[minus]["drafted"] if minus else 0) for r in rows)
        a = sum(r[n]["accepted"] - (r[minus]["accepted"] if minus else 0) for r in rows)
        return round(a / d, 4) if d > 0 else None

    summary = {"machine": machine_info(), "command": " ".join(sys.argv), "k": args.k, "prompts": len(rows),
               "context_bias": args.context_bias,
               f"acceptance, {args.long} tokens": rate(args.long),
               f"acceptance, the first {args.short}": rate(args.short),
               f"acceptance, tokens {args.short + 1}-{args.long}": rate(args.long, args.short)}
    print(json.dumps(summary, indent=1))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"summary": summary, "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
