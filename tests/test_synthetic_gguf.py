"""specd.bench.synthetic_gguf: a GGUF with a real model's shapes and Q4_K_M type mix, random
blocks, the tokenizer copied from another GGUF; it loads and runs through specd's GGUF path."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from specd.bench.synthetic_gguf import SHAPES, Shape, more_bits, tensors, write
from specd.models import kernels
from tests.padded_models import REAL, write_gguf_model


def test_type_mix_is_llama_cpp_q4_k_m() -> None:
    # the published 1.5B Q4_K_M file has Q6_K attn_v and ffn_down in these 14 of its 28 layers
    assert [i for i in range(28) if more_bits(i, 28)] == [0, 1, 2, 5, 8, 11, 14, 17, 20, 23, 24, 25, 26, 27]
    plan = {name: (dims, kind) for name, dims, kind in tensors(SHAPES["qwen2.5-coder-7b"])}
    assert plan["output.weight"] == ((152064, 3584), "Q6_K") and plan["token_embd.weight"][1] == "Q4_K"
    assert plan["blk.0.attn_k.weight"] == ((512, 3584), "Q4_K") and plan["blk.0.attn_v.weight"][1] == "Q6_K"
    assert plan["blk.3.ffn_down.weight"] == ((3584, 18944), "Q4_K")
    assert len(plan) == 3 + 12 * 28


@pytest.mark.skipif(not kernels.available(), reason=kernels.unavailable() or "")
def test_a_small_shape_loads_and_runs(tmp_path: Path) -> None:
    from specd.models.loader import load_model

    source = write_gguf_model(tmp_path / "tok.gguf", rows=REAL, seed=0)
    shape = Shape(layers=2, hidden=256, intermediate=512, heads=2, kv_heads=1, vocab_rows=304)
    path = write(shape, tmp_path / "small.gguf", source, seed=1, log=None)
    lm = load_model(str(path), quant="gguf", max_len=64)
    assert lm.model.vocab_size == 304 and "Gguf" in lm.model.describe()
    logits = lm.model.forward(torch.tensor([1, 2, 3]))
    assert logits.shape == (3, 304) and bool(torch.isfinite(logits).all())
    assert lm.tokenizer.decode(lm.tokenizer.encode("def f(x): return x")) == "def f(x): return x"
