"""Quantized linear layers. Each takes float32 activations ``[n, K]`` and returns float32 ``[n, N]``.

Which kernels are batch-invariant (a row's result does not depend on the other rows in the call)
matters: the target's logits for a position must not depend on how many tokens were verified
together, or greedy speculative output could differ from greedy target-only output.

| class | weights | activations | kernel | batch-invariant |
|---|---|---|---|---|
| ``DenseLinear`` | bf16 / fp32 | same dtype | oneDNN bf16 / MKL fp32 | bf16 yes, fp32 no |
| ``Int8RowLinear`` | int8 per channel (7-bit range) | int8, one scale per row | fbgemm dynamic | yes, by construction |
| ``Int4Linear`` | int4 asymmetric, group-wise | bf16 | ``_weight_int4pack_mm_for_cpu`` | yes (tested) |
| ``Int8WeightOnlyLinear`` | int8 per channel | bf16 | ``_weight_int8pack_mm`` | yes (tested) |
| ``FP8Linear`` | fp8 e4m3 + per-channel scale | fp8 per row (CUDA) / bf16 dequantized (CPU) | ``_scaled_mm`` / dequantize | yes |

``Int8RowLinear`` gets per-row activation scales out of fbgemm's per-tensor dynamic quantization:
each row is divided by its own absmax and two guard columns (+1, -1, with zero weights) are
appended, so every row spans exactly [-1, 1] and the tensor-wide scale and zero point are the same
constants whatever the batch; the int32 accumulation is exact, so each row's output is bit-identical
alone or in a batch. Weights use 7 bits (|q| <= 63) so AVX2's u8×s8 pair sums (vpmaddubsw) cannot
saturate with full 8-bit activations.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Protocol

import torch
import torch.nn.functional as F


class Linear(Protocol):
    in_features: int
    out_features: int

    def __call__(self, x: torch.Tensor) -> torch.Tensor: ...

    def nbytes(self) -> int: ...


@dataclass
class DenseLinear:
    weight: torch.Tensor  # [N, K]

    @property
    def in_features(self) -> int:
        return self.weight.shape[1]

    @property
    def out_features(self) -> int:
        return self.weight.shape[0]

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x.to(self.weight.dtype), self.weight).float()

    def nbytes(self) -> int:
        return self.weight.nbytes


# -- INT8, fbgemm, per-row activation scales ----------------------------------------------------

INT8_QMAX = 63  # 7-bit weights: no vpmaddubsw saturation on AVX2 with 8-bit activations


def quantize_int8_per_channel(w: torch.Tensor, qmax: int = INT8_QMAX) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric per-output-channel: ``w ≈ q * scale[:, None]``; returns (int8 ``[N, K]``, fp32 ``[N]``)."""
    w = w.float()
    scale = (w.abs().amax(dim=1) / qmax).clamp_min(1e-12)
    q = torch.clamp(torch.round(w / scale[:, None]), -qmax, qmax).to(torch.int8)
    return q, scale


