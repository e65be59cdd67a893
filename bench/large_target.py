#!/usr/bin/env python
"""A large target's step costs, same run as llama-bench on the same file (issue 25, deliverables 3 and 5).

On a GGUF with a large model's shapes and type mix (``python -m specd.bench.synthetic_gguf
qwen2.5-coder-7b --out /tmp/qwen7b-shape.gguf``; real weights work the same), in one process:

- this machine's read bandwidth (``specd.models.bandwidth``) and the target's floor: the bytes one
  step reads (``specd.models.step_bytes``) over it;
- specd's target (quant ``gguf``, the repacked K-quant kernels): load time and RSS, prompt
  processing (a ``--depth``-token prefill, timed), and T(n), one forward over n = 1 .. 9 new
  tokens (K + 1 for K = 0 .. 8) after ``--depth`` cached tokens, ``--reps`` rounds with the order
  of n alternating, each round the median of 3 forwards;
- llama-bench on the same file, same threads: pp512, tg32 at depth ``--depth``, and its own T(n)
  (pp1, 2, 3, 5, 9 at that depth, two repetitions);
- the speedup the cost model predicts for the default draft at acceptance 0.5 .. 0.9 with the
  draft step ``--draft-ms`` (measured with the default 0.5B draft; ``specd models info`` or
  ``specd bench --profile`` give it on a new machine), labelled a prediction.

    flock /tmp/specd-cpu.lock python bench/large_target.py /tmp/qwen7b-shape.gguf --out /tmp/large7b.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from specd.bench.llamacpp_bin import find_binaries, forward_curve, run_llama_bench
from specd.bench.machine import machine_info
from specd.engine.policy import CostModel
from specd.models.bandwidth import read_bandwidth
from specd.models.loader import load_model
from specd.models.memory import rss_bytes
from specd.models.step_bytes import step_bytes
from specd.percentile import percentile

NS = tuple(range(1, 10))
LLAMA_NS = (1, 2, 3, 5, 9)
ACCEPTANCE = (0.5, 0.6, 0.7, 0.8, 0.9)


def specd_curve(model, depth: int, reps: int, vocab: int) -> tuple[dict[int, list[float]], float]:
    """T(n) samples (ms) after ``depth`` cached tokens, and the timed prefill of those tokens (ms)."""
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, vocab, (depth + max(NS),), generator=g)
    t0 = time.perf_counter()
    model.forward(ids[:depth], logits=False)
    prefill_ms = (time.perf_counter() - t0) * 1e3
    model.forward(ids[depth:depth + 1])  # warm: the first forward after a prefill pays page faults
    model.rollback(depth)
    samples: dict[int, list[float]] = {n: [] for n in NS}
    for rep in range(reps):
        for n in (NS if rep % 2 == 0 else NS[::-1]):
            times = []
            for _ in range(3):
                t = time.perf_counter()
                model.forward(ids[depth:depth + n])
                times.append((time.perf_counter() - t) * 1e3)
                model.rollback(depth)
            samples[n].append(statistics.median(times))
    return samples, prefill_ms


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("gguf", type=Path)
    ap.add_argument("--depth", type=int, default=512, help="cached tokens before each forward (default 512)")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--draft-ms", type=float, default=None,
                    help="the draft's step for the prediction (default: measured here on the default draft)")
    ap.add_argument("--no-llama", action="store_true", help="skip llama-bench")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    doc: dict = {"machine": machine_info(), "gguf": str(args.gguf), "depth": args.depth, "threads": args.threads,
                 "command": "python bench/large_target.py " + " ".join(
                     [str(args.gguf), "--depth", str(args.depth), "--reps", str(args.reps)])}
    bw = read_bandwidth()
    doc["bandwidth"] = {"gbs": round(bw.gbs, 2), "how": bw.how}
    rss0 = rss_bytes()
    t0 = time.perf_counter()
    lm = load_model(str(args.gguf), quant="gguf", max_len=args.depth + 64)
    load_s = time.perf_counter() - t0
    model = lm.model
    weights = model.weight_bytes()
    step = step_bytes(weights)
    doc["specd"] = {"runtime": model.describe(), "load_s": round(load_s, 1),
                    "rss_added_bytes": rss_bytes() - rss0, "weights": weights, "step_bytes": step,
                    "floor_ms": round(step / (bw.gbs * 1e9) * 1e3, 2)}
    print(f"loaded in {load_s:.1f} s; step reads {step / 1e9:.2f} GB; floor {doc['specd']['floor_ms']:.1f} ms "
          f"at {bw.gbs:.1f} GB/s", flush=True)
    samples, prefill_ms = specd_curve(model, args.depth, args.reps, lm.tokenizer.vocab_size)
    curve = {n: statistics.median(v) for n, v in samples.items()}
    doc["specd"].update({
        "prefill_ms": round(prefill_ms, 1), "prefill_tokens_per_s": round(args.depth / prefill_ms * 1e3, 1),
        "T_ms": {n: round(v, 2) for n, v in curve.items()},
        "T_p10_p90": {n: [round(percentile(v, 10), 2), round(percentile(v, 90), 2)]
                      for n, v in samples.items()},
        "T_raw": samples})
    print("specd T(n) ms: " + ", ".join(f"{n}: {v:.1f}" for n, v in curve.items()), flush=True)
    del model, lm

    bins = None if args.no_llama else find_binaries()
    if bins is not None:
        figs = run_llama_bench(bins, args.gguf, args.threads, prompts=(512,), gens=(32,), repetitions=3)
        # every test re-processes the depth first (untimed, but minutes for a 7B on 2 cores): a
        # subset of n and two repetitions
        deep = run_llama_bench(bins, args.gguf, args.threads, prompts=LLAMA_NS, gens=(32,), repetitions=2,
                               depth=args.depth)
        doc["llama_bench"] = {
            "version": bins.version,
            "pp512_tokens_per_s": next(f.tokens_per_s for f in figs if f.test == "pp512"),
            "tg32_ms_depth0": next(1e3 / f.tokens_per_s for f in figs if f.test == "tg32"),
            f"tg32_ms_depth{args.depth}": next(1e3 / f.tokens_per_s for f in deep if f.test == "tg32"),
            "T_ms": {n: round(v, 2) for n, v in forward_curve(deep).items()},
            "raw": [f.__dict__ for f in figs + deep]}
        print(f"llama-bench: pp512 {doc['llama_bench']['pp512_tokens_per_s']:.1f} t/s, tg32 at depth "
              f"{args.depth} {doc['llama_bench'][f'tg32_ms_depth{args.depth}']:.1f} ms; T(n) "
              + ", ".join(f"{n}: {v:.1f}" for n, v in doc["llama_bench"]["T_ms"].items()), flush=True)

    draft_ms = args.draft_ms
    if draft_ms is None:
        from specd.engine.config import DEFAULT_DRAFT

        d = load_model(DEFAULT_DRAFT, quant="int4", max_len=args.depth + 64, head_vocab=65536)
        ds, _ = specd_curve(d.model, args.depth, args.reps, d.tokenizer.vocab_size)
        draft_ms = statistics.median(ds[1])
        doc["draft_T1_ms"] = round(draft_ms, 2)
    cost = CostModel(draft_ms, tuple(curve[n] for n in NS))
    doc["prediction"] = {str(a): dict(zip(("speedup", "k"), (round(s, 2), k)))
                         for a in ACCEPTANCE for s, k in [cost.predicted_speedup(a)]}
    print(f"predicted speedup with the default draft ({draft_ms:.1f} ms a step; a prediction, not a measurement): "
          + ", ".join(f"acceptance {a}: {v['speedup']}x (K={v['k']})" for a, v in doc["prediction"].items()))
    if args.out:
        args.out.write_text(json.dumps(doc, indent=1, default=str) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
