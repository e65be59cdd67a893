"""FP8 (e4m3) weights with per-output-channel scales.

On CUDA (sm89+) the matmul runs in FP8 through ``torch._scaled_mm`` with per-row activation scales;
on the CPU the weights are dequantized to bf16 per call — correct, and slow (no FP8 CPU kernel).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

FP8 = torch.float8_e4m3fn
FP8_MAX = torch.finfo(FP8).max  # 448


def quantize_fp8(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``w ≈ q.float() * scale[:, None]``; returns (fp8 ``[N, K]``, fp32 ``[N]``)."""
    w = w.float()
    scale = (w.abs().amax(dim=1) / FP8_MAX).clamp_min(1e-12)
    return (w / scale[:, None]).clamp(-FP8_MAX, FP8_MAX).to(FP8), scale


MM_ALIGN = 16  # _scaled_mm wants both of the weight's dimensions a multiple of 16


class FP8Linear:
    def __init__(self, q: torch.Tensor, scale: torch.Tensor) -> None:
        self.out_features, self.in_features = q.shape
        self.q, self.scale = q, scale.float()
        if q.is_cuda:  # zero rows and columns up to _scaled_mm's alignment (a vocabulary of 151,665, say)
            n_pad, k_pad = -self.out_features % MM_ALIGN, -self.in_features % MM_ALIGN
            if n_pad or k_pad:
                self.q = F.pad(q.view(torch.uint8), (0, k_pad, 0, n_pad)).view(FP8)  # [N', K']
                self.scale = F.pad(self.scale, (0, n_pad), value=1.0)  # [N']

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self.q.is_cuda:
            k_pad = self.q.shape[1] - self.in_features
            if k_pad:
                x = F.pad(x, (0, k_pad))
            return scaled_mm_rowwise(x, self.q, self.scale)[:, : self.out_features]
        w = (self.q.to(torch.bfloat16) * self.scale[:, None].to(torch.bfloat16))
        return F.linear(x.to(torch.bfloat16), w).float()

    def nbytes(self) -> int:
        return self.q.nbytes + self.scale.nbytes


def scaled_mm_rowwise(x: torch.Tensor, q: torch.Tensor, w_scale: torch.Tensor) -> torch.Tensor:
    """FP8 GEMM on CUDA with one scale per activation row and per weight channel."""
    x = x.float()
    x_scale = (x.abs().amax(dim=1, keepdim=True) / FP8_MAX).clamp_min(1e-12)  # [n, 1]
    xq = (x / x_scale).clamp(-FP8_MAX, FP8_MAX).to(FP8)
    return torch._scaled_mm(
        xq, q.t(), scale_a=x_scale, scale_b=w_scale[None, :].contiguous(), out_dtype=torch.bfloat16
    ).float()
