"""The decoder's layers in one C call each (``models/csrc/decoder_layer.c``), when every linear layer
is specd's INT8 kernel (``Q8Linear``), every one specd's INT4 (``Q4Linear``, drafts: Q4_0 blocks on the
GGUF kernels) or every one a GGUF file's own blocks (``GgufLinear``, quant mode gguf): norms, rotary embeddings, the KV-cache write, per-row
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

from specd.models import int_linear, kernels
from specd.models.config import ModelConfig
from specd.models.gguf_linear import GgufLinear
from specd.models.profile import PhaseClock


def supports(config: ModelConfig, layers: list[dict], device: torch.device) -> bool:
    """Whether ``layers`` (the decoder's per-layer dicts) can run through ``q8_layer``."""
    return (
        device.type == "cpu"
        and kernels.available()
        and config.head_dim % 8 == 0
        and config.num_heads % config.num_kv_heads == 0
        and len({type(layer[n]) for layer in layers for n in _LINEARS}) == 1
        and isinstance(layers[0]["qkv"], _KINDS)
    )


_LINEARS = ("qkv", "o", "gate_up", "down")
# the KV cache's element types the C layer reads and writes (float16: half the bytes attention
# streams; each key and value rounded once, when written)
KV_DTYPES = (torch.float32, torch.float16)
_KINDS = (int_linear.Q8Linear, int_linear.Q4Linear, GgufLinear)  # their ``packed`` and ``bits`` are what q8_layer reads


def _check(name: str, t: torch.Tensor, shape: tuple[int, ...], dtype: torch.dtype) -> None:
    """TypeError unless ``t`` holds ``dtype`` on the CPU; ValueError unless it is contiguous and
    of ``shape``. The C layer trusts every pointer and size it gets: these are its guards."""
    if t.dtype != dtype or t.device.type != "cpu":
        raise TypeError(f"{name}: expected {dtype} on the CPU, got {t.dtype} on {t.device}")
    if tuple(t.shape) != shape or not t.is_contiguous():
        layout = "" if t.is_contiguous() else " (not contiguous)"
        raise ValueError(f"{name}: expected a contiguous tensor of shape {list(shape)}, got shape "
                         f"{list(t.shape)}{layout}")


def _check_layers(config: ModelConfig, layers: list[dict]) -> None:
    """TypeError / ValueError unless every layer's weights have the shapes ``config`` gives them
    and every linear is the same kernel class (``Q8Linear``, ``Q4Linear`` or ``GgufLinear``)."""
    c = config
    if c.num_kv_heads <= 0 or c.num_heads % c.num_kv_heads or c.head_dim % 8:
        raise ValueError(f"{c.num_heads} heads over {c.num_kv_heads} KV heads of head_dim {c.head_dim}: "
                         f"the fused layer needs whole groups and head_dim a multiple of 8")
    H, qd, kvd, inter = c.hidden_size, c.num_heads * c.head_dim, c.num_kv_heads * c.head_dim, c.intermediate_size
    shapes = {"qkv": (qd + 2 * kvd, H), "o": (H, qd), "gate_up": (2 * inter, H), "down": (H, inter)}
    if not layers:
        raise ValueError("no layers to fuse")
    kind = type(layers[0]["qkv"])
    if kind not in _KINDS:
        raise TypeError(f"layer 0 qkv: expected Q8Linear, Q4Linear or GgufLinear, got {kind.__name__}")
    for li, layer in enumerate(layers):
        for name, shape in shapes.items():
            lin = layer[name]
            if type(lin) is not kind:
                raise TypeError(f"layer {li} {name}: expected {kind.__name__} like layer 0 qkv, "
                                f"got {type(lin).__name__}")
            if (lin.out_features, lin.in_features) != shape:
                raise ValueError(f"layer {li} {name}: expected a [{shape[0]}, {shape[1]}] weight, got "
                                 f"[{lin.out_features}, {lin.in_features}]")
        for name, size in (("in_norm", H), ("post_norm", H), ("qkv_bias", qd + 2 * kvd)):
            if layer[name] is not None:
                _check(f"layer {li} {name}", layer[name].float().contiguous(), (size,), torch.float32)


class FusedLayers:
    """Pointers to every layer's weights, built once; ``run`` applies all layers to ``x``.

    A long causal forward (a cold prefill) goes through in chunks of ``chunk`` rows, each chunk
    through every layer before the next: the scratch memory is then bounded by ``chunk`` rows
    (a 1,000-token prefill would otherwise keep ~130 MB for the 1.5B target), and since every
    row's numbers are independent of the rows beside it, chunking changes no result. The
    kernels already stream the weights once per 64 rows, so it costs no extra weight traffic.
    """

    def __init__(self, config: ModelConfig, layers: list[dict], capacity: int, chunk: int = 64,
                 kv_dtype: torch.dtype = torch.float32) -> None:
        c = config
        _check_layers(c, layers)
        if capacity <= 0:
            raise ValueError(f"cache capacity {capacity}: expected at least one position")
        if kv_dtype not in KV_DTYPES:
            raise ValueError(f"KV cache of {kv_dtype}: the C layer keeps float32 or float16")
        self.kv_dtype = kv_dtype
        self.chunk = chunk
        self.kernel = kernels.kernel()
        self.eps = float(c.rms_norm_eps)
        dims = {"hidden": c.hidden_size, "heads": c.num_heads, "kv_heads": c.num_kv_heads, "head_dim": c.head_dim,
                "intermediate": c.intermediate_size, "capacity": capacity, "bits": layers[0]["qkv"].bits,
                "kv_f16": int(kv_dtype == torch.float16)}
        # in the order of the ABI's q8_layer_dims / q8_layer_weights tables (checked at load)
        self.dims = (ctypes.c_int64 * len(kernels.LAYER_DIMS))(*[dims[name] for name in kernels.LAYER_DIMS])
        self._keep = []  # the tensors the pointers point into
        self.ptrs = []
        for layer in layers:
            weights = {name: layer[name].packed for name in _LINEARS}
            weights.update({name: layer[name].float().contiguous() for name in ("in_norm", "post_norm")})
            weights["qkv_bias"] = None if layer["qkv_bias"] is None else layer["qkv_bias"].float().contiguous()
            tensors = [weights[name] for name in kernels.LAYER_WEIGHTS]
            self._keep.append(tensors)
            self.ptrs.append((ctypes.c_void_p * len(tensors))(*[None if t is None else t.data_ptr() for t in tensors]))
        self._scratch = torch.empty(0)
        self._layers = len(layers)
        self._shape = (c.hidden_size, c.num_kv_heads, capacity, c.head_dim)  # H, nkv, capacity, hd
        # bytes per layer in the KV cache
        self._stride = c.num_kv_heads * capacity * c.head_dim * kv_dtype.itemsize

    def run(self, x: torch.Tensor, start: int, k: torch.Tensor, v: torch.Tensor, cos: torch.Tensor,
            sin: torch.Tensor, mask: torch.Tensor | None, clock: PhaseClock | None = None) -> None:
        """All layers over ``x`` ``[n, H]`` (float32, contiguous; updated in place); ``k``/``v``
        the cache ``[layers, nkv, capacity, hd]`` of ``kv_dtype`` (written at ``start .. start+n-1``); ``cos``/
        ``sin`` ``[n, hd]``; ``mask`` ``[n, n]`` uint8 or None (causal). TypeError / ValueError
        naming the tensor when a dtype, shape or the range ``start .. start+n-1`` does not fit.
        ``clock``: add the kernels' phase seconds to it (``specd.models.profile``)."""
        H, nkv, cap, hd = self._shape
        if x.dim() != 2:
            raise ValueError(f"x: expected a tensor of shape [n, {H}], got shape {list(x.shape)}")
        n = x.shape[0]
        _check("x", x, (n, H), torch.float32)
        if start < 0 or start + n > cap:
            raise ValueError(f"rows {start} .. {start + n - 1} do not fit the KV cache of {cap} positions")
        _check("k cache", k, (self._layers, nkv, cap, hd), self.kv_dtype)
        _check("v cache", v, (self._layers, nkv, cap, hd), self.kv_dtype)
        cos, sin = cos.contiguous(), sin.contiguous()
        _check("cos", cos, (n, hd), torch.float32)
        _check("sin", sin, (n, hd), torch.float32)
        if mask is not None:
            _check("mask", mask, (n, n), torch.uint8)
        if mask is None and n > self.chunk:  # causal: chunk i sees chunks < i through the cache
            for i in range(0, n, self.chunk):
                j = min(i + self.chunk, n)
                self.run(x[i:j], start + i, k, v, cos[i:j], sin[i:j], None, clock)
            return
        need = int(self.kernel.lib.q8_layer_scratch(self.dims, n))
        if self._scratch.numel() < need:
            self._scratch = torch.empty(need, dtype=torch.float32)
        mptr = None if mask is None else mask.data_ptr()
        kb, vb, step = k.data_ptr(), v.data_ptr(), self._stride
        lib = self.kernel.lib
        acc = None if clock is None else (ctypes.c_double * len(kernels.PROFILE_SLOTS))()
        with self.kernel.lock:
            if acc is not None:
                lib.kernel_profile(acc)
            try:
                for li, ptrs in enumerate(self.ptrs):
                    lib.q8_layer(ptrs, self.dims, self.eps, x.data_ptr(), n, start, kb + li * step, vb + li * step,
                                 cos.data_ptr(), sin.data_ptr(), mptr, self._scratch.data_ptr())
            finally:
                if acc is not None:
                    lib.kernel_profile(None)
        if clock is not None:
            for name, seconds in zip(kernels.PROFILE_SLOTS, acc):
                clock.add(name, seconds)
