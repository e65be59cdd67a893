"""A lean torch implementation of the Qwen2/Llama decoder family.

RMSNorm, rotary embeddings (NeoX layout, as Hugging Face's Qwen2/Llama), grouped-query attention
with optional q/k/v bias, SwiGLU MLP, tied or untied output head.

``Decoder.forward(tokens, positions, attn_mask)`` scores ``n`` new tokens against the cache and
returns logits for every one of them (``[n, vocab]``, float32). The new tokens may carry arbitrary
positions and an arbitrary ``[n, n]`` mask among themselves (token trees); every cached position is
visible to all of them. Their keys and values are written at cache slots ``length .. length+n-1``.

Numerics: the residual stream, norms, rotary embeddings and attention run in float32 (where the
layers run in C, the KV cache stores keys and values in float16 by default: ``kv_dtype``). Linear layers
run in ``compute_dtype``: float32 (matches transformers), or bfloat16 (half the bytes per step). With
bfloat16 the oneDNN matmul gives each row the same result whatever the number of rows in the
forward: a position's logits do not depend on how many tokens were verified with it, which is what
makes greedy speculative output equal greedy target-only output. MKL's float32 GEMM does not have
that property (tested in ``tests/test_decoder.py``).

Attention is batch-invariant too when ``row_attention`` is on (the default; drafts switch it off for
speed): each new token attends in its own small matmul over exactly the keys it sees, laid out as a
one-token forward at its position would lay them out. One batched matmul over all rows is faster, but
its rounding depends on how many keys and rows share it (measured: at ~700 cached positions a bf16
model's logits moved by 0.16 between one and twelve rows), and a greedy target could then emit a
different token in speculative and target-only runs, or in a cold and a warm (KV-reusing) request.
"""

from __future__ import annotations

import time
from typing import Callable, Mapping

import torch
import torch.nn.functional as F

from specd.models.config import ModelConfig
from specd.models.kv_cache import CacheOwner, HiddenStates, KVCache
from specd.models.profile import PhaseClock
from specd.models import fused_layers
from specd.models.fused_layers import FusedLayers
from specd.models.quant import DenseLinear, Linear

HEAD_INPUT = "head_input"  # the observer's name for the output head's input (calibration)

