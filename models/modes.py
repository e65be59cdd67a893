"""Quantization modes and model runtimes: the one list of what exists and what runs where.

Every place that offers or checks a mode imports it from here (the CLI's choices, the engine's
settings, the quantizer, the ONNX graph builder, the loader, the CUDA path). What each mode means
is described in :mod:`specd.models.quantize`.
"""

from __future__ import annotations

AUTO_QUANT = "auto"  # a target's mode chosen from its source and device (see auto_target_quant)
TARGET_QUANTS = (AUTO_QUANT, "int8", "fp8", "int4", "bf16", "fp32", "gguf")  # a target may run any
DRAFT_QUANTS = ("int4", "int8", "bf16", "fp32", "gguf")  # fp8 needs a GPU and buys a draft nothing
DEFAULT_TARGET_QUANT = AUTO_QUANT
DEFAULT_DRAFT_QUANT = "int4"

DENSE_QUANTS = ("bf16", "fp32")  # no quantized layers
KERNEL_QUANTS = ("int8", "int4")  # specd's own CPU kernels (specd.models.int_linear), where they are built
GGUF_QUANT = "gguf"  # a GGUF file's own weight blocks on specd's kernels (specd.models.gguf_model)
ORT_QUANTS = ("int8", "int4", "fp32")  # the ONNX Runtime backend (specd.models.onnx_graph)
BNB_QUANTS = ("int8", "int4")  # bitsandbytes on CUDA (LLM.int8, NF4); fp8 runs _scaled_mm there

BACKENDS = ("auto", "torch", "ort")  # model runtimes: specd.models.decoder, specd.models.ort_runtime
# the KV cache's element where a model's layers run in specd's C kernels (specd.models.fused_layers;
# every other runtime keeps float32): f16 as llama.cpp keeps it, half the bytes attention reads
KV_CACHES = ("f16", "f32")
DEFAULT_KV_CACHE = "f16"


def auto_target_quant(source_is_gguf: bool, device: str, gguf_kernels: bool) -> str:
    """What ``auto`` runs a target as: on the CPU, a GGUF source's own blocks (``gguf``: faster per
    step and in verification, 0.56x the INT8 weights, the same agreement with llama.cpp; see
    bench/RESULTS.md, session 7) where specd's kernels are built; otherwise ``int8``
    (batch-invariant on the CPU in both runtimes; LLM.int8 on CUDA)."""
    if source_is_gguf and gguf_kernels and not device.startswith("cuda"):
        return GGUF_QUANT
    return "int8"
