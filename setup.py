"""The one compiled part of specd: its kernel library specd.models._kernels (models/csrc: the INT8
and INT4 linears, the fused decoder layer, the GGUF block-format kernels), loaded through ctypes by
specd.models.kernels, which checks the library's ABI version and signatures (models/csrc/kernel_abi.h)
at load. Optional: where it cannot be built (no C compiler, not x86-64), the
install still succeeds and the runtimes fall back to ONNX Runtime / torch kernels."""

import platform
import sys

from setuptools import Extension, setup

ext_modules = []
if sys.platform != "win32" and platform.machine().lower() in ("x86_64", "amd64"):
    ext_modules.append(Extension(
        "specd.models._kernels",
        sources=["models/csrc/kernel_abi.c", "models/csrc/threads.c", "models/csrc/int_linear.c",
                 "models/csrc/decoder_layer.c", "models/csrc/gguf_dispatch.c", "models/csrc/gguf_ref.c",
                 "models/csrc/gguf_avx2.c", "models/csrc/gguf_avx512.c", "models/csrc/gguf_repack.c"],
        depends=["models/csrc/avx2.h", "models/csrc/kernel_abi.h", "models/csrc/profile.h",
                 "models/csrc/ggml_blocks.h", "models/csrc/gguf_kernels.h", "models/csrc/gguf_x86.h"],
        # -ffp-contract=off: no fused multiply-adds the code does not write (in the GGUF kernels,
        # dequantization is bit-exact to gguf-py's, and its dot products to their scalar reference)
        extra_compile_args=["-O3", "-mavx2", "-mfma", "-mf16c", "-std=c11", "-ffp-contract=off", "-fopenmp"],
        extra_link_args=["-fopenmp"],
        optional=True,
    ))

setup(ext_modules=ext_modules)
