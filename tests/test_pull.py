"""``specd models pull`` writes no weights: beside the verified GGUF only its config, tokenizer and
the sha256 record; a dequantized copy an older specd left is removed; the pulled model then loads
in a float-based mode straight from the GGUF. (The download itself is not exercised: the file is
placed in the cache at its published size, as after a download.)"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from gguf import GGUFWriter

from specd.models.loader import load_model
from specd.models.pull import converted_dir, gguf_path, is_pulled, pull
from specd.models.registry import PUBLISHED, PublishedModel
from tests.tiny import tiny_tokenizer

HIDDEN, INTER, HEADS, KV_HEADS = 64, 128, 2, 1


def write_gguf_with_tokenizer(path: Path) -> Path:
    """A tiny float Qwen2 GGUF with a byte-level BPE vocabulary and one merge, from which
    transformers builds a tokenizer as it does for the published files."""
    vocab = [t for t, _ in sorted(tiny_tokenizer()._tok.get_vocab().items(), key=lambda kv: kv[1])] + ["Ġt"]
    rng = np.random.default_rng(0)
    w = GGUFWriter(str(path), "qwen2")
    w.add_block_count(1)
    w.add_context_length(256)
    w.add_embedding_length(HIDDEN)
    w.add_feed_forward_length(INTER)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV_HEADS)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list(vocab)
    w.add_token_types([1] * len(vocab))
    w.add_token_merges(["Ġ t"])
    w.add_eos_token_id(len(vocab) - 1)
    hd = HIDDEN // HEADS

    def mat(rows: int, k: int) -> np.ndarray:
        return (rng.standard_normal((rows, k)) / np.sqrt(k)).astype(np.float32)

    w.add_tensor("token_embd.weight", mat(len(vocab), HIDDEN))
    w.add_tensor("output_norm.weight", np.ones(HIDDEN, np.float32))
    shapes = {"attn_q": (HEADS * hd, HIDDEN), "attn_k": (KV_HEADS * hd, HIDDEN), "attn_v": (KV_HEADS * hd, HIDDEN),
              "attn_output": (HIDDEN, HIDDEN), "ffn_gate": (INTER, HIDDEN), "ffn_up": (INTER, HIDDEN),
              "ffn_down": (HIDDEN, INTER)}
    w.add_tensor("blk.0.attn_norm.weight", np.ones(HIDDEN, np.float32))
    w.add_tensor("blk.0.ffn_norm.weight", np.ones(HIDDEN, np.float32))
    for t in ("attn_q", "attn_k", "attn_v"):
        w.add_tensor(f"blk.0.{t}.bias", (0.1 * rng.standard_normal(shapes[t][0])).astype(np.float32))
    for t, (rows, k) in shapes.items():
        w.add_tensor(f"blk.0.{t}.weight", mat(rows, k))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


@pytest.fixture
def published(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> PublishedModel:
    """A published-model entry for a tiny GGUF placed where a download would put it."""
    monkeypatch.setenv("SPECD_CACHE_DIR", str(tmp_path / "cache"))
    source = write_gguf_with_tokenizer(tmp_path / "tiny.gguf")
    data = source.read_bytes()
    m = PublishedModel(name="tiny-test", description="a test file", package_prefix="never-downloaded-part",
                       parts=1, version="0", sha256=hashlib.sha256(data).hexdigest(), size=len(data))
    gguf_path(m).parent.mkdir(parents=True)
    gguf_path(m).write_bytes(data)
    monkeypatch.setitem(PUBLISHED, m.name, m)
    return m


def test_pull_writes_no_weights_and_removes_the_old_dequantized_copy(published: PublishedModel) -> None:
    m = published
    out = converted_dir(m)
    out.mkdir()
    (out / "model.safetensors").write_bytes(b"\0" * 1000)  # what an older specd's pull left
    assert not is_pulled(m)
    said: list[str] = []
    assert pull(m, progress=said.append) == out
    assert any("removing" in s and "model.safetensors" in s for s in said), said
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "specd.json", "tokenizer.json"]
    assert json.loads((out / "specd.json").read_text())["sha256"] == m.sha256
    assert is_pulled(m)
    model = load_model(m.name, quant="int8", max_len=64)
    assert model.path == out
    assert model.tokenizer.encode(" t") == [model.config.vocab_size - 1]  # the merge: the tokenizer is the file's
    assert torch.isfinite(model.model.forward(torch.tensor([5, 6, 7]))).all()
    assert not list(out.glob("model*.safetensors"))  # quantized layers only (quant-int8*.safetensors)


def test_a_changed_or_unverified_file_is_not_pulled(published: PublishedModel) -> None:
    m = published
    pull(m, progress=lambda s: None)
    assert is_pulled(m)
    (converted_dir(m) / "specd.json").write_text(json.dumps({"sha256": "0" * 64}))  # verified another file
    assert not is_pulled(m)
    pull(m, progress=lambda s: None)  # the file on disk verifies: recorded again
    assert is_pulled(m)
    with open(gguf_path(m), "ab") as f:  # no longer the published size
        f.write(b"\0")
    assert not is_pulled(m)
