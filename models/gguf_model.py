"""Quant mode ``gguf``: a Qwen2 decoder whose weights are a GGUF file's own blocks.

The file is memory-mapped (copy-on-write, so nothing is copied until written, and nothing is
ever written); each linear layer is a ``GgufLinear`` over views of its tensors' blocks (q, k, v
and gate, up as parts of one layer, each part in its own format), the embedding a
``GgufEmbedding`` that dequantizes only the rows it looks up, the output head a ``GgufLinear``
(a draft's sub-vocabulary head: a copy of just those rows' blocks). Norms and biases (F32 in the
files llama.cpp writes) are small float32 copies. No dequantized copy of the model exists, on
disk or in memory.
"""

from __future__ import annotations

import logging
import math
import mmap
import re
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import torch
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType
from gguf.quants import dequantize as gguf_dequantize

from specd.models.config import ModelConfig
from specd.models.errors import ModelError
from specd.models.gguf_convert import hf_name, read_config
from specd.models import kernels
from specd.models.gguf_linear import KERNEL_TYPES, GgufEmbedding, GgufLinear, GgufPart, type_name, unsupported
from specd.models.gguf_linear import dequantize as kernel_dequantize
from specd.models.hugepages import weight_memory
from specd.models.quant import DenseLinear, Linear
from specd.models.weights import LazyWeights

log = logging.getLogger(__name__)

# float tensor types: a linear stored in one of them runs dense in bf16 (logged once per model)
FLOAT_TYPES = frozenset({int(GGMLQuantizationType.F32), int(GGMLQuantizationType.F16), int(GGMLQuantizationType.BF16)})
EMBEDDING = "model.embed_tokens.weight"


# GGUF metadata value types (gguf-py's GGUFValueType): struct formats of the scalars
_SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9


@dataclass(frozen=True)
class _Field:
    """One metadata value: ``contents()`` is the value (None for an array, whose ``data`` is a
    range of its length: the config needs only the vocabulary's size)."""

    value: object
    data: range = range(0)

    def contents(self) -> object:
        return self.value


@dataclass(frozen=True)
class TensorInfo:
    name: str
    qtype: int
    dims: tuple[int, ...]  # GGUF order: ne0 (the innermost, a linear's input channels) first
    offset: int  # of the data, from the file's start
    nbytes: int


