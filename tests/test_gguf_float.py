"""The float-weight quant modes (int4, int8, bf16, fp32) read a GGUF file directly
(specd.models.gguf_float): the tensors equal the dequantized copy specd used to write to disk bit
for bit, the models built from them equal the ones built from that copy, nothing float is written
to the cache, the stored quantized layers are keyed by the file's sha256, and a truncated or
corrupt file is a clear error naming it that leaves nothing in the cache."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType as T
from gguf import GGUFReader
from gguf import quants as gquants
from safetensors import safe_open
from safetensors.torch import save_file

from specd.models import gguf_model, kernels
from specd.models.errors import ModelError
from specd.models.gguf_convert import hf_name
from specd.models.gguf_float import GgufFloatWeights, RoundedEmbedding
from specd.models.gguf_model import GgufFile
from specd.models.loader import _converted_path, load_model
from specd.models.quantize import SOURCE_KEY
from tests.test_gguf_model import LAYER_TYPES, write_tiny_gguf
from tests.tiny import tiny_tokenizer

pytestmark = pytest.mark.skipif(kernels.unavailable() is not None, reason=str(kernels.unavailable()))

TOKENS = torch.tensor([5, 80, 13, 200, 7, 7, 99, 31, 250, 2, 64, 128])


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("SPECD_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path


def _former_copy(path: Path) -> dict[str, torch.Tensor]:
    """What ``specd models pull`` used to write as converted/model.safetensors (its code, inline):
    gguf-py's dequantization of every tensor, matrices in bfloat16, vectors in float32."""
    out = {}
    for t in GGUFReader(str(path)).tensors:
        shape = tuple(int(x) for x in reversed(t.shape.tolist()))
        ten = torch.from_numpy(np.array(gquants.dequantize(t.data, t.tensor_type).reshape(shape), dtype=np.float32))
        out[hf_name(t.name)] = ten if ten.ndim == 1 else ten.to(torch.bfloat16)
    return out


def _former_dir(cache: Path, path: Path) -> Path:
    """The directory an older specd's pull left for ``path``: its dequantized copy, config and tokenizer."""
    former_dir = cache / "former"
    former_dir.mkdir()
    save_file(_former_copy(path), str(former_dir / "model.safetensors"))
    (former_dir / "config.json").write_text(json.dumps(GgufFile(path).config.to_hf()))
    tiny_tokenizer()._tok.save(str(former_dir / "tokenizer.json"))
    return former_dir


def _tiny(cache: Path, name: str = "tiny.gguf", **kw) -> Path:
    """A tiny GGUF (every block format the kernels run, and an F16 matrix) with the tiny tokenizer
    placed in its cache directory (its vocabulary has no merges to build one from)."""
    types = [dict(LAYER_TYPES[0]), dict(LAYER_TYPES[1])]
    types[1]["attn_output"] = T.F16
    path = write_tiny_gguf(cache / name, seed=0, layer_types=types, **kw)
    directory = _converted_path(path)
    directory.mkdir(parents=True, exist_ok=True)
    tiny_tokenizer()._tok.save(str(directory / "tokenizer.json"))
    return path


def _cache_files(cache: Path) -> list[str]:
    root = cache / "cache"
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()) if root.exists() else []


@pytest.mark.parametrize("kernels", [True, False], ids=["kernels", "gguf-py"])
@pytest.mark.parametrize("chunk", [gguf_model.CHUNK_ROWS, 7])
def test_tensors_equal_the_former_converted_copy(cache: Path, monkeypatch: pytest.MonkeyPatch,
                                                 kernels: bool, chunk: int) -> None:
    """Bit for bit, whichever dequantizer runs (specd's kernels' reference or gguf-py) and however
    the rows are chunked (7: chunks end inside every tensor)."""
    path = write_tiny_gguf(cache / "tiny.gguf", seed=0, embed=T.Q8_0, output=T.Q4_K)
    monkeypatch.setattr(gguf_model, "CHUNK_ROWS", chunk)
    if not kernels:
        monkeypatch.setattr(gguf_model.kernels, "available", lambda: False)
    former = _former_copy(path)
    weights = GgufFloatWeights(GgufFile(path))
    assert sorted(weights) == sorted(former)
    for name, ref in former.items():
        got = weights[name]
        assert got.dtype == ref.dtype and got.shape == ref.shape, name
        assert torch.equal(got, ref), name


@pytest.mark.parametrize("quant", ["int4", "int8", "bf16"])
def test_models_equal_the_ones_built_from_the_former_copy(cache: Path, quant: str) -> None:
    """The same layers (int4: the same calibration and scale search) and the same logits as a load
    of the former converted directory, and no float copy anywhere in the cache."""
    path = _tiny(cache)
    former_dir = _former_dir(cache, path)
    before = load_model(str(former_dir), quant=quant, max_len=64).model
    now = load_model(str(path), quant=quant, max_len=64).model
    assert before.describe() == now.describe()
    # the embedding stays in the file's blocks (the tiny file has its own output head)
    assert isinstance(now.embed, RoundedEmbedding) and now.embed.nbytes < before.embed.nbytes
    assert torch.equal(before.forward(TOKENS), now.forward(TOKENS))
    assert not [f for f in _cache_files(cache) if f.endswith("model.safetensors")]


