"""The shape of a Qwen2/Llama-family decoder, read from a Hugging Face config or GGUF metadata."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Mapping


@dataclass(frozen=True)
class ModelConfig:
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rope_theta: float = 1_000_000.0
    rms_norm_eps: float = 1e-6
    max_position: int = 32768
    tie_word_embeddings: bool = True
    qkv_bias: bool = True
    architecture: str = "qwen2"

    def __post_init__(self) -> None:
        if self.num_heads % self.num_kv_heads:
            raise ValueError(
                f"num_heads ({self.num_heads}) must be a multiple of num_kv_heads ({self.num_kv_heads})"
            )

    @classmethod
    def from_hf(cls, cfg: Mapping[str, Any]) -> "ModelConfig":
        """From a Hugging Face ``config.json`` of a Qwen2 or Llama model."""
        model_type = cfg.get("model_type", "qwen2")
        if model_type not in ("qwen2", "llama"):
            raise ValueError(f"unsupported model_type {model_type!r}: specd runs qwen2 and llama decoders")
        heads = int(cfg["num_attention_heads"])
        hidden = int(cfg["hidden_size"])
        return cls(
            vocab_size=int(cfg["vocab_size"]),
            hidden_size=hidden,
            intermediate_size=int(cfg["intermediate_size"]),
            num_layers=int(cfg["num_hidden_layers"]),
            num_heads=heads,
            num_kv_heads=int(cfg.get("num_key_value_heads", heads)),
            head_dim=int(cfg.get("head_dim") or hidden // heads),
            rope_theta=float(cfg.get("rope_theta", (cfg.get("rope_parameters") or {}).get("rope_theta", 10000.0))),
            rms_norm_eps=float(cfg.get("rms_norm_eps", 1e-6)),
            max_position=int(cfg.get("max_position_embeddings", 32768)),
            tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
            qkv_bias=bool(cfg.get("attention_bias", model_type == "qwen2")),
            architecture=model_type,
        )

    def to_hf(self) -> dict[str, Any]:
        """A Hugging Face ``config.json`` for this shape (written next to converted weights)."""
        arch = "Qwen2ForCausalLM" if self.architecture == "qwen2" else "LlamaForCausalLM"
        return {
            "architectures": [arch],
            "model_type": self.architecture,
            "vocab_size": self.vocab_size,
            "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size,
            "num_hidden_layers": self.num_layers,
            "num_attention_heads": self.num_heads,
            "num_key_value_heads": self.num_kv_heads,
            "head_dim": self.head_dim,
            "rope_theta": self.rope_theta,
            "rms_norm_eps": self.rms_norm_eps,
            "max_position_embeddings": self.max_position,
            "tie_word_embeddings": self.tie_word_embeddings,
            "attention_bias": self.qkv_bias,
            "hidden_act": "silu",
        }

    def replace(self, **changes: Any) -> "ModelConfig":
        return dataclasses.replace(self, **changes)
