"""Linear layers and embeddings over a GGUF file's own weight blocks (Q4_0, Q5_0, Q8_0, Q4_K,
Q6_K), run by specd's kernels (``models/csrc/gguf_*.c``, loaded through ``specd.models.kernels``).

The weights stay in the bytes the file stores: a ``GgufLinear`` holds, per part, a uint8 tensor
``[rows, row_bytes]`` (a view of the GGUF memory map or a copy of the tensor's bytes), never a
float or re-quantized copy. Activations are quantized per row inside each call (blocks of 32
for Q4_0 / Q5_0 / Q8_0, llama.cpp's Q8_K super-blocks of 256 for the K-quants); every output's
float accumulation order depends on the input width alone, so a row's result is the same bit for
bit whatever the other rows in the call (batch-invariant, see the C file).
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Iterator, Sequence

import torch
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType
from gguf.quants import dequantize as gguf_dequantize

from specd.models import kernels
from specd.models.errors import ModelError

# the block formats the kernels run, by GGML type id
KERNEL_TYPES: dict[int, str] = {
    int(t): t.name for t in (GGMLQuantizationType.Q4_0, GGMLQuantizationType.Q5_0, GGMLQuantizationType.Q8_0,
                             GGMLQuantizationType.Q4_K, GGMLQuantizationType.Q6_K)
}
K_QUANTS = frozenset({int(GGMLQuantizationType.Q4_K), int(GGMLQuantizationType.Q6_K)})  # Q8_K activations
# specd's repacked layouts (ggml_blocks.h: 16 rows interleaved per block for the AVX2 and AVX-512
# VNNI kernels) of these formats: a repacked weight's kernel type id is the GGUF type | X16
REPACKED = K_QUANTS | {int(GGMLQuantizationType.Q4_0)}
X16 = 0x100
X16_ROWS = 16


def type_name(qtype: int) -> str:
    """GGML's name of a type id (``Q4_K``), or ``type <id>`` for an unknown one."""
    try:
        return GGMLQuantizationType(qtype).name
    except ValueError:
        return f"type {qtype}"


def block_of(qtype: int) -> tuple[int, int]:
    """(elements, bytes) of one block of ``qtype``."""
    return GGML_QUANT_SIZES[GGMLQuantizationType(qtype)]


def row_bytes(qtype: int, k: int) -> int:
    """Bytes of one row of ``k`` elements in ``qtype`` (k a whole number of blocks)."""
    elements, size = block_of(qtype)
    return k // elements * size


def unsupported(qtype: int, k: int) -> str | None:
    """Why the kernels cannot run a ``[*, k]`` weight of ``qtype``, or None when they can."""
    if qtype not in KERNEL_TYPES:
        return (f"its type {type_name(qtype)} is not one of the block formats specd's kernels run "
                f"({', '.join(KERNEL_TYPES.values())})")
    elements = block_of(qtype)[0]
    if k % elements:
        return f"its {k} input channels are not a whole number of {type_name(qtype)} blocks of {elements}"
    return None


# the kernels' SIMD levels (gguf_dispatch.c gg_simd): every level computes the same bits
SIMD_LEVELS: dict[int, str] = {0: "scalar", 2: "avx2", 3: "avx512"}


def simd_levels() -> list[int]:
    """The SIMD levels the kernels can run on this CPU, lowest first (0 the scalar reference,
    2 AVX2, 3 AVX-512 VNNI; the environment variable SPECD_GG_SIMD=scalar|avx2 caps them)."""
    kernel = kernels.kernel()
    with kernel.lock:
        now = kernel.lib.gg_simd()
        best = kernel.lib.gg_set_simd(-1)
        kernel.lib.gg_set_simd(now)
    return [level for level in SIMD_LEVELS if level <= best]


@contextmanager
def simd_level(level: int) -> Iterator[int]:
    """Run the kernels at ``level`` (or the best level below it the CPU has) inside the block,
    yielding the level they run; the previous level afterwards. For tests and benchmarks that
    compare the paths in one process: it changes the level for every caller of the library."""
    kernel = kernels.kernel()
    with kernel.lock:
        before = kernel.lib.gg_simd()
        got = kernel.lib.gg_set_simd(level)
    try:
        yield got
    finally:
        with kernel.lock:
            kernel.lib.gg_set_simd(before)


