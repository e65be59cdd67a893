"""How much memory a model will take, known before it is loaded, and how much the machine has.

A model's footprint is its weights in the mode it will run as plus its KV cache (preallocated
for ``max_len`` positions: float16 where the layers run in specd's C kernels, else float32). The weights are read from what is on disk without loading
them: a GGUF file's tensor table (quant mode ``gguf`` runs those bytes as stored), or the
parameter count of the config for the modes that quantize or convert the weights at load. The
numbers are estimates (within a few percent: the small norms and biases are counted as float32,
and a one-time calibration's transient copy is not counted); ``specd.app`` compares them with
:func:`available_memory` before loading anything.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from specd.models.config import ModelConfig
from specd.models.errors import ModelError
from specd.models.gguf_model import FLOAT_TYPES, GgufFile, TensorInfo
from specd.models.kv_cache import kv_dtype
from specd.models.modes import AUTO_QUANT, DEFAULT_KV_CACHE, GGUF_QUANT, KERNEL_QUANTS, auto_target_quant
from specd.models import hub_gguf
from specd.models.pull import gguf_path
from specd.models.registry import PUBLISHED

# bytes per weight of a linear layer, by quant mode (blocks of 32 with an fp16 scale: int8 as
# Q8_0, int4 as Q4_0; fp8 one byte plus a float32 scale per row, counted as one byte)
_LINEAR_BYTES = {"int8": 34 / 32, "int4": 18 / 32, "fp8": 1.0, "bf16": 2.0, "fp32": 4.0}


class NotEnoughMemory(ModelError):
    """The models would not fit in the memory available (raised before loading them)."""


@dataclass(frozen=True)
class Footprint:
    """What one model will hold resident: ``weight_bytes`` and ``kv_cache_bytes``."""

    name: str
    quant: str
    weight_bytes: int
    kv_cache_bytes: int

    @property
    def total(self) -> int:
        return self.weight_bytes + self.kv_cache_bytes


def kv_cache_bytes(config: ModelConfig, max_len: int, element_bytes: int = 4) -> int:
    """Keys and values of every layer for ``max_len`` positions (``KVCache``), ``element_bytes`` each."""
    return 2 * config.num_layers * config.num_kv_heads * config.head_dim * max_len * element_bytes


def estimate(spec: str, quant: str, max_len: int, device: str = "cpu", head_vocab: int = 0,
             gguf_kernels: bool = True, kv_cache: str = DEFAULT_KV_CACHE) -> Footprint | None:
    """The footprint of ``spec`` (a published name, ``.gguf`` file or Hugging Face directory) in
    ``quant``, read from disk without loading it; None where it cannot be known before loading (a
    hub id not downloaded yet, a file the loader will refuse with its own error). ``gguf_kernels``:
    whether specd's kernels run it (built, not on ONNX Runtime), where ``kv_cache`` applies."""
    path = _local_path(spec)
    if path is None:
        return None
    try:
        if path.suffix == ".gguf":
            file = GgufFile(path)
            config = file.config
            # the bytes of each tensor as stored; 0 for a float one (converted to the compute dtype)
            stored = {n: 0 if t.qtype in FLOAT_TYPES else t.nbytes for n, t in file.tensors.items()}
        else:
            config, stored, file = ModelConfig.from_hf(json.loads((path / "config.json").read_text())), None, None
    except (ModelError, OSError, KeyError, ValueError):
        return None
    if quant == AUTO_QUANT:
        quant = auto_target_quant(stored is not None, device, gguf_kernels)
    head_rows = head_vocab if 0 < head_vocab < config.vocab_size else config.vocab_size
    if quant == GGUF_QUANT and stored is not None:
        weights = sum(map(_gguf_mode_bytes, file.tensors.values()))
        head = next(_gguf_mode_bytes(file.tensors[n]) for n in ("output.weight", "token_embd.weight") if n in file.tensors)
        if head_rows < config.vocab_size:  # a sub-vocabulary head: a copy of those rows' blocks
            weights += head * head_rows // config.vocab_size
    else:
        weights = _converted_weight_bytes(config, quant, head_rows, stored, device)
    dtype = kv_dtype(kv_cache)  # (ValueError for an unknown setting)
    in_c = device == "cpu" and gguf_kernels and _layers_in_c(quant, file)  # else float32, as other runtimes keep it
    return Footprint(spec, quant, int(weights), kv_cache_bytes(config, max_len, dtype.itemsize if in_c else 4))


