"""GGUF → a converted directory that loads in seconds (mmap'd safetensors).

Output, next to each other: ``config.json`` (Hugging Face names), ``model.safetensors`` (weights
dequantized once from the GGUF blocks, stored as bfloat16 with Hugging Face tensor names),
``tokenizer.json`` (built from the GGUF vocabulary and merges), ``specd.json`` (provenance).
"""

from __future__ import annotations

import json
import logging
import shutil
import sys
import time
from pathlib import Path
from typing import Callable

import numpy as np
import torch
from gguf import GGUFReader
from gguf.quants import dequantize
from safetensors.torch import save_file

from specd.models.config import ModelConfig
from specd.models.errors import ModelError

_LAYER_NAMES = {
    "attn_norm.weight": "input_layernorm.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight",
    "attn_q.bias": "self_attn.q_proj.bias",
    "attn_k.bias": "self_attn.k_proj.bias",
    "attn_v.bias": "self_attn.v_proj.bias",
    "attn_output.weight": "self_attn.o_proj.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
}
_GLOBAL_NAMES = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}


def hf_name(gguf_name: str) -> str:
    if gguf_name in _GLOBAL_NAMES:
        return _GLOBAL_NAMES[gguf_name]
    parts = gguf_name.split(".", 2)
    if len(parts) == 3 and parts[0] == "blk" and parts[2] in _LAYER_NAMES:
        return f"model.layers.{parts[1]}.{_LAYER_NAMES[parts[2]]}"
    raise ModelError(f"unexpected tensor {gguf_name!r} in GGUF file")


def _field(reader, key: str, default=None):
    f = reader.fields.get(key)
    if f is None:
        return default
    return f.contents()


def read_config(reader) -> ModelConfig:
    arch = _field(reader, "general.architecture")
    if arch not in ("qwen2", "llama"):
        raise ModelError(f"GGUF architecture {arch!r} is not supported (qwen2 or llama)")
    heads = int(_field(reader, f"{arch}.attention.head_count"))
    hidden = int(_field(reader, f"{arch}.embedding_length"))
    names = {t.name for t in reader.tensors}
    vocab = len(reader.fields["tokenizer.ggml.tokens"].data)
    return ModelConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=int(_field(reader, f"{arch}.feed_forward_length")),
        num_layers=int(_field(reader, f"{arch}.block_count")),
        num_heads=heads,
        num_kv_heads=int(_field(reader, f"{arch}.attention.head_count_kv", heads)),
        head_dim=hidden // heads,
        rope_theta=float(_field(reader, f"{arch}.rope.freq_base", 10000.0)),
        rms_norm_eps=float(_field(reader, f"{arch}.attention.layer_norm_rms_epsilon", 1e-6)),
        max_position=int(_field(reader, f"{arch}.context_length", 32768)),
        tie_word_embeddings="output.weight" not in names,
        qkv_bias="blk.0.attn_q.bias" in names,
        architecture=arch,
    )


def convert_gguf(
    gguf_path: Path,
    out_dir: Path,
    *,
    sha256: str = "",
    progress: Callable[[str], None] = lambda s: print(s, file=sys.stderr),
) -> Path:
    """Dequantize ``gguf_path`` into ``out_dir`` (written atomically: a partial directory is
    never mistaken for a converted model)."""
    try:
        reader = GGUFReader(str(gguf_path))
    except Exception as e:  # truncated or not a GGUF file
        raise ModelError(f"cannot read GGUF file {gguf_path}: {e}") from e
    config = read_config(reader)
    if config.architecture == "llama":
        # llama.cpp permutes q/k rows of Llama checkpoints for its rotary layout
        raise ModelError("Llama GGUF files are not supported yet; pass a Hugging Face directory")
    tmp = out_dir.with_name(out_dir.name + ".partial")
    tmp.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    weights: dict[str, torch.Tensor] = {}
    n = len(reader.tensors)
    for i, t in enumerate(reader.tensors):
        arr = dequantize(t.data, t.tensor_type)
        shape = tuple(int(x) for x in reversed(t.shape.tolist()))  # GGUF lists ne0 (inner) first
        arr = np.array(arr.reshape(shape), dtype=np.float32)  # a writable copy, not a view of the mmap
        ten = torch.from_numpy(arr)
        name = hf_name(t.name)
        weights[name] = ten if ten.ndim == 1 else ten.to(torch.bfloat16)
        if (i + 1) % 50 == 0 or i + 1 == n:
            progress(f"  dequantized {i + 1}/{n} tensors ({time.perf_counter() - t0:.0f}s)")
    save_file(weights, str(tmp / "model.safetensors"), metadata={"format": "pt"})
    (tmp / "config.json").write_text(json.dumps(config.to_hf(), indent=2))
    progress("  building tokenizer.json from the GGUF vocabulary")
    _write_tokenizer(gguf_path, tmp)
    (tmp / "specd.json").write_text(
        json.dumps({"source": str(gguf_path), "sha256": sha256, "dtype": "bfloat16"}, indent=2)
    )
    if out_dir.exists():
        shutil.rmtree(out_dir)
    tmp.rename(out_dir)
    return out_dir


def write_tokenizer_dir(gguf_path: Path, out_dir: Path, config: ModelConfig) -> Path:
    """``config.json`` and ``tokenizer.json`` (from the GGUF vocabulary and merges) in ``out_dir``,
    no weights: what quant mode gguf needs beside the file itself. The tokenizer is written under
    a temporary name and renamed, so a present ``tokenizer.json`` is always whole."""
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "config.json").write_text(json.dumps(config.to_hf(), indent=2))
    tmp = out_dir / "tokenizer.partial"
    tmp.mkdir(exist_ok=True)
    _write_tokenizer(gguf_path, tmp)
    (tmp / "tokenizer.json").rename(out_dir / "tokenizer.json")
    shutil.rmtree(tmp, ignore_errors=True)
    return out_dir


def _write_tokenizer(gguf_path: Path, out_dir: Path) -> None:
    # transformers takes seconds to import; only a GGUF conversion needs it
    from transformers import AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    logging.getLogger("transformers").setLevel(logging.ERROR)
    tok = AutoTokenizer.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name)
    tok.backend_tokenizer.save(str(out_dir / "tokenizer.json"))