@dataclass(frozen=True)
class GgufPart:
    """Rows of one GGUF tensor: ``raw`` uint8 ``[rows, row_bytes(qtype, k)]`` (the stored blocks)."""

    name: str  # the GGUF tensor name, for messages
    qtype: int
    raw: torch.Tensor


def _check_part(p: GgufPart, k: int) -> None:
    """ModelError naming the tensor unless its blocks fit ``k`` input channels on the kernels."""
    why = unsupported(p.qtype, k)
    if why:
        raise ModelError(f"GGUF tensor {p.name!r}: {why}; load this model with --target-quant/--draft-quant "
                         f"int8 or int4 (dequantized once, re-quantized by specd) instead of gguf")
    want = row_bytes(p.qtype, k)
    if (p.raw.dtype != torch.uint8 or p.raw.dim() != 2 or p.raw.device.type != "cpu"
            or p.raw.shape[1] != want or not p.raw.is_contiguous()):
        raise ModelError(f"GGUF tensor {p.name!r} ({type_name(p.qtype)}): expected contiguous uint8 blocks "
                         f"[rows, {want}] on the CPU for {k} input channels, got {p.raw.dtype} "
                         f"{list(p.raw.shape)} on {p.raw.device}")


def repacks_here() -> bool:
    """Whether Q4_0 and K-quant weights are repacked at load (``GgufLinear``'s ``repack``): where the
    kernels run AVX2 or AVX-512 VNNI (both have repacked paths; the portable scalar build runs
    the GGUF layout)."""
    kernel = kernels.kernel()
    with kernel.lock:
        return int(kernel.lib.gg_simd()) >= 2


# where repacked weights are written: ``alloc(nbytes)`` -> a new uint8 tensor (None: torch.empty;
# the loaders pass their model's huge-page arena, ``hugepages.weight_memory``)
Alloc = Callable[[int], torch.Tensor]


def _torch_alloc(nbytes: int) -> torch.Tensor:
    return torch.empty(nbytes, dtype=torch.uint8)


def repack_blocks(qtype: int, raw: torch.Tensor, k: int, alloc: Alloc | None = None) -> tuple[int, torch.Tensor]:
    """(kernel type, weight bytes) a part runs with: a Q4_0 or K-quant tensor of whole groups of 16 rows
    in specd's repacked layout (a new uint8 tensor of the same size per row from ``alloc``, the same
    values: ``unrepack_blocks`` gives the GGUF bytes back), anything else as stored."""
    if qtype not in REPACKED or raw.shape[0] % X16_ROWS:
        return qtype, raw
    lib = kernels.kernel().lib
    rb = int(lib.gg_row_bytes(qtype | X16, k))
    out = (alloc or _torch_alloc)(raw.shape[0] * rb).view(raw.shape[0], rb)
    if lib.gg_repack(qtype, raw.data_ptr(), raw.shape[0], k, out.data_ptr()) != 0:
        raise ModelError(f"the kernels refused to repack a {type_name(qtype)} weight {list(raw.shape)} of width {k}")
    return qtype | X16, out


def unrepack_blocks(qtype: int, packed: torch.Tensor, k: int) -> torch.Tensor:
    """The GGUF blocks ``[rows, row_bytes]`` a repacked weight came from, byte for byte."""
    lib = kernels.kernel().lib
    out = torch.empty(packed.shape[0], row_bytes(qtype, k), dtype=torch.uint8)
    if lib.gg_unrepack(qtype | X16, packed.data_ptr(), packed.shape[0], k, out.data_ptr()) != 0:
        raise ModelError(f"cannot unrepack a {type_name(qtype)} weight {list(packed.shape)} of width {k}")
    return out


