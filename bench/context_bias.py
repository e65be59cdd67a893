#!/usr/bin/env python
"""Would the EAGLE head's first draft be right more often if it leaned to the context's tokens?

``record``: the engine drafts as in ``bench/heads_acceptance.py`` (the shipped head alone, one
draft a round, greedy, ``--tokens`` new tokens a FIM task, the context bias off) and keeps, per
round, the head's output ``f̂`` the draft was taken from, the sequence before it and the token the
target chose there (read from a later round's sequence; the last round's is unknown and left out).

``evaluate``: every drafting rule below applied to the same ``f̂`` with the target's own output
rows (the whole vocabulary, float32 from its GGUF), against the token the target chose:

- ``sub``: the head's sub-vocabulary, no bias (what the engine drafted: a check);
- ``full``: the whole vocabulary, no bias;
- ``ctx W b``: +b on the logit of every id among the last W tokens of the sequence (W 0: all of
  it), those ids outside the sub-vocabulary added as candidates; ``ctx-in W b``: the same with
  the sub-vocabulary's ids only; ``count b``: +b·log(1 + the id's count in the sequence).

It also reports calibration for ``ctx 256 2``: the top probability with the bias, and the
picked draft's probability without it, beside how often the draft was right.

    python bench/context_bias.py record TASKS.jsonl OUT.pt
    python bench/context_bias.py evaluate DEV.pt [OTHER.pt ...]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from specd.engine.config import DEFAULT_TARGET


def record(tasks: Path, out: Path, tokens: int) -> None:
    from specd.app import build_engine
    from specd.engine.config import EngineConfig
    from specd.engine.eagle_drafter import EagleDrafter
    from specd.engine.engine import CompletionRequest

    engine = build_engine(EngineConfig(drafter="heads", k=1, head_context_bias=0.0))
    seqs: list[list[int]] = []
    rounds: list[tuple[list[int], torch.Tensor]] = []  # (the sequence before the draft, f̂)
    propose = EagleDrafter.propose

    def recorded(self, seq, budget, params, generator):
        seqs.append(list(seq))
        if not getattr(self.head, "_recorded", False):
            draft_after = self.head.draft_after

            def keep_f(cache, f, *a, **kw):
                rounds.append((seqs[-1], f.detach().float().reshape(-1).clone()))
                return draft_after(cache, f, *a, **kw)

            self.head.draft_after, self.head._recorded = keep_f, True
        return propose(self, seq, budget, params, generator)

    EagleDrafter.propose = recorded
    rows = []
    for t in (json.loads(line) for line in tasks.read_text().splitlines() if line.strip()):
        # no free drafts from a remembered answer (the continuation cache)
        engine.complete(CompletionRequest(t["prefix"], t["suffix"] + "\n#", max_tokens=1, temperature=0))
        seqs.clear()
        rounds.clear()
        engine.complete(CompletionRequest(t["prefix"], t["suffix"], max_tokens=tokens, temperature=0))
        for seq, f in rounds:
            later = next((s for s in seqs if len(s) > len(seq)), None)
            if later is not None:
                rows.append({"task": t["id"], "seq": seq, "f": f, "true": later[len(seq)]})
        print(t["id"], len(rounds), flush=True)
    torch.save(rows, out)
    print(f"{len(rows)} first drafts -> {out}")


def _rows_and_ids() -> tuple[torch.Tensor, torch.Tensor]:
    """The target's output rows ``[V, H]`` and the shipped head's sub-vocabulary as a mask ``[V]``."""
    from safetensors import safe_open

    from specd.models.heads import HeadRows, shipped
    from specd.models.pull import gguf_path
    from specd.models.registry import PUBLISHED

    reader = HeadRows(gguf_path(PUBLISHED[DEFAULT_TARGET]))
    vocab = reader.file.tensors[reader.name].dims[1]
    rows = reader(torch.arange(vocab))
    with safe_open(str(shipped(DEFAULT_TARGET)), "pt") as f:
        ids = f.get_tensor("ids").long()
    sub = torch.zeros(vocab, dtype=torch.bool)
    sub[ids] = True
    return rows, sub


def _biased(logits: torch.Tensor, sub: torch.Tensor, seqs: list[list[int]], rule: str, window: int,
            b: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(biased logits, unbiased logits) ``[N, V]``, each -inf outside the rule's candidates."""
    bias = torch.zeros_like(logits)
    for i, seq in enumerate(seqs):
        toks = torch.tensor(seq[-window:] if window else seq)
        if rule == "count":
            bias[i] = b * torch.log1p(torch.bincount(toks, minlength=logits.shape[1]).float())
        else:
            bias[i, toks] = b
    allowed = sub[None, :] | ((bias != 0) if rule != "ctx-in" else torch.zeros_like(bias, dtype=torch.bool))
    inf = torch.full_like(logits, float("-inf"))
    return torch.where(allowed, logits + bias, inf), torch.where(allowed, logits, inf)


