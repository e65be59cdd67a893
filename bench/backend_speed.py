#!/usr/bin/env python
"""Runtime against runtime: T(n) after a 300-token context (median of 5) and a cold 750-token
prefill (best of 2), load time, weights and RSS, for each ``role:quant:backend``, one model at a
time in one process. One JSON line per variant.

    flock /tmp/specd-heavy.lock python bench/backend_speed.py \\
        draft:int4:torch,draft:int4:ort,target:int8:torch,target:int8:ort
"""
import gc
import json
import sys
import time
from pathlib import Path

import torch

from specd.bench.stats import spread
from specd.bench.verify_curve import forward_ms
from specd.models.loader import load_model
from specd.models.memory import rss_bytes
from specd.models.registry import DEFAULT_DRAFT, DEFAULT_TARGET

SIZES = (1, 2, 3, 5, 9, 17)


def main() -> None:
    torch.set_num_threads(2)
    for variant in sys.argv[1].split(","):
        role, quant, backend = variant.split(":")
        spec = DEFAULT_TARGET if role == "target" else DEFAULT_DRAFT
        t0 = time.perf_counter()
        m = load_model(spec, quant=quant, max_len=1024, backend=backend, threads=2)
        load_s = time.perf_counter() - t0
        ids = m.tokenizer.encode(Path(json.__file__).read_text())
        raw = forward_ms(m.model, ids[:300], SIZES, 5)
        med = {n: spread(v)["median"] for n, v in raw.items()}
        prompt = torch.tensor(ids[:750])
        prefill = []
        for _ in range(2):
            m.model.rollback(0)
            t = time.perf_counter()
            m.model.forward(prompt)
            prefill.append((time.perf_counter() - t) * 1e3)
        row = dict(variant=variant, load_s=round(load_s, 1), median_ms={n: round(v, 1) for n, v in med.items()},
                   t5_over_t1=round(med[5] / med[1], 2), prefill750_ms=round(min(prefill)),
                   weights_mib=round(sum(m.model.weight_bytes().values()) / 2**20), rss_mib=rss_bytes() // 2**20)
        print(json.dumps(row), flush=True)
        del m
        gc.collect()


if __name__ == "__main__":
    main()