def test_stored_layers_are_keyed_by_the_files_sha256(cache: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The INT4 layers are stored once, whole (renamed into place), recording the GGUF's sha256; a
    later load reuses them; an artifact recording another file's sha256 is quantized again."""
    path = _tiny(cache)
    first = load_model(str(path), quant="int4", max_len=64)
    [artifact] = first.path.glob("quant-int4*.safetensors")
    sha = hashlib.sha256(path.read_bytes()).hexdigest()
    with safe_open(str(artifact), framework="pt") as f:
        assert f.metadata()[SOURCE_KEY] == sha
    assert not [p for p in first.path.iterdir() if "partial" in p.name]
    stamp = artifact.stat().st_mtime_ns
    logits = first.model.forward(TOKENS)  # (forward fills the model's KV cache: once per model)
    again = load_model(str(path), quant="int4", max_len=64)
    assert artifact.stat().st_mtime_ns == stamp  # read, not written again
    assert torch.equal(logits, again.model.forward(TOKENS))
    # the same directory, an artifact claiming another source: not used, rebuilt and re-keyed
    with safe_open(str(artifact), framework="pt") as f:
        tensors = {k: f.get_tensor(k) for k in f.keys()}
    save_file(tensors, str(artifact), metadata={"format": "pt", SOURCE_KEY: "0" * 64})
    capsys.readouterr()
    rebuilt = load_model(str(path), quant="int4", max_len=64)
    assert "made from another file" in capsys.readouterr().err
    with safe_open(str(artifact), framework="pt") as f:
        assert f.metadata()[SOURCE_KEY] == sha
    assert torch.equal(logits, rebuilt.model.forward(TOKENS))


@pytest.mark.parametrize("quant", ["int4", "bf16"])
def test_a_truncated_file_names_itself_and_leaves_nothing_in_the_cache(cache: Path, quant: str) -> None:
    whole = write_tiny_gguf(cache / "tiny.gguf", seed=0)
    data = whole.read_bytes()
    cuts = {"half": data[: len(data) // 2], "last tensor": data[:-100], "header": data[:200]}
    for what, cut in cuts.items():
        path = cache / f"cut-{what.replace(' ', '-')}.gguf"
        path.write_bytes(cut)
        with pytest.raises(ModelError, match=rf"cannot read GGUF file .*{path.name}: truncated") as e:
            load_model(str(path), quant=quant, max_len=64)
        assert str(path) in str(e.value), what
        assert _cache_files(cache) == [], what


def test_a_corrupt_file_names_itself_and_leaves_nothing_in_the_cache(cache: Path) -> None:
    whole = write_tiny_gguf(cache / "tiny.gguf", seed=0)
    data = bytearray(whole.read_bytes())
    junk = cache / "junk.gguf"
    junk.write_bytes(b"GGUF" + bytes([3, 0, 0, 0]) + b"\xff" * 64)  # a GGUF v3 header with absurd counts
    with pytest.raises(ModelError, match=r"cannot read GGUF file .*junk\.gguf"):
        load_model(str(junk), quant="int4", max_len=64)
    data[:4] = b"FUGG"
    bad = cache / "bad-magic.gguf"
    bad.write_bytes(bytes(data))
    with pytest.raises(ModelError, match=r"cannot read GGUF file .*bad-magic\.gguf.*no GGUF magic"):
        load_model(str(bad), quant="int8", max_len=64)
    assert _cache_files(cache) == []


def test_a_file_whose_tokenizer_cannot_be_built_names_itself_and_leaves_nothing(cache: Path) -> None:
    """The tiny file's vocabulary has no tokenizer model or merges: building its tokenizer fails
    (a ModelError naming the file), and no partial tokenizer or config is left in the cache."""
    path = write_tiny_gguf(cache / "notok.gguf", seed=0)
    with pytest.raises(ModelError, match=r"notok\.gguf: cannot build a tokenizer"):
        load_model(str(path), quant="bf16", max_len=64)
    assert _cache_files(cache) == []
    assert not (cache / "cache" / "converted").exists() or not list((cache / "cache" / "converted").iterdir())


def test_the_ort_graph_from_a_gguf_file_equals_the_one_from_the_former_copy(cache: Path) -> None:
    """ONNX Runtime (fp32) reads the same float weights; its stored graph is stamped with the
    file's sha256 and reused."""
    pytest.importorskip("onnx")
    pytest.importorskip("onnxruntime")
    path = _tiny(cache)
    former_dir = _former_dir(cache, path)
    before = load_model(str(former_dir), quant="fp32", backend="ort", max_len=64).model
    now = load_model(str(path), quant="fp32", backend="ort", max_len=64)
    [graph] = now.path.glob("ort-fp32*.onnx")
    stamp = graph.stat().st_mtime_ns
    assert torch.equal(before.forward(TOKENS), now.model.forward(TOKENS))
    load_model(str(path), quant="fp32", backend="ort", max_len=64)
    assert graph.stat().st_mtime_ns == stamp
