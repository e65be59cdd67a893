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



def test_one_loader_entry_per_quant_mode_agreeing_with_the_mode_lists() -> None:
    """``loader.MODES`` has an entry for each mode ``specd.models.modes`` names (``auto`` resolves
    to one), the backends the lists say, and the default mode the engine's settings use."""
    import inspect

    import torch

    from specd.engine.config import EngineConfig
    from specd.models import modes
    from specd.models.loader import MODES, modes_on

    assert (modes.AUTO_QUANT, *MODES) == modes.TARGET_QUANTS
    assert set(modes.DRAFT_QUANTS) <= set(MODES)
    assert modes_on("ort") == modes.ORT_QUANTS
    assert set(modes_on("torch")) == set(MODES)
    assert {n for n, m in MODES.items() if m.compute_dtype == torch.float32} == {"fp32"}
    assert {n for n, m in MODES.items() if m.calibration is not None} == {"int8", "int4"}
    default = inspect.signature(load_model).parameters["quant"].default
    assert default == EngineConfig().target_quant == modes.DEFAULT_TARGET_QUANT


@pytest.mark.parametrize("quant", ["int8", "int4", "bf16"])
def test_calibration_runs_once_when_the_quantizer_weighs_it(tmp_path, monkeypatch, quant) -> None:
    """int8 calibrates on the fallback runtime only, int4 on specd's kernels only, and neither once
    its layers are stored; the statistics reach the quantizer through the factory's constructor."""
    from specd.models import kernels, loader

    calls: list[str] = []
    calibrate = loader._calibrate
    monkeypatch.setattr(loader, "_calibrate", lambda *a: calls.append(a[4]) or calibrate(*a))
    d = save_tiny_model(tmp_path / "m")
    load_model(str(d), quant=quant, backend="torch")
    expected = {"int8": not kernels.available(), "int4": kernels.available(), "bf16": False}[quant]
    assert calls == ([quant] if expected else [])
    load_model(str(d), quant=quant, backend="torch")  # from the stored layers
    assert calls == ([quant] if expected else [])


@pytest.mark.parametrize("backend,quant", [("torch", "bf16"), ("torch", "int8"), ("ort", "int8")])
def test_row_attention_is_a_load_argument(tmp_path, backend, quant) -> None:
    d = save_tiny_model(tmp_path / "m")
    assert load_model(str(d), quant=quant, backend=backend, max_len=32).model.row_attention is True
    draft = load_model(str(d), quant=quant, backend=backend, max_len=32, row_attention=False).model
    assert draft.row_attention is False


def test_the_engine_loads_its_draft_without_row_attention(tmp_path) -> None:
    target = save_tiny_model(tmp_path / "target", seed=0)
    draft = save_tiny_model(tmp_path / "draft", seed=1)
    engine = build_engine(EngineConfig(target=str(target), draft=str(draft), max_len=256, target_quant="bf16",
                                       draft_quant="bf16", k=2))
    assert engine.target.row_attention is True and engine.draft.row_attention is False
