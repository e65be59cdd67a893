"""An ONNX Runtime model runtime: the engine's ``CausalLM`` over a graph from
``specd.models.onnx_graph``, with the KV cache kept in numpy buffers outside the graph.

Cache layout: ``k``/``v`` ``[layers, capacity, kv_heads, head_dim]`` float32 (position-major), so
the cached prefix of a layer, ``[:P]``, is one contiguous block that is bound to the graph's
``past_k.{i}`` as is (IOBinding on the buffer's address, no copy), and the graph's ``new_k.{i}``
output is bound to the slots ``P .. P+n-1`` of the same buffer: ORT writes the new keys in place.
Rollback moves the length back (O(1)).

The graph is exported once per model and mode and stored next to the converted weights
(``ort-<mode>[-h<N>].onnx`` plus ``.onnx.data``); a stored graph from another graph version or
other source weights is rebuilt, a corrupt one is reported naming the model and the mode.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Callable, Mapping

import numpy as np
import onnx
import torch

from specd.models.config import ModelConfig
from specd.models.errors import ModelError
from specd.models.kv_cache import CacheOwner, KVRows, check_put, check_rows, common_prefix
from specd.models.modes import ORT_QUANTS
from specd.models.onnx_graph import GRAPH_VERSION, build_model
from specd.models.registry import cache_root


def _ort():
    try:  # imported here to name the missing package in a ModelError
        import onnxruntime
    except ImportError as e:  # pragma: no cover - the base install has it
        raise ModelError("the ONNX Runtime backend needs onnxruntime: pip install 'specd[ort]'") from e
    return onnxruntime


class OrtKVCache:
    """Keys and values per layer, position-major, plus the token ids they came from."""

    def __init__(self, num_layers: int, num_kv_heads: int, head_dim: int, capacity: int) -> None:
        self.k = np.zeros((num_layers, capacity, num_kv_heads, head_dim), dtype=np.float32)
        # values carry a column of ones (the softmax normalizer, see onnx_graph)
        self.v = np.zeros((num_layers, capacity, num_kv_heads, head_dim + 1), dtype=np.float32)
        self.tokens = torch.full((capacity,), -1, dtype=torch.long)
        self.capacity = capacity
        self.length = 0
        self.k_layer_bytes, self.v_layer_bytes = self.k[0].nbytes, self.v[0].nbytes
        self.k_slot_bytes, self.v_slot_bytes = self.k[0, 0].nbytes, self.v[0, 0].nbytes

    def rollback(self, length: int) -> None:
        if not 0 <= length <= self.length:
            raise ValueError(f"cannot roll back to {length}: cache holds {self.length} positions")
        self.length = length

    def keep(self, start: int, indices: torch.Tensor) -> None:
        """Compact: keep positions ``start + indices`` (ascending) as ``start, start+1, ...``."""
        idx = indices.to(torch.long).cpu().numpy() + start
        n = len(idx)
        self.k[:, start : start + n] = self.k[:, idx]
        self.v[:, start : start + n] = self.v[:, idx]
        self.tokens[start : start + n] = self.tokens[torch.from_numpy(idx)]
        self.length = start + n

    def common_prefix(self, tokens: torch.Tensor) -> int:
        return common_prefix(self.tokens, self.length, tokens)

    def rows(self, start: int, end: int) -> KVRows:
        """A copy of positions ``start .. end-1`` (all cached)."""
        check_rows(start, end, self.length)
        return KVRows(self.k[:, start:end].copy(), self.v[:, start:end].copy(), end - start)

    def put_rows(self, start: int, rows: KVRows, tokens: torch.Tensor) -> None:
        """Write ``rows`` at ``start ..``; the cache then holds exactly ``start + rows.length``."""
        end = check_put(start, rows, tokens, self.length, self.capacity)
        self.k[:, start:end] = rows.k
        self.v[:, start:end] = rows.v
        self.tokens[start:end] = tokens.cpu()
        self.length = end

    def bytes_per_token(self) -> int:
        return (self.k.nbytes + self.v.nbytes) // self.capacity

    def nbytes(self) -> int:
        return self.k.nbytes + self.v.nbytes


def session_options(threads: int = 0):
    ort = _ort()
    so = ort.SessionOptions()
    so.intra_op_num_threads = max(threads, 0)
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.log_severity_level = 3
    # idle worker threads do not spin by default: the draft, the target and torch take turns on
    # the same cores, and a session spinning after its forward would take cycles from the next
    # one. SPECD_ORT_SPIN=1 turns spinning on (for measurements).
    so.add_session_config_entry("session.intra_op.allow_spinning", os.environ.get("SPECD_ORT_SPIN", "0"))
    return so


class OrtDecoder(CacheOwner):
    """A ``CausalLM`` running an ``onnx_graph`` model in an ONNX Runtime session."""

    def __init__(
        self,
        config: ModelConfig,
        model: str | bytes | Path,
        max_len: int = 4096,
        threads: int = 0,
        head_rows: list[int] | None = None,
        name: str = "model",
        mode: str = "",
        row_attention: bool = True,
    ) -> None:
        ort = _ort()
        self.config = config
        self.name, self.mode = name, mode
        source = str(model) if isinstance(model, Path) else model
        try:
            self.session = ort.InferenceSession(source, session_options(threads),
                                                providers=["CPUExecutionProvider"])
        except Exception as e:
            where = f" {model}" if isinstance(model, (str, Path)) else ""
            raise ModelError(f"{name} ({mode or 'ort'}): cannot load the ONNX graph{where} ({e}); "
                             "delete it to rebuild") from e
        meta = self.session.get_modelmeta().custom_metadata_map
        self._weight_bytes = {k: int(v) for k, v in json.loads(meta.get("specd_weight_bytes", "{}")).items()}
        self.head_rows = None if head_rows is None else torch.tensor(sorted(head_rows), dtype=torch.long)
        rows = int(meta.get("specd_head_rows", "0")) or config.vocab_size
        if rows != (len(head_rows) if head_rows is not None else config.vocab_size):
            raise ModelError(f"{name} ({mode}): the ONNX graph scores {rows} tokens, expected "
                             f"{len(head_rows) if head_rows is not None else config.vocab_size}; delete it to rebuild")
        self.head_size = rows
        c = config
        self._max_len = max_len
        # one spare slot: a padded one-token forward writes its pad row's keys there
        self.cache = OrtKVCache(c.num_layers, c.num_kv_heads, c.head_dim, max_len + 1)
        # True: a position's logits must not depend on the other rows in the forward (targets).
        # The 8-bit kernel is batch-invariant as is; the 4-bit one is for 2+ rows but takes
        # another path for exactly one row, so one-token forwards are padded to two rows.
        # Off for drafts (``row_attention``, as for ``Decoder``).
        self.batch_invariant = row_attention
        self.group = c.num_heads // c.num_kv_heads
        self.inv_freq = 1.0 / (c.rope_theta ** (np.arange(0, c.head_dim, 2, dtype=np.float64) / c.head_dim))
        self._io = self.session.io_binding()
        self._kv_names = [(f"past_k.{i}", f"past_v.{i}", f"new_k.{i}", f"new_v.{i}") for i in range(c.num_layers)]

    # -- properties the engine relies on ------------------------------------------------------
    @property
    def vocab_size(self) -> int:
        return self.config.vocab_size

    @property
    def max_len(self) -> int:
        return self._max_len

    @property
    def row_attention(self) -> bool:
        """``Decoder``'s name for "batch-invariant rows" (False for drafts: see ``load_ort``)."""
        return self.batch_invariant

    @row_attention.setter
    def row_attention(self, value: bool) -> None:
        self.batch_invariant = bool(value)

    def describe(self) -> str:
        """The runtime and its graph's quantization mode."""
        return f"{type(self).__name__}:{self.mode}"

    def weight_bytes(self) -> dict[str, int]:
        return dict(self._weight_bytes)

    # -- the forward ----------------------------------------------------------------------------
    def _rope(self, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        angles = positions.astype(np.float64)[:, None] * self.inv_freq[None, :]  # [n, hd/2]
        cos, sin = np.cos(angles), np.sin(angles)
        cos = np.concatenate([cos, cos], axis=-1).astype(np.float32)
        sin = np.concatenate([-sin, sin], axis=-1).astype(np.float32)  # rotate_half's sign folded in
        return cos[:, None, :], sin[:, None, :]

    def forward(
        self,
        tokens: torch.Tensor,
        positions: torch.Tensor | None = None,
        attn_mask: torch.Tensor | None = None,
        *,
        logits: bool = True,
    ) -> torch.Tensor:
        """Score ``tokens`` (``[n]``) appended to the cache; returns float32 logits ``[n, V]``
        (``logits=False`` is accepted and ignored: the graph always computes them).
        ``positions`` default to ``length .. length+n-1``; ``attn_mask`` (``[n, n]`` bool, True =
        may attend) to causal among the new tokens. Every cached position is visible."""
        cache = self.cache
        ids = tokens.reshape(-1).to(torch.long).cpu().numpy()
        n = len(ids)
        start, end = cache.length, cache.length + len(ids)
        if n == 0:
            raise ValueError("forward needs at least one token")
        if end > self._max_len:
            raise ValueError(f"context full: {end} tokens exceed this model's cache of {self._max_len}")
        pos = np.arange(start, end) if positions is None else positions.reshape(-1).cpu().numpy()
        pad = n == 1 and self.batch_invariant and self.mode == "int4"
        if pad:  # a second row (the same token, after the first, unseen by it): the 2+-row kernel
            ids, pos, attn_mask = np.repeat(ids, 2), np.repeat(pos, 2), None
            n, end = 2, end + 1
        cos, sin = self._rope(pos)
        mask = np.zeros((n, end), dtype=np.float32)  # every cached position visible
        if attn_mask is None:
            mask[:, start:] = np.triu(np.full((n, n), -np.inf, dtype=np.float32), k=1)
        else:
            mask[:, start:][~attn_mask.cpu().numpy().astype(bool)] = -np.inf
        logits = np.empty((n, self.head_size), dtype=np.float32)
        io = self._io
        io.bind_cpu_input("input_ids", np.ascontiguousarray(ids, dtype=np.int64))
        io.bind_cpu_input("cos", cos)
        io.bind_cpu_input("sin", sin)
        io.bind_cpu_input("mask", mask)
        kbase, vbase = cache.k.ctypes.data, cache.v.ctypes.data
        nkv, hd = self.config.num_kv_heads, self.config.head_dim
        f32 = np.float32
        for i, (pk, pv, nk, nv) in enumerate(self._kv_names):
            k_at, v_at = kbase + i * cache.k_layer_bytes, vbase + i * cache.v_layer_bytes
            io.bind_input(pk, "cpu", 0, f32, [start, nkv, hd], k_at)
            io.bind_input(pv, "cpu", 0, f32, [start, nkv, hd + 1], v_at)
            io.bind_output(nk, "cpu", 0, f32, [n, nkv, hd], k_at + start * cache.k_slot_bytes)
            io.bind_output(nv, "cpu", 0, f32, [n, nkv, hd + 1], v_at + start * cache.v_slot_bytes)
        io.bind_output("logits", "cpu", 0, f32, list(logits.shape), logits.ctypes.data)
        self.session.run_with_iobinding(io)
        if pad:
            logits, ids, n, end = logits[:1], ids[:1], 1, end - 1
        cache.tokens[start:end] = torch.from_numpy(ids)
        cache.length = end
        out = torch.from_numpy(logits)
        if self.head_rows is not None:
            full = torch.full((n, self.config.vocab_size), float("-inf"))
            out = full.index_copy_(1, self.head_rows, out)
        return out

    # -- cache control: CacheOwner (rollback, keep, reset, common_prefix, cache_len) ------------


# -- stored graphs --------------------------------------------------------------------------------

def artifact_path(directory: Path, mode: str, head_rows: list[int] | None = None) -> Path:
    head = f"-h{len(head_rows)}" if head_rows is not None else ""
    return directory / f"ort-{mode}{head}.onnx"


def source_stamp(directory: Path) -> str:
    """Identifies the float weights a graph was built from (names, sizes, modification times)."""
    files = sorted(f for f in directory.glob("*.safetensors") if not f.name.startswith("quant-"))
    return ";".join(f"{f.name}:{f.stat().st_size}:{f.stat().st_mtime_ns}" for f in files)


def _stored_meta(path: Path, name: str, mode: str) -> dict[str, str] | None:
    """The stored graph's metadata, or None when there is none; ModelError when it is corrupt."""
    if not path.exists():
        return None
    try:
        proto = onnx.load(str(path), load_external_data=False)
    except Exception as e:
        raise ModelError(f"{name} ({mode}): corrupt ONNX graph {path} ({e}); delete it to rebuild") from e
    return {p.key: p.value for p in proto.metadata_props}


def export(path: Path, config: ModelConfig, weights: Mapping[str, torch.Tensor], mode: str,
           head_rows: list[int] | None, stamp: str) -> None:
    """Build the graph and write it (``path`` + ``path.data``); the .onnx appears last."""
    model = build_model(config, weights, mode, head_rows, metadata={"specd_source": stamp})
    data = path.name + ".data"
    tmp = path.with_name(path.name + ".tmp")
    if (path.parent / data).exists():
        (path.parent / data).unlink()
    onnx.save_model(model, str(tmp), save_as_external_data=True, all_tensors_to_one_file=True,
                    location=data, size_threshold=1024)
    os.replace(tmp, path)


def load_ort(
    directory: Path,
    config: ModelConfig,
    read_weights: Callable[[], Mapping[str, torch.Tensor]],
    *,
    mode: str,
    name: str,
    max_len: int = 4096,
    threads: int = 0,
    head_rows: list[int] | None = None,
    stamp: str | None = None,
    row_attention: bool = True,
) -> OrtDecoder:
    """The model in ``directory`` as an ``OrtDecoder``: from the stored graph when it is current,
    else built from ``read_weights()`` and stored (once). ``stamp`` identifies the float weights
    (a GGUF source: its sha256); by default the directory's safetensors files. ``row_attention``:
    as ``Decoder``'s (False for a draft: its rows need not be batch-invariant)."""
    if mode not in ORT_QUANTS:
        raise ModelError(f"{name}: the ONNX Runtime backend runs {', '.join(ORT_QUANTS)}, not {mode!r}")
    stamp = source_stamp(directory) if stamp is None else stamp
    path = artifact_path(directory, mode, head_rows)
    if not os.access(directory, os.W_OK):  # a read-only model directory: store the graph in the cache
        key = hashlib.sha256(str(directory.resolve()).encode()).hexdigest()[:16]
        path = artifact_path(cache_root() / "ort" / key, mode, head_rows)
    meta = _stored_meta(path, name, mode)
    current = meta is not None and meta.get("specd_graph_version") == str(GRAPH_VERSION) \
        and meta.get("specd_mode") == mode and meta.get("specd_source") == stamp
    if not current:
        print(f"specd: exporting {name} to ONNX ({mode}, once) at {path}", file=sys.stderr)
        weights = read_weights()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            export(path, config, weights, mode, head_rows, stamp)
        except KeyError as e:
            raise ModelError(f"{directory}: {e.args[0]}; the weights do not fit a {config.architecture} model") from e
        except OSError as e:
            raise ModelError(f"{name} ({mode}): cannot store the ONNX graph at {path}: {e}") from e
    return OrtDecoder(config, path, max_len, threads, head_rows, name, mode, row_attention)
