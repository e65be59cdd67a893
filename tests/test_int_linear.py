"""specd's INT8 kernel (models/csrc/int_linear.c): against a slow reference built from the packed
numbers, bit-exact batch invariance, the activation quantization, bad shapes, and the exactness
contract (greedy speculative == greedy target-only) with a tiny model whose target runs on it."""

from __future__ import annotations

import pytest
import torch

from specd.models import int_linear, kernels
from specd.models.errors import ModelError
from specd.models.gguf_linear import dequantize, repacks_here

pytestmark = pytest.mark.skipif(kernels.unavailable() is not None, reason=str(kernels.unavailable()))

G = torch.Generator().manual_seed(1)


def _reference(x: torch.Tensor, packed: torch.Tensor, k: int) -> torch.Tensor:
    """float64: sum over blocks of d_w * d_x * (exact integer dot of the int8 blocks), with the
    activations quantized by the documented rule (d = absmax / 127 per row and block of 32,
    q = round-half-even(x * (1 / d)), all in float32)."""
    wq, wd = int_linear.unpack(packed, k)  # [N, K] int8, [N, K/32]
    n = x.shape[0]
    g = x.float().reshape(n, -1, 32)
    d = g.abs().amax(-1) / 127  # [n, K/32] float32
    inv = torch.where(d > 0, 1.0 / d, torch.zeros_like(d))
    xq = torch.round(g * inv[..., None]).clamp(-127, 127)
    dots = torch.einsum("rbi,obi->rob", xq.double(), wq.double().reshape(wq.shape[0], -1, 32))  # exact
    return (dots * d.double()[:, None, :] * wd.double()[None]).sum(-1)


@pytest.mark.parametrize("n_out,k", [(96, 128), (70, 96), (33, 288)])  # k/32 = 4, 3 (no group of 8), 9
def test_matches_reference(n_out: int, k: int) -> None:
    w = torch.randn(n_out, k, generator=G) / 10
    x = torch.randn(11, k, generator=G)
    x[:, 5] *= 40  # an outlier channel: only its own block of 32 gets a coarse scale
    layer = int_linear.Q8Linear.from_float(w)
    ref = _reference(x, layer.packed, k)
    assert float((layer(x).double() - ref).abs().max()) <= 1e-5 * float(ref.abs().max())
    # and the quantization itself stays close to the float product
    exact = x.double() @ w.double().t()
    assert float((layer(x).double() - exact).norm() / exact.norm()) < 0.02


def test_activation_quantization_matches_the_documented_rule() -> None:
    x = torch.randn(5, 64, generator=G) * 3
    x[2, :32] = 0  # an all-zero block: scale 0, codes 0
    q, d = int_linear.quantize_activations(x)
    g = x.reshape(5, -1, 32)
    dd = g.abs().amax(-1) / 127
    inv = torch.where(dd > 0, 1.0 / dd, torch.zeros_like(dd))
    assert torch.equal(d, dd)
    assert torch.equal(q, torch.round(g * inv[..., None]).to(torch.int8).reshape(5, 64))
    assert int(q.abs().max()) == 127


def test_pack_roundtrip_error_bound() -> None:
    w = torch.randn(40, 256, generator=G)
    wq, wd = int_linear.unpack(int_linear.pack(w), 256)
    deq = wq.float() * wd.repeat_interleave(32, 1)
    step = wd.repeat_interleave(32, 1)
    # half a step, plus the fp16 rounding of the scale (relative 2^-11 of up to 127 steps)
    assert bool(((deq - w).abs() <= step * (0.5 + 127 * 2**-11) + 1e-7).all())


