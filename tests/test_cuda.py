"""The CUDA paths end to end, on tiny random models loaded as the daemon loads them.

``--device cuda`` runs the target and the draft on the GPU (bitsandbytes LLM.int8 / NF4, FP8
``_scaled_mm``, or bf16); what leaves a model (logits, hidden states) comes back on the CPU, where
the engine samples. The contract is the CPU's: greedy speculative text equals target-only text.
Skipped without a CUDA GPU; ``bench/gpu_check.py`` runs this file on a lent GPU machine.
"""

from __future__ import annotations

import pytest
import torch

from specd.app import build_engine
from specd.engine.engine import CompletionRequest, EngineConfig
from specd.models.loader import load_model
from tests.tiny import save_tiny_model

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

PREFIX = "def add(a, b):\n    return "
SUFFIX = "\n\nprint(add(1, 2))\n"
FP8_OK = torch.cuda.is_available() and torch.cuda.get_device_capability() >= (8, 9)
TARGET_MODES = ["int8", "bf16", pytest.param("fp8", marks=pytest.mark.skipif(not FP8_OK, reason="fp8 needs sm89+"))]


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    root = tmp_path_factory.mktemp("cuda-pair")
    return str(save_tiny_model(root / "target", seed=0, hidden=128)), str(save_tiny_model(root / "draft", seed=1))


def _config(pair, target_quant: str, **kw) -> EngineConfig:
    target, draft = pair
    kw.setdefault("k", 4)
    return EngineConfig(target=target, draft=draft, device="cuda", target_quant=target_quant, draft_quant="int4",
                        max_len=512, **kw)


# Random tiny models magnify quantization error (on the CPU, against fp32: bf16 0.045, int8 0.09,
# fp8 0.24, specd's int4 0.66): the bounds catch a wrong layout or scale, which gives ~1.4
@pytest.mark.parametrize("quant, reference, tol", [
    ("bf16", "bf16", 0.02), ("int8", "fp32", 0.2), ("int4", "fp32", 1.0),
    pytest.param("fp8", "fp32", 0.4, marks=pytest.mark.skipif(not FP8_OK, reason="fp8 needs sm89+")),
])
def test_cuda_logits_follow_the_cpu(pair, quant: str, reference: str, tol: float) -> None:
    """Each CUDA mode's logits over a prefill and one step, against the CPU's, and returned on the CPU."""
    ids = torch.arange(40) * 7 % 250
    cpu = load_model(pair[0], quant=reference, max_len=128, backend="torch").model
    gpu = load_model(pair[0], quant=quant, max_len=128, device="cuda").model
    ref = torch.cat([cpu.forward(ids[:39]), cpu.forward(ids[39:])])  # [40, V]
    out = torch.cat([gpu.forward(ids[:39]), gpu.forward(ids[39:])])
    assert out.device.type == "cpu" and gpu.hidden.states.device.type == "cpu"
    err = float((out - ref).norm() / ref.norm())
    print(f"{quant} on CUDA vs {reference} on the CPU: relative error {err:.4f}")
    assert err < tol


@pytest.mark.parametrize("target_quant", TARGET_MODES)
@pytest.mark.parametrize("tree", ["off", "on"])
def test_greedy_matches_target_on_cuda(pair, target_quant: str, tree: str) -> None:
    engine = build_engine(_config(pair, target_quant, tree=tree))
    spec = engine.complete(CompletionRequest(PREFIX, SUFFIX, max_tokens=48, mode="spec"))
    target = engine.complete(CompletionRequest(PREFIX, SUFFIX, max_tokens=48, mode="target"))
    assert spec.stats.drafted > 0
    assert spec.tokens == target.tokens and spec.text == target.text


def test_sampling_on_cuda_is_seeded(pair) -> None:
    engine = build_engine(_config(pair, "int8"))
    runs = [engine.complete(CompletionRequest(PREFIX, SUFFIX, max_tokens=32, temperature=0.8, seed=7))
            for _ in range(2)]
    assert runs[0].tokens == runs[1].tokens and runs[0].stats.drafted > 0


def test_k_auto_prices_the_pair_on_cuda(pair) -> None:
    """K auto times both models on the GPU (one forward each, synchronised by the logits' copy)."""
    engine = build_engine(_config(pair, "int8", k="auto"))
    spec = engine.complete(CompletionRequest(PREFIX, SUFFIX, max_tokens=24, mode="spec"))
    target = engine.complete(CompletionRequest(PREFIX, SUFFIX, max_tokens=24, mode="target"))
    assert spec.tokens == target.tokens
