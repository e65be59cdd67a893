"""An EAGLE-1 draft head (Li et al. 2024): one decoder layer over the target's own features.

Glossary (positions are the target's):

    feature ``f_t``   the target's final-normed hidden state at ``t`` (its output head's input:
                      ``head(f_t)`` is the distribution of token ``t + 1``)
    input ``x_t``     ``fc([rms(f_t); rms(e(tok_{t+1}))])``: the feature at ``t`` fused with the
                      embedding of the token that followed it
    predicted ``f̂``   the layer's output at ``t``: a guess at ``f_{t+1}``, so ``head(f̂)`` guesses
                      token ``t + 2``

The layer is a Qwen2-style decoder layer (RMS norms, grouped-query attention with RoPE, SwiGLU)
attending causally over the inputs of every earlier position it has seen; its keys and values are
the head's own small cache (``EagleCache``). Drafting runs it, INT8, through the target's own fused
C decoder layer (``specd.models.fused_layers``) where specd's kernels are built; training runs it
in torch. Drafting a chain: the first step reads the target's
feature at the last verified position and the token the target chose after it; each later step
reads the head's own ``f̂`` and its own last draft (EAGLE's feature-level autoregression). The
output head is the target's, restricted to a sub-vocabulary (``ids``) and frozen; the embedding
rows are the target's too, read when needed. Neither is stored in a head file.

This module knows nothing of speculation: it maps features and tokens to features and logits.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F
from safetensors.torch import save_file

from specd.models import fused_layers, kernels
from specd.models.config import ModelConfig
from specd.models.decoder import rotate
from specd.models.fused_layers import FusedLayers
from specd.models.int_linear import QK, Q8Linear, row_bytes
from specd.models.subvocab import Places

FORMAT = "specd-eagle-1"
RowReader = Callable[[torch.Tensor], torch.Tensor]  # token ids [n] -> float32 rows [n, H]
MATRICES = ("fc", "wq", "wk", "wv", "wo", "gate", "up", "down", "head")  # drafting runs these as INT8 rows
EXTRA_ROWS = 8192  # output rows ``favour`` keeps for tokens outside the sub-vocabulary (~50 MB float32)
PARAMS = ("fc", "in_norm", "wq", "bq", "wk", "bk", "wv", "bv", "wo", "post_norm", "gate", "up", "down")


@dataclass(frozen=True)
class EagleShape:
    hidden: int  # H, the target's
    heads: int = 12  # query heads
    kv_heads: int = 2
    head_dim: int = 128
    width: int = 3072  # the MLP's
    rope_theta: float = 1_000_000.0


def rope_tables(positions: torch.Tensor, d: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin ``[n, d]`` float32 of the rotary embedding at ``positions`` ``[n]`` (each half
    of a row the same angles: the half-split form Qwen uses)."""
    inv = theta ** (-torch.arange(0, d, 2, dtype=torch.float32) / d)  # [d/2]
    ang = positions.float()[:, None] * inv[None, :]  # [n, d/2]
    ang = torch.cat([ang, ang], -1)  # [n, d]
    return ang.cos(), ang.sin()


def rope(x: torch.Tensor, positions: torch.Tensor, theta: float) -> torch.Tensor:
    """Rotary embedding of ``x`` ``[..., n, heads, d]`` at ``positions`` ``[n]``."""
    cos, sin = rope_tables(positions, x.shape[-1], theta)
    return rotate(x, cos[:, None, :].to(x.dtype), sin[:, None, :].to(x.dtype))


def _mm(x: torch.Tensor, w: "torch.Tensor | Q8Linear") -> torch.Tensor:
    """``x @ w.T``; ``w`` a packed INT8 linear when drafting (``[n, K]`` rows only)."""
    return x @ w.T if isinstance(w, torch.Tensor) else w(x)


@dataclass(frozen=True)
class Favour:
    """Tokens the drafts lean to (``EagleHead.favour``): ``bias`` is added to their logits before
    a draft's top token is taken. ``sub`` ``[m]``: their places in the sub-vocabulary;
    ``extra_ids`` ``[e]``: those outside it, candidates only here, with their output rows
    ``extra_rows`` ``[e, H]`` (the target's)."""

    sub: torch.Tensor
    extra_ids: torch.Tensor
    extra_rows: torch.Tensor
    bias: float


@dataclass(frozen=True)
class Drafts:
    """A chain the head drafted: ``tokens``, each one's probability (the head's own, see
    ``draft_after``) in ``probs``, and ``others``: the head's next choices at the first position,
    best first (as many as asked; the first draft is not among them)."""

    tokens: list[int]
    probs: list[float]
    others: list[int] = field(default_factory=list)


