"""Loading models from a Hugging Face directory, and the errors for broken ones."""

from __future__ import annotations

import pytest

from specd.engine.engine import CompletionRequest, Engine, EngineConfig
from specd.models.errors import ModelError
from specd.models.loader import load_model
from tests.tiny import save_tiny_model


def test_engine_loads_hf_directories(tmp_path) -> None:
    target = save_tiny_model(tmp_path / "target", seed=0)
    draft = save_tiny_model(tmp_path / "draft", seed=1)
    engine = Engine.load(EngineConfig(target=str(target), draft=str(draft), max_len=256))
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
