"""Tiny models with a real BPE vocabulary (byte tokens, Qwen's control tokens, one merge), padded
to any row count, written as a GGUF file (tokens, types and merges as llama.cpp writes them, the
padding rows named ``[PADn]``) or as a Hugging Face directory (``config.json`` with the padded
``vocab_size``, ``tokenizer.json`` with only the real tokens). Their padding rows' output weights
are large, so a padding row would win most argmaxes and samples if it were ever allowed."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch

from specd.models.tiny import tiny_config, tiny_weights
from tests.tiny import SPECIALS

HIDDEN, LAYERS = 64, 2
MERGE = ("Ġ", "t")


def byte_tokens() -> list[str]:
    from tokenizers.pre_tokenizers import ByteLevel

    return sorted(ByteLevel.alphabet())


def real_tokens(specials: list[str] = SPECIALS) -> list[str]:
    """Id order: the 256 byte tokens, the merged ``Ġt``, then the control tokens."""
    return byte_tokens() + ["".join(MERGE)] + list(specials)


REAL = len(real_tokens())  # 266


def hf_tokenizer(tokens: list[str] | None = None, specials: list[str] = SPECIALS, merges: list[tuple[str, str]] = [MERGE]):
    """A byte-level BPE tokenizer as Hugging Face writes Qwen's: the normal tokens in the model's
    vocabulary, the control tokens added as special tokens (``specd.models.tokenizer.Tokenizer``)."""
    from tokenizers import AddedToken, Tokenizer as HFTokenizer, decoders, models, pre_tokenizers

    from specd.models.tokenizer import Tokenizer

    tokens = tokens or real_tokens(specials)
    normal = {t: i for i, t in enumerate(tokens) if t not in specials}
    tok = HFTokenizer(models.BPE(vocab=normal, merges=list(merges)))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in tokens if t in specials])
    assert all(tok.token_to_id(t) == i for i, t in enumerate(tokens)), "control tokens must come last"
    return Tokenizer(tok)


def _weights(rows: int, seed: int) -> dict[str, torch.Tensor]:
    config = tiny_config(vocab=rows, hidden=HIDDEN, layers=LAYERS)
    w = tiny_weights(config, seed)
    w["lm_head.weight"][REAL - len(SPECIALS):REAL] *= 0.01  # rarely emit a control (stop) token
    w["lm_head.weight"][REAL:] *= 20.0  # the padding rows would dominate
    return w


def save_hf_model(directory: Path, rows: int, seed: int, tokenizer=None) -> Path:
    """A Hugging Face directory: ``rows`` embedding and head rows, the tokenizer's real tokens."""
    from safetensors.torch import save_file

    directory.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in _weights(rows, seed).items()}, str(directory / "model.safetensors"))
    (directory / "config.json").write_text(json.dumps(tiny_config(vocab=rows, hidden=HIDDEN, layers=LAYERS).to_hf()))
    (tokenizer or hf_tokenizer())._tok.save(str(directory / "tokenizer.json"))
    return directory


_GGUF_LAYER = {
    "input_layernorm.weight": "attn_norm.weight", "post_attention_layernorm.weight": "ffn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight", "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight", "self_attn.q_proj.bias": "attn_q.bias",
    "self_attn.k_proj.bias": "attn_k.bias", "self_attn.v_proj.bias": "attn_v.bias",
    "self_attn.o_proj.weight": "attn_output.weight", "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight", "mlp.down_proj.weight": "ffn_down.weight",
}
_GGUF_GLOBAL = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
                "lm_head.weight": "output.weight"}


def _gguf_name(name: str) -> str:
    if name in _GGUF_GLOBAL:
        return _GGUF_GLOBAL[name]
    _, _, i, rest = name.split(".", 3)
    return f"blk.{i}.{_GGUF_LAYER[rest]}"


def write_gguf_model(path: Path, rows: int, seed: int, tokens: list[str] | None = None,
                     specials: list[str] = SPECIALS) -> Path:
    """A float32 Qwen2 GGUF: ``tokens`` (default :func:`real_tokens`) padded with ``[PADn]`` to
    ``rows``, token types as llama.cpp's converter writes them (control for ``specials``, unused
    for the padding), the one merge."""
    from gguf import GGUFWriter, TokenType

    tokens = list(tokens or real_tokens(specials))
    types = [TokenType.CONTROL if t in specials else TokenType.NORMAL for t in tokens]
    tokens += [f"[PAD{i}]" for i in range(len(tokens), rows)]
    types += [TokenType.UNUSED] * (rows - len(types))
    c = tiny_config(vocab=rows, hidden=HIDDEN, layers=LAYERS)
    w = GGUFWriter(str(path), "qwen2")
    w.add_block_count(c.num_layers)
    w.add_context_length(c.max_position)
    w.add_embedding_length(c.hidden_size)
    w.add_feed_forward_length(c.intermediate_size)
    w.add_head_count(c.num_heads)
    w.add_head_count_kv(c.num_kv_heads)
    w.add_rope_freq_base(c.rope_theta)
    w.add_layer_norm_rms_eps(c.rms_norm_eps)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list(tokens)
    w.add_token_types([int(t) for t in types])
    w.add_token_merges([" ".join(MERGE)])
    w.add_eos_token_id(tokens.index("<|endoftext|>"))
    for name, tensor in _weights(rows, seed).items():
        w.add_tensor(_gguf_name(name), np.ascontiguousarray(tensor.numpy().astype(np.float32)))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
