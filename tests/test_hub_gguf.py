"""A GGUF in a Hugging Face repository (``owner/repo:file.gguf``, ``owner/repo:QUANT``): named,
picked, fetched through huggingface_hub's cache (offline here: a cache laid out as the hub
writes it) and run as any local GGUF."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from specd.models import hub_gguf, kernels
from specd.models.errors import ModelError
from tests.padded_models import REAL, write_gguf_model

REPO = "someone/Tiny-Coder-GGUF"
FILE = "tiny-coder-q8_0.gguf"


def test_spec_forms() -> None:
    assert hub_gguf.is_hub_gguf(f"{REPO}:{FILE}") and hub_gguf.is_hub_gguf(f"{REPO}:Q4_K_M")
    assert not hub_gguf.is_hub_gguf(REPO) and not hub_gguf.is_hub_gguf("qwen2.5-coder-1.5b")
    assert not hub_gguf.is_hub_gguf("/tmp/model.gguf")


def test_pick_by_quant_tag() -> None:
    files = ["README.md", "m-q4_k_m.gguf", "m-q8_0.gguf", "m-q6_k-00001-of-00002.gguf", "m-q6_k-00002-of-00002.gguf"]
    assert hub_gguf.pick(files, "Q4_K_M", REPO) == "m-q4_k_m.gguf"
    with pytest.raises(ModelError, match="no .gguf file matches 'Q5_K_M'.*m-q4_k_m.gguf"):
        hub_gguf.pick(files, "Q5_K_M", REPO)
    with pytest.raises(ModelError, match="split in parts.*llama-gguf-split"):
        hub_gguf.pick(files, "q6_k", REPO)
    with pytest.raises(ModelError, match="several files"):
        hub_gguf.pick(["a-q4_0.gguf", "b-q4_0.gguf"], "q4_0", REPO)


def _hub_cache(root: Path, gguf: Path) -> None:
    """``gguf`` as huggingface_hub caches a download of REPO's FILE (refs/main -> a snapshot)."""
    repo = root / "hub" / ("models--" + REPO.replace("/", "--"))
    commit = "0" * 40
    snap = repo / "snapshots" / commit
    snap.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    (snap / FILE).write_bytes(gguf.read_bytes())


@pytest.mark.skipif(not kernels.available(), reason=kernels.unavailable() or "")
def test_a_cached_hub_gguf_loads_and_runs_offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from specd.models.footprint import estimate
    from specd.models.loader import is_gguf_source, load_model

    _hub_cache(tmp_path / "hf", write_gguf_model(tmp_path / "src.gguf", rows=REAL, seed=0))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf" / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("SPECD_CACHE_DIR", str(tmp_path / "specd"))
    spec = f"{REPO}:{FILE}"
    assert is_gguf_source(spec)
    assert hub_gguf.cached_path(spec) is not None and estimate(spec, "gguf", 64).total > 0  # fit checked
    lm = load_model(spec, quant="auto", max_len=64)
    assert lm.model.vocab_size == REAL and lm.path.name == FILE  # auto: a GGUF runs as gguf, from the hub cache
    assert bool(torch.isfinite(lm.model.forward(torch.tensor([1, 2, 3]))).all())
    with pytest.raises(ModelError, match="cannot fetch"):  # not in the cache, and offline
        load_model(f"{REPO}:other.gguf", quant="gguf", max_len=64)