def evaluate(files: list[Path]) -> None:
    rows, sub = _rows_and_ids()
    sets = {}
    for path in files:
        data = torch.load(path)
        logits = torch.stack([r["f"] for r in data]) @ rows.T  # [N, V]
        sets[path.stem] = (logits, torch.tensor([r["true"] for r in data]), [r["seq"] for r in data])
    right = lambda lg, true: round(float((lg.argmax(1) == true).float().mean()), 4)  # noqa: E731
    table: dict[str, dict[str, float]] = {}
    for name, (lg, true, seqs) in sets.items():
        n = true.numel()
        in_seq = torch.tensor([t in set(s) for t, s in zip(true.tolist(), seqs)])
        table.setdefault("positions", {})[name] = n
        table.setdefault("target's token in the sub-vocabulary", {})[name] = round(float(sub[true].float().mean()), 4)
        table.setdefault("... or in the sequence", {})[name] = round(float((sub[true] | in_seq).float().mean()), 4)
        table.setdefault("sub", {})[name] = right(lg.masked_fill(~sub, float("-inf")), true)
        table.setdefault("full", {})[name] = right(lg, true)
        for rule, window in (("ctx", 0), ("ctx", 256), ("ctx", 128), ("ctx", 64), ("ctx-in", 256), ("count", 0)):
            for b in ((0.5, 1.0, 1.5) if rule == "count" else (1.0, 1.5, 2.0, 2.5, 3.0, 4.0)):
                table.setdefault(f"{rule} {window} {b}", {})[name] = right(_biased(lg, sub, seqs, rule, window, b)[0], true)
        biased, own = _biased(lg, sub, seqs, "ctx", 256, 2.0)
        pick = biased.argmax(1)
        ok = (pick == true).float()
        table.setdefault("ctx 256 2.0: right", {})[name] = round(float(ok.mean()), 4)
        table.setdefault("ctx 256 2.0: mean top probability, biased", {})[name] = round(
            float(torch.softmax(biased, -1).max(1).values.mean()), 4)
        table.setdefault("ctx 256 2.0: mean probability of the pick, unbiased", {})[name] = round(
            float(torch.softmax(own, -1)[torch.arange(n), pick].mean()), 4)
    for rule, by_set in table.items():
        print(f"{rule:55s} " + "  ".join(f"{k} {v}" for k, v in by_set.items()))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)
    rec = sub.add_parser("record")
    rec.add_argument("tasks", type=Path)
    rec.add_argument("out", type=Path)
    rec.add_argument("--tokens", type=int, default=40)
    ev = sub.add_parser("evaluate")
    ev.add_argument("files", type=Path, nargs="+")
    args = ap.parse_args()
    if args.command == "record":
        record(args.tasks, args.out, args.tokens)
    else:
        evaluate(args.files)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
