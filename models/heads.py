"""Draft heads: small networks that read a target's own final hidden state and guess the tokens
after the next one. Two kinds:

**Medusa-1** (Cai et al. 2024), ``MedusaHeads``:
A target's output head turns its final-normed hidden state ``h_t`` into the distribution of token
``t + 1``. Medusa head ``j`` (``j = 1..K``) turns the same ``h_t`` into a guess at token
``t + 1 + j``: a residual block ``z_j = h + silu(W_j h + b_j)`` followed by the target's own output
head, restricted to a sub-vocabulary (``ids``: the tokens the target most often predicts on the
training corpus; the head's rows are the target's, frozen, never stored here). A head file holds
only ``W``, ``b`` and ``ids`` (safetensors) and names the target it was trained on.

**Recurrent** (EAGLE's inputs and losses, Li et al. 2024, with an MLP in place of EAGLE's
decoder layer, as Hydra's sequentially dependent heads, Ankner et al. 2024), ``RecurrentHead``:
one step maps a feature ``f`` (at first the target's ``h_t``) and the embedding of the token that
follows it to the predicted feature of the next position,
``f' = f + W_2 silu(W_1 [rms(f); rms(e(x))] + b_1) + b_2``, whose head row (the same shared, frozen
sub-vocabulary head) gives the draft; the draft's embedding feeds the next step. It sees the token
it continues (Medusa's heads do not) and keeps no KV cache of its own (EAGLE's layer attends over
every earlier feature; this one reads only the target's last state), so it needs nothing from a
prefill. Its embedding rows are the target's, read when needed, never stored here.

This module knows nothing of speculation: it maps hidden states to logits. Drafting from it is the
engine's (``specd.engine.head_drafter``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file

from specd.models import kernels
from specd.models.eagle import FORMAT as EAGLE_FORMAT, PARAMS, EagleHead, EagleShape
from specd.models.errors import ModelError
from specd.models.int_linear import QK, Q8Linear, row_bytes
from specd.models.subvocab import Places

# draft heads shipped with specd, by target name and kind: models/data/heads/<target>.safetensors
# (the EAGLE head, the default drafter's) and <target>.medusa.safetensors, and the sha256 each file
# was shipped with (tests/test_shipped_heads.py checks it; bench/RESULTS.md says how it was trained)
SHIPPED = Path(__file__).parent / "data" / "heads"
SHIPPED_KINDS = ("eagle", "medusa")  # --heads KIND: the heads of that kind shipped for the target
SHIPPED_SHA256: dict[str, str] = {
    "qwen2.5-coder-1.5b.safetensors": "e4a314207519bcb2becc378a7a1857882f4095d9cecbb488805016e195a99c64",
    "qwen2.5-coder-1.5b.medusa.safetensors": "8d1a1d87f63e2e8daa4ec7be2fe5cfbdee0ea6653faa3190dfbbae8779a2d604",
}
FORMAT = "specd-medusa-1"
RECURRENT_FORMAT = "specd-recurrent-2"  # 2: inputs scaled to unit RMS


@dataclass(frozen=True)
class HeadsInfo:
    """What a heads file was made for and from."""

    target: str  # the target's name or file
    target_sha256: str  # its GGUF's sha256 ('' when unknown)
    heads: int  # Medusa: heads; recurrent: the MLP's width
    hidden: int
    vocab: int  # sub-vocabulary rows
    trained_tokens: int = 0
    notes: str = ""


class MedusaHeads(torch.nn.Module):
    """``K`` residual blocks over a hidden state of width ``H``, sharing the target's output head
    restricted to ``ids`` (``head`` ``[V', H]``, frozen)."""

    def __init__(self, k: int, head: torch.Tensor, ids: torch.Tensor) -> None:
        super().__init__()
        v, h = head.shape
        if ids.numel() != v:
            raise ValueError(f"{ids.numel()} sub-vocabulary ids for {v} head rows")
        self.weight = torch.nn.Parameter(torch.zeros(k, h, h))  # [K, H, H]: zero, so each head starts as the target's
        self.bias = torch.nn.Parameter(torch.zeros(k, h))  # [K, H]
        self.register_buffer("head", head.float())  # [V', H]
        self.register_buffer("ids", ids.long())  # [V']
        self._infer: tuple[list[Q8Linear] | torch.Tensor, torch.Tensor, Q8Linear | torch.Tensor] | None = None
        self._places: Places | None = None

    @property
    def k(self) -> int:
        return int(self.weight.shape[0])

    def rows_of(self, tokens: torch.Tensor) -> torch.Tensor:
        """The sub-vocabulary rows ``[m]`` of the distinct ids among ``tokens`` (those outside it
        have none: the heads cannot draft them)."""
        if self._places is None:
            self._places = Places(self.ids)
        _, where = self._places.rows(tokens)
        return where[where >= 0]

    def features(self, hidden: torch.Tensor) -> torch.Tensor:
        """``hidden`` ``[n, H]`` -> ``z`` ``[n, K, H]``."""
        pre = torch.einsum("nh,kgh->nkg", hidden, self.weight) + self.bias  # [n, K, H]
        return hidden[:, None, :] + F.silu(pre)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        """``hidden`` ``[n, H]`` (float32) -> logits ``[n, K, V']`` over the sub-vocabulary."""
        return self.features(hidden) @ self.head.T

    def _packed(self) -> bool:
        """Whether drafting runs on specd's INT8 kernel (built, and the width a multiple of its block)."""
        return kernels.available() and self.head.shape[1] % QK == 0

    @torch.inference_mode()
    def draft_logits(self, hidden: torch.Tensor, k: int | None = None) -> torch.Tensor:
        """One hidden state ``[H]`` -> the first ``k`` heads' logits ``[k, V']`` (float32). Each
        block's matrix and the shared head rows are INT8 on specd's kernel where it is built (the
        EAGLE head's way: a bfloat16 matmul at one row took ~6 ms a call here, bench/RESULTS.md,
        session 37), else bfloat16; the drafts are verified, never trusted."""
        k = self.k if k is None else min(k, self.k)
        if self._infer is None:
            if self._packed():
                self._infer = ([Q8Linear.from_float(w) for w in self.weight.detach()], self.bias.detach().float(),
                               Q8Linear.from_float(self.head))
            else:
                self._infer = (self.weight.detach().to(torch.bfloat16), self.bias.detach().to(torch.bfloat16),
                               self.head.to(torch.bfloat16))
        w, b, head = self._infer
        if isinstance(head, Q8Linear):
            x = hidden.float().reshape(1, -1)  # [1, H]
            pre = torch.cat([w[j](x) for j in range(k)]) + b[:k]  # [k, H]
            return head(x + F.silu(pre))  # [k, V']: the head's rows read once for all k
        x = hidden.to(torch.bfloat16).reshape(1, -1)  # [1, H]
        pre = torch.einsum("nh,kgh->kg", x, w[:k]) + b[:k]  # [k, H]
        z = x + F.silu(pre)
        return (z @ head.T).float()  # [k, V']

    def nbytes(self) -> int:
        """Bytes read per call for all heads: the blocks and the shared head rows, INT8 rows where
        specd's kernel runs them, else bfloat16."""
        if self._packed():
            h = self.head.shape[1]
            return (self.k * h + self.head.shape[0]) * row_bytes(h) + 4 * self.bias.numel()
        return 2 * (self.weight.numel() + self.bias.numel() + self.head.numel())

    def save(self, path: Path, info: HeadsInfo) -> None:
        save_file({"weight": self.weight.detach().to(torch.bfloat16).contiguous(),
                   "bias": self.bias.detach().to(torch.bfloat16).contiguous(), "ids": self.ids.to(torch.int32)},
                  str(path), metadata={"format": FORMAT, "info": json.dumps(info.__dict__)})


def shipped(target: str, kind: str = "eagle") -> Path | None:
    """The heads of ``kind`` (``SHIPPED_KINDS``) shipped for the published model ``target``, if any."""
    if kind not in SHIPPED_KINDS:
        raise ValueError(f"shipped heads are of kinds {', '.join(SHIPPED_KINDS)}, not {kind!r}")
    path = SHIPPED / (f"{target}.safetensors" if kind == "eagle" else f"{target}.{kind}.safetensors")
    return path if path.is_file() else None


def read_info(path: Path) -> tuple[str, HeadsInfo]:
    """(format, info) of a heads file; ModelError when it is not one."""
    meta = _metadata(path)
    return meta["format"], HeadsInfo(**json.loads(meta["info"]))


def _metadata(path: Path) -> dict[str, str]:
    """A heads file's safetensors metadata; ModelError when it is not a heads file."""
    from safetensors import safe_open

    try:
        with safe_open(str(path), "pt") as f:
            meta = f.metadata() or {}
    except Exception as e:  # safetensors raises its own error types for a corrupt file
        raise ModelError(f"cannot read draft heads {path}: {e}") from e
    if meta.get("format") not in (FORMAT, RECURRENT_FORMAT, EAGLE_FORMAT):
        raise ModelError(f"{path} is not a specd draft heads file (format {meta.get('format')!r})")
    return meta


def load(path: Path, head_rows: "RowReader", embed_rows: "RowReader | None" = None
         ) -> "MedusaHeads | RecurrentHead | EagleHead":
    """A heads file, its shared head rows (and a recurrent or EAGLE head's embedding rows) read
    from the target (``head_rows(ids)`` -> float32 ``[V', H]``; an EAGLE head also reads rows
    outside its sub-vocabulary through it, for the tokens its drafts favour)."""
    meta = _metadata(path)
    fmt, info = meta["format"], HeadsInfo(**json.loads(meta["info"]))
    tensors = load_file(str(path))
    ids = tensors["ids"].long()
    if fmt == EAGLE_FORMAT:
        if embed_rows is None:
            raise ModelError(f"{path}: an EAGLE head needs the target's embedding rows")
        shape = EagleShape(**json.loads(meta["shape"]))
        eagle = EagleHead(shape, head_rows(ids), ids, embed_rows, out_rows=head_rows)
        with torch.no_grad():
            for name in PARAMS:
                getattr(eagle, name).copy_(tensors[name].float())
        return eagle
    if fmt == RECURRENT_FORMAT:
        if embed_rows is None:
            raise ModelError(f"{path}: a recurrent head needs the target's embedding rows")
        head = RecurrentHead(info.hidden, info.heads, head_rows(ids), ids, embed_rows)
        names = ("w1", "b1", "w2", "b2")
    else:
        head = MedusaHeads(info.heads, head_rows(ids), ids)
        names = ("weight", "bias")
    with torch.no_grad():
        for name in names:
            getattr(head, name).copy_(tensors[name].float())
    return head


RowReader = Callable[[torch.Tensor], torch.Tensor]  # token ids [n] -> float32 rows [n, H]


def recurrent_step(f: torch.Tensor, e: torch.Tensor, w1: torch.Tensor, b1: torch.Tensor, w2: torch.Tensor,
                   b2: torch.Tensor) -> torch.Tensor:
    """One step of the recurrent head: ``f + W_2 silu(W_1 [rms(f); rms(e)] + b_1) + b_2`` (the MLP reads
    both inputs scaled to unit RMS: the target's hidden state has a few channels two orders of
    magnitude above the rest)."""
    x = torch.cat([F.rms_norm(f, (f.shape[-1],)), F.rms_norm(e, (e.shape[-1],))], -1)  # [n, 2H]
    return f + F.silu(x @ w1.T + b1) @ w2.T + b2


class RecurrentHead(torch.nn.Module):
    """See the module docstring and :func:`recurrent_step`."""

    def __init__(self, hidden: int, width: int, head: torch.Tensor, ids: torch.Tensor,
                 embed_rows: RowReader) -> None:
        super().__init__()
        if ids.numel() != head.shape[0]:
            raise ValueError(f"{ids.numel()} sub-vocabulary ids for {head.shape[0]} head rows")
        self.w1 = torch.nn.Parameter(torch.randn(width, 2 * hidden) * (2 * hidden) ** -0.5)  # [I, 2H]
        self.b1 = torch.nn.Parameter(torch.zeros(width))
        self.w2 = torch.nn.Parameter(torch.zeros(hidden, width))  # [H, I]: zero, so f' starts as f
        self.b2 = torch.nn.Parameter(torch.zeros(hidden))
        self.register_buffer("head", head.float())  # [V', H]
        self.register_buffer("ids", ids.long())  # [V']
        self.embed_rows = embed_rows
        self._infer: tuple[torch.Tensor, ...] | None = None

    @property
    def width(self) -> int:
        return int(self.w1.shape[0])

    def step(self, feature: torch.Tensor, embedding: torch.Tensor) -> torch.Tensor:
        """``feature``, ``embedding`` ``[n, H]`` -> the next feature ``[n, H]`` (float32, trainable)."""
        return recurrent_step(feature, embedding, self.w1, self.b1, self.w2, self.b2)

    @torch.inference_mode()
    def draft(self, feature: torch.Tensor, token: int, k: int,
              more: Callable[[list[float]], bool] | None = None,
              keep: Callable[[float, int], bool] | None = None) -> tuple[list[int], list[float]]:
        """Up to ``k`` drafts after ``token`` from the target's state ``feature`` ``[H]``, each the
        top token of its step (bfloat16). ``more(top probabilities so far)`` is asked before each
        step after the first, ``keep(top probability, index)`` before a draft is taken; either may
        end the chain. Returns (tokens, their top probabilities)."""
        if self._infer is None:
            self._infer = tuple(t.detach().to(torch.bfloat16) for t in (self.w1, self.b1, self.w2, self.b2, self.head))
        w1, b1, w2, b2, head = self._infer
        f = feature.to(torch.bfloat16).reshape(1, -1)  # [1, H]
        tokens: list[int] = []
        tops: list[float] = []
        for i in range(k):
            if i and more is not None and not more(tops):
                break
            e = self.embed_rows(torch.tensor([token])).to(torch.bfloat16)  # [1, H]
            f = recurrent_step(f, e, w1, b1, w2, b2)
            p = torch.softmax((f @ head.T).float(), -1)[0]  # [V']
            top, at = p.max(0)
            if keep is not None and not keep(float(top), i):
                break
            token = int(self.ids[at])
            tokens.append(token)
            tops.append(float(top))
        return tokens, tops

    def nbytes(self) -> int:
        return 2 * (self.w1.numel() + self.w2.numel() + self.head.numel())

    def save(self, path: Path, info: HeadsInfo) -> None:
        save_file({n: getattr(self, n).detach().to(torch.bfloat16).contiguous() for n in ("w1", "b1", "w2", "b2")}
                  | {"ids": self.ids.to(torch.int32)},
                  str(path), metadata={"format": RECURRENT_FORMAT, "info": json.dumps(info.__dict__)})


class HeadRows:
    """The target's output-head rows (or, ``embedding=True``, its token-embedding rows) by token
    id, float32, read from its GGUF file (only those rows dequantized)."""

    def __init__(self, gguf: Path, embedding: bool = False) -> None:
        from specd.models.gguf_model import GgufFile

        self.file = GgufFile(gguf)
        self.name = ("token_embd.weight" if embedding or "output.weight" not in self.file.tensors
                     else "output.weight")

    def __call__(self, ids: torch.Tensor) -> torch.Tensor:
        return self.file.rows(self.name, ids)
