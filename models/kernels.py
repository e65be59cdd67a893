"""specd's kernel library (``specd.models._kernels``, built by the package install from
``models/csrc``: the INT8 linear, the fused decoder layer, the GGUF block-format kernels),
loaded here through ctypes once its ABI version and signatures match ``ABI_VERSION`` and
``_SIGNATURES`` (see ``models/csrc/kernel_abi.h``). The Python faces of its kernels:
``specd.models.int_linear`` (INT8, and INT4 over the Q4_0 kernels), ``specd.models.gguf_linear`` (GGUF blocks),
``specd.models.fused_layers`` (a decoder layer in one call).
"""

from __future__ import annotations

import ctypes
import importlib.util
import logging
import os
import threading
from functools import lru_cache

import torch

from specd.models.errors import KernelABIError, ModelError

log = logging.getLogger(__name__)

# The kernel library's C ABI (models/csrc/kernel_abi.h), checked at load. Bump rule: change
# ABI_VERSION (and SPECD_KERNEL_ABI_VERSION in kernel_abi.h with it) whenever any exported
# function's signature, q8_layer's dims[] / weights[] tables or the packed weight layout
# changes, and edit _SIGNATURES / LAYER_DIMS / LAYER_WEIGHTS to match SPECD_KERNEL_SIGNATURES.
ABI_VERSION = 9
_P, _I64, _I32, _F32 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int, ctypes.c_float
_SIGNATURES: dict[str, tuple[list[type], type | None]] = {
    "q8_linear": ([_P, _I64, _I64, _P, _I64, _P, _P, _P], None),
    "q8_quantize": ([_P, _I64, _I64, _P, _P], None),
    "q8_layer": ([_P, _P, _F32, _P, _I64, _I64, _P, _P, _P, _P, _P, _P], None),
    "q8_layer_scratch": ([_P, _I64], _I64),
    "specd_kernel_omp_entry": ([], _P),
    "specd_kernel_set_threads": ([_I32], None),
    # gguf_*.c: GGUF-native block formats (specd.models.gguf_linear)
    "gg_row_bytes": ([_I32, _I64], _I64),
    "gg_act_bytes": ([_I32, _I64], _I64),
    "gg_simd": ([], _I32),
    "gg_set_simd": ([_I32], _I32),
    "gg_dequantize": ([_I32, _P, _I64, _I64, _P], _I32),
    "gg_quantize": ([_I32, _P, _I64, _I64, _P], _I32),
    "gg_quantize_ref": ([_I32, _P, _I64, _I64, _P], _I32),
    "gg_gemm": ([_I32, _P, _I64, _I64, _P, _I64, _P, _I64], _I32),
    "gg_gemm_ref": ([_I32, _P, _I64, _I64, _P, _I64, _P, _I64], _I32),
    "gg_repack": ([_I32, _P, _I64, _I64, _P], _I32),
    "gg_unrepack": ([_I32, _P, _I64, _I64, _P], _I32),
    "gg_parts_act_bytes": ([_I64, _I64], _I64),
    "gg_linear_parts": ([_P, _I64, _P, _I64, _P, _P], None),
    # profiling (models/csrc/profile.h): the accumulator the kernels add phase seconds into
    "kernel_profile": ([_P], None),
}
# q8_layer's index tables: the order of its dims[] (int64) and weights[] (pointers) arguments
LAYER_DIMS = ("hidden", "heads", "kv_heads", "head_dim", "intermediate", "capacity", "bits", "kv_f16")
LAYER_WEIGHTS = ("qkv", "o", "gate_up", "down", "in_norm", "post_norm", "qkv_bias")
# gg_linear_parts' part table (int64): its count, then per part these fields
GG_PARTS = ("count", "type", "rows", "pointer")
# kernel_profile's accumulator (float64): seconds per slot (see models/csrc/profile.h)
PROFILE_SLOTS = ("matmul", "attention", "layer_other", "team", "busy", "busy_cpu", "regions")
_TYPE_CODES: dict[type | None, str] = {_P: "p", _I64: "i64", _I32: "i32", _F32: "f32", None: "void"}
REBUILD = "pip install -e . (or, in the source tree, python setup.py build_ext --inplace)"
# the extension module the package install builds (setup.py), and how messages name it
LIBRARY = "specd.models._kernels"
NAME = "specd's kernel library"


@lru_cache(maxsize=None)
def _cpu_flags() -> frozenset[str]:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


@lru_cache(maxsize=None)
def unavailable() -> str | None:
    """Why the kernel cannot run here, or None when it can."""
    spec = importlib.util.find_spec(LIBRARY)
    if spec is None or spec.origin is None:
        return (f"{NAME} ({LIBRARY}: the INT8, INT4 and GGUF kernels) is not built (the install needs "
                f"a C compiler on x86-64: pip install -e . again with gcc or clang present)")
    missing = {"avx2", "fma", "f16c"} - _cpu_flags()
    if missing:
        return f"{NAME} needs a CPU with {', '.join(sorted(missing))}"
    return None


def available() -> bool:
    return unavailable() is None


def signature_table() -> dict[str, str]:
    """The ABI text entries this module declares, by name, in kernel_abi.h's format:
    ``name(args)->ret`` for the functions, ``name[indices]->type`` for q8_layer's tables."""
    table = {name: f"{name}({','.join(_TYPE_CODES[t] for t in args)})->{_TYPE_CODES[ret]}"
             for name, (args, ret) in _SIGNATURES.items()}
    table["q8_layer_dims"] = f"q8_layer_dims[{','.join(LAYER_DIMS)}]->i64"
    table["q8_layer_weights"] = f"q8_layer_weights[{','.join(LAYER_WEIGHTS)}]->p"
    table["gg_parts"] = f"gg_parts[{','.join(GG_PARTS)}]->i64"
    table["kernel_profile_slots"] = f"kernel_profile_slots[{','.join(PROFILE_SLOTS)}]->f64"
    return table


