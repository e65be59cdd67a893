"""Activation statistics for quantization, observed while the dense model reads real code: per
input channel of every linear layer, the absolute maximum (INT8 outlier channels on the
fallback runtime) or the mean square (the importance of each channel to the INT4 scale search).

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

    _run(model, texts, observe)
    return stats


@torch.inference_mode()
def channel_meansq(model: Decoder, texts: list[list[int]]) -> dict[str, torch.Tensor]:
    """Per linear layer, ``E[x_i^2]`` over every calibration token, per input channel ``i``."""
    sums: dict[str, torch.Tensor] = {}
    counts: dict[str, int] = {}

    def observe(name: str, x: torch.Tensor) -> None:
        s = x.float().square().sum(dim=0)
        sums[name] = sums[name] + s if name in sums else s
        counts[name] = counts.get(name, 0) + x.shape[0]

    _run(model, texts, observe)
    return {name: s / counts[name] for name, s in sums.items()}


def _run(model: Decoder, texts: list[list[int]], observe) -> None:
    model.observer = observe
    try:
        for ids in texts:
            model.rollback(0)
            for i in range(0, len(ids), 64):
                model.forward(torch.tensor(ids[i : i + 64]))
    finally:
        model.observer = None
        model.rollback(0)


def outlier_channels(absmax: torch.Tensor, ratio: float = 6.0, cap: int = 64) -> torch.Tensor:
    """Channels whose calibrated magnitude exceeds ``ratio`` × the median (at most ``cap``)."""
    threshold = ratio * float(absmax.median())
    idx = (absmax > threshold).nonzero().flatten()
    if idx.numel() > cap:
        idx = idx[torch.argsort(absmax[idx], descending=True)[:cap]]
    return torch.sort(idx).values