def test_batch_invariant_bit_for_bit() -> None:
    """A row's output does not depend on the other rows in the call or on its place among them
    (row tiles of 4, a leftover tile, a row 100x larger than the rest)."""
    w = torch.randn(200, 512, generator=G) / 10
    x = torch.randn(9, 512, generator=G)
    x[4] *= 100
    layer = int_linear.Q8Linear.from_float(w)
    together = layer(x)
    for i in range(9):
        assert torch.equal(layer(x[i : i + 1])[0], together[i])
    assert torch.equal(layer(x[3:8]), together[3:8])
    assert torch.equal(layer(torch.cat([x[7:], x[:2]])), torch.cat([together[7:], together[:2]]))


def test_bad_shapes_are_clear_errors() -> None:
    with pytest.raises(ValueError, match="multiple of 32"):
        int_linear.pack(torch.randn(4, 100))
    layer = int_linear.Q8Linear.from_float(torch.randn(8, 64))
    with pytest.raises(ValueError, match="expected 64 input features"):
        layer(torch.randn(2, 32))
    with pytest.raises(ModelError, match="does not fit"):
        int_linear.Q8Linear(torch.zeros(8, 10, dtype=torch.uint8), 64)


def test_greedy_speculative_matches_target_with_q8_target(tmp_path) -> None:
    """The contract on the kernel: a tiny INT8 target on the torch runtime (every linear, head
    included, on Q8Linear), greedy speculative output equal to greedy target-only output."""
    from specd.app import build_engine
    from specd.engine.engine import CompletionRequest, EngineConfig
    from tests.tiny import save_tiny_model

    t, d = save_tiny_model(tmp_path / "t", seed=0), save_tiny_model(tmp_path / "d", seed=1)
    engine = build_engine(EngineConfig(target=str(t), draft=str(d), target_quant="int8", draft_quant="int4",
                                      max_len=256, k=4, target_backend="torch", draft_backend="torch"))
    target = engine.target
    assert all(isinstance(layer[n], int_linear.Q8Linear) for layer in target.layers for n in ("qkv", "o", "gate_up", "down"))
    assert isinstance(target.lm_head, int_linear.Q8Linear)
    for k in (1, 3, 6):
        spec = engine.complete(CompletionRequest("def f(x):", max_tokens=30, k=k))
        plain = engine.complete(CompletionRequest("def f(x):", max_tokens=30, mode="target"))
        assert spec.tokens == plain.tokens and spec.stats.drafted > 0
    assert list(t.glob("quant-int8-q8.safetensors"))  # packed once, stored


# -- INT4 (drafts) -------------------------------------------------------------------------


def _reference4(x: torch.Tensor, packed: torch.Tensor, k: int) -> torch.Tensor:
    """As ``_reference``, with the INT4 weights' integer values (q - 8) and scales."""
    wq, wd = int_linear.unpack4(packed, k)
    xq, xd = int_linear.quantize_activations(x)
    n = x.shape[0]
    dots = torch.einsum("rbi,obi->rob", xq.double().reshape(n, -1, 32), wq.double().reshape(wq.shape[0], -1, 32))
    return (dots * xd.double()[:, None, :] * wd.double()[None]).sum(-1)


@pytest.mark.parametrize("n_out,k", [(96, 128), (70, 96), (33, 288), (40, 896), (64, 896)])
def test_q4_matches_reference(n_out: int, k: int) -> None:
    w = torch.randn(n_out, k, generator=G) / 10
    x = torch.randn(11, k, generator=G)
    packed = int_linear.pack4(w)
    layer = int_linear.Q4Linear(packed, k)
    assert layer.repacked is (repacks_here() and n_out % 16 == 0)  # whole groups of 16 rows repack
    ref = _reference4(x, packed, k)
    assert float((layer(x).double() - ref).abs().max()) <= 1e-5 * float(ref.abs().max())
    exact = x.double() @ w.double().t()
    assert float((layer(x).double() - exact).norm() / exact.norm()) < 0.15  # 4-bit weights