class GgufLinear:
    """``Linear`` over GGUF block rows: float32 ``[n, K]`` in, float32 ``[n, N]`` out, where the
    N output rows are the parts' rows in order (q, k and v, or gate and up, may each keep their
    own block format). Per call the activations are quantized once per activation format (A32 /
    Q8_K) and each part's kernel writes its columns of the output directly.

    ``repack`` (default: ``repacks_here()``): Q4_0 and K-quant parts are copied once into specd's
    interleaved layout (``repack_blocks``), which the AVX2 and AVX-512 kernels run for every number of rows
    (one token, a verification, a prefill) with the same bits as the GGUF layout; the parts keep
    their GGUF views (``parts``, for ``reference`` and ``dequantize``), which the caller may let the
    OS drop from memory (``GgufFile.release``). ``alloc`` gives the repacked copies their memory
    (``GgufLinearFactory``: a huge-page arena, ``specd.models.hugepages``)."""

    bits = 0  # specd.models.fused_layers's weight kind: part tables (kernel_abi.h gg_parts)

    def __init__(self, parts: Sequence[GgufPart], in_features: int, repack: bool | None = None,
                 alloc: Alloc | None = None) -> None:
        if not parts:
            raise ModelError("a GGUF linear layer needs at least one weight tensor")
        for p in parts:
            _check_part(p, in_features)
        self.kernel = kernels.kernel()
        self.parts = list(parts)
        self.in_features = in_features
        self.out_features = sum(p.raw.shape[0] for p in self.parts)
        if repack is None:
            repack = repacks_here()
        # per part the kernel type and the bytes it runs (repacked, or the GGUF view itself)
        self.run = [repack_blocks(p.qtype, p.raw, in_features, alloc) if repack else (p.qtype, p.raw)
                    for p in self.parts]
        # the part table the C side reads (gg_linear_parts, the fused layer's weights argument):
        # int64 [count, (type, rows, address) per part]; the tensors stay referenced in self.run
        self.packed = torch.tensor([len(self.run)] + [v for t, w in self.run
                                    for v in (t, w.shape[0], w.data_ptr())], dtype=torch.int64)

    @classmethod
    def from_blocks(cls, name: str, qtype: int, raw: torch.Tensor, in_features: int,
                    repack: bool | None = None) -> "GgufLinear":
        """One tensor's blocks ``raw`` uint8 ``[N, row_bytes]``."""
        return cls([GgufPart(name, qtype, raw)], in_features, repack=repack)

    @property
    def repacked(self) -> bool:
        """Whether any part runs in the repacked layout."""
        return any(t & X16 for t, _ in self.run)

    def types(self) -> list[str]:
        """The parts' block formats, in order (``['Q4_K', 'Q4_K', 'Q6_K']``)."""
        return [type_name(p.qtype) for p in self.parts]

    def nbytes(self) -> int:
        """Bytes of the weights the kernels run (repacked copies, or the GGUF blocks)."""
        return sum(w.nbytes for _, w in self.run)

    def _check_x(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() != 2 or x.shape[1] != self.in_features:
            raise ValueError(f"expected {self.in_features} input features in x of shape [n, "
                             f"{self.in_features}], got x of shape {tuple(x.shape)}")
        if x.device.type != "cpu":
            raise ValueError(f"x is on {x.device}: specd's GGUF kernels run on the CPU")
        return x.float().contiguous()

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """One C call (gg_linear_parts): the activations quantized once per activation format,
        each part's kernel writing its columns of y."""
        x = self._check_x(x)
        n, k = x.shape
        lib = self.kernel.lib
        y = torch.empty(n, self.out_features, dtype=torch.float32)  # [n, N]
        act = torch.empty(int(lib.gg_parts_act_bytes(k, n)), dtype=torch.uint8)  # quantized rows
        with self.kernel.lock:
            lib.gg_linear_parts(self.packed.data_ptr(), k, x.data_ptr(), n, y.data_ptr(), act.data_ptr())
        return y

    def reference(self, x: torch.Tensor) -> torch.Tensor:
        """The same linear by the kernels' scalar reference, part by part (tests: the SIMD path
        equals it bit for bit)."""
        x = self._check_x(x)
        n, k = x.shape
        lib = self.kernel.lib
        y = torch.empty(n, self.out_features, dtype=torch.float32)  # [n, N]
        col = 0
        for p in self.parts:
            act = torch.empty(n, int(lib.gg_act_bytes(p.qtype, k)), dtype=torch.uint8)
            rows = p.raw.shape[0]
            if (lib.gg_quantize_ref(p.qtype, x.data_ptr(), n, k, act.data_ptr()) != 0
                    or lib.gg_gemm_ref(p.qtype, p.raw.data_ptr(), rows, k, act.data_ptr(), n,
                                       y.data_ptr() + 4 * col, self.out_features) != 0):
                raise RuntimeError(f"{p.name}: the kernel refused a {type_name(p.qtype)} weight [{rows}, {k}]")
            col += rows
        return y

    def dequantize(self) -> torch.Tensor:
        """The weights as float32 ``[N, K]`` (the scalar reference dequantization: gguf-py's
        numbers bit for bit)."""
        return torch.cat([dequantize(p.qtype, p.raw, self.in_features) for p in self.parts])


def dequantize(qtype: int, raw: torch.Tensor, k: int) -> torch.Tensor:
    """Blocks ``raw`` uint8 ``[rows, row_bytes(qtype, k)]`` -> float32 ``[rows, k]`` (specd's
    scalar reference: gguf-py's dequantization bit for bit). ModelError for a type the kernels lack."""
    why = unsupported(qtype, k)
    if why:
        raise ModelError(f"cannot dequantize a {type_name(qtype)} tensor of width {k}: {why}")
    raw = raw.contiguous()
    out = torch.empty(raw.shape[0], k, dtype=torch.float32)
    if kernels.kernel().lib.gg_dequantize(qtype, raw.data_ptr(), raw.shape[0], k, out.data_ptr()) != 0:
        raise RuntimeError(f"the kernel refused to dequantize {type_name(qtype)} rows of width {k}")
    return out


def quantize_activations(qtype: int, x: torch.Tensor, reference: bool = False) -> torch.Tensor:
    """The kernels' own activation quantization for weights of ``qtype``: ``x`` ``[n, K]`` ->
    uint8 ``[n, act_bytes]`` (A32 rows: float d[K/32], int32 sums[K/32], int8 q[K]; Q8_K rows:
    K/256 blocks of float d, int8 q[256], int16 sums of 16[16])."""
    x = x.float().contiguous()
    n, k = x.shape
    lib = kernels.kernel().lib
    out = torch.empty(n, int(lib.gg_act_bytes(qtype, k)), dtype=torch.uint8)
    fn = lib.gg_quantize_ref if reference else lib.gg_quantize
    if fn(qtype, x.data_ptr(), n, k, out.data_ptr()) != 0:
        raise ValueError(f"{type_name(qtype)} activations of width {k}: not a whole number of blocks")
    return out


def dequantize_activations(qtype: int, act: torch.Tensor, k: int) -> torch.Tensor:
    """float64 ``[n, K]``: the values ``d * q`` that quantized activation rows ``act`` stand for."""
    n = act.shape[0]
    if qtype in K_QUANTS:
        blocks = act.reshape(n, k // 256, 292)
        d = blocks[..., :4].contiguous().view(torch.float32).double()  # [n, K/256, 1]
        q = blocks[..., 4:260].contiguous().view(torch.int8).double()  # [n, K/256, 256]
        return (q * d).reshape(n, k)
    nb = k // 32
    d = act[:, : 4 * nb].contiguous().view(torch.float32).double()  # [n, K/32]
    q = act[:, 8 * nb :].contiguous().view(torch.int8).double().reshape(n, nb, 32)
    return (q * d[..., None]).reshape(n, k)


class GgufEmbedding:
    """A token embedding held in its GGUF blocks ``raw`` uint8 ``[V, row_bytes]``; indexing with
    token ids dequantizes just those rows: ``emb[tokens]`` -> float32 ``[n, H]`` (specd's kernels
    for their formats, gguf-py's dequantization for any other block format)."""

    def __init__(self, name: str, qtype: int, raw: torch.Tensor, dim: int) -> None:
        if unsupported(qtype, dim) is None:
            _check_part(GgufPart(name, qtype, raw), dim)
        self.name, self.qtype, self.raw, self.dim = name, qtype, raw, dim

    @property
    def shape(self) -> tuple[int, int]:
        return (self.raw.shape[0], self.dim)

    @property
    def nbytes(self) -> int:
        return self.raw.nbytes

    def __getitem__(self, tokens: torch.Tensor) -> torch.Tensor:
        rows = self.raw.index_select(0, torch.as_tensor(tokens, dtype=torch.long).reshape(-1))  # [n, row_bytes]
        if unsupported(self.qtype, self.dim) is None:
            return dequantize(self.qtype, rows, self.dim)
        values = gguf_dequantize(rows.numpy(), GGMLQuantizationType(self.qtype))
        return torch.from_numpy(values.reshape(rows.shape[0], self.dim).astype("float32"))
