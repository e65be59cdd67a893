"""Choosing, building and caching a model's quantized linear layers.

Modes (``--target-quant`` / ``--draft-quant``; the lists are in :mod:`specd.models.modes`):

- ``bf16`` / ``fp32``: dense.
- ``int8``: on an x86-64 CPU with AVX2, ``Q8Linear`` (specd's own kernel, ``specd.models.kernels``:
  block-wise int8 weights and activations, batch-invariant, weights read once for all rows);
  elsewhere on CPU ``Int8RowLinear`` (fbgemm, per-row activation scales, batch-invariant);
  bitsandbytes LLM.int8 on CUDA.
- ``int4``: where specd's kernels build, ``Q4Linear`` (blocks of 32 with an fp16 scale, scales
  searched by specd: ggml's Q4_0 numbers, run on the GGUF kernels' repacked Q4_0 layout; int8
  activations per block); elsewhere on CPU ``Int4Linear`` group-wise (group 64,
  torch's kernel); bitsandbytes NF4 on CUDA.
- ``gguf``: a GGUF file's own blocks as stored (Q4_0, Q5_0, Q8_0, Q4_K, Q6_K), on specd's kernels
  (``specd.models.gguf_linear``; the loader builds these layers, ``specd.models.gguf_model``,
  without this module's store): nothing dequantized or re-quantized, CPU only.
- ``fp8``: e4m3 weights with per-channel scales; ``torch._scaled_mm`` on CUDA sm89+, dequantized
  to bf16 on CPU (correct, slow).

Quantized weights are computed once and stored in the model's cache directory
(``quant-<mode><version>.safetensors``: the version names the quantizer; written under a temporary
name and renamed, so a present artifact is whole; its metadata records the sha256 of the GGUF it
was made from, and an artifact made from another file is quantized again); the embedding stays
bf16 (a lookup reads one row).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Callable, Protocol

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from specd.models import int_linear, kernels
from specd.models.calibrate import outlier_channels
from specd.models.decoder import HEAD_INPUT
from specd.models.errors import ModelError
from specd.models.fp8 import FP8Linear, quantize_fp8
from specd.models.gpu import check_cuda_mode, cuda_linear_factory
from specd.models.hugepages import weight_memory
from specd.models.modes import DENSE_QUANTS, GGUF_QUANT, TARGET_QUANTS
from specd.models.quant import (
    DenseLinear,
    Int4Linear,
    Int8RowLinear,
    Linear,
    quantize_int4_groupwise,
    quantize_int8_per_channel,
)

INT4_GROUP = 64
# calibration statistics by layer name, computed when called (runs the dense model over real code)
Calibrate = Callable[[], dict[str, torch.Tensor]]


def check_mode(mode: str, device: str = "cpu", model: str = "model") -> None:
    if mode not in TARGET_QUANTS:
        raise ModelError(f"{model}: unknown quantization {mode!r}; use one of {', '.join(TARGET_QUANTS)}")
    if device.startswith("cuda"):
        if mode == GGUF_QUANT:
            raise ModelError(f"{model}: quant mode gguf runs on the CPU (specd's kernels); use --device cpu, or int8 on CUDA")
        check_cuda_mode(mode, model)


SOURCE_KEY = "specd_source_sha256"  # artifact metadata: the GGUF file's sha256 the layers were quantized from

# bump when a mode's stored format or method changes, so stale artifacts are not reused
_ARTIFACT_VERSION = {"int8": "-v2", "int4": "", "fp8": ""}
# specd's kernels' own packed layouts (int4 -v2: scales searched against calibrated channel
# importance, int_linear.pack4)
_KERNEL_ARTIFACT_VERSION = {"int8": "-q8", "int4": "-q4-v2"}


def _artifact(directory: Path, mode: str) -> Path:
    if mode in _KERNEL_ARTIFACT_VERSION and kernels.available():
        return directory / f"quant-{mode}{_KERNEL_ARTIFACT_VERSION[mode]}.safetensors"
    version = _ARTIFACT_VERSION.get(mode, "")
    return directory / f"quant-{mode}{version}.safetensors"


class LinearFactory(Protocol):
    def __call__(self, name: str, weight: Callable[[], torch.Tensor]) -> Linear:
        """The layer ``name``; ``weight()`` reads its float weight (only if it must be quantized)."""
        ...

    def save(self) -> None:
        """Persist whatever was quantized during this load."""


def linear_factory(directory: Path | None, mode: str, model: str = "model", device: str = "cpu",
                   source_sha256: str = "", calibrate: Calibrate | None = None) -> LinearFactory | None:
    """A factory for ``Decoder``; None for dense modes. On CPU, quantized tensors are read from
    (or written once to) ``quant-<mode>.safetensors`` in ``directory``; call ``save()`` after
    building the model. ``source_sha256``: the GGUF the weights come from ('' for a directory's
    safetensors); a stored artifact recording another file's is not used. ``calibrate``: the
    calibration statistics by layer name (the loader's ``QuantMode.calibration``), computed once
    here when this mode's CPU quantizer weighs them and something is left to quantize."""
    check_mode(mode, device, model)
    if mode in DENSE_QUANTS:
        return None
    if mode == GGUF_QUANT:
        raise ModelError(f"{model}: quant mode gguf runs a GGUF file's own blocks; pass a .gguf file or a published model")
    if device.startswith("cuda"):
        return cuda_linear_factory(mode)
    return _QuantStore(_artifact(directory, mode) if directory is not None else None, mode, model, source_sha256,
                       calibrate)


class _QuantStore:
    """Loads stored quantized tensors by layer name, quantizing (and saving) the missing ones."""

    def __init__(self, path: Path | None, mode: str, model: str, source_sha256: str = "",
                 calibrate: Calibrate | None = None) -> None:
        self.path, self.mode, self.model, self.source_sha256 = path, mode, model, source_sha256
        self.stored: dict[str, torch.Tensor] = {}
        self.fresh: dict[str, torch.Tensor] = {}
        self.expected = 0
        self.use_q8 = mode == "int8" and kernels.available()  # block-wise kernel: no outlier calibration needed
        self.use_q4 = mode == "int4" and kernels.available()
        # Q4Linear's repacked copies: 2 MiB pages where the OS offers them (specd.models.hugepages)
        self.alloc = weight_memory() if self.use_q4 else None
        if path is not None and path.exists():
            try:
                with safe_open(str(path), framework="pt") as f:
                    made_from = (f.metadata() or {}).get(SOURCE_KEY, "")
                if made_from and source_sha256 and made_from != source_sha256:
                    print(f"specd: {path} was made from another file (sha256 {made_from[:12]}…, this one "
                          f"{source_sha256[:12]}…): quantizing again", file=sys.stderr)
                else:
                    self.stored = load_file(str(path))
            except Exception as e:
                raise ModelError(f"{model}: corrupt quantized artifact {path} ({e}); delete it to rebuild") from e
        # per input channel by layer name (``specd.models.calibrate``): int8 without specd's kernel
        # keeps its outlier channels dense; int4 on it weighs the scale search (``int_linear.pack4``) by
        # their mean squares. Computed only when something is left to quantize.
        needs = (mode == "int8" and not self.use_q8) or self.use_q4
        self.stats: dict[str, torch.Tensor] = calibrate() if calibrate is not None and needs and not self.stored else {}

    def __call__(self, name: str, weight: Callable[[], torch.Tensor]) -> Linear:
        tensors = {k[len(name) + 1 :]: v for k, v in self.stored.items() if k.startswith(name + ":")}
        if not tensors:
            tensors = self._quantize(name, weight())
            self.fresh.update({f"{name}:{k}": v for k, v in tensors.items()})
        return self._build(name, tensors)

    def _quantize(self, name: str, w: torch.Tensor) -> dict[str, torch.Tensor]:
        if self.use_q8:
            try:
                return {"p": int_linear.pack(w), "k": torch.tensor([w.shape[1]])}
            except ValueError as e:  # in_features not a multiple of 32
                raise ModelError(f"{self.model}: {name}: {e} (specd's INT8 blocks); use --*-quant bf16 "
                                 "for this model") from e
        if self.use_q4:
            try:
                imp = self.stats.get(HEAD_INPUT if name.startswith("lm_head") else name)
                return {"p4": int_linear.pack4(w, importance=imp), "k": torch.tensor([w.shape[1]])}
            except ValueError as e:
                raise ModelError(f"{self.model}: {name}: {e} (specd's INT4 blocks); use --*-quant bf16 "
                                 "for this model") from e
        if self.mode == "int8":
            outliers = outlier_channels(self.stats[name]) if name in self.stats else torch.zeros(0, dtype=torch.long)
            layer = Int8RowLinear.from_float(w, outliers)
            if layer.outliers is None:
                q, s = quantize_int8_per_channel(w)
                return {"q": q, "scale": s}
            rest = w.clone()
            rest[:, outliers] = 0
            q, s = quantize_int8_per_channel(rest)
            return {"q": q, "scale": s, "oidx": outliers, "ow": w[:, outliers].to(torch.bfloat16)}
        if self.mode == "int4":
            if w.shape[1] % INT4_GROUP:
                raise ModelError(
                    f"{self.model}: {name} has {w.shape[1]} input channels, not a multiple of the INT4 "
                    f"group size {INT4_GROUP}; use --*-quant int8 for this model"
                )
            q, sz = quantize_int4_groupwise(w, INT4_GROUP)
            packed = (q[:, 0::2] | (q[:, 1::2] << 4)).to(torch.uint8)  # two nibbles per byte
            return {"q4": packed, "sz": sz}
        if self.mode == "fp8":

            q, s = quantize_fp8(w)
            return {"q8": q, "scale": s}
        raise ModelError(f"{self.model}: unknown quantization {self.mode!r}")

    def _build(self, name: str, t: dict[str, torch.Tensor]) -> Linear:
        if self.use_q8:
            return int_linear.Q8Linear(t["p"], int(t["k"][0]))
        if self.use_q4:
            return int_linear.Q4Linear(t["p4"], int(t["k"][0]), alloc=self.alloc)
        if self.mode == "int8":
            return Int8RowLinear(t["q"], t["scale"], t.get("oidx"), t.get("ow"))
        if self.mode == "int4":
            p = t["q4"].to(torch.int32)
            q = torch.stack([p & 0xF, p >> 4], dim=-1).reshape(p.shape[0], -1)
            return Int4Linear(q, t["sz"], INT4_GROUP)
        return FP8Linear(t["q8"], t["scale"])

    def save(self) -> None:
        """Write newly quantized layers (first load in this mode) so later loads skip the work."""
        if not self.fresh or self.path is None:
            return
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.partial")
        try:
            # metadata values are strings: the source's sha256 ('' for a directory's safetensors)
            save_file({**self.stored, **self.fresh}, str(tmp),
                      metadata={"format": "pt", SOURCE_KEY: self.source_sha256, "specd_quantizer": self.path.stem})
            os.replace(tmp, self.path)  # a present artifact is always whole
        except OSError as e:
            tmp.unlink(missing_ok=True)  # a read-only model directory still works, just slower to load
            print(f"specd: note: cannot cache quantized weights at {self.path}: {e}", file=sys.stderr)
