"""Activation statistics for quantization: per-channel absolute maxima of every linear layer's
input, observed while the dense model reads real code.

The calibration text is real source code found on this machine (the Python standard library),
disjoint from the held-out files ``bench/quant_quality.py`` evaluates on.
"""

from __future__ import annotations

import inspect
import importlib

import torch

from specd.models.decoder import Decoder
from specd.models.tokenizer import Tokenizer

CALIBRATION_MODULES = ("argparse", "json.decoder", "collections", "dataclasses")


def calibration_tokens(tokenizer: Tokenizer, n_tokens: int = 512) -> list[list[int]]:
    per = n_tokens // len(CALIBRATION_MODULES)
    out = []
    for name in CALIBRATION_MODULES:
        ids = tokenizer.encode(inspect.getsource(importlib.import_module(name)))
        start = len(ids) // 4
        out.append(ids[start : start + per])
    return out


@torch.inference_mode()
def channel_absmax(model: Decoder, texts: list[list[int]]) -> dict[str, torch.Tensor]:
    stats: dict[str, torch.Tensor] = {}

    def observe(name: str, x: torch.Tensor) -> None:
        m = x.abs().amax(dim=0).float()
        stats[name] = torch.maximum(stats[name], m) if name in stats else m

    model.observer = observe
    try:
        for ids in texts:
            model.rollback(0)
            for i in range(0, len(ids), 64):
                model.forward(torch.tensor(ids[i : i + 64]))
    finally:
        model.observer = None
        model.rollback(0)
    return stats


def outlier_channels(absmax: torch.Tensor, ratio: float = 6.0, cap: int = 64) -> torch.Tensor:
    """Channels whose calibrated magnitude exceeds ``ratio`` × the median (at most ``cap``)."""
    threshold = ratio * float(absmax.median())
    idx = (absmax > threshold).nonzero().flatten()
    if idx.numel() > cap:
        idx = idx[torch.argsort(absmax[idx], descending=True)[:cap]]
    return torch.sort(idx).values