class _Header:
    """A GGUF file's metadata and tensor table, read with struct from a memory map. Unlike
    gguf-py's reader it does not build an array per vocabulary string (11 s for Qwen's 151,936
    tokens and merges): arrays are skipped, only their length kept. ``fields`` and ``tensors``
    have the shape ``gguf_convert.read_config`` reads."""

    def __init__(self, buf: mmap.mmap, file_size: int) -> None:
        self.buf, self.at = buf, 0
        if self._take("<4s") != b"GGUF":
            raise ValueError("no GGUF magic number")
        version = self._take("<I")
        if version not in (2, 3):
            raise ValueError(f"GGUF version {version} (specd reads versions 2 and 3, little-endian)")
        n_tensors, n_fields = self._take("<Q"), self._take("<Q")
        self.fields: dict[str, _Field] = {}
        for _ in range(n_fields):
            key = self._string()
            self.fields[key] = self._value(self._take("<I"))
        infos = []
        for _ in range(n_tensors):
            name = self._string()
            dims = tuple(self._take("<Q") for _ in range(self._take("<I")))
            infos.append((name, dims, self._take("<I"), self._take("<Q")))
        align = int(self.fields.get("general.alignment", _Field(32)).value)
        data = (self.at + align - 1) // align * align
        self.tensors: list[TensorInfo] = []
        for name, dims, qtype, offset in infos:
            try:
                elements, size = GGML_QUANT_SIZES[GGMLQuantizationType(qtype)]
            except (ValueError, KeyError):
                raise ValueError(f"tensor {name!r} has unknown type {qtype}") from None
            count = math.prod(dims)
            if not dims or dims[0] % elements:
                raise ValueError(f"tensor {name!r} of shape {list(dims)} is not whole {type_name(qtype)} blocks")
            self.tensors.append(TensorInfo(name, qtype, dims, data + offset, count // elements * size))
        for t in self.tensors:
            if t.offset + t.nbytes > file_size:
                raise ValueError(f"tensor {t.name!r} ends at byte {t.offset + t.nbytes}, past the file's "
                                 f"end at {file_size} (truncated)")

    def _take(self, fmt: str):
        value = struct.unpack_from(fmt, self.buf, self.at)[0]
        self.at += struct.calcsize(fmt)
        return value

    def _string(self) -> str:
        n = self._take("<Q")
        raw = self.buf[self.at : self.at + n]
        if len(raw) != n:
            raise ValueError("the metadata ends inside a string (truncated)")
        self.at += n
        return raw.decode("utf-8", errors="replace")

    def _value(self, vtype: int) -> _Field:
        if vtype in _SCALAR:
            return _Field(self._take(_SCALAR[vtype]))
        if vtype == _STRING:
            return _Field(self._string())
        if vtype != _ARRAY:
            raise ValueError(f"unknown metadata value type {vtype}")
        itype, count = self._take("<I"), self._take("<Q")
        if itype in _SCALAR:
            self.at += struct.calcsize(_SCALAR[itype]) * count
        elif itype == _STRING:
            for _ in range(count):
                self.at += 8 + struct.unpack_from("<Q", self.buf, self.at)[0]
        else:
            for _ in range(count):
                self._value(itype)
        return _Field(None, range(count))


# rows dequantized per step by GgufFile.dense: bounds the float32 scratch beside the result (4096
# rows of the 1.5B's 1,536-wide embedding: 25 MB)
CHUNK_ROWS = 4096


def _rows_float32(qtype: int, raw: torch.Tensor, k: int) -> torch.Tensor:
    """Block rows ``raw`` uint8 ``[n, row_bytes]`` -> float32 ``[n, k]``: floats as stored, the
    formats specd's kernels run by their scalar reference (gguf-py's numbers bit for bit), the
    rest by gguf-py."""
    floats = {int(GGMLQuantizationType.F32): torch.float32, int(GGMLQuantizationType.F16): torch.float16,
              int(GGMLQuantizationType.BF16): torch.bfloat16}
    if qtype in floats:
        return raw.contiguous().view(floats[qtype]).float()
    if unsupported(qtype, k) is None and kernels.available():
        return kernel_dequantize(qtype, raw, k)
    values = gguf_dequantize(raw.numpy(), GGMLQuantizationType(qtype))
    return torch.from_numpy(np.ascontiguousarray(values, dtype=np.float32).reshape(raw.shape[0], k))


class GgufFile:
    """A GGUF file's tensors by name, memory-mapped (copy-on-write: writable views, nothing
    copied), and the decoder config its metadata gives. ModelError naming the file when it is
    truncated, corrupt, not a GGUF file or not a Qwen2 model."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            with open(path, "rb") as f:
                buf = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
            try:
                header = _Header(buf, buf.size())
            finally:
                buf.close()
            self.config: ModelConfig = read_config(header)
            self._map = np.memmap(path, dtype=np.uint8, mode="c")
        except ModelError as e:
            raise ModelError(f"{path}: {e}") from e
        except (ValueError, OSError, struct.error, UnicodeDecodeError) as e:
            raise ModelError(f"cannot read GGUF file {path}: truncated, corrupt or not a GGUF file ({e}); "
                             f"download or pull it again") from e
        if self.config.architecture != "qwen2":
            raise ModelError(f"{path}: {self.config.architecture} GGUF files are not supported in quant mode "
                             f"gguf (llama.cpp permutes their q/k rows); use a qwen2 model")
        self.tensors = {t.name: t for t in header.tensors}

    def qtype(self, name: str) -> int:
        return self.tensors[name].qtype

    def width(self, name: str) -> int:
        """The tensor's innermost dimension (a linear's input channels)."""
        return self.tensors[name].dims[0]

    def blocks(self, name: str) -> torch.Tensor:
        """A tensor's bytes as uint8 ``[rows, row_bytes]`` (rows: every dimension but the
        innermost), a view of the map."""
        t = self.tensors[name]
        rows = math.prod(t.dims[1:])
        return torch.from_numpy(self._map[t.offset : t.offset + t.nbytes]).view(rows, t.nbytes // rows)

    def release(self, name: str) -> None:
        """Let the OS drop the tensor's pages from this process's memory (they stay in the file and
        are read again if touched): for tensors whose bytes were copied into another layout."""
        t = self.tensors[name]
        mm = getattr(self._map, "_mmap", None)
        if mm is None:
            return
        start = -(-t.offset // mmap.PAGESIZE) * mmap.PAGESIZE  # whole pages inside the tensor only
        end = (t.offset + t.nbytes) // mmap.PAGESIZE * mmap.PAGESIZE
        if end > start:
            mm.madvise(mmap.MADV_DONTNEED, start, end - start)

    def dense(self, name: str, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """The tensor as a new ``dtype`` tensor of its shape (outermost dimension first: ``[rows, k]``,
        or ``[k]`` for a vector), dequantized ``CHUNK_ROWS`` rows at a time (the peak is the result
        plus one chunk's float32 rows); the values gguf-py's dequantization gives, rounded to ``dtype``."""
        t = self.tensors[name]
        k, rows = t.dims[0], math.prod(t.dims[1:])
        raw = self.blocks(name)  # [rows, row_bytes], a view of the map
        out = torch.empty(rows, k, dtype=dtype)
        for lo in range(0, rows, CHUNK_ROWS):
            hi = min(rows, lo + CHUNK_ROWS)
            out[lo:hi] = _rows_float32(t.qtype, raw[lo:hi], k)  # (copy_ rounds as .to(dtype) does)
        return out.reshape(tuple(reversed(t.dims)))

    def rows(self, name: str, ids: torch.Tensor) -> torch.Tensor:
        """Rows ``ids`` of a 2-D tensor as float32 ``[len(ids), k]`` (only those rows dequantized)."""
        t = self.tensors[name]
        raw = self.blocks(name).index_select(0, torch.as_tensor(ids, dtype=torch.long))
        return _rows_float32(t.qtype, raw, t.dims[0])


class GgufWeights(LazyWeights[object]):
    """The file's tensors by Hugging Face name, for ``Decoder``: the embedding as a
    ``GgufEmbedding`` (its blocks; a float32 copy when the file stores it as floats), every other
    tensor as a float32 copy, read when asked for (the decoder asks for norms and biases; the
    linears come from ``GgufLinearFactory``)."""

    def __init__(self, file: GgufFile) -> None:
        self.file = file
        self._where = {hf_name(name): name for name in file.tensors}

    def __getitem__(self, name: str) -> object:
        gguf = self._where[name]
        qtype = self.file.qtype(gguf)
        if name == EMBEDDING and qtype not in FLOAT_TYPES:
            return GgufEmbedding(gguf, qtype, self.file.blocks(gguf), self.file.width(gguf))
        return self.file.dense(gguf)


# the decoder's linear layers (specd.models.decoder names) -> their GGUF tensors, in output order
_LAYER_TENSORS = {"qkv": ("attn_q", "attn_k", "attn_v"), "o_proj": ("attn_output",),
                  "gate_up": ("ffn_gate", "ffn_up"), "down_proj": ("ffn_down",)}


class GgufLinearFactory:
    """``Decoder``'s linear factory for quant mode gguf: each layer a ``GgufLinear`` over the
    file's blocks (the float weight the decoder offers is never read). ``head_rows``: the sorted
    token ids of a sub-vocabulary head (the decoder's ``lm_head.subN``). A layer stored as floats
    runs dense in bf16 (one log line per model); one in a block format the kernels lack is a
    ModelError naming the tensor, its type and what works."""

    def __init__(self, file: GgufFile, head_rows: list[int] | None = None, model: str = "model") -> None:
        self.file, self.model = file, model
        self.head_rows = None if head_rows is None else torch.tensor(sorted(head_rows), dtype=torch.long)
        self.dense: list[str] = []  # tensors run dense (stored as floats)
        # the repacked weights' memory: 2 MiB pages where the OS offers them (see hugepages.py)
        self.alloc = weight_memory()

    def tensors_of(self, name: str) -> list[str]:
        """The GGUF tensors of the decoder's layer ``name``."""
        if name == "lm_head" or name.startswith("lm_head.sub"):
            return ["output.weight" if "output.weight" in self.file.tensors else "token_embd.weight"]
        m = re.fullmatch(r"model\.layers\.(\d+)\.(\w+)", name)
        if m is None or m.group(2) not in _LAYER_TENSORS:
            raise ModelError(f"{self.model}: no GGUF tensors for the decoder's layer {name!r}")
        return [f"blk.{m.group(1)}.{t}.weight" for t in _LAYER_TENSORS[m.group(2)]]

    def __call__(self, name: str, weight: Callable[[], torch.Tensor]) -> Linear:
        tensors = self.tensors_of(name)
        missing = [t for t in tensors if t not in self.file.tensors]
        if missing:
            raise ModelError(f"{self.file.path}: missing tensor {missing[0]!r}; the file does not fit a qwen2 model")
        rows = self.head_rows if name.startswith("lm_head.sub") else None
        widths = {self.file.width(t) for t in tensors}
        if len(widths) != 1:
            raise ModelError(f"{self.file.path}: tensors {', '.join(tensors)} differ in input width {sorted(widths)}")
        k = widths.pop()
        if any(self.file.qtype(t) in FLOAT_TYPES for t in tensors):
            if not self.dense:
                log.warning("%s: GGUF tensor %s is stored as %s: layers stored as floats run dense in bf16",
                            self.model, tensors[0], type_name(self.file.qtype(tensors[0])))
            self.dense += tensors
            w = torch.cat([self.file.dense(t) for t in tensors])
            return DenseLinear((w if rows is None else w[rows]).to(torch.bfloat16))
        parts = []
        for t in tensors:
            qtype = self.file.qtype(t)
            why = unsupported(qtype, k)
            if why:
                raise ModelError(f"{self.model}: GGUF tensor {t!r}: {why}; quant mode gguf runs "
                                 f"{', '.join(KERNEL_TYPES.values())} (and F32/F16/BF16 dense): load "
                                 f"{self.model} with --target-quant/--draft-quant int8 or int4 instead")
            raw = self.file.blocks(t)
            parts.append(GgufPart(t, qtype, raw if rows is None else raw.index_select(0, rows)))
        linear = GgufLinear(parts, k, alloc=self.alloc)
        for part, (_, w) in zip(linear.parts, linear.run):
            if w is not part.raw:
                self.file.release(part.name)  # repacked: the kernels no longer read the file's bytes
        return linear

    def save(self) -> None:
        """Nothing to store: the file is the artifact."""