# Builds the linear layer for a (fused) weight: name, a function returning the float weight
# [N, K] -> Linear. The weight is read only when called: a factory whose quantized layer is
# stored never reads the float weight from the checkpoint.
LinearFactory = Callable[[str, Callable[[], torch.Tensor]], Linear]


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary embedding in the half-split form Qwen uses: ``x`` ``[..., n, heads, hd]``,
    ``cos`` / ``sin`` ``[n, 1, hd]``."""
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rotated * sin


class Decoder(CacheOwner):
    """Weights (a flat dict with Hugging Face names) plus one KV cache."""

    SINKS_HIDDEN = True  # see CacheOwner.watch_hidden

    def __init__(
        self,
        config: ModelConfig,
        weights: Mapping[str, torch.Tensor],
        compute_dtype: torch.dtype = torch.bfloat16,
        max_len: int = 4096,
        device: str = "cpu",
        linear_factory: LinearFactory | None = None,
        head_rows: list[int] | None = None,
        row_attention: bool = True,
        fused: bool = True,
        kv_dtype: torch.dtype = torch.float16,
    ) -> None:
        """``linear_factory`` turns each float weight into a layer (quantized ones, see
        ``specd.models.quant``); by default a dense layer in ``compute_dtype``. ``head_rows``
        restricts the output head to those token ids (a draft's sub-vocabulary, see
        ``specd.models.subvocab``): every other token gets logit -inf. ``fused``: run the layers
        through ``specd.models.fused_layers`` when every linear is one of specd's kernels (INT8 or
        INT4; the default; False keeps the Python loop, the reference it is tested against).
        ``kv_dtype``: the KV cache's element where the layers run in C (float16, as llama.cpp keeps
        it: half the bytes attention reads; or float32); the Python loop keeps float32."""
        self.config = config
        self.compute_dtype = compute_dtype
        self.row_attention = row_attention  # batch-invariant attention (see the module docstring)
        # called with (linear layer name, its float input) before each linear: calibration
        self.observer: Callable[[str, torch.Tensor], None] | None = None
        self.device = torch.device(device)
        c = config
        make = linear_factory or (lambda name, weight: DenseLinear(weight().to(compute_dtype)))

        def w(name: str, dtype: torch.dtype = compute_dtype) -> torch.Tensor:
            if name not in weights:
                raise KeyError(f"missing weight {name!r}")
            t = weights[name]
            if not isinstance(t, torch.Tensor):  # held in its file's blocks (specd.models.gguf_linear.GgufEmbedding)
                return t
            return t if t.dtype == dtype and t.device == self.device else t.to(self.device, dtype)

        def lazy(*names: str) -> Callable[[], torch.Tensor]:
            """The weights ``names`` stacked along the output dimension, read when called (their
            presence is checked now)."""
            for name in names:
                if name not in weights:
                    raise KeyError(f"missing weight {name!r}")
            return lambda: w(names[0]) if len(names) == 1 else torch.cat([w(n) for n in names])

        self.embed = w("model.embed_tokens.weight")  # [V, H]
        head = "lm_head.weight" if not c.tie_word_embeddings and "lm_head.weight" in weights else "model.embed_tokens.weight"
        self.head_rows = None if head_rows is None else torch.tensor(sorted(head_rows), dtype=torch.long)
        if self.head_rows is not None:
            rows = self.head_rows
            self.lm_head: Linear = make(f"lm_head.sub{len(rows)}", lambda: w(head)[rows])  # [V', H]
        elif linear_factory is None and head == "model.embed_tokens.weight":
            self.lm_head = DenseLinear(self.embed)  # tied: one tensor serves both
        else:
            self.lm_head = make("lm_head", lazy(head))  # [V, H]
        self.norm = w("model.norm.weight", torch.float32)
        self.layers = []
        for i in range(c.num_layers):
            p = f"model.layers.{i}."
            layer = {
                "in_norm": w(p + "input_layernorm.weight", torch.float32),
                "post_norm": w(p + "post_attention_layernorm.weight", torch.float32),
                "qkv": make(p + "qkv", lazy(*(p + f"self_attn.{n}_proj.weight" for n in "qkv"))),  # [(nh + 2 nkv) hd, H]
                "o": make(p + "o_proj", lazy(p + "self_attn.o_proj.weight")),
                "gate_up": make(p + "gate_up", lazy(p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight")),  # [2 I, H]
                "down": make(p + "down_proj", lazy(p + "mlp.down_proj.weight")),
                "qkv_bias": None,
            }
            if c.qkv_bias:
                layer["qkv_bias"] = torch.cat(
                    [w(p + f"self_attn.{n}_proj.bias", torch.float32) for n in "qkv"]
                )
            self.layers.append(layer)
        inv_freq = 1.0 / (
            c.rope_theta ** (torch.arange(0, c.head_dim, 2, dtype=torch.float64) / c.head_dim)
        )
        self.inv_freq = inv_freq.to(self.device)  # [hd/2], float64 for exact angles
        # every linear on specd's INT8 (or INT4) kernel: each layer is one C call (specd.models.fused_layers)
        self.fused: FusedLayers | None = None
        if fused and fused_layers.supports(c, self.layers, self.device):
            self.fused = FusedLayers(c, self.layers, max_len, kv_dtype=kv_dtype)
        self.cache = KVCache(c.num_layers, c.num_kv_heads, c.head_dim, max_len,
                             kv_dtype if self.fused is not None else torch.float32, self.device)

    # -- properties the engine relies on ------------------------------------------------------
    @property
    def vocab_size(self) -> int:
        return self.config.vocab_size

    @property
    def max_len(self) -> int:
        return self.cache.capacity

    def describe(self) -> str:
        """The runtime and its linear layers' kernel, ``:fused`` when the layers run in C."""
        fused = ":fused" if self.fused is not None else ""
        return f"{type(self).__name__}:{type(self.layers[0]['qkv']).__name__}{fused}"

    def weight_bytes(self) -> dict[str, int]:
        """Resident weight bytes by kind: embedding, head, linear layers, norms and biases."""
        linears = sum(layer[n].nbytes() for layer in self.layers for n in ("qkv", "o", "gate_up", "down"))
        small = self.norm.nbytes + sum(
            t.nbytes for layer in self.layers for n in ("in_norm", "post_norm", "qkv_bias")
            if (t := layer[n]) is not None
        )
        tied = isinstance(self.lm_head, DenseLinear) and self.lm_head.weight is self.embed
        return {"embedding": self.embed.nbytes, "head": 0 if tied else self.lm_head.nbytes(),
                "linear": linears, "norms_biases": small}

    # -- the forward ----------------------------------------------------------------------------
    _KEYS = {"qkv": "qkv", "o_proj": "o", "gate_up": "gate_up", "down_proj": "down"}

    def _apply(self, li: int, name: str, layer: dict, x: torch.Tensor) -> torch.Tensor:
        if self.observer is not None:
            self.observer(f"model.layers.{li}.{name}", x)
        return layer[self._KEYS[name]](x)

    def _rope(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        angles = positions.to(self.device, torch.float64)[:, None] * self.inv_freq[None, :]
        angles = torch.cat([angles, angles], dim=-1)  # [n, hd]
        return angles.cos().float(), angles.sin().float()

    def _visible(self, li: int, start: int, i: int, seen: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys and values ``[nkv, L, hd]`` (float32) that new token ``i`` attends to: the cache,
        then the new tokens it sees. ``seen`` None means new tokens ``0..i`` (a view of a float32
        cache, no copy; a float16 cache, kept for the C layers, is read here only by calibration)."""
        cache = self.cache
        if seen is None:
            return cache.k[li, :, : start + i + 1].float(), cache.v[li, :, : start + i + 1].float()
        slots = torch.cat([torch.arange(start), start + seen])  # a tree row: gather its ancestors
        return cache.k[li][:, slots].float(), cache.v[li][:, slots].float()

    @staticmethod
    def _attend_row(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, scale: float) -> torch.Tensor:
        """One token's attention: ``q`` ``[nkv, group, hd]`` over ``keys``/``values`` ``[nkv, L, hd]``
        → ``[nkv, group, hd]``. The same ops and shapes whatever else is in the forward."""
        scores = (q @ keys.transpose(1, 2)) * scale  # [nkv, group, L]
        return torch.softmax(scores, dim=-1) @ values

    def _rms(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        var = x.pow(2).mean(-1, keepdim=True)
        return x * torch.rsqrt(var + self.config.rms_norm_eps) * weight

    @torch.inference_mode()
    def forward(
        self,
        tokens: torch.Tensor,
        positions: torch.Tensor | None = None,
        attn_mask: torch.Tensor | None = None,
        *,
        logits: bool = True,
    ) -> torch.Tensor:
        """Score ``tokens`` (``[n]``) appended to the cache; returns logits ``[n, V]`` (float32).

        ``positions`` (``[n]``) default to ``length .. length+n-1``. ``attn_mask`` (``[n, n]`` bool,
        True = may attend) defaults to causal among the new tokens. ``logits=False`` (a prompt's
        prefill) only fills the cache: the final norm and the output head are skipped and an empty
        ``[n, 0]`` tensor is returned.
        """
        clock = self.clock
        if clock is None:
            return self._forward(tokens, positions, attn_mask, logits, None)
        t0 = time.perf_counter()
        try:
            return self._forward(tokens, positions, attn_mask, logits, clock)
        finally:
            clock.add("forward", time.perf_counter() - t0)
            clock.forwards += 1

    def _forward(self, tokens: torch.Tensor, positions: torch.Tensor | None, attn_mask: torch.Tensor | None,
                 logits: bool, clock: PhaseClock | None) -> torch.Tensor:
        c = self.config
        cache = self.cache
        tokens = tokens.reshape(-1).to(self.device)
        n = int(tokens.numel())
        start = cache.length
        end = start + n
        if n == 0:
            raise ValueError("forward needs at least one token")
        if end > cache.capacity:
            raise ValueError(
                f"context full: {end} tokens exceed this model's cache of {cache.capacity}"
            )
        if positions is None:
            positions = torch.arange(start, end, device=self.device)
        fused = self.fused is not None and self.observer is None  # the layers in C, per row
        per_row = fused or self.row_attention or n == 1
        rows: list[torch.Tensor | None] = [None] * n  # per new token: which new tokens it sees
        bias = None  # [n, end], the batched path's additive mask
        if per_row:
            if attn_mask is not None:
                rows = _visible_new_tokens(attn_mask)
        else:
            if attn_mask is None:
                attn_mask = torch.ones(n, n, dtype=torch.bool, device=self.device).tril()
            # every cached position visible, then the mask among the new tokens
            full_mask = torch.cat(
                [torch.ones(n, start, dtype=torch.bool, device=self.device), attn_mask.to(self.device)], dim=1
            )
            bias = torch.zeros(n, end, device=self.device).masked_fill_(~full_mask, float("-inf"))

        nh, nkv, hd = c.num_heads, c.num_kv_heads, c.head_dim
        group = nh // nkv
        cos, sin = self._rope(positions)
        cos, sin = cos[:, None, :], sin[:, None, :]
        scale = hd**-0.5

        t0 = time.perf_counter()
        x = self.embed[tokens].float()  # [n, H]
        if clock is not None:
            t1 = time.perf_counter()
            clock.add("embed", t1 - t0)
            t0 = t1
        if fused:  # rows (the mask's checks) were validated above
            mask = None if attn_mask is None else attn_mask.to("cpu", torch.uint8).contiguous()
            x = x.contiguous()
            self.fused.run(x, start, cache.k, cache.v, cos[:, 0], sin[:, 0], mask, clock)
        layers = [] if fused else self.layers
        for li, layer in enumerate(layers):
            h = self._rms(x, layer["in_norm"])
            qkv = self._apply(li, "qkv", layer, h)  # [n, (nh + 2 nkv) hd]
            if layer["qkv_bias"] is not None:
                qkv = qkv + layer["qkv_bias"]
            q, k, v = qkv.split([nh * hd, nkv * hd, nkv * hd], dim=-1)
            q = rotate(q.view(n, nh, hd), cos, sin)
            k = rotate(k.view(n, nkv, hd), cos, sin)
            cache.k[li, :, start:end] = k.transpose(0, 1)
            cache.v[li, :, start:end] = v.view(n, nkv, hd).transpose(0, 1)
            if per_row:
                attn = torch.cat([
                    self._attend_row(q[i].view(nkv, group, hd), *self._visible(li, start, i, rows[i]), scale)
                    for i in range(n)
                ]).view(n, nh * hd)
            else:
                keys = cache.k[li, :, :end].float()  # [nkv, end, hd]
                values = cache.v[li, :, :end].float()
                # queries grouped by their kv head: [nkv, group * n, hd]; row r = (g, i)
                qg = q.view(n, nkv, group, hd).permute(1, 2, 0, 3).reshape(nkv, group * n, hd)
                scores = (qg @ keys.transpose(1, 2)) * scale  # [nkv, group * n, end]
                scores = scores.view(nkv, group, n, end) + bias
                probs = torch.softmax(scores, dim=-1).view(nkv, group * n, end)
                attn = probs @ values  # [nkv, group * n, hd]
                attn = attn.view(nkv, group, n, hd).permute(2, 0, 1, 3).reshape(n, nh * hd)
            x = x + self._apply(li, "o_proj", layer, attn)
            h = self._rms(x, layer["post_norm"])
            gate, up = self._apply(li, "gate_up", layer, h).chunk(2, dim=-1)
            x = x + self._apply(li, "down_proj", layer, F.silu(gate) * up)
        cache.tokens[start:end] = tokens.cpu()
        cache.length = end
        if clock is not None:
            t1 = time.perf_counter()
            clock.add("layers", t1 - t0)
            t0 = t1
        sink = self.hidden_sink
        if not logits and sink is None:
            self.hidden = None
            return torch.empty(n, 0)
        x = self._rms(x, self.norm)
        # what leaves the model lives on the CPU, whatever the device: the engine, its samplers
        # and the draft heads are device-agnostic (a [K+1, V] row block is ~0.6 MB per row)
        host = x.cpu()  # the tensor itself where it is on the CPU already
        if sink is not None:  # an EAGLE head's context: every forward's states, a prefill's too
            sink(start, host, cache.tokens[:end])
        if not logits:
            self.hidden = None
            return torch.empty(n, 0)
        self.hidden = HiddenStates(start, host)  # [n, H]: what draft heads read
        if self.observer is not None:
            self.observer(HEAD_INPUT, x)
        scores = self.lm_head(x)  # [n, V] or [n, V'] for a sub-vocabulary head
        scores = scores.cpu()
        if self.head_rows is not None:
            full = torch.full((n, c.vocab_size), float("-inf"))
            scores = full.index_copy_(1, self.head_rows, scores)  # [n, V]
        if clock is not None:
            clock.add("head", time.perf_counter() - t0)
        return scores

    # cache control (rollback, keep, reset, common_prefix, cache_len): see CacheOwner


def _visible_new_tokens(attn_mask: torch.Tensor) -> list[torch.Tensor | None]:
    """Per new token, the new tokens it attends to (ascending), or None when that is exactly
    ``0..i`` (causal: a contiguous slice of the cache)."""
    out: list[torch.Tensor | None] = []
    for i, row in enumerate(attn_mask.to("cpu", torch.bool)):
        seen = row.nonzero().flatten()
        if not bool(row[i]):
            raise ValueError(f"attention mask: new token {i} must attend to itself")
        causal = seen.numel() == i + 1 and int(seen[-1]) == i
        out.append(None if causal else seen)
    return out
