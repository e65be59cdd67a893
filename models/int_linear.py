"""specd's INT8 and INT4 linears (in the kernel library that ``specd.models.kernels`` loads): the
weight formats, packing, and the layers.

INT8 (``Q8Linear``, x86-64 AVX2, ``models/csrc/int_linear.c``): weights int8 in blocks of 32 input
channels, one fp16 scale per block (llama.cpp's Q8_0 numbers; scales stored ahead of each row's
blocks). INT4 (``Q4Linear``, drafts): blocks of 32 with an fp16 scale and 4-bit codes whose scales
specd searches (``pack4``); the numbers are ggml's Q4_0, so they run on the GGUF kernels'
repacked Q4_0 layout (``models/csrc/gguf_repack.c``). Activations: quantized per row and per block
of 32 inside the call.
Both scales are block-wise, so Qwen's few huge activation channels coarsen only their own block
(as ONNX Runtime's MatMulNBits with accuracy level 4 does), and the kernel is batch-invariant by
construction: a row's result does not depend on the other rows in the call (see the C file).
Weights are read once per call for all rows: a forward over 5 tokens costs little more than one.
"""

from __future__ import annotations

import torch
from gguf import GGMLQuantizationType

from specd.models.errors import ModelError
from specd.models.gguf_linear import Alloc, GgufLinear, GgufPart, unrepack_blocks
from specd.models.kernels import kernel

QK = 32
Q4_0 = int(GGMLQuantizationType.Q4_0)  # the GGUF block format INT4 weights run as


def scale_bytes(k: int) -> int:
    """Bytes of a weight row's fp16 block scales, padded to 8 (see ``pack``)."""
    return (k // QK + 3) // 4 * 8


def row_bytes(k: int) -> int:
    return scale_bytes(k) + k


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


def _gguf_rows(packed: torch.Tensor, k: int, code_bytes: int) -> torch.Tensor:
    """A packed weight's rows as GGUF blocks: per block its fp16 scale, then its ``code_bytes``
    bytes of codes (a packed row keeps all its scales ahead of all its blocks)."""
    n, nb = packed.shape[0], k // QK
    d = packed[:, : nb * 2].reshape(n, nb, 2)
    codes = packed[:, scale_bytes(k):].reshape(n, nb, code_bytes)
    return torch.cat([d, codes], dim=2).reshape(n, nb * (2 + code_bytes)).contiguous()


def q4_0_blocks(packed: torch.Tensor, k: int) -> torch.Tensor:
    """The GGUF Q4_0 rows ``[N, K/32 * 18]`` holding exactly the numbers of an INT4-packed weight
    (``pack4``): per block its fp16 ``d`` and the same 16 bytes of codes (ggml's block_q4_0, whose
    ``w = d (q - 8)`` and nibble order ``pack4`` already follows); only the row layout differs."""
    return _gguf_rows(packed, k, QK // 2)


def q8_0_blocks(packed: torch.Tensor, k: int) -> torch.Tensor:
    """The GGUF Q8_0 rows ``[N, K/32 * 34]`` holding exactly the numbers of an INT8-packed weight
    (``pack``): per block its fp16 scale and its 32 int8 (ggml's block_q8_0)."""
    return _gguf_rows(packed, k, QK)


class Q4Linear(GgufLinear):
    """INT4 weights (``pack4``), for drafts: half the bytes per step of ``Q8Linear``. They are
    ggml's Q4_0 numbers, so they run on the GGUF kernels as Q4_0 blocks (``q4_0_blocks``), in the
    repacked layout where the kernels run AVX2 or AVX-512 VNNI (``gguf_linear.repack_blocks``:
    16 output channels per vector, a token, a verification and a prefill alike); the kernels'
    bits are the scalar Q4_0 reference's at every SIMD level. The repacked copy (from ``alloc``:
    the loader's huge-page arena) is the only one kept: ``parts`` unrepacks it when asked (tests)."""

    def __init__(self, packed: torch.Tensor, in_features: int, alloc: Alloc | None = None) -> None:
        if (packed.dtype != torch.uint8 or packed.dim() != 2 or in_features <= 0 or in_features % QK
                or packed.shape[1] != q4_row_bytes(in_features)):
            raise ModelError(f"Q4 weight of shape {tuple(packed.shape)} and dtype {packed.dtype} does not fit "
                             f"{in_features} input channels (expected uint8 [N, {q4_row_bytes(in_features)}], "
                             f"input channels a multiple of {QK})")
        blocks = q4_0_blocks(packed.cpu(), in_features)
        super().__init__([GgufPart("int4", Q4_0, blocks)], in_features, alloc=alloc)
        self._rows = None if self.repacked else blocks  # the Q4_0 rows, where they are what runs

    @classmethod
    def from_float(cls, w: torch.Tensor) -> "Q4Linear":
        return cls(pack4(w), w.shape[1])

    @property
    def parts(self) -> list[GgufPart]:
        rows = self._rows
        if rows is None:
            rows = unrepack_blocks(Q4_0, self.run[0][1], self.in_features)
        return [GgufPart("int4", Q4_0, rows)]

    @parts.setter
    def parts(self, value: list[GgufPart]) -> None:  # GgufLinear.__init__'s assignment
        self._rows = value[0].raw
