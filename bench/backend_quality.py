#!/usr/bin/env python
"""Top-1 agreement and KL of each runtime's quantized model against the torch bf16 reference that
``bench/quant_quality.py`` caches (``bench/out/ref-<model>-256.pt``; run it first), on the same
held-out code; then the greedy / T=1 acceptance of each draft against the (first) target.
Variants ``role:quant:backend[@N]``, ``@N`` an N-token sub-vocabulary head (drafts; its KL against
the full-vocabulary reference is infinite, so the reference's probability mass outside the head is
printed instead).

    flock /tmp/specd-heavy.lock python bench/backend_quality.py target:int8:ort,draft:int4:ort
    flock /tmp/specd-heavy.lock python bench/backend_quality.py target:int8:torch,draft:int4:torch@32768,draft:int4:ort
"""
import json
import sys
from pathlib import Path

import torch

# run as `python bench/backend_quality.py`: its own folder is first on sys.path, for quant_quality
from quant_quality import acceptance, compare, held_out_texts, logprobs

from specd.models.loader import load_model
from specd.engine.config import DEFAULT_DRAFT, DEFAULT_TARGET


def main() -> None:
    torch.set_num_threads(2)
    target = None
    drafts = []
    for variant in sys.argv[1].split(","):
        role, quant, backend = variant.split(":")
        backend, _, head = backend.partition("@")
        spec = DEFAULT_TARGET if role == "target" else DEFAULT_DRAFT
        ref = torch.cat(torch.load(Path(__file__).resolve().parent / "out" / f"ref-{spec}-256.pt"))
        m = load_model(spec, quant=quant, max_len=300, backend=backend, threads=2, head_vocab=int(head or 0))
        q = torch.cat([logprobs(m.model, ids) for ids in held_out_texts(256, m.tokenizer)])
        stats = compare(ref, q)
        if head:
            stats["ref_mass_outside_head"] = round(float(ref.exp()[q.isinf()].sum() / ref.shape[0]), 5)
        print(variant, json.dumps(stats), flush=True)
        if role == "target" and target is None:
            target = (ref, q)
        elif role == "draft":
            drafts.append((variant, ref, q))
        del m
    for variant, ref, q in drafts if target is not None else []:
        print("pair", sys.argv[1].split(",")[0], "/", variant, json.dumps(acceptance(target[1], q)))
        print("pair bf16 / bf16", json.dumps(acceptance(target[0], ref)))


if __name__ == "__main__":
    main()
