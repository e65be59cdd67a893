#!/usr/bin/env python
"""Could a 4-bit copy of the target's output head find its greedy token exactly? (Tried in session 33.)

The output head (Q6_K, 191 MB) is a fifth of the bytes a target step reads. A greedy step needs only
the argmax, so a cheaper copy could score every row, and the exact head only the rows that could
still win: row j's exact logit lies within ``B_j = ||x|| (||w_j - w4_j|| + 0.01 ||w4_j||)`` of its
approximate one (Cauchy-Schwarz; the second term covers the two activation quantizations), so only
rows with ``approx_j + B_j >= max_i (approx_i - B_i)`` are candidates, and the argmax among them is
exact. It pays only if the candidates are few.

This script measures that on real decoding: greedy continuations (40 tokens) of the first 12 tasks
of a task file, the target's final-normed hidden states at every generated position, and for two
4-bit copies (specd's ``pack4`` with its error search, with and without the head input's channel
importance from the tasks' prompts) and two bounds (plain, and weighted by the channel importance):
how far the bound is from the largest real error, and the candidates per row.

    python bench/head_bound.py ~/.cache/specd/heads/qwen2.5-coder-1.5b/s31/race-dev.jsonl
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from gguf import GGMLQuantizationType

from specd.engine.config import DEFAULT_TARGET
from specd.models.gguf_linear import GgufLinear
from specd.models.int_linear import pack4, q4_0_blocks, unpack4
from specd.models.loader import load_model

FIM_MIDDLE = 151659  # Qwen2.5-Coder's <|fim_middle|>: the continuation starts as a middle would


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("tasks", type=Path)
    ap.add_argument("--tasks-count", type=int, default=12)
    ap.add_argument("--tokens", type=int, default=40)
    args = ap.parse_args()
    loaded = load_model(DEFAULT_TARGET, quant="gguf", max_len=4096)
    model, tok = loaded.model, loaded.tokenizer
    head = model.lm_head
    w = head.dequantize()  # [V, H]
    tasks = [json.loads(line) for line in args.tasks.open()][: args.tasks_count]
    calib, decode = [], []
    for i, t in enumerate(tasks):
        ids = tok.encode(t["prefix"][-1200:])[-250:] + [FIM_MIDDLE]
        model.rollback(0)
        logits = model.forward(torch.tensor(ids), logits=True)
        if i < 4:
            calib.append(model.last_hidden().states[::4])
        nxt = int(logits[-1].argmax())
        for _ in range(args.tokens):
            logits = model.forward(torch.tensor([nxt]))
            decode.append(model.last_hidden().states)
            nxt = int(logits[-1].argmax())
    x = torch.cat(decode).contiguous()  # [rows, H]
    c = (torch.cat(calib) ** 2).mean(0)  # [H] the head input's channel importance
    exact = head(x)  # [rows, V]
    print(f"{x.shape[0]} decoding rows, head {head.types()} {head.nbytes() / 1e6:.0f} MB")
    for name, importance in (("q4 search", None), ("q4 search + importance", c)):
        packed = pack4(w, search=True, importance=importance)
        q, d = unpack4(packed, w.shape[1])
        w4 = (q.float().view(w.shape[0], -1, 32) * d[..., None]).view_as(w)
        approx = GgufLinear.from_blocks("head4", int(GGMLQuantizationType.Q4_0), q4_0_blocks(packed, w.shape[1]),
                                        w.shape[1])(x)
        err = (exact - approx).abs()
        delta = w - w4
        bounds = {
            "plain": x.norm(dim=1, keepdim=True) * (delta.norm(dim=1) + 0.01 * w4.norm(dim=1))[None],
            "weighted": (x / c.sqrt()).norm(dim=1, keepdim=True)
            * ((delta * c.sqrt()).norm(dim=1) + 0.01 * (w4 * c.sqrt()).norm(dim=1))[None],
        }
        for bname, b in bounds.items():
            lower = (approx - b).max(dim=1, keepdim=True).values
            cands = ((approx + b) >= lower).sum(dim=1).float()
            print(f"{name}, {bname} bound: largest real error / bound {float((err / b).max()):.3f}; candidates a row "
                  f"p50 {cands.median():.0f}, p75 {cands.quantile(0.75):.0f}, p90 {cands.quantile(0.9):.0f}; "
                  f"rows over 2,048: {float((cands > 2048).float().mean()):.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
