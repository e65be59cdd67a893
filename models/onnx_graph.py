"""Build a Qwen2/Llama decoder as an ONNX graph for ONNX Runtime (``specd.models.ort_runtime``).

The graph is written node by node with ``onnx.helper`` from the same flat Hugging Face-named
weights the torch ``Decoder`` loads. Numerics follow ``specd.models.decoder``: RMSNorm, rotary
embeddings (NeoX layout), attention and the residual stream in float32; linear layers as
``com.microsoft::MatMulNBits`` (weights packed here from the float weights, block-wise along the
input dimension) or dense float32 ``MatMul``.

Interface (one forward over ``n`` new tokens after ``P`` cached ones):

- inputs ``input_ids`` int64 ``[n]``; ``cos``/``sin`` float32 ``[n, 1, head_dim]`` (the rotary
  angles of each token's position, computed by the caller, so token trees may carry any positions;
  ``sin`` carries the sign of the rotation: ``[-sin, sin]`` halves); ``mask`` float32 ``[n, P+n]``
  additive (0 = may attend, -inf = not); ``past_k.{i}``/``past_v.{i}`` float32 ``[P, kv_heads, head_dim]`` per layer;
- outputs ``logits`` float32 ``[n, V']`` (``V'`` = the head's rows) and ``new_k.{i}``
  ``[n, kv_heads, head_dim]`` / ``new_v.{i}`` ``[n, kv_heads, head_dim + 1]`` (last column 1), the
  new tokens' keys (rotated) and values, which the caller writes into its KV cache; ``past_v.{i}``
  has the same ``head_dim + 1`` layout.

Attention runs over one key/value sequence, the cache and the new tokens concatenated
(``[P+n, kv_heads, head_dim]``; ``FusedMatMul``'s ``transBatchB`` reads it as
``[kv_heads, head_dim, P+n]`` without a transpose). Values carry an extra column of ones
(``[.., head_dim + 1]``, in the cache too): one matmul then gives the softmax's weighted sum and its
normalizer, both accumulated key by key, so a masked key adds exactly 0 wherever it sits and a
token-tree row equals the same token's row in a sequential forward. Scores against cache and new keys in separate
matmuls would be cheaper by that copy, but a position's sum would then be split where the cache
ends, and its logits would differ between a verification forward and a one-token step (measured);
with one sequence they are bit-identical alone, with other rows, and cold or warm.

Modes: ``int4`` (4-bit asymmetric, block 32, uint8 zero points), ``int8`` (8-bit symmetric,
block 32), ``fp32`` (dense). With ``accuracy_level`` 4 MatMulNBits quantizes each row's activations
to int8 per block and accumulates in int32: the 8-bit kernel gives each row the same result
whatever the number of rows (batch-invariant, tested), the 4-bit one does not (fine for a draft).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Mapping

import numpy as np
import torch
from onnx import TensorProto, helper, numpy_helper

from specd.models.config import ModelConfig
from specd.models.modes import ORT_QUANTS
BLOCK = 32
BITS = {"int4": 4, "int8": 8}
# bump when the graph or the packing changes: stored artifacts with another version are rebuilt
GRAPH_VERSION = 2
OPSET = 17


@dataclass
class Packed:
    """``MatMulNBits`` operands for a weight ``[N, K]``: ``B`` uint8 ``[N, blocks, BLOCK*bits/8]``,
    ``scales`` float32 ``[N * blocks]``, ``zero_points`` uint8 (4-bit: two per byte, low nibble
    first, ``[N * ceil(blocks/2)]``) or None (8-bit: symmetric, ORT's default zero point 128)."""

    B: np.ndarray
    scales: np.ndarray
    zero_points: np.ndarray | None
    bits: int
    n: int
    k: int

    def nbytes(self) -> int:
        return self.B.nbytes + self.scales.nbytes + (0 if self.zero_points is None else self.zero_points.nbytes)


def _pack_rows(w: torch.Tensor, bits: int) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    n, k = w.shape
    pad = -k % BLOCK
    if pad:
        w = torch.cat([w, torch.zeros(n, pad, dtype=w.dtype)], dim=1)
    g = w.float().reshape(n, -1, BLOCK)  # [N, blocks, BLOCK]
    if bits == 8:
        scale = (g.abs().amax(-1, keepdim=True) / 127).clamp_min(1e-12)
        q = (torch.clamp(torch.round(g / scale), -127, 127) + 128).to(torch.uint8)
        return q.numpy(), scale.reshape(-1).numpy(), None
    # 4-bit asymmetric: w ≈ (q - zp) * scale, q and zp in 0..15; the range always includes 0
    mx = g.amax(-1, keepdim=True).clamp_min(0)
    mn = g.amin(-1, keepdim=True).clamp_max(0)
    scale = ((mx - mn) / 15).clamp_min(1e-12)
    zp = torch.clamp(torch.round(-mn / scale), 0, 15)
    q = torch.clamp(torch.round(g / scale) + zp, 0, 15).to(torch.uint8)
    packed = (q[..., 0::2] | (q[..., 1::2] << 4)).contiguous()
    z = zp[..., 0].to(torch.uint8)  # [N, blocks]
    if z.shape[1] % 2:
        z = torch.cat([z, torch.zeros(n, 1, dtype=torch.uint8)], dim=1)
    zpacked = (z[:, 0::2] | (z[:, 1::2] << 4)).contiguous()
    return packed.numpy(), scale.reshape(-1).numpy(), zpacked.reshape(-1).numpy()


def pack_nbits(w: torch.Tensor, bits: int, chunk_rows: int = 8192) -> Packed:
    """Quantize a float weight ``[N, K]`` block-wise (``BLOCK`` input channels) to ``bits``."""
    n, k = w.shape
    parts = [_pack_rows(w[i : i + chunk_rows], bits) for i in range(0, n, chunk_rows)]
    B = np.concatenate([p[0] for p in parts])
    scales = np.concatenate([p[1] for p in parts]).astype(np.float32)
    zp = None if bits == 8 else np.concatenate([p[2] for p in parts])
    return Packed(B, scales, zp, bits, n, k)


def dequantize(p: Packed) -> torch.Tensor:
    """The float32 weight ``[N, K]`` a ``Packed`` stands for (what ORT multiplies by)."""
    B = torch.from_numpy(p.B)
    blocks = B.shape[1]
    scale = torch.from_numpy(p.scales).reshape(p.n, blocks, 1)
    if p.bits == 8:
        q = B.float() - 128
    else:
        q = torch.stack([B & 0xF, B >> 4], dim=-1).reshape(p.n, blocks, BLOCK).float()
        z = torch.from_numpy(p.zero_points).reshape(p.n, -1)
        z = torch.stack([z & 0xF, z >> 4], dim=-1).reshape(p.n, -1)[:, :blocks].float()
        q = q - z[..., None]
    return (q * scale).reshape(p.n, -1)[:, : p.k]


class _Builder:
    def __init__(self) -> None:
        self.nodes: list = []
        self.inits: list = []
        self.count = 0
        self.bytes: dict[str, int] = {"embedding": 0, "head": 0, "linear": 0, "norms_biases": 0}

    def name(self, hint: str) -> str:
        self.count += 1
        return f"{hint}_{self.count}"

    def op(self, op_type: str, inputs: list[str], hint: str | None = None, n_out: int = 1,
           domain: str = "", **attrs) -> str | list[str]:
        outs = [self.name(hint or op_type) for _ in range(n_out)]
        self.nodes.append(helper.make_node(op_type, inputs, outs, domain=domain or None, **attrs))
        return outs[0] if n_out == 1 else outs

    def const(self, name: str, array: np.ndarray, kind: str | None = None) -> str:
        self.inits.append(numpy_helper.from_array(np.ascontiguousarray(array), name))
        if kind:
            self.bytes[kind] += array.nbytes
        return name

    def tensor(self, name: str, t: torch.Tensor, kind: str) -> str:
        """An initializer from a torch tensor (bf16 stored as raw bfloat16)."""
        t = t.contiguous()
        if t.dtype == torch.bfloat16:
            self.inits.append(helper.make_tensor(name, TensorProto.BFLOAT16, list(t.shape),
                                                 t.view(torch.int16).numpy().tobytes(), raw=True))
            self.bytes[kind] += t.nbytes
            return name
        return self.const(name, t.float().numpy(), kind)

    def linear(self, name: str, x: str, w: torch.Tensor, mode: str, kind: str = "linear",
               bias: torch.Tensor | None = None, accuracy_level: int = 4) -> str:
        n, k = w.shape
        b = self.const(name + ".bias", bias.float().numpy(), "norms_biases") if bias is not None else ""
        if mode == "fp32":
            y = self.op("MatMul", [x, self.const(name + ".weight_t", w.float().T.contiguous().numpy(), kind)], name)
            return self.op("Add", [y, b], name + ".add") if b else y
        p = pack_nbits(w, BITS[mode])
        self.bytes[kind] += p.nbytes()
        inputs = [x, self.const(name + ".B", p.B), self.const(name + ".scales", p.scales),
                  self.const(name + ".zp", p.zero_points) if p.zero_points is not None else "", ""]
        if b:
            inputs.append(b)
        while inputs[-1] == "":
            inputs.pop()
        return self.op("MatMulNBits", inputs, name, domain="com.microsoft", K=k, N=n, bits=p.bits,
                       block_size=BLOCK, accuracy_level=accuracy_level)


def head_weight(config: ModelConfig, weights: Mapping[str, torch.Tensor]) -> torch.Tensor:
    """The output head's weight, as ``Decoder`` picks it (tied to the embedding unless a separate
    ``lm_head.weight`` exists and the config does not tie)."""
    untied = not config.tie_word_embeddings and "lm_head.weight" in weights
    return weights["lm_head.weight" if untied else "model.embed_tokens.weight"]


def build_model(
    config: ModelConfig,
    weights: Mapping[str, torch.Tensor],
    mode: str,
    head_rows: list[int] | None = None,
    accuracy_level: int = 4,
    metadata: Mapping[str, str] | None = None,
):
    """An ``onnx.ModelProto`` for ``config`` with ``weights`` in ``mode`` (see the module doc).
    ``head_rows`` keeps only those output rows (sorted ids; the caller scatters them back).
    Missing weights raise ``KeyError`` naming the tensor."""
    if mode not in ORT_QUANTS:
        raise ValueError(f"ONNX Runtime modes are {', '.join(ORT_QUANTS)}, not {mode!r}")
    c = config
    nh, nkv, hd = c.num_heads, c.num_kv_heads, c.head_dim
    group = nh // nkv
    bd = _Builder()

    def w(name: str) -> torch.Tensor:
        if name not in weights:
            raise KeyError(f"missing weight {name!r}")
        return weights[name]

    def norm(x: str, weight: torch.Tensor, name: str) -> str:
        g = bd.const(name, weight.float().numpy(), "norms_biases")
        return bd.op("SimplifiedLayerNormalization", [x, g], name, axis=-1, epsilon=c.rms_norm_eps,
                     stash_type=1)

    def i64(name: str, values: list[int]) -> str:
        return bd.const(name, np.array(values, dtype=np.int64))

    embed = w("model.embed_tokens.weight")
    if embed.dtype not in (torch.bfloat16, torch.float32):
        embed = embed.float()
    table = bd.tensor("embed_tokens", embed, "embedding")
    x = bd.op("Gather", [table, "input_ids"], "embed")
    if embed.dtype != torch.float32:
        x = bd.op("Cast", [x], "embed_f32", to=TensorProto.FLOAT)  # [n, H]

    # shared across layers
    perm = i64("rope_perm", list(range(hd // 2, hd)) + list(range(hd // 2)))
    mask_g = bd.op("Tile", ["mask", i64("mask_reps", [group, 1])], "mask_grouped")  # [group*n, P+n]
    shp_q = i64("shape_q", [-1, nh, hd])
    shp_kv = i64("shape_kv", [-1, nkv, hd])
    shp_qg = i64("shape_qg", [-1, nkv, group, hd])
    shp_qg2 = i64("shape_qg2", [nkv, -1, hd])
    shp_o = i64("shape_o", [nkv, group, -1, hd])
    shp_o2 = i64("shape_o2", [-1, nh * hd])
    scale = float(hd) ** -0.5
    v_split = i64("v_split", [hd, 1])
    ones_kv = bd.op("ConstantOfShape", [bd.op("Concat", [bd.op("Shape", ["input_ids"]), i64("kv_one", [nkv, 1])],
                                              axis=0)], "ones_kv",
                    value=helper.make_tensor("one", TensorProto.FLOAT, [1], [1.0]))  # [n, nkv, 1]

    def rope(t: str) -> str:  # t [n, heads, hd]: t*cos + rotate_half(t)*sin (sign folded into sin)
        rot = bd.op("Gather", [t, perm], "rot", axis=2)
        return bd.op("Add", [bd.op("Mul", [t, "cos"]), bd.op("Mul", [rot, "sin"])], "rope")

    for i in range(c.num_layers):
        p = f"model.layers.{i}."
        h = norm(x, w(p + "input_layernorm.weight"), p + "input_layernorm")
        qkv_w = torch.cat([w(p + f"self_attn.{n}_proj.weight") for n in "qkv"])
        bias = torch.cat([w(p + f"self_attn.{n}_proj.bias") for n in "qkv"]) if c.qkv_bias else None
        qkv = bd.linear(p + "qkv", h, qkv_w, mode, bias=bias, accuracy_level=accuracy_level)
        q, k, v = bd.op("Split", [qkv, i64(p + "qkv_split", [nh * hd, nkv * hd, nkv * hd])], p + "split",
                        n_out=3, axis=1)
        q = rope(bd.op("Reshape", [q, shp_q]))
        k = rope(bd.op("Reshape", [k, shp_kv]))
        bd.nodes.append(helper.make_node("Identity", [k], [f"new_k.{i}"]))
        bd.nodes.append(helper.make_node("Concat", [bd.op("Reshape", [v, shp_kv]), ones_kv], [f"new_v.{i}"],
                                         axis=-1))  # [n, nkv, hd+1]: the last column is 1
        # queries grouped by kv head: [nkv, group*n, hd], row r = (g, token)
        qg = bd.op("Reshape", [bd.op("Transpose", [bd.op("Reshape", [q, shp_qg])], perm=[1, 2, 0, 3]), shp_qg2],
                   p + "qg")
        # one key/value sequence [P+n, nkv, hd(+1)]: a position's scores, softmax and weighted sum
        # then do not depend on where the cache ends and the new tokens begin (batch-invariant)
        keys = bd.op("Concat", [f"past_k.{i}", f"new_k.{i}"], p + "keys", axis=0)
        values = bd.op("Concat", [f"past_v.{i}", f"new_v.{i}"], p + "values", axis=0)
        s = bd.op("Add", [bd.op("FusedMatMul", [qg, keys], p + "scores", domain="com.microsoft",
                                transB=1, transBatchB=1, alpha=scale), mask_g])  # [nkv, group*n, P+n]
        # softmax whose sum is a matmul: values carry a column of ones, so one matmul gives the
        # weighted sum and the normalizer, both accumulated key by key: a masked key adds exactly 0
        # wherever it sits (token-tree rows equal their sequential rows)
        e = bd.op("Exp", [bd.op("Sub", [s, bd.op("ReduceMax", [s], axes=[-1], keepdims=1)])], p + "exp")
        weighted = bd.op("FusedMatMul", [e, values], p + "attn_sum", domain="com.microsoft",
                         transBatchB=1)  # [nkv, group*n, hd+1]
        num, den = bd.op("Split", [weighted, v_split], p + "attn_split", n_out=2, axis=-1)
        o = bd.op("Div", [num, den], p + "attn")  # [nkv, group*n, hd]
        o = bd.op("Reshape", [bd.op("Transpose", [bd.op("Reshape", [o, shp_o])], perm=[2, 0, 1, 3]), shp_o2])
        x = bd.op("Add", [x, bd.linear(p + "o_proj", o, w(p + "self_attn.o_proj.weight"), mode,
                                      accuracy_level=accuracy_level)], p + "resid1")
        h = norm(x, w(p + "post_attention_layernorm.weight"), p + "post_attention_layernorm")
        gu_w = torch.cat([w(p + "mlp.gate_proj.weight"), w(p + "mlp.up_proj.weight")])
        gate, up = bd.op("Split", [bd.linear(p + "gate_up", h, gu_w, mode, accuracy_level=accuracy_level)],
                         p + "gu_split", n_out=2, axis=1)
        act = bd.op("Mul", [bd.op("Mul", [gate, bd.op("Sigmoid", [gate])]), up], p + "swiglu")
        x = bd.op("Add", [x, bd.linear(p + "down_proj", act, w(p + "mlp.down_proj.weight"), mode,
                                      accuracy_level=accuracy_level)], p + "resid2")
    x = norm(x, w("model.norm.weight"), "model.norm")
    head = head_weight(c, weights)
    if head_rows is not None:
        head = head[torch.tensor(sorted(head_rows), dtype=torch.long)]
    logits = bd.linear("lm_head", x, head, mode, kind="head", accuracy_level=accuracy_level)
    bd.nodes.append(helper.make_node("Identity", [logits], ["logits"]))

    f32 = TensorProto.FLOAT
    kv_shape = lambda dim: [dim, nkv, hd]  # noqa: E731
    inputs = [
        helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["n"]),
        helper.make_tensor_value_info("cos", f32, ["n", 1, hd]),
        helper.make_tensor_value_info("sin", f32, ["n", 1, hd]),
        helper.make_tensor_value_info("mask", f32, ["n", "T"]),
    ]
    outputs = [helper.make_tensor_value_info("logits", f32, ["n", head.shape[0]])]
    for i in range(c.num_layers):
        inputs += [helper.make_tensor_value_info(f"past_k.{i}", f32, kv_shape("P")),
                   helper.make_tensor_value_info(f"past_v.{i}", f32, ["P", nkv, hd + 1])]
        outputs += [helper.make_tensor_value_info(f"new_k.{i}", f32, kv_shape("n")),
                    helper.make_tensor_value_info(f"new_v.{i}", f32, ["n", nkv, hd + 1])]
    graph = helper.make_graph(bd.nodes, "specd_decoder", inputs, outputs, bd.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET),
                                                    helper.make_opsetid("com.microsoft", 1)],
                              producer_name="specd")
    model.ir_version = 9
    meta = {"specd_graph_version": str(GRAPH_VERSION), "specd_mode": mode,
            "specd_weight_bytes": json.dumps(bd.bytes),
            "specd_head_rows": str(len(head_rows) if head_rows is not None else 0), **(metadata or {})}
    helper.set_model_props(model, meta)
    return model