@dataclass
class EagleCache:
    """The head's keys and values, one row per position it has seen: ``k``, ``v``
    ``[kv_heads, L, head_dim]``; ``length`` rows are valid; ``start`` is the target position of
    row 0 (positions before it were never seen by the head: a prefix-cache hit)."""

    k: torch.Tensor
    v: torch.Tensor
    length: int = 0
    start: int = 0
    tokens: list[int] = field(default_factory=list)  # tok_{t+1} of each row (what x_t was fed)

    def rollback(self, length: int) -> None:
        self.length = min(self.length, max(0, length))
        del self.tokens[self.length :]


class EagleHead(torch.nn.Module):
    """See the module docstring. ``head`` ``[V', H]`` (frozen sub-vocabulary output rows),
    ``ids`` ``[V']``, ``embed_rows`` the target's embedding rows by token id."""

    def __init__(self, shape: EagleShape, head: torch.Tensor, ids: torch.Tensor, embed_rows: RowReader,
                 fused: bool = True, out_rows: RowReader | None = None) -> None:
        """``fused``: draft through the target's fused C decoder layer where it can run (the
        torch layer otherwise; both give the same numbers up to float rounding). ``out_rows``:
        the target's output rows by token id, for favoured tokens outside the sub-vocabulary
        (``favour``; None: those are not drafted)."""
        super().__init__()
        if ids.numel() != head.shape[0]:
            raise ValueError(f"{ids.numel()} sub-vocabulary ids for {head.shape[0]} head rows")
        h, q, kv, w = shape.hidden, shape.heads * shape.head_dim, shape.kv_heads * shape.head_dim, shape.width
        self.shape = shape
        lin = lambda o, i: torch.nn.Parameter(torch.randn(o, i) * i ** -0.5)  # noqa: E731
        self.fc = lin(h, 2 * h)  # [H, 2H]
        self.in_norm = torch.nn.Parameter(torch.ones(h))
        self.wq, self.bq = lin(q, h), torch.nn.Parameter(torch.zeros(q))
        self.wk, self.bk = lin(kv, h), torch.nn.Parameter(torch.zeros(kv))
        self.wv, self.bv = lin(kv, h), torch.nn.Parameter(torch.zeros(kv))
        self.wo = torch.nn.Parameter(torch.zeros(h, q))  # zero: the layer starts as its input
        self.post_norm = torch.nn.Parameter(torch.ones(h))
        self.gate, self.up = lin(w, h), lin(w, h)
        self.down = torch.nn.Parameter(torch.zeros(h, w))
        self.register_buffer("head", head.float())  # [V', H]
        self.register_buffer("ids", ids.long())  # [V']
        self.embed_rows = embed_rows
        self.out_rows = out_rows
        self._places: Places | None = None  # a token's row in ``head``
        self._extra: dict[int, torch.Tensor] = {}  # output rows read for favoured tokens, by id
        self.fused = fused
        self._infer: dict[str, torch.Tensor] | None = None
        self._layer: dict[str, torch.Tensor | Q8Linear] | None = None  # the layer's weights as the C layer reads them
        self._fused: dict[int, FusedLayers] = {}  # by cache capacity (the C layer's row stride)

    def with_vocabulary(self, head: torch.Tensor, ids: torch.Tensor) -> "EagleHead":
        """This head's layer (its parameters copied) over another sub-vocabulary: ``head``
        ``[V'', H]`` the target's output rows of ``ids`` ``[V'']``."""
        out = EagleHead(self.shape, head, ids, self.embed_rows, self.fused, self.out_rows)
        with torch.no_grad():
            for name in PARAMS:
                getattr(out, name).copy_(getattr(self, name))
        return out

    # the layer, in pieces shared by training (whole windows) and drafting (one row at a time)

    def inputs(self, feature: torch.Tensor, embedding: torch.Tensor, p: dict[str, torch.Tensor]) -> torch.Tensor:
        """``x = fc([rms(f); rms(e)])``: ``[..., H]`` each -> ``[..., H]``."""
        h = feature.shape[-1]
        cat = torch.cat([F.rms_norm(feature, (h,)), F.rms_norm(embedding.to(feature.dtype), (h,))], -1)
        return _mm(cat, p["fc"])

    def qkv(self, x: torch.Tensor, positions: torch.Tensor, p: dict[str, torch.Tensor]
            ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``x`` ``[..., n, H]`` -> q ``[..., n, heads, d]``, k, v ``[..., n, kv_heads, d]`` (rotated)."""
        s = self.shape
        h = F.rms_norm(x, (x.shape[-1],), p["in_norm"])
        q = (_mm(h, p["wq"]) + p["bq"]).unflatten(-1, (s.heads, s.head_dim))
        k = (_mm(h, p["wk"]) + p["bk"]).unflatten(-1, (s.kv_heads, s.head_dim))
        v = (_mm(h, p["wv"]) + p["bv"]).unflatten(-1, (s.kv_heads, s.head_dim))
        return rope(q, positions, s.rope_theta), rope(k, positions, s.rope_theta), v

    def finish(self, x: torch.Tensor, attn: torch.Tensor, p: dict[str, torch.Tensor]) -> torch.Tensor:
        """The residual after attention (``attn`` ``[..., heads * d]``) and the MLP: ``f̂``."""
        x = x + _mm(attn, p["wo"])
        h = F.rms_norm(x, (x.shape[-1],), p["post_norm"])
        return x + _mm(F.silu(_mm(h, p["gate"])) * _mm(h, p["up"]), p["down"])

    def params(self) -> dict[str, torch.Tensor]:
        return {n: getattr(self, n) for n in PARAMS}

    def forward(self, feature: torch.Tensor, embedding: torch.Tensor) -> torch.Tensor:
        """Teacher-forced windows: ``feature``, ``embedding`` ``[B, T, H]`` (row ``t``: ``f_t`` and
        ``e(tok_{t+1})``) -> ``f̂`` ``[B, T, H]``, each row attending causally over its window."""
        p = self.params()
        s = self.shape
        x = self.inputs(feature, embedding, p)  # [B, T, H]
        q, k, v = self.qkv(x, torch.arange(x.shape[1]), p)  # [B, T, heads|kv, d]
        attn = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                              is_causal=True, enable_gqa=True)  # [B, heads, T, d]
        return self.finish(x, attn.transpose(1, 2).reshape(*x.shape[:2], s.heads * s.head_dim), p)

    # drafting

    def new_cache(self, capacity: int) -> EagleCache:
        s = self.shape
        z = torch.zeros(s.kv_heads, capacity, s.head_dim, dtype=self._draft_dtype())
        return EagleCache(z, z.clone())

    def _inference(self) -> dict[str, torch.Tensor]:
        if self._infer is None:
            dtype = self._draft_dtype()
            infer: dict[str, torch.Tensor | Q8Linear] = {n: t.detach().to(dtype) for n, t in self.params().items()}
            infer["head"] = self.head.to(dtype)
            if dtype == torch.float32:  # specd's INT8 kernel: 3-7x a bf16 matmul's speed at one row here
                self._layer = self._c_layer() if self.fused else None
                fused = ("wq", "wk", "wv", "wo", "gate", "up", "down") if self._layer is not None else ()
                for name in MATRICES:
                    w = self._matrix(name).detach()
                    if name not in fused and w.shape[1] % QK == 0:
                        infer[name] = Q8Linear.from_float(w)
            self._infer = infer
        return self._infer

    def _config(self) -> ModelConfig:
        """The layer's shape as the target's decoder layers describe theirs (the norms' epsilon is
        ``F.rms_norm``'s default for float32, which training used)."""
        s = self.shape
        return ModelConfig(vocab_size=int(self.ids.numel()), hidden_size=s.hidden, intermediate_size=s.width,
                           num_layers=1, num_heads=s.heads, num_kv_heads=s.kv_heads, head_dim=s.head_dim,
                           rope_theta=s.rope_theta, rms_norm_eps=torch.finfo(torch.float32).eps)

    def _c_layer(self) -> "dict[str, torch.Tensor | Q8Linear] | None":
        """The layer's weights for specd's fused decoder layer (``models/csrc/decoder_layer.c``:
        norms, rotary embedding, the cache write, attention and the SwiGLU in one C call, the
        target's own; ~40 small torch ops a draft step otherwise), INT8 as the separate matrices
        would be; None where the C layer cannot run this shape."""
        q8 = lambda *names: Q8Linear.from_float(torch.cat([getattr(self, n).detach() for n in names]))  # noqa: E731
        s = self.shape
        if (s.hidden % QK or (s.heads * s.head_dim) % QK or s.width % QK):
            return None
        layer = {"qkv": q8("wq", "wk", "wv"), "o": q8("wo"), "gate_up": q8("gate", "up"), "down": q8("down"),
                 "qkv_bias": torch.cat([self.bq, self.bk, self.bv]).detach().float().contiguous(),
                 "in_norm": self.in_norm.detach().float().contiguous(),
                 "post_norm": self.post_norm.detach().float().contiguous()}
        return layer if fused_layers.supports(self._config(), [layer], torch.device("cpu")) else None

    def _fused_for(self, cache: EagleCache) -> FusedLayers | None:
        """The C layer over ``cache``'s capacity; None where drafting runs the torch layer."""
        self._inference()  # decides ``_layer``
        if self._layer is None:
            return None
        cap = cache.k.shape[1]
        if cap not in self._fused:
            self._fused[cap] = FusedLayers(self._config(), [self._layer], cap)
        return self._fused[cap]

    @torch.inference_mode()
    def extend(self, cache: EagleCache, features: torch.Tensor, tokens: list[int]) -> torch.Tensor:
        """Append rows to ``cache``: ``features`` ``[n, H]`` (``f_t`` for the next ``n``
        positions) each fused with ``tokens[i]`` (the token after it). Returns ``f̂`` ``[n, H]``
        (the drafting dtype: see ``_draft_dtype``)."""
        p = self._inference()
        n = features.shape[0]
        if cache.length + n > cache.k.shape[1]:
            raise ValueError(f"the head's cache holds {cache.k.shape[1]} rows; {cache.length + n} asked")
        dtype = self._draft_dtype()
        e = self.embed_rows(torch.tensor(tokens, dtype=torch.long)).to(dtype)  # [n, H]
        x = self.inputs(features.to(dtype), e, p)  # [n, H]
        at = cache.length
        positions = torch.arange(cache.start + at, cache.start + at + n)
        fused = self._fused_for(cache)
        if fused is not None:  # the layer in one C call: x becomes f̂ in place, the rows' keys and values cached
            s = self.shape
            cos, sin = rope_tables(positions, s.head_dim, s.rope_theta)  # [n, d]
            x = x.float().contiguous()
            fused.run(x, at, cache.k[None], cache.v[None], cos, sin, None)
            cache.length = at + n
            cache.tokens.extend(tokens)
            return x
        q, k, v = self.qkv(x, positions, p)  # [n, heads|kv, d]
        cache.k[:, at : at + n] = k.transpose(0, 1)
        cache.v[:, at : at + n] = v.transpose(0, 1)
        keys, values = cache.k[:, : at + n], cache.v[:, : at + n]  # [kv, L, d]
        # grouped-query attention without expanding the cache per head (SDPA's enable_gqa copied it)
        s = self.shape
        group = s.heads // s.kv_heads
        qg = q.transpose(0, 1).reshape(s.kv_heads, group * n, s.head_dim)  # [kv, g * n, d]; row (g, i)
        scores = (qg @ keys.transpose(1, 2)) * s.head_dim ** -0.5  # [kv, g * n, L]
        if n > 1:
            hidden = torch.ones(n, at + n, dtype=torch.bool).triu(at + 1)  # row i sees rows <= at + i
            scores = scores.view(s.kv_heads, group, n, at + n).masked_fill(hidden, float("-inf")).view_as(scores)
        attn = torch.softmax(scores, -1) @ values  # [kv, g * n, d]
        attn = attn.view(s.heads, n, s.head_dim)  # [heads, n, d]
        out = self.finish(x, attn.transpose(0, 1).reshape(n, -1), p)
        cache.length = at + n
        cache.tokens.extend(tokens)
        return out

    def favour(self, tokens: torch.Tensor, bias: float) -> Favour:
        """The drafts' lean toward ``tokens`` (ids, repeats allowed): ``bias`` added to each one's
        logit. Those outside the sub-vocabulary become candidates too, where ``out_rows`` can read
        their output rows (kept once read: a file's identifiers recur from round to round)."""
        if self._places is None:
            self._places = Places(self.ids)
        uniq, where = self._places.rows(tokens)  # [u], [u]
        outside = uniq[where < 0] if self.out_rows is not None else uniq[:0]
        missing = [t for t in outside.tolist() if t not in self._extra]
        if missing:
            if len(self._extra) + len(missing) > EXTRA_ROWS:
                self._extra.clear()
            rows = self.out_rows(torch.tensor(missing, dtype=torch.long)).to(self._draft_dtype())  # [m, H]
            self._extra.update(zip(missing, rows))
        rows = (torch.stack([self._extra[t] for t in outside.tolist()]) if outside.numel()
                else torch.zeros(0, self.shape.hidden, dtype=self._draft_dtype()))  # [e, H]
        return Favour(where[where >= 0], outside, rows, bias)

    @torch.inference_mode()
    def draft(self, cache: EagleCache, feature: torch.Tensor, token: int, k: int,
              more: Callable[[list[float]], bool] | None = None,
              keep: Callable[[float, int], bool] | None = None,
              favour: Favour | None = None, others: int = 0) -> Drafts:
        """Up to ``k`` drafts after ``token`` from the target's feature ``[H]`` at the cache's next
        position (that row, the target's own, stays in the cache); see ``draft_after``."""
        f = self.extend(cache, feature.reshape(1, -1), [token])  # [1, H]: the row is the target's
        return self.draft_after(cache, f, k, more, keep, favour, others)

    @torch.inference_mode()
    def draft_after(self, cache: EagleCache, f: torch.Tensor, k: int,
                    more: Callable[[list[float]], bool] | None = None,
                    keep: Callable[[float, int], bool] | None = None,
                    favour: Favour | None = None, others: int = 0) -> Drafts:
        """Up to ``k`` drafts from ``f`` ``[1, H]``, the head's output at the cache's last row
        (``extend``'s last row: the caller fuses the rows it catches up on with the target's own
        last one in a single forward). Each draft's row stays in the cache only while drafting:
        the cache is rolled back to where it was. ``more`` / ``keep`` as in
        ``RecurrentHead.draft``; ``favour``: tokens the drafts lean to (``favour()``). A draft's
        probability is the head's own for it, without the bias, over the same candidates: the
        biased distribution's top was over-confident (0.53 against 0.45 right on the dev tasks,
        bench/RESULTS.md, session 29) and K auto's gate reads it as the draft's acceptance.
        ``others``: how many of the next choices at the first position to return beside the
        chain (``Drafts.others``; a token tree's siblings), ranked as the first draft was."""
        p = self._inference()
        base = cache.length
        tokens: list[int] = []
        tops: list[float] = []
        sub = self.ids.numel()
        alternatives: list[int] = []
        as_id = lambda at: int(self.ids[at]) if at < sub else int(favour.extra_ids[at - sub])  # noqa: E731
        for i in range(k):
            logits = _mm(f, p["head"]).float()  # [1, V']
            own = logits
            if favour is not None:
                if favour.extra_ids.numel():
                    logits = torch.cat([logits, (f @ favour.extra_rows.T).float()], 1)  # [1, V' + e]
                own = logits.clone()
                logits[0, favour.sub] += favour.bias
                logits[0, sub:] += favour.bias
            at = int(logits[0].argmax())
            if i == 0 and others > 0:  # (argmax picks the first: the same draft as without them)
                ranked = logits[0].topk(min(others + 1, logits.shape[1])).indices.tolist()
                alternatives = [as_id(j) for j in ranked if j != at][:others]
            top = torch.softmax(own, -1)[0, at]  # [V' (+ e)]: the pick's probability without the bias
            if keep is not None and not keep(float(top), i):
                break
            tokens.append(as_id(at))
            tops.append(float(top))
            # the next draft's row only if it will be drafted (asked before its forward is paid)
            if i + 1 >= k or cache.length >= cache.k.shape[1] or (more is not None and not more(tops)):
                break
            f = self.extend(cache, f, [tokens[-1]])
        cache.rollback(base)
        return Drafts(tokens, tops, alternatives)

    def nbytes(self) -> int:
        """Bytes read per draft step: the matrices' INT8 rows where specd's kernel runs them (else
        bfloat16), the norms and biases in the drafting dtype."""
        size = self._draft_dtype().itemsize
        total = sum(t.numel() * size for n, t in self.params().items() if n not in MATRICES)
        for name in MATRICES:
            w = self._matrix(name)
            packed = size == 4 and w.shape[1] % QK == 0
            total += w.shape[0] * row_bytes(w.shape[1]) if packed else w.numel() * size
        return total

    def _matrix(self, name: str) -> torch.Tensor:
        return self.head if name == "head" else getattr(self, name)

    @staticmethod
    def _draft_dtype() -> torch.dtype:
        """float32 around specd's INT8 kernel where it is built, else bfloat16 matmuls."""
        return torch.float32 if kernels.available() else torch.bfloat16

    def save(self, path: Path, info: object) -> None:
        s = self.shape
        meta = {"format": FORMAT, "info": json.dumps(info.__dict__),
                "shape": json.dumps(s.__dict__)}
        save_file({n: t.detach().to(torch.bfloat16).contiguous() for n, t in self.params().items()}
                  | {"ids": self.ids.to(torch.int32)}, str(path), metadata=meta)
