#!/usr/bin/env python
"""Top-1 agreement and KL of each runtime's quantized model against the torch bf16 reference that
``bench/quant_quality.py`` caches (``bench/out/ref-<model>-256.pt``; run it first), on the same
held-out code; then the greedy / T=1 acceptance of the pair. Variants ``role:quant:backend``.

    flock /tmp/specd-heavy.lock python bench/backend_quality.py target:int8:ort,draft:int4:ort
"""
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from quant_quality import acceptance, compare, held_out_texts, logprobs  # noqa: E402

from specd.models.loader import load_model  # noqa: E402


def main() -> None:
    torch.set_num_threads(2)
    lp = {}
    for variant in sys.argv[1].split(","):
        role, quant, backend = variant.split(":")
        spec = "qwen2.5-coder-1.5b" if role == "target" else "qwen2.5-coder-0.5b"
        ref = torch.cat(torch.load(Path(__file__).resolve().parent / "out" / f"ref-{spec}-256.pt"))
        m = load_model(spec, quant=quant, max_len=300, backend=backend, threads=2)
        q = torch.cat([logprobs(m.model, ids) for ids in held_out_texts(256, m.tokenizer)])
        lp[role] = (ref, q)
        print(variant, json.dumps(compare(ref, q)), flush=True)
        del m
    if {"target", "draft"} <= lp.keys():
        print("pair", json.dumps(acceptance(lp["target"][1], lp["draft"][1])))
        print("pair bf16 / bf16", json.dumps(acceptance(lp["target"][0], lp["draft"][0])))


if __name__ == "__main__":
    main()
