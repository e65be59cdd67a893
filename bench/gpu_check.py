#!/usr/bin/env python
"""The GPU check: the CUDA tests, then T_target(n) and T_draft(1) per CUDA quantization.

The tests (``tests/test_cuda.py``, ``tests/test_quant.py``) load tiny random models as the daemon
does (``build_engine`` with ``--device cuda``) and check greedy speculative == target-only at every
CUDA target mode, chains and trees, K auto, seeded sampling, and each mode's logits against the CPU's.

For a lent GPU machine, which has no model weights and no network: the models are built with the
real pair's shapes (Qwen2.5-Coder-1.5B target, 0.5B draft) and random weights — the cost of a
forward does not depend on the weights' values. Modes: ``int4`` (bitsandbytes NF4), ``int8``
(bitsandbytes LLM.int8), ``fp8`` (e4m3 ``torch._scaled_mm``, compute capability 8.9+), ``bf16``.
Timed with ``torch.cuda.synchronize``; no CUDA graphs (the runtime does host-side cache
bookkeeping per forward, which a graph cannot capture yet). One JSON line per model and mode.

    python bench/gpu_check.py                    # on the GPU machine
    python bench/gpu_check.py --tiny --device cpu --modes bf16 --no-tests   # a smoke run here
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import torch

from specd.models.config import ModelConfig
from specd.models.decoder import Decoder
from specd.models.gpu import check_cuda_mode, cuda_linear_factory
from specd.models.tiny import tiny_weights

ROOT = Path(__file__).resolve().parent.parent  # the checkout: this script runs its CUDA tests

SHAPES = {  # the default pair's config.json
    "target": dict(vocab_size=151936, hidden_size=1536, intermediate_size=8960, num_hidden_layers=28,
                   num_attention_heads=12, num_key_value_heads=2, head_dim=128),
    "draft": dict(vocab_size=151936, hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                  num_attention_heads=14, num_key_value_heads=2, head_dim=64),
}
TINY = dict(vocab_size=512, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, head_dim=32)
SIZES = (1, 2, 3, 5, 9, 17)


def build(role: str, mode: str, device: str, tiny: bool, weights: dict) -> Decoder:
    """``weights``: a cache per role (random weights for 1.5B parameters take a while to draw)."""
    shape = TINY if tiny else SHAPES[role]
    config = ModelConfig.from_hf({**shape, "model_type": "qwen2", "rope_theta": 1e6, "rms_norm_eps": 1e-6,
                                  "tie_word_embeddings": False, "attention_bias": True})
    if role not in weights:
        weights[role] = tiny_weights(config, seed=0, scale=0.02)
    factory = None
    if device.startswith("cuda") and mode != "bf16":
        check_cuda_mode(mode, f"{role} ({mode})")
        factory = cuda_linear_factory(mode, device)
    return Decoder(config, weights[role], compute_dtype=torch.bfloat16, max_len=512, device=device,
                   linear_factory=factory)


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def forward_ms(model: Decoder, device: str, sizes: tuple[int, ...], reps: int, context: int = 256) -> dict[int, float]:
    ids = torch.arange(context + max(sizes)) % model.vocab_size
    model.rollback(0)
    model.forward(ids[:context])
    out = {}
    for n in sizes:
        runs = []
        for _ in range(reps + 1):  # the first run warms up
            model.rollback(context)
            sync(device)
            t0 = time.perf_counter()
            model.forward(ids[context:context + n])
            sync(device)
            runs.append((time.perf_counter() - t0) * 1e3)
        out[n] = sorted(runs[1:])[len(runs[1:]) // 2]
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--modes", default="int4,int8,fp8,bf16")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--tiny", action="store_true", help="tiny shapes (a smoke run)")
    ap.add_argument("--no-tests", dest="tests", action="store_false")
    args = ap.parse_args()
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("no CUDA GPU visible to torch: nothing to check here", file=sys.stderr)
        return 2
    status = 0
    if args.tests:
        # kernels launched blocking: a CUDA error is reported where it happens, not at a later call
        env = {**os.environ, "CUDA_LAUNCH_BLOCKING": "1"}
        status = subprocess.call([sys.executable, "-m", "pytest", "-q", "-rsP", "-p", "no:cacheprovider",
                                  "tests/test_quant.py", "tests/test_cuda.py"], cwd=ROOT, env=env)
    info = {"device": torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu",
            "torch": torch.__version__}
    print(json.dumps(info), flush=True)
    weights: dict = {}
    for mode in args.modes.split(","):
        for role, sizes in (("target", SIZES), ("draft", (1,))):
            try:
                model = build(role, mode, args.device, args.tiny, weights)
                ms = forward_ms(model, args.device, sizes, args.reps)
                row = {"role": role, "mode": mode, "median_ms": {str(n): round(v, 3) for n, v in ms.items()}}
                if 5 in ms:
                    row["t5_over_t1"] = round(ms[5] / ms[1], 2)
            except Exception as e:  # a mode this GPU cannot run: say so, go on
                row = {"role": role, "mode": mode, "error": f"{type(e).__name__}: {e}"}
            print(json.dumps(row), flush=True)
            model = None
            if args.device.startswith("cuda"):
                torch.cuda.empty_cache()
    return status


if __name__ == "__main__":
    raise SystemExit(main())
