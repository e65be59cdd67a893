"""specd's kernel library (``specd.models._kernels``, built by the package install from
``models/csrc``: the INT8 and INT4 linears, the fused decoder layer, the GGUF block-format kernels),
loaded here through ctypes once its ABI version and signatures match ``ABI_VERSION`` and
``_SIGNATURES`` (see ``models/csrc/kernel_abi.h``); and its INT8 x INT8 linear on x86-64 AVX2.

Weights: int8 in blocks of 32 input channels, one fp16 scale per block (llama.cpp's Q8_0 numbers;
scales stored ahead of each row's blocks). Activations: quantized per row and per block of 32 inside the call.
Both scales are block-wise, so Qwen's few huge activation channels coarsen only their own block
(as ONNX Runtime's MatMulNBits with accuracy level 4 does), and the kernel is batch-invariant by
construction: a row's result does not depend on the other rows in the call (see the C file).
Weights are read once per call for all rows: a forward over 5 tokens costs little more than one.
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

QK = 32

# The kernel library's C ABI (models/csrc/kernel_abi.h), checked at load. Bump rule: change
# ABI_VERSION (and SPECD_KERNEL_ABI_VERSION in kernel_abi.h with it) whenever any exported
# function's signature, q8_layer's dims[] / weights[] tables or the packed weight layout
# changes, and edit _SIGNATURES / LAYER_DIMS / LAYER_WEIGHTS to match SPECD_KERNEL_SIGNATURES.
ABI_VERSION = 6
_P, _I64, _I32, _F32 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int, ctypes.c_float
_SIGNATURES: dict[str, tuple[list[type], type | None]] = {
    "q8_linear": ([_P, _I64, _I64, _P, _I64, _P, _P, _P], None),
    "q4_linear": ([_P, _I64, _I64, _P, _I64, _P, _P, _P, _P], None),
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
LAYER_DIMS = ("hidden", "heads", "kv_heads", "head_dim", "intermediate", "capacity", "bits")
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


def scale_bytes(k: int) -> int:
    """Bytes of a weight row's fp16 block scales, padded to 8 (see ``pack``)."""
    return (k // QK + 3) // 4 * 8


def row_bytes(k: int) -> int:
    return scale_bytes(k) + k


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
    diff = [f"{name}: library {theirs.get(name, 'missing')!r}, specd.models.q8 {ours.get(name, 'missing')!r}"
            for name in sorted(theirs.keys() | ours.keys()) if theirs.get(name) != ours.get(name)]
    if diff:
        raise KernelABIError(f"{NAME} {path} (ABI version {found}) declares other "
                             f"signatures than specd.models.q8 ({'; '.join(diff)}); rebuild it: {REBUILD}")


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


def pack(w: torch.Tensor) -> torch.Tensor:
    """Quantize a float weight ``[N, K]`` (K a multiple of 32) to uint8 ``[N, row_bytes(K)]``:
    per block of 32 input channels an fp16 scale ``d = absmax / 127`` and 32 int8
    ``round(w / d)``; a row holds its K/32 scales (zero-padded to 8 bytes), then its blocks."""
    n, k = w.shape
    if k % QK:
        raise ValueError(f"in_features {k} is not a multiple of {QK}")
    g = w.float().reshape(n, k // QK, QK)
    d = (g.abs().amax(-1, keepdim=True) / 127).half()  # [N, nb, 1]
    df = d.float()
    q = torch.where(df > 0, torch.round(g / df.clamp_min(1e-30)), torch.zeros_like(g))
    q = q.clamp(-127, 127).to(torch.int8)
    scales = torch.zeros(n, scale_bytes(k), dtype=torch.uint8)
    scales[:, : k // QK * 2] = d.reshape(n, -1).contiguous().view(torch.uint8)
    return torch.cat([scales, q.reshape(n, k).view(torch.uint8)], dim=1).contiguous()


def unpack(packed: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(int8 ``[N, K]``, float32 scales ``[N, K/32]``) of a packed weight."""
    sb = scale_bytes(k)
    d = packed[:, : k // QK * 2].contiguous().view(torch.float16).float()
    q = packed[:, sb:].contiguous().view(torch.int8)
    return q, d


def q4_row_bytes(k: int) -> int:
    return scale_bytes(k) + k // 2


def _q4_codes(g: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
    """The 4-bit codes ``clamp(round(g / d) + 8, 0, 15)`` of blocks ``g`` ``[..., 32]`` at scales
    ``d`` ``[..., 1]`` (a zero scale gives code 8, the value 0)."""
    safe = torch.where(d != 0, d, torch.ones_like(d))
    return torch.where(d != 0, torch.round(g / safe) + 8, torch.full_like(g, 8.0)).clamp(0, 15)


def _q4_search(g: torch.Tensor, m: torch.Tensor, c: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(scales ``[R, nb, 1]``, codes ``[R, nb, 32]``) of blocks ``g`` by the search in ``pack4``.
    A candidate's error in closed form: ``sum c (d l - g)^2 = sum c g^2 - 2 d sum c l g + d^2
    sum c l^2`` at its fp16 scale ``d``."""
    cg2 = (c * g * g).sum(-1, keepdim=True)
    best_d = (m / -8).half().float()
    best_l = _q4_codes(g, best_d) - 8
    cl = c * best_l
    best_e = cg2 - 2 * best_d * (cl * g).sum(-1, keepdim=True) + best_d.square() * (cl * best_l).sum(-1, keepdim=True)
    inv_m = torch.where(m != 0, 1 / m, torch.zeros_like(m))
    for s in range(-9, 10):
        l = torch.round(g * (inv_m * -(8 + 0.1 * s))).clamp_(-8, 7)  # [R, nb, 32]
        cl = c * l
        slx, sl2 = (cl * g).sum(-1, keepdim=True), (cl * l).sum(-1, keepdim=True)
        d = torch.where(sl2 > 0, slx / sl2.clamp_min(1e-30), torch.zeros_like(sl2)).half().float()
        e = cg2 - 2 * d * slx + d.square() * sl2
        better = e < best_e
        best_d, best_e = torch.where(better, d, best_d), torch.where(better, e, best_e)
        best_l = torch.where(better, l, best_l)
    return best_d, best_l + 8


def pack4(w: torch.Tensor, search: bool = True, importance: torch.Tensor | None = None) -> torch.Tensor:
    """Quantize a float weight ``[N, K]`` (K a multiple of 32) to the INT4 layout, uint8
    ``[N, q4_row_bytes(K)]``: per block of 32 input channels an fp16 scale ``d`` and 32 values
    ``q`` in 0..15, ``w ≈ d (q - 8)`` (llama.cpp's Q4_0 numbers); byte j of a block holds q[j]
    low, q[j + 16] high.

    ``search`` False: Q4_0's rule, ``d = m / -8`` with ``m`` the block's value of largest
    magnitude. True (the default): the scale that minimises the block's squared error, as
    llama.cpp's ``make_qx_quants``: for 19 candidate grids ``d = m / -(8 + 0.1 s)``, s = -9..9,
    the codes are rounded, then ``d`` is refit by least squares to those codes; the candidate
    with the smallest error wins (the plain rule is one of them, so no block gets worse).

    ``importance`` ``[K]``: the mean square of each input channel's activation on real text
    (``specd.models.calibrate.channel_meansq``). The error is then ``sum_i E[x_i^2] (w_i - ŵ_i)^2``,
    the expected squared error of the layer's output, so the scale favours the channels that
    carry signal (llama.cpp's importance matrix plays this part)."""
    n, k = w.shape
    if k % QK:
        raise ValueError(f"in_features {k} is not a multiple of {QK}")
    g = w.float().reshape(n, k // QK, QK)
    m = g.gather(-1, g.abs().argmax(-1, keepdim=True))  # [N, nb, 1] signed largest magnitude
    if not search:
        d = (m / -8).half().float()
        q = _q4_codes(g, d)
    else:  # in chunks of rows, so the temporaries stay in cache
        c = torch.ones(1, k // QK, QK) if importance is None else importance.float().reshape(1, k // QK, QK)
        c = c.clamp_min(1e-12)  # a channel never seen still counts a little
        parts = [_q4_search(g[i : i + 256], m[i : i + 256], c) for i in range(0, n, 256)]
        d, q = torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])
    q = q.to(torch.uint8)  # [N, nb, 32]
    nibbles = q[..., :16] | (q[..., 16:] << 4)  # [N, nb, 16]
    scales = torch.zeros(n, scale_bytes(k), dtype=torch.uint8)
    scales[:, : k // QK * 2] = d.half().reshape(n, -1).contiguous().view(torch.uint8)
    return torch.cat([scales, nibbles.reshape(n, k // 2)], dim=1).contiguous()


def unpack4(packed: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(int8 ``[N, K]`` in [-8, 7], float32 scales ``[N, K/32]``) of an INT4-packed weight."""
    n = packed.shape[0]
    d = packed[:, : k // QK * 2].contiguous().view(torch.float16).float()
    b = packed[:, scale_bytes(k):].reshape(n, k // QK, 16).to(torch.int16)
    q = torch.cat([b & 0xF, b >> 4], dim=-1).reshape(n, k) - 8
    return q.to(torch.int8), d


def quantize_activations(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The kernel's own activation quantization (int8 ``[n, K]``, float32 ``[n, K/32]``).
    ValueError unless ``x`` is ``[n, K]`` with K a multiple of 32."""
    if x.dim() != 2 or x.shape[1] % QK or x.device.type != "cpu":
        raise ValueError(f"activations x of shape {tuple(x.shape)} on {x.device}: expected [n, K] on "
                         f"the CPU with K a multiple of {QK}")
    x = x.float().contiguous()
    n, k = x.shape
    q = torch.empty(n, k, dtype=torch.int8)
    d = torch.empty(n, k // QK, dtype=torch.float32)
    kernel().lib.q8_quantize(x.data_ptr(), n, k, q.data_ptr(), d.data_ptr())
    return q, d


class _BlockLinear:
    """``Linear`` over a weight packed in blocks of 32 (``pack`` / ``pack4``): float32 ``[n, K]``
    in, float32 ``[n, N]`` out; activations int8 per row and block of 32, quantized inside the
    call. Every row's arithmetic is the same whatever the rows around it (batch-invariant)."""

    bits: int

    def __init__(self, packed: torch.Tensor, in_features: int) -> None:
        if (packed.dtype != torch.uint8 or packed.dim() != 2 or packed.device.type != "cpu"
                or in_features <= 0 or in_features % QK or packed.shape[1] != self._row_bytes(in_features)):
            raise ModelError(f"Q{self.bits} weight of shape {tuple(packed.shape)} and dtype {packed.dtype} "
                             f"on {packed.device} does not fit {in_features} input channels (expected uint8 "
                             f"[N, {self._row_bytes(in_features)}] on the CPU, input channels a "
                             f"multiple of {QK})")
        self.kernel = kernel()
        self.packed = packed.contiguous()
        self.in_features = in_features
        self.out_features = packed.shape[0]

    @staticmethod
    def _row_bytes(k: int) -> int:
        raise NotImplementedError

    def _run(self, x: torch.Tensor, y: torch.Tensor, xq: torch.Tensor, xd: torch.Tensor) -> None:
        raise NotImplementedError

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() != 2 or x.shape[1] != self.in_features:
            raise ValueError(f"expected {self.in_features} input features in x of shape [n, "
                             f"{self.in_features}], got x of shape {tuple(x.shape)}")
        if x.device.type != "cpu":
            raise ValueError(f"x is on {x.device}: specd's INT8 and INT4 kernels run on the CPU")
        x = x.float().contiguous()
        n, k = x.shape
        y = torch.empty(n, self.out_features, dtype=torch.float32)
        xq = torch.empty(n, k, dtype=torch.int8)
        xd = torch.empty(n, k // QK, dtype=torch.float32)
        with self.kernel.lock:
            self._run(x, y, xq, xd)
        return y

    def nbytes(self) -> int:
        return self.packed.nbytes


class Q8Linear(_BlockLinear):
    """INT8 weights (``pack``): the target's linears."""

    bits = 8
    _row_bytes = staticmethod(row_bytes)

    @classmethod
    def from_float(cls, w: torch.Tensor) -> "Q8Linear":
        return cls(pack(w), w.shape[1])

    def _run(self, x: torch.Tensor, y: torch.Tensor, xq: torch.Tensor, xd: torch.Tensor) -> None:
        n, k = x.shape
        self.kernel.lib.q8_linear(self.packed.data_ptr(), self.out_features, k, x.data_ptr(), n,
                                  y.data_ptr(), xq.data_ptr(), xd.data_ptr())


class Q4Linear(_BlockLinear):
    """INT4 weights (``pack4``), for drafts: half the bytes per step of ``Q8Linear``."""

    bits = 4
    _row_bytes = staticmethod(q4_row_bytes)

    @classmethod
    def from_float(cls, w: torch.Tensor) -> "Q4Linear":
        return cls(pack4(w), w.shape[1])

    def _run(self, x: torch.Tensor, y: torch.Tensor, xq: torch.Tensor, xd: torch.Tensor) -> None:
        n, k = x.shape
        xs = torch.empty(n, k // QK, dtype=torch.int32)  # per row and block: the sum of its int8 codes
        self.kernel.lib.q4_linear(self.packed.data_ptr(), self.out_features, k, x.data_ptr(), n,
                                  y.data_ptr(), xq.data_ptr(), xd.data_ptr(), xs.data_ptr())
