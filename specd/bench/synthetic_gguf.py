"""A GGUF with a real model's exact architecture, tensor shapes and Q4_K_M type mix, random blocks.

What a step of a 7B or 14B target costs does not depend on its weights' values, only on their
shapes and block formats; this writes such a file without downloading the weights:

    python -m specd.bench.synthetic_gguf qwen2.5-coder-7b --out /tmp/qwen7b-shape.gguf

- **Shapes**: Qwen2.5-Coder's published configs (``SHAPES``), the embedding and output padded to
  152,064 rows as the 7B and larger checkpoints are.
- **Type mix**: llama.cpp's Q4_K_M: every linear Q4_K, except ``attn_v`` and ``ffn_down`` in the
  layers its ``use_more_bits`` rule picks (the first and last eighth, and every third between),
  which are Q6_K; ``token_embd`` Q4_K, ``output`` Q6_K; norms and biases F32. (The 1.5B Q4_K_M
  file follows the same rule: 14 of its 28 layers have Q6_K ``attn_v`` and ``ffn_down``.)
- **Blocks**: random codes and scales, each block's fp16 super-scale set to a small finite value,
  so every weight is finite and no float denormal or NaN slows any kernel down.
- **Tokenizer**: the real one, copied from a GGUF of the same family (the default 1.5B target's),
  its token list padded with ``[PADn]`` (type unused) to the embedding's rows, as the real 7B's is.

With random weights a draft's proposals are never accepted: K auto must settle on K = 0.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

QK_K = 256
Q4_K_BYTES, Q6_K_BYTES = 144, 210  # bytes of one super-block of 256 weights


@dataclass(frozen=True)
class Shape:
    """A Qwen2 model's dimensions (its Hugging Face config)."""

    layers: int
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    vocab_rows: int = 152064
    rope_theta: float = 1000000.0
    rms_eps: float = 1e-6
    context: int = 32768

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads


SHAPES = {
    "qwen2.5-coder-7b": Shape(layers=28, hidden=3584, intermediate=18944, heads=28, kv_heads=4),
    "qwen2.5-coder-14b": Shape(layers=48, hidden=5120, intermediate=13824, heads=40, kv_heads=8),
    "qwen2.5-coder-32b": Shape(layers=64, hidden=5120, intermediate=27648, heads=40, kv_heads=8),
}


def more_bits(layer: int, layers: int) -> bool:
    """llama.cpp's ``use_more_bits`` (Q4_K_M gives these layers' attn_v and ffn_down Q6_K)."""
    return layer < layers // 8 or layer >= 7 * layers // 8 or (layer - layers // 8) % 3 == 2


def tensors(s: Shape) -> list[tuple[str, tuple[int, ...], str]]:
    """(GGUF name, shape as [rows, columns] or [n], type) of every tensor, in the file's order."""
    kvd = s.kv_heads * s.head_dim
    out: list[tuple[str, tuple[int, ...], str]] = [("token_embd.weight", (s.vocab_rows, s.hidden), "Q4_K")]
    for i in range(s.layers):
        big = "Q6_K" if more_bits(i, s.layers) else "Q4_K"
        p = f"blk.{i}."
        out += [
            (p + "attn_norm.weight", (s.hidden,), "F32"),
            (p + "attn_q.weight", (s.hidden, s.hidden), "Q4_K"),
            (p + "attn_q.bias", (s.hidden,), "F32"),
            (p + "attn_k.weight", (kvd, s.hidden), "Q4_K"),
            (p + "attn_k.bias", (kvd,), "F32"),
            (p + "attn_v.weight", (kvd, s.hidden), big),
            (p + "attn_v.bias", (kvd,), "F32"),
            (p + "attn_output.weight", (s.hidden, s.hidden), "Q4_K"),
            (p + "ffn_norm.weight", (s.hidden,), "F32"),
            (p + "ffn_gate.weight", (s.intermediate, s.hidden), "Q4_K"),
            (p + "ffn_up.weight", (s.intermediate, s.hidden), "Q4_K"),
            (p + "ffn_down.weight", (s.hidden, s.intermediate), big),
        ]
    out += [("output_norm.weight", (s.hidden,), "F32"), ("output.weight", (s.vocab_rows, s.hidden), "Q6_K")]
    return out


