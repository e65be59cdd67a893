"""Draft heads: small networks that read a target's own final hidden state and guess the tokens
after the next one (Medusa-1, Cai et al. 2024).

A target's output head turns its final-normed hidden state ``h_t`` into the distribution of token
``t + 1``. Medusa head ``j`` (``j = 1..K``) turns the same ``h_t`` into a guess at token
``t + 1 + j``: a residual block ``z_j = h + silu(W_j h + b_j)`` followed by the target's own output
head, restricted to a sub-vocabulary (``ids``: the tokens the target most often predicts on the
training corpus; the head's rows are the target's, frozen, never stored here). A head file holds
only ``W``, ``b`` and ``ids`` (safetensors) and names the target it was trained on.

This module knows nothing of speculation: it maps hidden states to logits. Drafting from it is the
engine's (``specd.engine.head_drafter``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file

from specd.models.errors import ModelError

FORMAT = "specd-medusa-1"


@dataclass(frozen=True)
class HeadsInfo:
    """What a heads file was made for and from."""

    target: str  # the target's name or file
    target_sha256: str  # its GGUF's sha256 ('' when unknown)
    heads: int
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
        self._infer: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None

    @property
    def k(self) -> int:
        return int(self.weight.shape[0])

    def features(self, hidden: torch.Tensor) -> torch.Tensor:
        """``hidden`` ``[n, H]`` -> ``z`` ``[n, K, H]``."""
        pre = torch.einsum("nh,kgh->nkg", hidden, self.weight) + self.bias  # [n, K, H]
        return hidden[:, None, :] + F.silu(pre)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        """``hidden`` ``[n, H]`` (float32) -> logits ``[n, K, V']`` over the sub-vocabulary."""
        return self.features(hidden) @ self.head.T

    @torch.inference_mode()
    def draft_logits(self, hidden: torch.Tensor, k: int | None = None) -> torch.Tensor:
        """One hidden state ``[H]`` -> the first ``k`` heads' logits ``[k, V']`` (float32), computed
        in bfloat16 (half the bytes; the drafts are verified, never trusted)."""
        if self._infer is None:
            self._infer = (self.weight.detach().to(torch.bfloat16), self.bias.detach().to(torch.bfloat16),
                           self.head.to(torch.bfloat16))
        w, b, head = self._infer
        k = self.k if k is None else min(k, self.k)
        x = hidden.to(torch.bfloat16).reshape(1, -1)  # [1, H]
        pre = torch.einsum("nh,kgh->kg", x, w[:k]) + b[:k]  # [k, H]
        z = x + F.silu(pre)
        return (z @ head.T).float()  # [k, V']

    def nbytes(self) -> int:
        """Bytes read per draft (the bfloat16 copies): the blocks and the shared head rows."""
        return 2 * (self.weight.numel() + self.bias.numel() + self.head.numel())

    def save(self, path: Path, info: HeadsInfo) -> None:
        save_file({"weight": self.weight.detach().to(torch.bfloat16).contiguous(),
                   "bias": self.bias.detach().to(torch.bfloat16).contiguous(), "ids": self.ids.to(torch.int32)},
                  str(path), metadata={"format": FORMAT, "info": json.dumps(info.__dict__)})


def read_info(path: Path) -> HeadsInfo:
    from safetensors import safe_open

    try:
        with safe_open(str(path), "pt") as f:
            meta = f.metadata() or {}
    except Exception as e:  # safetensors raises its own error types for a corrupt file
        raise ModelError(f"cannot read draft heads {path}: {e}") from e
    if meta.get("format") != FORMAT:
        raise ModelError(f"{path} is not a specd Medusa heads file (format {meta.get('format')!r})")
    return HeadsInfo(**json.loads(meta["info"]))


def load(path: Path, head_rows: "HeadRows") -> MedusaHeads:
    """A heads file, its shared head rows read from the target (``head_rows(ids)`` -> float32
    ``[V', H]``)."""
    info = read_info(path)
    tensors = load_file(str(path))
    ids = tensors["ids"].long()
    heads = MedusaHeads(info.heads, head_rows(ids), ids)
    with torch.no_grad():
        heads.weight.copy_(tensors["weight"].float())
        heads.bias.copy_(tensors["bias"].float())
    return heads


class HeadRows:
    """The target's output-head rows by token id, float32, read from its GGUF file (only those
    rows dequantized)."""

    def __init__(self, gguf: Path) -> None:
        from specd.models.gguf_model import GgufFile

        self.file = GgufFile(gguf)
        self.name = "output.weight" if "output.weight" in self.file.tensors else "token_embd.weight"

    def __call__(self, ids: torch.Tensor) -> torch.Tensor:
        return self.file.rows(self.name, ids)