def test_q4_weights_are_q4_0_blocks_of_the_same_numbers() -> None:
    """Q4Linear runs the GGUF kernels' Q4_0 blocks: their dequantization (gguf-py's numbers) is
    exactly d (q - 8) of the INT4 packing, and the layer keeps one copy of the weights (the
    repacked one where it repacks; ``parts`` unrepacks it to the same Q4_0 bytes)."""
    w = torch.randn(48, 896, generator=G) / 10
    packed = int_linear.pack4(w)
    wq, wd = int_linear.unpack4(packed, 896)
    blocks = int_linear.q4_0_blocks(packed, 896)
    want = wq.float() * wd.repeat_interleave(32, 1)
    assert torch.equal(dequantize(2, blocks, 896), want)
    layer = int_linear.Q4Linear(packed, 896)
    assert torch.equal(layer.parts[0].raw, blocks)
    assert torch.equal(layer.dequantize(), want)
    assert layer.nbytes() == blocks.nbytes  # the bytes the kernels read: one copy


def test_q4_pack_roundtrip_error_bound() -> None:
    """Q4_0's rule: d = m / -8 (m the block's value of largest magnitude, which maps exactly to
    q = 0), every other value within half a step (the clamp at 15 only ever touches values that
    round past +7 steps, at most one step away)."""
    w = torch.randn(40, 256, generator=G)
    wq, wd = int_linear.unpack4(int_linear.pack4(w, search=False), 256)
    assert int(wq.min()) >= -8 and int(wq.max()) <= 7
    step = wd.abs().repeat_interleave(32, 1)
    deq = wq.float() * wd.repeat_interleave(32, 1)
    assert bool(((deq - w).abs() <= step * (1 + 8 * 2**-11) + 1e-6).all())
    assert float((deq - w).abs().mean() / step.mean()) < 0.3


def _q4_block_errors(w: torch.Tensor, importance: torch.Tensor | None = None, **kw) -> torch.Tensor:
    wq, wd = int_linear.unpack4(int_linear.pack4(w, importance=importance, **kw), w.shape[1])
    err = (wq.float() * wd.repeat_interleave(32, 1) - w).square()
    if importance is not None:
        err = err * importance
    return err.reshape(w.shape[0], -1, 32).sum(-1)  # [N, nb]


def test_q4_scale_search_never_worse_than_the_plain_rule() -> None:
    w = torch.randn(64, 512, generator=G) / 10
    w[:, 7] *= 6  # an outlier channel
    plain, searched = _q4_block_errors(w, search=False), _q4_block_errors(w)
    assert bool((searched <= plain * (1 + 1e-6)).all())
    assert float(searched.sum()) < 0.95 * float(plain.sum())


def test_q4_importance_lowers_the_weighted_error() -> None:
    """Channels that carry more activation energy are fit more closely: the expected squared
    error of the layer's output (sum E[x^2] dw^2) is lower with the importance than without."""
    w = torch.randn(64, 512, generator=G) / 10
    importance = torch.rand(512, generator=G) ** 4 * 10 + 0.01  # a few channels dominate
    wq, wd = int_linear.unpack4(int_linear.pack4(w), 512)  # searched, blind to the importance
    blind_weighted = ((wq.float() * wd.repeat_interleave(32, 1) - w).square() * importance).sum()
    aware = _q4_block_errors(w, importance).sum()
    plain = _q4_block_errors(w, importance, search=False).sum()
    assert float(aware) < 0.9 * float(blind_weighted) and float(aware) < float(plain)


def test_q4_batch_invariant_bit_for_bit() -> None:
    w = torch.randn(200, 512, generator=G) / 10
    x = torch.randn(9, 512, generator=G)
    x[4] *= 100
    layer = int_linear.Q4Linear.from_float(w)
    together = layer(x)
    for i in range(9):
        assert torch.equal(layer(x[i : i + 1])[0], together[i])


def test_q4_bad_shapes_are_clear_errors() -> None:
    with pytest.raises(ValueError, match="multiple of 32"):
        int_linear.pack4(torch.zeros(4, 40))
    with pytest.raises(ModelError, match="does not fit"):
        int_linear.Q4Linear(torch.zeros(8, 10, dtype=torch.uint8), 64)
