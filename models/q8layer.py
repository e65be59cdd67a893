"""The decoder's layers in one C call each (``models/csrc/q8layer.c``), when every linear layer
is specd's INT8 kernel (``Q8Linear``) or every one its INT4 kernel (``Q4Linear``, drafts): norms, rotary embeddings, the KV-cache write, per-row
attention and the SwiGLU in C instead of ~40 small torch ops per layer.

Same contract as the Python loop in ``specd.models.decoder``: a forward over ``n`` new tokens
with their positions and an ``[n, n]`` mask among them (token trees), every cached position
visible; each row's result does not depend on the other rows (see the C file). The numbers
differ from the Python loop's by float rounding (a different order of sums, a polynomial exp),
so a model runs one path or the other, never both: ``Decoder`` picks this one whenever it can.
"""

from __future__ import annotations

import ctypes

import torch

from specd.models import q8
from specd.models.config import ModelConfig


def supports(config: ModelConfig, layers: list[dict], device: torch.device) -> bool:
    """Whether ``layers`` (the decoder's per-layer dicts) can run through ``q8_layer``."""
    return (
        device.type == "cpu"
        and q8.available()
        and config.head_dim % 8 == 0
        and config.num_heads % config.num_kv_heads == 0
        and len({type(layer[n]) for layer in layers for n in _LINEARS}) == 1
        and isinstance(layers[0]["qkv"], (q8.Q8Linear, q8.Q4Linear))
    )


_LINEARS = ("qkv", "o", "gate_up", "down")


class FusedLayers:
    """Pointers to every layer's weights, built once; ``run`` applies all layers to ``x``.

    A long causal forward (a cold prefill) goes through in chunks of ``chunk`` rows, each chunk
    through every layer before the next: the scratch memory is then bounded by ``chunk`` rows
    (a 1,000-token prefill would otherwise keep ~130 MB for the 1.5B target), and since every
    row's numbers are independent of the rows beside it, chunking changes no result. The
    kernels already stream the weights once per 64 rows, so it costs no extra weight traffic.
    """

    def __init__(self, config: ModelConfig, layers: list[dict], capacity: int, chunk: int = 64) -> None:
        c = config
        self.chunk = chunk
        self.kernel = q8.kernel()
        self.eps = float(c.rms_norm_eps)
        self.dims = (ctypes.c_int64 * 7)(c.hidden_size, c.num_heads, c.num_kv_heads, c.head_dim,
                                         c.intermediate_size, capacity, layers[0]["qkv"].bits)
        self._keep = []  # the tensors the pointers point into
        self.ptrs = []
        for layer in layers:
            tensors = [layer["qkv"].packed, layer["o"].packed, layer["gate_up"].packed, layer["down"].packed,
                       layer["in_norm"].float().contiguous(), layer["post_norm"].float().contiguous(),
                       None if layer["qkv_bias"] is None else layer["qkv_bias"].float().contiguous()]
            self._keep.append(tensors)
            self.ptrs.append((ctypes.c_void_p * 7)(*[None if t is None else t.data_ptr() for t in tensors]))
        self._scratch = torch.empty(0)
        self._stride = c.num_kv_heads * capacity * c.head_dim  # floats per layer in the KV cache

    def run(self, x: torch.Tensor, start: int, k: torch.Tensor, v: torch.Tensor, cos: torch.Tensor,
            sin: torch.Tensor, mask: torch.Tensor | None) -> None:
        """All layers over ``x`` ``[n, H]`` (float32, contiguous; updated in place); ``k``/``v``
        the cache ``[layers, nkv, capacity, hd]`` (written at ``start .. start+n-1``); ``cos``/
        ``sin`` ``[n, hd]``; ``mask`` ``[n, n]`` uint8 or None (causal)."""
        n = x.shape[0]
        if mask is None and n > self.chunk:  # causal: chunk i sees chunks < i through the cache
            for i in range(0, n, self.chunk):
                j = min(i + self.chunk, n)
                self.run(x[i:j], start + i, k, v, cos[i:j], sin[i:j], None)
            return
        need = int(self.kernel.lib.q8_layer_scratch(self.dims, n))
        if self._scratch.numel() < need:
            self._scratch = torch.empty(need, dtype=torch.float32)
        assert k.is_contiguous() and v.is_contiguous() and k.dtype == torch.float32
        cos, sin = cos.contiguous(), sin.contiguous()
        mptr = None if mask is None else mask.data_ptr()
        kb, vb, step = k.data_ptr(), v.data_ptr(), self._stride * 4
        lib = self.kernel.lib
        with self.kernel.lock:
            for li, ptrs in enumerate(self.ptrs):
                lib.q8_layer(ptrs, self.dims, self.eps, x.data_ptr(), n, start, kb + li * step, vb + li * step,
                             cos.data_ptr(), sin.data_ptr(), mptr, self._scratch.data_ptr())
