"""Loading models from a Hugging Face directory, and the errors for broken ones."""

from __future__ import annotations

import pytest

from specd.app import build_engine
from specd.engine.engine import CompletionRequest, EngineConfig
from specd.models.errors import ModelError
from specd.models.loader import load_model
from tests.tiny import save_tiny_model


def test_engine_loads_hf_directories(tmp_path) -> None:
    target = save_tiny_model(tmp_path / "target", seed=0)
    draft = save_tiny_model(tmp_path / "draft", seed=1)
    engine = build_engine(EngineConfig(target=str(target), draft=str(draft), max_len=256))
    spec = engine.complete(CompletionRequest("def f(x):\n", max_tokens=12))
    target_only = engine.complete(CompletionRequest("def f(x):\n", max_tokens=12, mode="target"))
    assert spec.tokens == target_only.tokens and len(spec.tokens) == 12


def test_directory_without_config(tmp_path) -> None:
    with pytest.raises(ModelError, match="no config.json"):
        load_model(str(tmp_path))


def test_truncated_weights(tmp_path) -> None:
    d = save_tiny_model(tmp_path / "m")
    data = (d / "model.safetensors").read_bytes()
    (d / "model.safetensors").write_bytes(data[: len(data) // 2])
    with pytest.raises(ModelError, match="corrupt"):
        load_model(str(d))


def test_missing_tensor(tmp_path) -> None:
    from safetensors.torch import load_file, save_file

    d = save_tiny_model(tmp_path / "m")
    w = load_file(str(d / "model.safetensors"))
    del w["model.layers.1.mlp.down_proj.weight"]
    save_file(w, str(d / "model.safetensors"))
    with pytest.raises(ModelError, match="down_proj"):
        load_model(str(d))


@pytest.mark.parametrize("quant", ["int8", "int4"])
def test_stored_quantized_layers_never_read_the_float_linears(tmp_path, monkeypatch, quant) -> None:
    """The first load quantizes and stores the layers; a later load reads only the embedding,
    norms and biases from the checkpoint (the float linears would otherwise sit in memory)."""
    from specd.models import loader

    d = save_tiny_model(tmp_path / "m")
    first = load_model(str(d), quant=quant)
    assert list(d.glob(f"quant-{quant}*.safetensors"))
    read: list[str] = []
    get = loader._LazyWeights.__getitem__
    monkeypatch.setattr(loader._LazyWeights, "__getitem__", lambda self, name: read.append(name) or get(self, name))
    again = load_model(str(d), quant=quant)
    assert read and not [n for n in read if n.endswith("proj.weight")], read
    ids = __import__("torch").tensor([1, 2, 3])
    assert (first.model.forward(ids) == again.model.forward(ids)).all()


def test_auto_runs_a_gguf_source_natively_on_the_cpu_and_int8_elsewhere() -> None:
    from specd.models.modes import auto_target_quant

    assert auto_target_quant(True, "cpu", gguf_kernels=True) == "gguf"
    assert auto_target_quant(True, "cpu", gguf_kernels=False) == "int8"  # no kernels built here
    assert auto_target_quant(True, "cuda", gguf_kernels=True) == "int8"  # gguf runs on the CPU only
    assert auto_target_quant(False, "cpu", gguf_kernels=True) == "int8"  # a Hugging Face source

