"""Quantization modes and model runtimes: the one list of what exists and what runs where.

Every place that offers or checks a mode imports it from here (the CLI's choices, the engine's
settings, the quantizer, the ONNX graph builder, the loader, the CUDA path). What each mode means
is described in :mod:`specd.models.quantize`.
"""

from __future__ import annotations

TARGET_QUANTS = ("int8", "fp8", "int4", "bf16", "fp32", "gguf")  # every mode: a target may run any
DRAFT_QUANTS = ("int4", "int8", "bf16", "fp32", "gguf")  # fp8 needs a GPU and buys a draft nothing
DEFAULT_TARGET_QUANT = "int8"  # batch-invariant on the CPU in both runtimes
DEFAULT_DRAFT_QUANT = "int4"

DENSE_QUANTS = ("bf16", "fp32")  # no quantized layers
KERNEL_QUANTS = ("int8", "int4")  # specd's own CPU kernels (specd.models.q8), where they are built
GGUF_QUANT = "gguf"  # a GGUF file's own weight blocks on specd's kernels (specd.models.gguf_model)
ORT_QUANTS = ("int8", "int4", "fp32")  # the ONNX Runtime backend (specd.models.onnx_graph)
BNB_QUANTS = ("int8", "int4")  # bitsandbytes on CUDA (LLM.int8, NF4); fp8 runs _scaled_mm there

BACKENDS = ("auto", "torch", "ort")  # model runtimes: specd.models.decoder, specd.models.ort_runtime
