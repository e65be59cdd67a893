"""Forward cost per quantization: T(n) for n new tokens after a 256-token context, for the
target and the draft in each mode, one model at a time (medians of ``--reps``), as a Markdown table.

    python bench/quant_speed.py --reps 5 --out bench/out/quant_speed.json
"""

from __future__ import annotations

import argparse
import gc
import json
from pathlib import Path

from specd.bench.stats import spread
from specd.bench.verify_curve import forward_ms
from specd.models.loader import load_model
from specd.models.registry import DEFAULT_DRAFT, DEFAULT_TARGET

SIZES = (1, 2, 3, 5, 9, 17)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--target", default=DEFAULT_TARGET)
    ap.add_argument("--draft", default=DEFAULT_DRAFT)
    ap.add_argument("--variants", default="target:int8,target:bf16,target:int4,draft:int4,draft:int8,draft:int8:32768,draft:int4:32768,draft:bf16")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--out", type=Path, default=Path("bench/out/quant_speed.json"))
    args = ap.parse_args()
    rows = []
    for variant in args.variants.split(","):
        role, quant, *head = variant.split(":")
        spec = args.target if role == "target" else args.draft
        head_vocab = int(head[0]) if head else 0
        m = load_model(spec, quant=quant, max_len=512, head_vocab=head_vocab)
        context = m.tokenizer.encode(Path(json.__file__).read_text())[:256]
        raw = forward_ms(m.model, context, SIZES, args.reps)
        med = {n: spread(v)["median"] for n, v in raw.items()}
        row = {"role": role, "quant": quant, "head_vocab": head_vocab or m.config.vocab_size,
               "weights_mib": round(sum(m.model.weight_bytes().values()) / 2**20),
               "median_ms": {str(n): round(med[n], 2) for n in SIZES},
               "t5_over_t1": round(med[5] / med[1], 2), "raw": {str(n): v for n, v in raw.items()}}
        rows.append(row)
        print(f"| {role} | {quant} | {row['head_vocab']} | {row['weights_mib']} | "
              + " | ".join(f"{med[n]:.1f}" for n in SIZES) + f" | {row['t5_over_t1']} |", flush=True)
        del m
        gc.collect()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
