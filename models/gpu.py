"""CUDA paths: bitsandbytes NF4 (INT4 draft) and LLM.int8 (INT8 target), FP8 via ``_scaled_mm``.

Chosen by device capability; a mode the device cannot run is refused with a message saying what
to use instead. bitsandbytes also runs on the CPU (slowly): ``BnbLinear`` works on either device,
which is how the tests exercise it without a GPU.
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F

from specd.models.errors import ModelError
from specd.models.fp8 import FP8Linear, quantize_fp8
from specd.models.modes import BNB_QUANTS


def _bnb():
    """bitsandbytes, imported on first use: optional (the ``gpu`` extra), and seconds to import."""
    import bitsandbytes

    return bitsandbytes


def check_cuda_mode(mode: str, model: str) -> None:
    if not torch.cuda.is_available():
        raise ModelError(f"{model}: --device cuda was asked for, but torch sees no CUDA GPU; use --device cpu")
    if mode == "fp8":
        cap = torch.cuda.get_device_capability()
        if cap < (8, 9):
            raise ModelError(
                f"{model}: fp8 needs compute capability 8.9+ (this GPU is {cap[0]}.{cap[1]}); use int8"
            )
    if mode in BNB_QUANTS:
        try:
            _bnb()
        except ImportError as e:
            raise ModelError(f"{model}: {mode} on CUDA needs bitsandbytes: pip install 'specd[gpu]'") from e


BNB_ALIGN = 64  # both dimensions padded to a multiple of this (a tiny or odd vocabulary crashed NF4 on an H200)


class BnbLinear:
    """bitsandbytes NF4 (``bits=4``) or LLM.int8 (``bits=8``) weights.

    The weight is padded with zero rows and columns to ``BNB_ALIGN`` (the output sliced back). For
    LLM.int8, whose CUDA kernels take float16 only, each activation row is divided by its absolute
    maximum before the cast and the result multiplied back: the same int8 rows, no float16 overflow.
    """

    def __init__(self, weight: torch.Tensor, bits: int, device: str) -> None:
        bnb = _bnb()
        self.out_features, self.in_features = weight.shape
        self.bits = bits
        n_pad, self.k_pad = -self.out_features % BNB_ALIGN, -self.in_features % BNB_ALIGN
        w = F.pad(weight.to(device=device, dtype=torch.float32), (0, self.k_pad, 0, n_pad))  # [N', K']
        if bits == 4:
            self.packed, self.state = bnb.functional.quantize_4bit(w.to(torch.bfloat16), quant_type="nf4",
                                                                   blocksize=64)
        elif bits == 8:
            self.packed, self.state, _ = bnb.functional.int8_vectorwise_quant(w.to(torch.float16))
        else:
            raise ValueError(bits)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        bnb = _bnb()
        x = x.to(self.packed.device, torch.float32)
        if self.k_pad:
            x = F.pad(x, (0, self.k_pad))
        if self.bits == 4:
            out = bnb.matmul_4bit(x.to(torch.bfloat16), self.packed.t(), quant_state=self.state).float()
        else:
            row_max = x.abs().amax(dim=-1, keepdim=True).clamp_min(1e-12)  # [n, 1]
            x_q, x_scale, _ = bnb.functional.int8_vectorwise_quant((x / row_max).to(torch.float16))
            acc = bnb.functional.int8_linear_matmul(x_q, self.packed)  # [n, N'] int32
            out = bnb.functional.int8_mm_dequant(acc, x_scale, self.state).float() * row_max
        return out[:, : self.out_features]

    def nbytes(self) -> int:
        return self.packed.nbytes


class _CudaFactory:
    def __init__(self, mode: str, device: str = "cuda") -> None:
        self.mode, self.device = mode, device

    def __call__(self, name: str, read: Callable[[], torch.Tensor]):
        weight = read()
        if self.mode == "fp8":
            q, s = quantize_fp8(weight.to(self.device))
            return FP8Linear(q, s)
        return BnbLinear(weight, 4 if self.mode == "int4" else 8, self.device)

    def save(self) -> None:
        """Quantization on the GPU takes a moment; nothing is cached."""


def cuda_linear_factory(mode: str, device: str = "cuda") -> _CudaFactory:
    return _CudaFactory(mode, device)