class Int8RowLinear:
    """``outliers`` (channel ids, with their bf16 weight columns ``outlier_weight`` ``[N, m]``):
    input channels that calibration found far larger than the rest (Qwen has a few) are computed
    densely, the rest in INT8 — a static split, so rows stay batch-invariant (LLM.int8's
    decomposition, with the outlier set fixed ahead of time)."""

    def __init__(
        self,
        qweight: torch.Tensor,
        scale: torch.Tensor,
        outliers: torch.Tensor | None = None,
        outlier_weight: torch.Tensor | None = None,
    ) -> None:
        n, k = qweight.shape
        self.in_features, self.out_features = k, n
        has = outliers is not None and outliers.numel() > 0
        self.outliers = outliers.to(torch.long) if has else None
        self.outlier_weight = outlier_weight.to(torch.bfloat16).contiguous() if has else None
        guarded = torch.cat([qweight, torch.zeros(n, 2, dtype=torch.int8)], dim=1)  # [N, K+2]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # quantized tensor constructors are deprecated, the ops are not
            qt = torch._make_per_channel_quantized_tensor(
                guarded, scale.double(), torch.zeros(n, dtype=torch.long), 0
            )
            previous = torch.backends.quantized.engine
            torch.backends.quantized.engine = "fbgemm"
            try:
                self.packed = torch.ops.quantized.linear_prepack(qt, None)
            finally:
                torch.backends.quantized.engine = previous
        self._nbytes = qweight.numel() + scale.numel() * 4
        if self.outlier_weight is not None:
            self._nbytes += self.outlier_weight.nbytes

    @classmethod
    def from_float(cls, w: torch.Tensor, outliers: torch.Tensor | None = None) -> "Int8RowLinear":
        if outliers is None or outliers.numel() == 0:
            return cls(*quantize_int8_per_channel(w))
        dense = w[:, outliers]
        rest = w.clone()
        rest[:, outliers] = 0
        return cls(*quantize_int8_per_channel(rest), outliers, dense)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        x = x.float()
        n = x.shape[0]
        if self.outliers is not None:
            dense = F.linear(x[:, self.outliers].to(torch.bfloat16), self.outlier_weight).float()
            x = x.index_fill(1, self.outliers, 0.0)
            return self._int8(x, n) + dense
        return self._int8(x, n)

    def _int8(self, x: torch.Tensor, n: int) -> torch.Tensor:
        amax = x.abs().amax(dim=1, keepdim=True).clamp_min(1e-30)  # [n, 1]
        guards = torch.tensor([1.0, -1.0]).expand(n, 2)
        xn = torch.cat([x / amax, guards], dim=1)  # [n, K+2], every row spans [-1, 1]
        return torch.ops.quantized.linear_dynamic(xn, self.packed, False) * amax

    def nbytes(self) -> int:
        return self._nbytes


# -- INT4 group-wise, torch's packed CPU kernel -------------------------------------------------

def quantize_int4_groupwise(w: torch.Tensor, group: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Asymmetric 4-bit per group of ``group`` input channels: ``w ≈ (q - 8) * scale + zero``.

    Returns (int32 ``[N, K]`` in 0..15, bf16 scales-and-zeros ``[K/group, N, 2]``)."""
    n, k = w.shape
    if k % group:
        raise ValueError(f"in_features {k} is not a multiple of the INT4 group size {group}")
    g = w.float().reshape(n, k // group, group)
    mx, mn = g.amax(-1, keepdim=True), g.amin(-1, keepdim=True)
    scale = ((mx - mn) / 15).clamp_min(1e-8)
    q = torch.clamp(torch.round((g - mn) / scale), 0, 15).to(torch.int32).reshape(n, k)
    zero = mn + 8 * scale
    sz = torch.cat([scale, zero], dim=-1).permute(1, 0, 2).contiguous().to(torch.bfloat16)
    return q, sz


class Int4Linear:
    def __init__(self, q: torch.Tensor, scales_zeros: torch.Tensor, group: int) -> None:
        self.out_features, self.in_features = q.shape
        self.group = group
        pad = -self.out_features % 16  # the packed kernel wants N % 16 == 0: zero rows, sliced off
        if pad:
            q = torch.cat([q, torch.full((pad, q.shape[1]), 8, dtype=q.dtype)])
            scales_zeros = torch.cat([scales_zeros, torch.zeros(scales_zeros.shape[0], pad, 2, dtype=scales_zeros.dtype)], 1)
        self.packed = torch._convert_weight_to_int4pack_for_cpu(q, 2)
        self.scales_zeros = scales_zeros

    @classmethod
    def from_float(cls, w: torch.Tensor, group: int = 64) -> "Int4Linear":
        return cls(*quantize_int4_groupwise(w, group), group)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        y = torch._weight_int4pack_mm_for_cpu(x.to(torch.bfloat16), self.packed, self.group, self.scales_zeros)
        return y[:, : self.out_features].float()

    def nbytes(self) -> int:
        return self.packed.nbytes + self.scales_zeros.nbytes


class Int8WeightOnlyLinear:
    def __init__(self, q: torch.Tensor, scale: torch.Tensor) -> None:
        self.out_features, self.in_features = q.shape
        self.q, self.scale = q, scale.to(torch.bfloat16)

    @classmethod
    def from_float(cls, w: torch.Tensor) -> "Int8WeightOnlyLinear":
        return cls(*quantize_int8_per_channel(w, 127))

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return torch._weight_int8pack_mm(x.to(torch.bfloat16), self.q, self.scale).float()

    def nbytes(self) -> int:
        return self.q.nbytes + self.scale.nbytes
