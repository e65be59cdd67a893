"""Tiny random Qwen2-shaped models: a config and Hugging Face-named random weights, built in
memory in milliseconds. For checks that need a real model's code paths but not its numbers (the
tests, ``bench/gpu_check.py``, smoke runs on a machine without model files)."""

from __future__ import annotations

import torch

from specd.models.config import ModelConfig


def tiny_config(vocab: int = 64, hidden: int = 32, layers: int = 2, heads: int = 4, kv_heads: int = 2,
                tie: bool = False) -> ModelConfig:
    return ModelConfig(
        vocab_size=vocab, hidden_size=hidden, intermediate_size=hidden * 2, num_layers=layers,
        num_heads=heads, num_kv_heads=kv_heads, head_dim=hidden // heads, rope_theta=10000.0,
        rms_norm_eps=1e-6, max_position=512, tie_word_embeddings=tie, qkv_bias=True,
    )


def tiny_weights(config: ModelConfig, seed: int, scale: float = 0.5) -> dict[str, torch.Tensor]:
    """Random weights with Hugging Face names; ``scale`` sets how peaked the distributions are."""
    g = torch.Generator().manual_seed(seed)
    c = config

    def r(*shape: int, s: float = scale) -> torch.Tensor:
        return torch.randn(*shape, generator=g) * s

    hd = c.head_dim
    w: dict[str, torch.Tensor] = {
        "model.embed_tokens.weight": r(c.vocab_size, c.hidden_size, s=1.0),
        "model.norm.weight": 1 + r(c.hidden_size, s=0.1),
    }
    if not c.tie_word_embeddings:
        w["lm_head.weight"] = r(c.vocab_size, c.hidden_size, s=1.0)
    for i in range(c.num_layers):
        p = f"model.layers.{i}."
        w[p + "input_layernorm.weight"] = 1 + r(c.hidden_size, s=0.1)
        w[p + "post_attention_layernorm.weight"] = 1 + r(c.hidden_size, s=0.1)
        w[p + "self_attn.q_proj.weight"] = r(c.num_heads * hd, c.hidden_size)
        w[p + "self_attn.k_proj.weight"] = r(c.num_kv_heads * hd, c.hidden_size)
        w[p + "self_attn.v_proj.weight"] = r(c.num_kv_heads * hd, c.hidden_size)
        w[p + "self_attn.q_proj.bias"] = r(c.num_heads * hd, s=0.1)
        w[p + "self_attn.k_proj.bias"] = r(c.num_kv_heads * hd, s=0.1)
        w[p + "self_attn.v_proj.bias"] = r(c.num_kv_heads * hd, s=0.1)
        w[p + "self_attn.o_proj.weight"] = r(c.hidden_size, c.num_heads * hd)
        w[p + "mlp.gate_proj.weight"] = r(c.intermediate_size, c.hidden_size)
        w[p + "mlp.up_proj.weight"] = r(c.intermediate_size, c.hidden_size)
        w[p + "mlp.down_proj.weight"] = r(c.hidden_size, c.intermediate_size)
    return w
