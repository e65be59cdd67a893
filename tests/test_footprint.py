"""Before loading, specd knows what each model will take (weights in its mode + KV cache) and
refuses, naming the numbers, a pair that does not fit in the memory available (issue #25,
deliverable 2: "says clearly when a model will not fit before it starts loading it")."""

from __future__ import annotations

from pathlib import Path

import pytest

from specd import app
from specd.cli import main
from specd.engine.config import EngineConfig
from specd.models import kernels
from specd.models.errors import ModelError
from specd.models.footprint import NotEnoughMemory, available_memory, estimate
from specd.models.loader import load_model
from tests.padded_models import save_hf_model, write_gguf_model


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("SPECD_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path


def _config(cache: Path, **kw) -> EngineConfig:
    target = write_gguf_model(cache / "target.gguf", 300, seed=0)
    draft = save_hf_model(cache / "draft-hf", rows=272, seed=1)
    kw.setdefault("prefix_cache_mb", 1)
    return EngineConfig(target=str(target), draft=str(draft), target_quant="bf16", draft_quant="bf16", k=2,
                        max_len=512, **kw)


@pytest.mark.parametrize("quant", ["bf16", "fp32", "gguf", "int8"])
def test_the_estimate_matches_the_loaded_model(cache: Path, quant: str) -> None:
    """Weights and KV cache as loaded (int8: the layers in C, a float16 cache; the others float32)."""
    if quant in ("gguf", "int8") and kernels.unavailable() is not None:
        pytest.skip(str(kernels.unavailable()))
    path = write_gguf_model(cache / "m.gguf", 300, seed=0)
    f = estimate(str(path), quant, max_len=512)
    assert f is not None and f.quant == quant
    resident = load_model(str(path), quant=quant, max_len=512, backend="torch").model.resident_bytes()
    assert f.kv_cache_bytes == resident["kv_cache"]
    assert f.weight_bytes == pytest.approx(resident["weights"], rel=0.05), (f, resident)


def test_the_kv_cache_setting_is_what_loads_and_what_is_estimated(cache: Path) -> None:
    """``kv_cache`` f32 keeps float32 keys and values where the layers run in C (f16 halves them);
    anything else is refused by name."""
    if kernels.unavailable() is not None:
        pytest.skip(str(kernels.unavailable()))
    path = write_gguf_model(cache / "m.gguf", 300, seed=0)
    sizes = {}
    for kind in ("f16", "f32"):
        model = load_model(str(path), quant="int8", max_len=512, backend="torch", kv_cache=kind).model
        f = estimate(str(path), "int8", max_len=512, kv_cache=kind)
        assert f is not None and f.kv_cache_bytes == model.resident_bytes()["kv_cache"]
        sizes[kind] = f.kv_cache_bytes
    assert sizes["f32"] == 2 * sizes["f16"]
    with pytest.raises(ModelError, match="KV cache 'f8'"):
        load_model(str(path), quant="int8", max_len=512, backend="torch", kv_cache="f8")


def test_a_hugging_face_directory_is_estimated_from_its_config(cache: Path) -> None:
    path = save_hf_model(cache / "hf", rows=272, seed=0)
    f = estimate(str(path), "bf16", max_len=256)
    resident = load_model(str(path), quant="bf16", max_len=256).model.resident_bytes()
    assert f is not None and f.kv_cache_bytes == resident["kv_cache"]
    assert f.weight_bytes == pytest.approx(resident["weights"], rel=0.05)
    assert estimate("no/such-model-here", "bf16", 256) is None  # a hub id not downloaded: unknown


def test_a_pair_that_does_not_fit_is_refused_before_loading(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = _config(cache)
    (_, target), (_, draft) = app.footprints(config)
    need = target.total + draft.total + (1 << 20)

    def no_load(*args, **kw):
        raise AssertionError("a model was loaded")

    monkeypatch.setattr(app, "load_model", no_load)
    monkeypatch.setattr(app, "available_memory", lambda: (need - 1, "MemAvailable in a test"))
    with pytest.raises(NotEnoughMemory) as err:
        app.build_engine(config)
    message = str(err.value)
    for number in (target.total, target.weight_bytes, target.kv_cache_bytes, draft.total, need, need - 1):
        assert f"{number / (1 << 30):.2f} GiB" in message, (number, message)
    assert f"the target {config.target} (bf16) needs" in message and f"the draft {config.draft} (bf16)" in message
    assert "KV cache at max_len 512" in message and "prefix cache up to" in message
    assert "is available (MemAvailable in a test)" in message
    # exactly enough: it loads
    monkeypatch.setattr(app, "available_memory", lambda: (need, "MemAvailable in a test"))
    with pytest.raises(AssertionError, match="a model was loaded"):
        app.build_engine(config)


def test_the_daemon_says_it_and_exits(cache: Path, monkeypatch: pytest.MonkeyPatch,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    """``specd serve`` prints the refusal as its one error line, before loading, and exits 2."""
    config = _config(cache)
    monkeypatch.setattr(app, "available_memory", lambda: (1 << 20, "MemAvailable in a test"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(cache / "no-config"))
    code = main(["serve", "--socket", str(cache / "specd.sock"), "--target", config.target, "--draft", config.draft,
                 "--target-quant", "bf16", "--draft-quant", "bf16", "--max-len", "512", "--k", "2"])
    err = capsys.readouterr().err
    assert code == 2 and "specd: error: not enough memory to load the models" in err, err
    assert "0.00 GiB is available (MemAvailable in a test)" in err


def test_a_small_pair_fits_here_and_the_available_memory_is_read() -> None:
    have = available_memory()
    assert have is None or have[0] > 0 and have[1]


@pytest.mark.real_models
def test_the_estimates_match_the_real_default_pair(real_engine) -> None:
    """The pulled pair as the default settings load it (target gguf, repacked K-quants; INT4 draft
    with a 65,536-token head): estimate within 5 % of the bytes the loaded models hold."""
    memory = real_engine.memory()
    for role, f in app.footprints(real_engine.config):
        assert f is not None
        assert f.weight_bytes == pytest.approx(memory[f"{role}_weight_bytes"], rel=0.05), (role, f, memory)
        assert f.kv_cache_bytes == memory[f"{role}_kv_cache_bytes"]
