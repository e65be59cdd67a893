"""Quantized linears: error bounds, agreement with dequantized references, batch invariance, and
the exactness contract with a quantized target."""

from __future__ import annotations

import pytest
import torch

from specd.models.fp8 import FP8Linear, quantize_fp8
from specd.models.quant import (
    INT8_QMAX,
    Int4Linear,
    Int8RowLinear,
    Int8WeightOnlyLinear,
    quantize_int4_groupwise,
    quantize_int8_per_channel,
)

G = torch.Generator().manual_seed(0)
W = torch.randn(96, 128, generator=G) / 10  # [N, K]; N not a multiple of 16 on purpose
X = torch.randn(7, 128, generator=G)
X[:, 5] *= 40  # an outlier channel, as Qwen's activations have


def test_int8_roundtrip_error_bound() -> None:
    q, s = quantize_int8_per_channel(W)
    assert q.dtype == torch.int8 and int(q.abs().max()) <= INT8_QMAX
    err = (q.float() * s[:, None] - W).abs()
    assert bool((err <= s[:, None] / 2 + 1e-7).all())


def test_int4_roundtrip_error_bound() -> None:
    q, sz = quantize_int4_groupwise(W, 64)
    assert int(q.min()) >= 0 and int(q.max()) <= 15
    scale, zero = sz[..., 0].float().t(), sz[..., 1].float().t()  # [N, K/64]
    deq = (q.float() - 8) * scale.repeat_interleave(64, 1) + zero.repeat_interleave(64, 1)
    # half a step, plus bf16 rounding of the stored scale and zero
    bound = scale.repeat_interleave(64, 1) * (0.5 + 8 * 2**-8) + zero.abs().repeat_interleave(64, 1) * 2**-8
    assert bool(((deq - W).abs() <= bound + 1e-6).all())
    with pytest.raises(ValueError, match="multiple of the INT4 group"):
        quantize_int4_groupwise(W[:, :100], 64)


def test_fp8_roundtrip_error_bound() -> None:
    q, s = quantize_fp8(W)
    deq = q.float() * s[:, None]
    # e4m3: 3 mantissa bits, relative error <= 2^-4 for normal values
    big = W.abs() > s[:, None] * 2**-6
    assert bool(((deq - W).abs()[big] <= W.abs()[big] * 2**-4 + 1e-9).all())


