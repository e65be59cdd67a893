"""Tiny random Qwen2 models built in the test process (seconds, no files needed)."""

from __future__ import annotations

import torch

from specd.models.decoder import Decoder
from specd.models.tiny import tiny_config, tiny_weights

__all__ = ["SPECIALS", "TINY_VOCAB", "save_tiny_model", "tiny_config", "tiny_decoder", "tiny_engine",
           "tiny_tokenizer", "tiny_weights"]


def tiny_decoder(seed: int = 0, dtype: torch.dtype = torch.float32, max_len: int = 256,
                 **config_kw) -> Decoder:
    c = tiny_config(**config_kw)
    return Decoder(c, tiny_weights(c, seed), compute_dtype=dtype, max_len=max_len)


SPECIALS = ["<|endoftext|>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>",
            "<|repo_name|>", "<|file_sep|>", "<|im_start|>", "<|im_end|>"]


def tiny_tokenizer(extra: int = 0):
    """A byte-level tokenizer without merges: 256 byte tokens, then Qwen's special tokens
    (ids 256..264), then ``extra`` unused tokens. Any text round-trips."""
    from tokenizers import Tokenizer as HFTokenizer, decoders, models as tmodels, pre_tokenizers
    from tokenizers.pre_tokenizers import ByteLevel

    from specd.models.tokenizer import Tokenizer

    alphabet = ByteLevel.alphabet()
    vocab = {ch: i for i, ch in enumerate(sorted(alphabet))}
    tok = HFTokenizer(tmodels.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(SPECIALS + [f"<|extra_{i}|>" for i in range(extra)])
    return Tokenizer(tok)


TINY_VOCAB = 256 + len(SPECIALS)


def tiny_engine(target_seed: int = 0, draft_seed: int | None = 1, k: int = 4, costs=None, **config_kw):
    """An Engine over tiny random bf16 decoders that share the byte-level tokenizer."""
    from specd.engine.engine import Engine, EngineConfig

    target = tiny_decoder(seed=target_seed, dtype=torch.bfloat16, vocab=TINY_VOCAB, hidden=64,
                          max_len=512)
    draft = None
    if draft_seed is not None:
        draft = tiny_decoder(seed=draft_seed, dtype=torch.bfloat16, vocab=TINY_VOCAB, hidden=64,
                             max_len=512)
    for model in (target, draft):
        if model is not None:  # random heads emit special (stop) tokens often; keep texts long
            model.lm_head.weight[256:TINY_VOCAB] *= 0.01
    tok = tiny_tokenizer()
    config_kw.setdefault("max_len", 512)
    config = EngineConfig(k=k, **config_kw)
    if k == "auto" and costs is None:  # as the composition root does: measured once, cached per machine and pair
        from specd.app import step_costs

        costs = step_costs(config, target, draft)
    return Engine(target, tok, draft, tok, config, costs=costs)


def save_tiny_model(directory, seed: int = 0, hidden: int = 64, layers: int = 2):
    """Write a tiny random model as a Hugging Face directory (config.json, model.safetensors,
    tokenizer.json) that ``specd --target DIR`` loads like any other model; returns the path."""
    import json
    from pathlib import Path

    from safetensors.torch import save_file

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    config = tiny_config(vocab=TINY_VOCAB, hidden=hidden, layers=layers)
    weights = tiny_weights(config, seed)
    weights["lm_head.weight"][256:TINY_VOCAB] *= 0.01  # rarely emit stop tokens: longer texts
    save_file({k: v.contiguous() for k, v in weights.items()}, str(directory / "model.safetensors"))
    (directory / "config.json").write_text(json.dumps(config.to_hf()))
    tiny_tokenizer()._tok.save(str(directory / "tokenizer.json"))
    return directory
