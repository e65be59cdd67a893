"""Quality of each quantization against the model's own unquantized (bf16) self, on held-out code.

Teacher-forced over real source files that no test or bench task uses (CPython's standard
library): for every position, top-1 agreement of the argmax and KL(p_bf16 || p_quant); and for the
pair, the acceptance the quantized draft would get against the quantized target (greedy: argmax
agreement; sampling at T=1: expected acceptance sum_x min(p, q)).

    python bench/quant_quality.py --tokens 384 --out bench/out/quality.json
"""

from __future__ import annotations

import argparse
import inspect
import json
import textwrap
import time
from pathlib import Path

import torch

from specd.engine.config import DEFAULT_DRAFT, DEFAULT_TARGET

HELD_OUT = ["heapq", "textwrap", "fractions"]  # stdlib modules: real code, not in tests/ or bench tasks


def held_out_texts(n_tokens: int, tokenizer) -> list[list[int]]:
    import importlib

    out = []
    for name in HELD_OUT:
        src = inspect.getsource(importlib.import_module(name))
        ids = tokenizer.encode(src)
        start = len(ids) // 3  # skip license headers
        out.append(ids[start : start + n_tokens])
    return out


@torch.inference_mode()
def logprobs(model, ids: list[int]) -> torch.Tensor:
    model.rollback(0)
    chunks = [model.forward(torch.tensor(ids[i : i + 128])) for i in range(0, len(ids), 128)]
    return torch.log_softmax(torch.cat(chunks), dim=-1)  # [T, V]


def compare(ref: torch.Tensor, q: torch.Tensor) -> dict:
    top1 = (ref.argmax(-1) == q.argmax(-1)).float().mean().item()
    kl = (ref.exp() * (ref - q)).sum(-1).mean().item()
    return {"top1_agreement": round(top1, 4), "kl": round(kl, 5)}


def acceptance(target: torch.Tensor, draft: torch.Tensor) -> dict:
    greedy = (target.argmax(-1) == draft.argmax(-1)).float().mean().item()
    stochastic = torch.minimum(target.exp(), draft.exp()).sum(-1).mean().item()
    return {"greedy_acceptance": round(greedy, 4), "t1_acceptance": round(stochastic, 4)}


def main() -> None:
    from specd.models.loader import load_model

    ap = argparse.ArgumentParser()
    ap.add_argument("--target", default=DEFAULT_TARGET)
    ap.add_argument("--draft", default=DEFAULT_DRAFT)
    ap.add_argument("--target-quants", default="int8,int4,fp8")
    ap.add_argument("--draft-quants", default="int4,int8")
    ap.add_argument("--tokens", type=int, default=384)
    ap.add_argument("--out", type=Path, default=Path("bench/out/quality.json"))
    args = ap.parse_args()
    results: dict = {"held_out": HELD_OUT, "tokens_per_text": args.tokens, "models": {}}
    lp: dict[tuple[str, str], list[torch.Tensor]] = {}
    texts = None
    for role, spec, quants in (("target", args.target, args.target_quants), ("draft", args.draft, args.draft_quants)):
        for quant in ["bf16", *quants.split(",")]:
            t0 = time.perf_counter()
            cached = args.out.parent / f"ref-{spec.replace('/', '_')}-{args.tokens}.pt"
            if quant == "bf16" and cached.exists():  # the reference does not change between runs
                lp[(role, quant)] = torch.load(cached)
                print(f"{role} {quant}: reference from {cached}", flush=True)
                continue
            m = load_model(spec, quant=quant, max_len=args.tokens + 8)
            if texts is None:
                texts = held_out_texts(args.tokens, m.tokenizer)
            elif len(texts[0]) != args.tokens:
                raise SystemExit("held-out text shorter than --tokens")
            lp[(role, quant)] = [logprobs(m.model, ids) for ids in texts]
            if quant == "bf16":
                cached.parent.mkdir(parents=True, exist_ok=True)
                torch.save(lp[(role, quant)], cached)
            print(f"{role} {quant}: {time.perf_counter() - t0:.0f}s", flush=True)
            del m
            if quant != "bf16":
                ref, q = torch.cat(lp[(role, "bf16")]), torch.cat(lp[(role, quant)])
                results["models"][f"{role}:{quant}"] = compare(ref, q)
                print(f"  vs bf16: {results['models'][f'{role}:{quant}']}", flush=True)
    pairs = {}
    for (role_t, qt), t_lp in lp.items():
        if role_t != "target":
            continue
        for (role_d, qd), d_lp in lp.items():
            if role_d == "draft":
                pairs[f"target:{qt} / draft:{qd}"] = acceptance(torch.cat(t_lp), torch.cat(d_lp))
    results["pairs"] = pairs
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2))
    print(textwrap.indent(json.dumps(results, indent=2), "  "))


if __name__ == "__main__":
    main()