def _int8_row_reference(x: torch.Tensor, q: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    """Slow reference: each row divided by its absmax, asymmetric uint8 with scale 2/255 and zero
    point 128 (fbgemm's choice for the range [-1, 1]), integer dot products, dequantized."""
    amax = x.abs().amax(1, keepdim=True)
    scale = 2.0 / 255
    zp = 128
    xq = torch.clamp(torch.round((x / amax) / scale) + zp, 0, 255) - zp  # [n, K]
    acc = xq.double() @ q.double().t()  # exact integers
    return (acc * scale * s.double()[None, :] * amax.double()).float()


def test_int8_row_matches_reference() -> None:
    q, s = quantize_int8_per_channel(W)
    layer = Int8RowLinear(q, s)
    torch.testing.assert_close(layer(X), _int8_row_reference(X, q, s), rtol=1e-4, atol=1e-4)


def test_int4_matches_dequantized_reference() -> None:
    q, sz = quantize_int4_groupwise(W, 64)
    layer = Int4Linear(q, sz, 64)
    scale, zero = sz[..., 0].float().t(), sz[..., 1].float().t()
    deq = (q.float() - 8) * scale.repeat_interleave(64, 1) + zero.repeat_interleave(64, 1)
    ref = X.bfloat16().float() @ deq.t()
    torch.testing.assert_close(layer(X), ref, rtol=2e-2, atol=2e-2 * float(ref.abs().mean()))


def test_fp8_cpu_matches_dequantized_reference() -> None:
    q, s = quantize_fp8(W)
    layer = FP8Linear(q, s)
    ref = X.bfloat16().float() @ (q.float() * s[:, None]).bfloat16().float().t()
    torch.testing.assert_close(layer(X), ref, rtol=2e-2, atol=2e-2 * float(ref.abs().mean()))


@pytest.mark.parametrize("make", [
    lambda: Int8RowLinear.from_float(W),
    lambda: Int4Linear.from_float(W, 64),
    lambda: Int8WeightOnlyLinear.from_float(W),
    lambda: FP8Linear(*quantize_fp8(W)),
], ids=["int8row", "int4", "int8wo", "fp8"])
def test_batch_invariance(make) -> None:
    layer = make()
    together = layer(X)
    alone = torch.cat([layer(X[i : i + 1]) for i in range(X.shape[0])])
    assert torch.equal(together, alone)


def test_quantization_error_is_small_against_float() -> None:
    ref = X @ W.t()
    for layer, tol in ((Int8RowLinear.from_float(W), 0.05), (Int4Linear.from_float(W, 64), 0.12)):
        assert float((layer(X) - ref).norm() / ref.norm()) < tol


def test_bitsandbytes_on_cpu() -> None:
    pytest.importorskip("bitsandbytes")
    from specd.models.gpu import BnbLinear

    ref = X @ W.t()
    for bits, tol in ((4, 0.15), (8, 0.05)):
        layer = BnbLinear(W, bits, "cpu")
        assert float((layer(X) - ref).norm() / ref.norm()) < tol


# an odd output (a tiny vocabulary), an odd input, activations far past float16's range
ODD_W = torch.randn(265, 100, generator=torch.Generator().manual_seed(3)) * 0.05
ODD_X = torch.randn(5, 100, generator=torch.Generator().manual_seed(4)) * 1e5


def test_bitsandbytes_pads_odd_shapes_and_keeps_large_activations() -> None:
    pytest.importorskip("bitsandbytes")
    from specd.models.gpu import BnbLinear

    ref = ODD_X @ ODD_W.t()
    for bits, tol in ((4, 0.15), (8, 0.05)):
        out = BnbLinear(ODD_W, bits, "cpu")(ODD_X)
        assert out.shape == ref.shape and bool(out.isfinite().all())
        assert float((out - ref).norm() / ref.norm()) < tol


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("w, x", [(W, X), (ODD_W, ODD_X)], ids=["aligned", "odd"])
def test_cuda_paths(w: torch.Tensor, x: torch.Tensor) -> None:
    from specd.models.gpu import BnbLinear

    ref = (x @ w.t()).cuda()
    for bits, tol in ((4, 0.15), (8, 0.05)):
        out = BnbLinear(w, bits, "cuda")(x.cuda())
        assert out.shape == ref.shape and float((out - ref).norm() / ref.norm()) < tol
    if torch.cuda.get_device_capability() >= (8, 9):
        q, s = quantize_fp8(w.cuda())
        out = FP8Linear(q, s)(x.cuda())
        assert out.shape == ref.shape and float((out - ref).norm() / ref.norm()) < 0.08


# -- whole models ---------------------------------------------------------------------------------

@pytest.mark.parametrize("target_quant, draft_quant, backend", [
    ("int8", "int4", "torch"), ("int4", "int8", "torch"), ("fp8", "int4", "torch"),
    ("int8", "int4", "auto"),  # the defaults (specd's INT8 kernel where it runs, else ONNX Runtime)
])
def test_greedy_matches_target_with_quantized_target(tmp_path, target_quant, draft_quant, backend) -> None:
    from specd.app import build_engine
    from specd.engine.engine import CompletionRequest, EngineConfig
    from tests.tiny import save_tiny_model

    t, d = save_tiny_model(tmp_path / "t", seed=0), save_tiny_model(tmp_path / "d", seed=1)
    engine = build_engine(EngineConfig(target=str(t), draft=str(d), target_quant=target_quant,
                                      draft_quant=draft_quant, max_len=256, k=4,
                                      target_backend=backend, draft_backend=backend))
    for k in (2, 5):
        spec = engine.complete(CompletionRequest("for i in range(", max_tokens=24, k=k))
        plain = engine.complete(CompletionRequest("for i in range(", max_tokens=24, mode="target"))
        assert spec.tokens == plain.tokens
    from specd.models.loader import resolve_backend

    runtime = resolve_backend(backend, target_quant, "cpu")
    stored = f"quant-{target_quant}*.safetensors" if runtime == "torch" else f"ort-{target_quant}*.onnx"
    assert list(t.glob(stored))  # quantized once, stored


def test_quantized_artifact_is_reused_and_smaller(tmp_path) -> None:
    from specd.models.loader import load_model
    from tests.tiny import save_tiny_model

    d = save_tiny_model(tmp_path / "m", seed=0, hidden=128)
    dense = load_model(str(d), quant="bf16", max_len=64, backend="torch").model
    int8 = load_model(str(d), quant="int8", max_len=64, backend="torch").model
    assert int8.weight_bytes()["linear"] < 0.6 * dense.weight_bytes()["linear"]
    ids = torch.tensor([1, 2, 3, 4])
    first = int8.forward(ids)
    again = load_model(str(d), quant="int8", max_len=64, backend="torch").model.forward(ids)  # from the artifact
    assert torch.equal(first, again)


def test_corrupt_artifact_is_a_clear_error(tmp_path) -> None:
    from specd.models.errors import ModelError
    from specd.models.loader import load_model
    from tests.tiny import save_tiny_model

    d = save_tiny_model(tmp_path / "m")
    load_model(str(d), quant="int8", backend="torch")
    (artifact,) = d.glob("quant-int8*.safetensors")
    artifact.write_bytes(b"garbage")
    with pytest.raises(ModelError, match="corrupt quantized artifact"):
        load_model(str(d), quant="int8", backend="torch")


def test_cuda_mode_without_gpu_is_a_clear_error() -> None:
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    from specd.models.errors import ModelError
    from specd.models.quantize import check_mode

    with pytest.raises(ModelError, match="no CUDA GPU"):
        check_mode("int8", "cuda", "qwen")


def test_int8_outlier_channels_are_dense_and_batch_invariant() -> None:
    outliers = torch.tensor([5])
    layer = Int8RowLinear.from_float(W, outliers)
    plain = Int8RowLinear.from_float(W)
    ref = X @ W.t()
    err_split = float((layer(X) - ref).norm() / ref.norm())
    err_plain = float((plain(X) - ref).norm() / ref.norm())
    assert err_split < err_plain / 2  # the 40x channel no longer coarsens every other one
    alone = torch.cat([layer(X[i : i + 1]) for i in range(X.shape[0])])
    assert torch.equal(layer(X), alone)


def test_calibration_finds_outlier_channels(tmp_path) -> None:
    from specd.models.calibrate import channel_absmax, outlier_channels
    from tests.tiny import tiny_decoder

    texts = [list(range(40))]
    model = tiny_decoder(seed=2, dtype=torch.bfloat16, hidden=64)
    plain = channel_absmax(model, texts)
    assert set(plain) >= {"model.layers.0.qkv", "model.layers.1.down_proj"}
    # the control: a random model's normed embeddings have no outlier channel
    assert outlier_channels(plain["model.layers.0.qkv"]).tolist() == []
    # channels 7 and 30 of the residual stream made huge: layer 0's qkv reads the normed
    # embeddings, so exactly those two input channels stand out there
    model.embed[:, [7, 30]] *= 50
    stats = channel_absmax(model, texts)
    qkv = stats["model.layers.0.qkv"]
    assert outlier_channels(qkv).tolist() == [7, 30]
    assert float(qkv[[7, 30]].min()) > 6 * float(qkv.median())
    assert stats["model.layers.0.qkv"].shape == (64,)