def random_blocks(kind: str, rows: int, cols: int, rng: np.random.Generator) -> np.ndarray:
    """``rows`` rows of ``cols`` weights as random ``kind`` blocks (uint8 [rows, bytes a row]),
    every super-scale a small positive fp16."""
    per = Q4_K_BYTES if kind == "Q4_K" else Q6_K_BYTES
    blocks = rng.integers(0, 256, size=(rows * cols // QK_K, per), dtype=np.uint8)
    d = rng.uniform(2e-4, 1e-3, size=blocks.shape[0]).astype(np.float16).view(np.uint8).reshape(-1, 2)
    if kind == "Q4_K":  # d, dmin, scales[12], qs[128]
        blocks[:, 0:2] = d
        blocks[:, 2:4] = d
    else:  # ql[128], qh[64], scales[16] (int8), d
        blocks[:, 208:210] = d
    return blocks.reshape(rows, -1)


def write(shape: Shape, out: Path, tokenizer_gguf: Path, seed: int = 0, log=print) -> Path:
    """Write the file; returns ``out``. The tokenizer's fields come from ``tokenizer_gguf``."""
    import gguf

    src = gguf.GGUFReader(str(tokenizer_gguf))

    def field(name: str):
        f = src.fields[name]
        return f.contents()

    tokens = list(field("tokenizer.ggml.tokens"))
    types = list(field("tokenizer.ggml.token_type"))
    if len(tokens) > shape.vocab_rows:
        raise ValueError(f"{tokenizer_gguf}: {len(tokens)} tokens do not fit {shape.vocab_rows} rows")
    tokens += [f"[PAD{i}]" for i in range(len(tokens), shape.vocab_rows)]
    types += [int(gguf.TokenType.UNUSED)] * (shape.vocab_rows - len(types))

    w = gguf.GGUFWriter(str(out), "qwen2")
    w.add_name(f"synthetic {out.stem} (random Q4_K_M blocks, specd.bench.synthetic_gguf)")
    w.add_block_count(shape.layers)
    w.add_context_length(shape.context)
    w.add_embedding_length(shape.hidden)
    w.add_feed_forward_length(shape.intermediate)
    w.add_head_count(shape.heads)
    w.add_head_count_kv(shape.kv_heads)
    w.add_rope_freq_base(shape.rope_theta)
    w.add_layer_norm_rms_eps(shape.rms_eps)
    w.add_file_type(int(gguf.LlamaFileType.MOSTLY_Q4_K_M))
    w.add_tokenizer_model(field("tokenizer.ggml.model"))
    w.add_tokenizer_pre(field("tokenizer.ggml.pre"))
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(list(field("tokenizer.ggml.merges")))
    w.add_eos_token_id(int(field("tokenizer.ggml.eos_token_id")))
    if "tokenizer.ggml.bos_token_id" in src.fields:
        w.add_bos_token_id(int(field("tokenizer.ggml.bos_token_id")))
    if "tokenizer.ggml.padding_token_id" in src.fields:
        w.add_pad_token_id(int(field("tokenizer.ggml.padding_token_id")))
    w.add_add_bos_token(False)
    plan = tensors(shape)
    qtype = {"Q4_K": gguf.GGMLQuantizationType.Q4_K, "Q6_K": gguf.GGMLQuantizationType.Q6_K}
    for name, dims, kind in plan:
        if kind == "F32":
            w.add_tensor_info(name, dims, np.dtype(np.float32), dims[0] * 4)
        else:
            per = Q4_K_BYTES if kind == "Q4_K" else Q6_K_BYTES
            rows, cols = dims
            nbytes = rows * cols // QK_K * per
            w.add_tensor_info(name, (rows, cols // QK_K * per), np.dtype(np.uint8), nbytes, raw_dtype=qtype[kind])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    rng = np.random.default_rng(seed)
    total = 0
    for i, (name, dims, kind) in enumerate(plan):
        if kind == "F32":
            scale = 0.02 if name.endswith(".bias") else 1.0
            base = 0.0 if name.endswith(".bias") else 1.0
            data = (base + scale * rng.standard_normal(dims[0])).astype(np.float32)
        else:
            data = random_blocks(kind, dims[0], dims[1], rng)
        w.write_tensor_data(data)
        total += data.nbytes
        if log is not None and (i % 60 == 0 or i == len(plan) - 1):
            log(f"  {i + 1}/{len(plan)} tensors, {total / 1e9:.2f} GB")
    w.close()
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("shape", choices=sorted(SHAPES))
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--tokenizer-from", type=Path, default=None,
                    help="a GGUF of the same family to copy the tokenizer from (default: the pulled default target)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    source = args.tokenizer_from
    if source is None:
        from specd.app import gguf_file
        from specd.engine.config import DEFAULT_TARGET

        source = gguf_file(DEFAULT_TARGET)
        if source is None or not source.is_file():
            print(f"no tokenizer source: {source} is not pulled (specd models pull), or pass --tokenizer-from",
                  file=sys.stderr)
            return 2
    write(SHAPES[args.shape], args.out, source, args.seed)
    print(f"wrote {args.out} ({args.out.stat().st_size / 1e9:.2f} GB)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
