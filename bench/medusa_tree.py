#!/usr/bin/env python
"""Which token tree pays for Medusa heads: each head's rank of the target's own tokens, recorded
in decoding, and every tree shape scored on those records.

``record``: greedy decoding through the engine (``--drafter heads --heads medusa``, K = 1, so
every round drafts from the target's hidden state the daemon would draft from) over FIM tasks;
at each round the hidden state is kept with the position, and after the request the target's
own tokens there (greedy output is the target's). Each state is then run through all heads and
the rank of each true token under each head is stored (``-1``: not among the head's top ``TOP``,
the sub-vocabulary's missing tokens included; ``-2``: past the output's end, scored as a miss).
``--context-bias`` ranks under the drafter's lean to the context (``lean_to_context``).

``score``: for a tree of rank paths (Medusa's sparse trees: a node is the tuple of ranks its
path takes, head ``j`` at depth ``j``), a round accepts the deepest node whose ranks all match
the true tokens' ranks. Reports, per node budget, the best static tree (chosen greedily by
each path's hit rate on ``--choose`` records, scored on ``--report`` records) against the chain
that drafts the heads' top tokens only, and the expected tokens per ms under a step-cost
curve (``--costs``: the engine's stored ``{verify_ms, heads_ms}``); and the bound no tree over
the heads' top ``w`` choices can pass (every path of them verified, for free).

    python bench/medusa_tree.py record --tasks race-dev.jsonl --out ranks-dev.pt
    python bench/medusa_tree.py score --choose ranks-dev.pt --report ranks-dev.pt --costs COSTS.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

from specd.app import build_engine
from specd.bench.machine import machine_info
from specd.engine import head_drafter
from specd.engine.config import EngineConfig
from specd.engine.engine import CompletionRequest

TOP = 8  # ranks kept per head


def record(args: argparse.Namespace) -> int:
    engine = build_engine(EngineConfig(drafter="heads", heads="medusa", k=1, threads=args.threads,
                                      head_context_bias=0.0))  # the rounds as before the lean: paired records
    seen: list[tuple[torch.Tensor, list[int]]] = []
    propose = head_drafter.HeadDrafter.propose

    found = []

    def recording(self, seq, budget, params, generator):  # keep the state each round drafts from
        found[:] = [self.heads]
        state = self._state(seq)
        if state is not None:
            seen.append((state.detach().float().clone(), list(seq)))
        return propose(self, seq, budget, params, generator)

    head_drafter.HeadDrafter.propose = recording
    ranks = []
    rows = [json.loads(x) for x in args.tasks.read_text().splitlines() if x.strip()][: args.count]
    for r in rows:
        seen.clear()
        engine.complete(CompletionRequest(r["prefix"], r["suffix"] + "\n#", max_tokens=1, temperature=0))
        seen.clear()
        engine.complete(CompletionRequest(r["prefix"], r["suffix"], max_tokens=args.max_tokens, temperature=0))
        if not seen:
            continue
        truth = seen[-1][1]  # the longest sequence a round saw: every earlier one is its prefix
        heads = found[0]
        for state, seq in seen:
            after = truth[len(seq):len(seq) + heads.k]
            if len(after) < 1:
                continue
            logits = heads.draft_logits(state)  # [K, V']
            if args.context_bias:  # the drafter's lean, at this script's strength
                logits = head_drafter.lean_to_context(heads, logits, seq, args.context_bias)
            top_i = logits.topk(TOP, -1).indices  # [K, TOP]
            rk = torch.full((heads.k,), -2, dtype=torch.long)  # -2: past the output's end
            for j, tok in enumerate(after):
                hit = (heads.ids[top_i[j]] == tok).nonzero()
                rk[j] = int(hit[0]) if hit.numel() else -1
            ranks.append(rk)
        print(r["id"], len(seen), flush=True)
    out = {"ranks": torch.stack(ranks), "machine": json.dumps(machine_info(), default=str),
           "command": " ".join(sys.argv)}
    torch.save(out, args.out)
    print(f"{len(ranks)} rounds -> {args.out}")
    return 0


def accepted(ranks: torch.Tensor, tree: set[tuple[int, ...]]) -> torch.Tensor:
    """Tokens each round accepts with ``tree`` (rank paths), ``ranks`` ``[N, K]``."""
    out = torch.zeros(ranks.shape[0])
    for i, rk in enumerate(ranks.tolist()):
        depth = 0
        while depth < len(rk) and tuple(rk[: depth + 1]) in tree:
            depth += 1
        out[i] = depth
    return out


def greedy_tree(ranks: torch.Tensor, nodes: int, width: int = 4) -> list[tuple[int, ...]]:
    """Add, one at a time, the child (of the tree so far) whose path is right most often."""
    tree: list[tuple[int, ...]] = []
    have: set[tuple[int, ...]] = set()
    rk = [tuple(r) for r in ranks.tolist()]
    k = ranks.shape[1]
    for _ in range(nodes):
        best, gain = None, -1
        frontier = [()] + tree
        for parent in frontier:
            if len(parent) >= k:
                continue
            for r in range(width):
                node = parent + (r,)
                if node in have:
                    continue
                g = sum(1 for x in rk if x[: len(node)] == node)
                if g > gain:
                    best, gain = node, g
        tree.append(best)
        have.add(best)
    return tree


def score(args: argparse.Namespace) -> int:
    choose = torch.load(args.choose)["ranks"]
    report = torch.load(args.report)["ranks"]
    costs = json.loads(args.costs.read_text()) if args.costs else None
    print(f"choose {choose.shape[0]} rounds, report {report.shape[0]} rounds")
    for j in range(report.shape[1]):
        col = report[:, j]
        print(f"head {j + 1}: " + " ".join(f"r{r}={float((col == r).float().mean()):.3f}" for r in range(4))
              + f" outside={float((col == -1).float().mean()):.3f}")

    for w in (1, 2, 4, TOP):  # every path of each head's top w: what no tree of those could beat
        ok = ((report >= 0) & (report < w)).long()  # [N, K]
        print(f"all paths of the heads' top {w}: {float(ok.cumprod(1).sum(1).float().mean()):.3f} accepted a round")

    def rate(e: float, n: int) -> str:
        if not costs:
            return ""
        v = costs["verify_ms"]
        ms = v[min(n, len(v) - 1)] + costs.get("heads_ms", 0.0)
        return f" {(1 + e) / ms * v[0]:.3f}x target-only"

    for n in range(1, args.max_nodes + 1):
        chain = {tuple([0] * d) for d in range(1, min(n, report.shape[1]) + 1)}
        tree = greedy_tree(choose, n)
        ec = float(accepted(report, chain).mean())
        et = float(accepted(report, set(tree)).mean())
        print(f"{n} nodes: chain {ec:.3f}{rate(ec, min(n, report.shape[1]))} | tree {et:.3f}{rate(et, n)} {tree}")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("record")
    r.add_argument("--tasks", type=Path, required=True)
    r.add_argument("--count", type=int, default=1000)
    r.add_argument("--max-tokens", type=int, default=48)
    r.add_argument("--threads", type=int, default=2)
    r.add_argument("--context-bias", type=float, default=0.0,
                   help="added to the logit of every sub-vocabulary id among the sequence's last tokens")
    r.add_argument("--out", type=Path, required=True)
    s = sub.add_parser("score")
    s.add_argument("--choose", type=Path, required=True)
    s.add_argument("--report", type=Path, required=True)
    s.add_argument("--costs", type=Path, default=None)
    s.add_argument("--max-nodes", type=int, default=10)
    args = ap.parse_args()
    return record(args) if args.cmd == "record" else score(args)


if __name__ == "__main__":
    raise SystemExit(main())