def _layers_in_c(quant: str, file: GgufFile | None) -> bool:
    """Whether the layers run in C (where ``kv_cache`` applies), given specd's kernels: specd's
    INT8 / INT4, or a GGUF ``file``'s own blocks when no layer matrix is stored as floats (those
    run dense)."""
    if quant in KERNEL_QUANTS:
        return True
    return quant == GGUF_QUANT and file is not None and not any(
        t.qtype in FLOAT_TYPES for name, t in file.tensors.items() if name.startswith("blk.") and len(t.dims) == 2)


def _gguf_mode_bytes(t: TensorInfo) -> int:
    """A tensor's bytes in quant mode gguf: its blocks as stored; a float matrix as bf16, a float
    vector (norm, bias) as float32."""
    if t.qtype not in FLOAT_TYPES:
        return t.nbytes
    return math.prod(t.dims) * (4 if len(t.dims) == 1 else 2)


def _converted_weight_bytes(config: ModelConfig, quant: str, head_rows: int, stored: dict[str, int] | None,
                            device: str) -> float:
    """Weights of a mode that converts at load: the linears (and the head) in the mode's bytes,
    the embedding in the file's blocks (a GGUF source) or in the compute dtype, norms and biases."""
    c = config
    per_weight = _LINEAR_BYTES.get(quant, 2.0)
    q_out, kv_out = c.num_heads * c.head_dim, c.num_kv_heads * c.head_dim
    layer = c.hidden_size * (q_out + 2 * kv_out) + q_out * c.hidden_size + 3 * c.hidden_size * c.intermediate_size
    small = c.num_layers * (2 * c.hidden_size + (q_out + 2 * kv_out if c.qkv_bias else 0)) + c.hidden_size
    dense = 4.0 if quant == "fp32" else 2.0
    if stored and stored.get("token_embd.weight") and not c.tie_word_embeddings and device == "cpu":
        embedding = float(stored["token_embd.weight"])  # looked up from the file's blocks
    else:
        embedding = c.vocab_size * c.hidden_size * dense
    head = head_rows * c.hidden_size * per_weight
    return c.num_layers * layer * per_weight + embedding + head + small * 4


def _local_path(spec: str) -> Path | None:
    """The file or directory ``spec`` loads from, when it is already on disk."""
    if spec in PUBLISHED:
        path = gguf_path(PUBLISHED[spec])
        return path if path.exists() else None
    path = Path(spec).expanduser()
    if path.is_file() and path.suffix == ".gguf":
        return path
    if path.is_dir() and (path / "config.json").exists():
        return path
    return hub_gguf.cached_path(spec)  # a hub repository's GGUF already downloaded, else None


def available_memory() -> tuple[int, str] | None:
    """Bytes this process can still take, and where the number comes from: the kernel's
    ``MemAvailable`` (free memory plus the page cache it can reclaim), or a cgroup's limit less its
    usage where that is lower (a container). None where neither can be read (not Linux)."""
    found: list[tuple[int, str]] = []
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    found.append((int(line.split()[1]) * 1024, "MemAvailable in /proc/meminfo"))
    except (OSError, ValueError, IndexError):
        pass
    cgroup = Path("/sys/fs/cgroup")
    try:
        limit = (cgroup / "memory.max").read_text().strip()
        if limit != "max":
            used = int((cgroup / "memory.current").read_text())
            stat = dict(line.split() for line in (cgroup / "memory.stat").read_text().splitlines())
            used -= int(stat.get("inactive_file", 0))  # page cache the kernel reclaims first
            found.append((max(0, int(limit) - used), f"the cgroup's memory.max ({int(limit) >> 20} MiB) less its usage"))
    except (OSError, ValueError):
        pass
    return min(found) if found else None
