#!/usr/bin/env python
"""Would an EAGLE-3-style head, reading several of the target's layers, draft better than one
reading its last? A probe, not a head: before building the runtime and the training that
EAGLE-3's features need, this measures what they could add, on this CPU, in minutes.

The task is the EAGLE head's first draft: from the target's features at position ``t`` and the
embedding of token ``t + 1``, predict the target's greedy token at ``t + 1`` (the token after
it). Two probes learn it on the same positions, with the same capacity:

- ``last``: the last layer's features (after the final norm: what specd's head reads) and the
  embedding;
- ``layers``: the same, plus the inputs of a low and a middle layer (EAGLE-3's low and middle
  features; each the layer's normalized input, as the layer reads it).

Each probe is one hidden layer (``--width``, SiLU) mapping its inputs to a predicted feature,
read out through the target's own output rows for the ``--vocab`` most frequent greedy labels
(frozen), as EAGLE's heads are. Trained on windows of the standard library's training files and
scored on its held-out files (``specd.heads.corpus``: split by file), top-1 against the target's
greedy token, every position. Features come from the target's Python layer loop (an observer
turns the C layers off), which differs from the daemon's C path by float rounding only.

    python bench/feature_probe.py --train-windows 48 --eval-windows 12 --out probe.json
"""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from specd.app import load_target
from specd.engine.config import EngineConfig
from specd.heads import corpus
from specd.models.decoder import HEAD_INPUT
from specd.models.heads import HeadRows
from specd.models.loader import resolve


def windows(tokenizer, held_out: bool, count: int, length: int, seed: int) -> list[list[int]]:
    """``count`` windows of ``length`` tokens, one per standard-library file of the split."""
    files = [f for f in corpus.files(seed, ("stdlib",))["python"] if f.validation == held_out]
    out = []
    for f in files:
        text = corpus.read(f)
        ids = tokenizer.encode(text) if text else []
        if len(ids) >= length:
            start = random.Random(f.name).randrange(len(ids) - length + 1)
            out.append(ids[start : start + length])
        if len(out) == count:
            break
    return out


def features(model, window: list[int], layers: tuple[int, ...]) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """The window's features by name (``last`` and ``in{L}`` for each of ``layers``) ``[n, H]`` and
    the target's greedy tokens ``[n]``."""
    got: dict[str, torch.Tensor] = {}
    wanted = {f"model.layers.{li}.qkv": f"in{li}" for li in layers}

    def observe(name: str, x: torch.Tensor) -> None:
        if name == HEAD_INPUT:
            got["last"] = x.detach().float().clone()
        elif name in wanted:
            got[wanted[name]] = x.detach().float().clone()

    model.rollback(0)
    model.observer = observe
    try:
        logits = model.forward(torch.tensor(window, dtype=torch.long))
    finally:
        model.observer = None
    return got, logits.argmax(-1)


class Probe(torch.nn.Module):
    def __init__(self, inputs: int, hidden: int, width: int) -> None:
        super().__init__()
        self.up = torch.nn.Linear(inputs, width)
        self.down = torch.nn.Linear(width, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.silu(self.up(x)))


def train(name: str, xs: torch.Tensor, ys: torch.Tensor, ex: torch.Tensor, ey: torch.Tensor, rows: torch.Tensor,
          args: argparse.Namespace) -> dict:
    """Train a probe on (xs, ys) and return its held-out top-1 on (ex, ey) after each epoch."""
    torch.manual_seed(args.seed)
    probe = Probe(xs.shape[1], rows.shape[1], args.width)
    opt = torch.optim.AdamW(probe.parameters(), lr=args.lr, weight_decay=0.01)
    history = []
    t0 = time.time()
    for epoch in range(args.epochs):
        order = torch.randperm(xs.shape[0], generator=torch.Generator().manual_seed(args.seed + epoch))
        for i in range(0, len(order), args.batch):
            b = order[i : i + args.batch]
            loss = F.cross_entropy(probe(xs[b]) @ rows.T, ys[b], ignore_index=-1)
            opt.zero_grad()
            loss.backward()
            opt.step()
        with torch.no_grad():
            pred = torch.cat([(probe(ex[i : i + 2048]) @ rows.T).argmax(-1) for i in range(0, len(ex), 2048)])
        top1 = (pred == ey).float().mean().item()  # labels outside the sub-vocabulary count as wrong
        history.append({"epoch": epoch + 1, "loss": round(loss.item(), 4), "held_out_top1": round(top1, 4),
                        "seconds": round(time.time() - t0, 1)})
        print(name, history[-1], flush=True)
    return {"inputs": xs.shape[1], "history": history}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--train-windows", type=int, default=48)
    ap.add_argument("--eval-windows", type=int, default=12)
    ap.add_argument("--length", type=int, default=512)
    ap.add_argument("--layers", type=int, nargs=2, default=[3, 14], help="the low and middle layers whose inputs")
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--width", type=int, default=1536)
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()

    config = EngineConfig()
    loaded = load_target(config)
    model, tokenizer = loaded.model, loaded.tokenizer
    layers = tuple(args.layers)
    data = {}
    t0 = time.time()
    for split, held_out, count in (("train", False, args.train_windows), ("eval", True, args.eval_windows)):
        feats, tokens, greedy = [], [], []
        for w in windows(tokenizer, held_out, count, args.length, args.seed):
            got, g = features(model, w, layers)
            feats.append(got)
            tokens.append(torch.tensor(w))
            greedy.append(g)
        data[split] = (feats, tokens, greedy)
        print(f"{split}: {len(feats)} windows, {time.time() - t0:.0f} s", flush=True)

    # the sub-vocabulary: the most frequent greedy labels of the training windows
    counts = torch.bincount(torch.cat(data["train"][2]), minlength=model.vocab_size)
    ids = counts.argsort(descending=True)[: args.vocab]
    index = torch.full((model.vocab_size,), -1, dtype=torch.long)
    index[ids] = torch.arange(len(ids))
    gguf = resolve(config.target).gguf
    rows = HeadRows(Path(gguf))(ids)  # [vocab, H]
    embed = HeadRows(Path(gguf), embedding=True)

    def table(split: str, names: tuple[str, ...]) -> tuple[torch.Tensor, torch.Tensor]:
        """Inputs [positions, k * H + H] and labels: features at t, embedding of token t + 1 -> the
        target's greedy token at t + 1 (its index in the sub-vocabulary, -1 outside)."""
        feats, tokens, greedy = data[split]
        xs, ys = [], []
        for got, tok, g in zip(feats, tokens, greedy):
            e = embed(tok[1:])  # [n - 1, H]
            xs.append(torch.cat([*(got[n][:-1] for n in names), e], dim=1))
            ys.append(index[g[1:]])
        return torch.cat(xs), torch.cat(ys)

    flags = [f"--{k.replace('_', '-')} {' '.join(map(str, v)) if isinstance(v, list) else v}"
             for k, v in vars(args).items() if k != "out"]
    results = {"command": "python bench/feature_probe.py " + " ".join(flags),
               "layers": list(layers), "probes": {}}
    for name, names in (("last", ("last",)), ("layers", (f"in{layers[0]}", f"in{layers[1]}", "last"))):
        xs, ys = table("train", names)
        ex, ey = table("eval", names)
        results["probes"][name] = train(name, xs, ys, ex, ey, rows, args)
    results["positions"] = {"train": int(xs.shape[0]), "eval": int(ex.shape[0]),
                            "eval_in_vocab": round((ey >= 0).float().mean().item(), 4)}
    print(json.dumps(results, indent=1))
    if args.out:
        args.out.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
