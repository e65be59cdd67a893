"""What a GGUF file's metadata gives beside its weights: Hugging Face tensor names (``hf_name``),
the decoder config (``read_config``), and ``config.json`` + ``tokenizer.json`` (built from the GGUF
vocabulary and merges) written into a cache directory (``write_tokenizer_dir``). The weights are
never converted: quant mode gguf runs the file's blocks (``specd.models.gguf_model``), the other
modes dequantize one tensor at a time from it (``specd.models.gguf_float``).
"""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

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


def write_tokenizer_dir(gguf_path: Path, out_dir: Path, config: ModelConfig) -> Path:
    """``config.json`` and ``tokenizer.json`` (from the GGUF vocabulary and merges) in ``out_dir``,
    no weights: what every quant mode needs beside the file itself. Both are written into a
    temporary directory and renamed into place, so a present ``tokenizer.json`` is always whole;
    when building fails, nothing is left behind (nor ``out_dir``, if this call created it)."""
    created = not out_dir.exists()
    out_dir.mkdir(parents=True, exist_ok=True)
    tmp = out_dir / "tokenizer.partial"
    try:
        tmp.mkdir(exist_ok=True)
        (tmp / "config.json").write_text(json.dumps(config.to_hf(), indent=2))
        try:
            _write_tokenizer(gguf_path, tmp)
        except Exception as e:
            raise ModelError(f"{gguf_path}: cannot build a tokenizer from its vocabulary ({type(e).__name__}: "
                             f"{e}); is it a complete GGUF file?") from e
        (tmp / "config.json").replace(out_dir / "config.json")
        (tmp / "tokenizer.json").replace(out_dir / "tokenizer.json")
    except BaseException:
        if created:
            shutil.rmtree(out_dir, ignore_errors=True)
        raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out_dir


def _write_tokenizer(gguf_path: Path, out_dir: Path) -> None:
    # transformers takes seconds to import; only building a GGUF file's tokenizer needs it
    from transformers import AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    logging.getLogger("transformers").setLevel(logging.ERROR)
    tok = AutoTokenizer.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name)
    tok.backend_tokenizer.save(str(out_dir / "tokenizer.json"))