def _parse_signatures(text: str) -> dict[str, str]:
    """The library's ABI text (``specd_kernel_abi_signatures``) as entries by name."""
    entries = [e.strip() for e in text.split(";") if e.strip()]
    return {e.split("(", 1)[0].split("[", 1)[0]: e for e in entries}


def _check_abi(lib: ctypes.CDLL, path: str) -> None:
    """KernelABIError unless ``lib`` exports ABI_VERSION and exactly the signatures declared here."""
    try:
        version_fn, text_fn = lib.specd_kernel_abi_version, lib.specd_kernel_abi_signatures
    except AttributeError:
        raise KernelABIError(f"{NAME} {path} exports no ABI version "
                             f"(specd_kernel_abi_version): it was built from older sources than "
                             f"this specd; rebuild it: {REBUILD}") from None
    version_fn.argtypes, version_fn.restype = [], ctypes.c_int
    text_fn.argtypes, text_fn.restype = [], ctypes.c_char_p
    found = int(version_fn())
    if found != ABI_VERSION:
        raise KernelABIError(f"{NAME} {path} has ABI version {found}, this specd "
                             f"expects {ABI_VERSION}: the build is stale; rebuild it: {REBUILD}")
    theirs, ours = _parse_signatures((text_fn() or b"").decode()), signature_table()
    diff = [f"{name}: library {theirs.get(name, 'missing')!r}, specd.models.kernels {ours.get(name, 'missing')!r}"
            for name in sorted(theirs.keys() | ours.keys()) if theirs.get(name) != ours.get(name)]
    if diff:
        raise KernelABIError(f"{NAME} {path} (ABI version {found}) declares other "
                             f"signatures than specd.models.kernels ({'; '.join(diff)}); rebuild it: {REBUILD}")


def _entry(fn: ctypes._CFuncPtr) -> int | None:
    """The address of a ctypes function."""
    return ctypes.cast(fn, ctypes.c_void_p).value


def _mapped_library(prefix: str) -> str | None:
    """The path of the first library mapped into this process whose file name starts with
    ``prefix`` (from /proc/self/maps), or None."""
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                path = line.split(maxsplit=5)[-1].strip()
                if path.startswith("/") and os.path.basename(path).startswith(prefix):
                    return path
    except OSError:
        pass
    return None


def _library_of(address: int | None) -> str:
    """The file of the library that holds ``address`` (dladdr), for messages."""
    if not address:
        return "no OpenMP runtime"
    info = (ctypes.c_void_p * 4)()  # Dl_info: dli_fname, dli_fbase, dli_sname, dli_saddr
    try:
        found = ctypes.CDLL(None).dladdr(ctypes.c_void_p(address), info)
    except (OSError, AttributeError):
        found = 0
    if not found or not info[0]:
        return hex(address)
    return ctypes.cast(info[0], ctypes.c_char_p).value.decode(errors="replace")


def torch_omp_entry() -> int | None:
    """The address of ``omp_get_max_threads`` in the OpenMP runtime torch's CPU library is bound
    to (looked up through libtorch_cpu's dependencies), or None when torch does not run its
    intra-op threads on OpenMP."""
    if "parallel backend: OpenMP" not in torch.__config__.parallel_info():
        return None
    path = _mapped_library("libtorch_cpu")
    if path is None:
        return None
    try:
        return _entry(ctypes.CDLL(path).omp_get_max_threads)
    except (OSError, AttributeError):
        return None


class _Kernel:
    """The kernel library at ``path``, checked at load: its ABI (KernelABIError naming the
    rebuild command when it does not match this module) and whether its OpenMP runtime is
    torch's. ``omp_shared``: True when the kernel's parallel regions run on torch's thread
    pool (``torch.set_num_threads`` applies); otherwise the kernel keeps its own team size, set
    once here to torch's thread count, and a log line says so."""

    def __init__(self, path: str) -> None:
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            raise KernelABIError(f"cannot load {NAME} {path} ({e}); rebuild it: {REBUILD}") from None
        _check_abi(lib, path)
        for name, (args, ret) in _SIGNATURES.items():
            fn = getattr(lib, name)
            fn.argtypes, fn.restype = args, ret
        self.lib = lib
        self.path = path
        self.lock = threading.Lock()  # one call at a time: calls share torch's OpenMP pool
        ours, torchs = lib.specd_kernel_omp_entry(), torch_omp_entry()
        self.omp_shared = ours is not None and ours == torchs
        if not self.omp_shared:
            threads = torch.get_num_threads() if ours is not None else 1
            lib.specd_kernel_set_threads(threads)
            log.warning("%s does not share torch's OpenMP runtime (kernel: %s, "
                        "torch: %s): it runs on its own %d thread(s), fixed at load",
                        NAME, _library_of(ours), _library_of(torchs), threads)


_kernel: _Kernel | None = None
_kernel_lock = threading.Lock()


def kernel() -> _Kernel:
    """The loaded kernel; its threads are torch's (``torch.set_num_threads``) when its OpenMP
    runtime is torch's (``_Kernel.omp_shared``). ModelError when it is unavailable,
    KernelABIError when the built library does not match this module."""
    global _kernel
    why = unavailable()
    if why:
        raise ModelError(why)
    with _kernel_lock:
        if _kernel is None:
            _kernel = _Kernel(importlib.util.find_spec(LIBRARY).origin)
        return _kernel
