"""Training an EAGLE-1 head (``specd.models.eagle``) on the data ``specd.heads.data`` stored.

Teacher-forced over whole windows, as EAGLE trains: row ``t`` of a window reads the target's feature
``f_t`` (with noise added, EAGLE's augmentation for drafting from its own features later) and the
embedding of the corpus token ``tok_{t+1}``, attends causally over the rows before it, and its
output ``f̂`` is pulled towards the target's feature ``f_{t+1}`` (smooth L1) while ``head(f̂)`` is
trained towards the target's greedy token after ``t + 1`` (cross-entropy over the whole
sub-vocabulary, weighted ``ce_weight``).

Held-out figures (``evaluate_eagle``) draft as decoding does: the first draft from the target's
feature and token, each later one from the head's own ``f̂`` and its own previous draft, attending
over the window's teacher-forced rows and the chain's own; reported by ``train._figures``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F

from specd.heads.train import Embeddings, Split, _figures, _fit, _reduced, embed_any
from specd.models.eagle import EagleHead


@dataclass(frozen=True)
class EagleSettings:
    width: int = 3072  # the MLP's
    vocab: int = 8192
    steps: int = 800
    windows: int = 4  # windows a step (each up to 512 positions)
    lr: float = 1e-3
    weight_decay: float = 0.0
    noise: float = 0.05  # gaussian noise on the input feature, times its RMS
    ce_weight: float = 0.1
    seed: int = 0
    eval_every: int = 100
    eval_windows: int = 12  # held-out windows looked at during training (all at the end)
    chain: int = 4  # draft positions the held-out figures follow
    keep_best: bool = False  # fine-tuning: judge on every held-out window, end at the best judgement


def _window(split: Split, w: int) -> tuple[int, int]:
    assert split.starts is not None
    return int(split.starts[w]), int(split.starts[w + 1])


def train_eagle(head: EagleHead, train_split: Split, val: Split, embed: Embeddings, settings: EagleSettings,
                report: Callable[[str], None] = print) -> list[dict]:
    """AdamW over random training windows (see the module docstring). Returns the log."""
    g = torch.Generator().manual_seed(settings.seed)
    vocab_size = int(max(train_split.labels.max(), head.ids.max())) + 1
    labels = _reduced(train_split.labels[:, :1], head.ids, vocab_size)[:, 0]  # [N]: argmax[t + 1] in V'
    windows = train_split.starts.numel() - 1
    hdim = train_split.hidden.shape[1]

    def batch_loss() -> torch.Tensor:
        picks = torch.randint(windows, (settings.windows,), generator=g).tolist()
        spans = [_window(train_split, w) for w in picks]
        t = max(b - a for a, b in spans) - 1
        feat = torch.zeros(len(spans), t, hdim)
        goal = torch.zeros(len(spans), t, hdim)
        emb = torch.zeros(len(spans), t, hdim)
        lab = torch.full((len(spans), t), -100, dtype=torch.long)
        valid = torch.zeros(len(spans), t, dtype=torch.bool)
        for i, (a, b) in enumerate(spans):
            n = b - a - 1
            valid[i, :n] = True
            feat[i, :n] = train_split.hidden[a : b - 1].float()
            goal[i, :n] = train_split.hidden[a + 1 : b].float()
            emb[i, :n] = embed(train_split.tokens[a + 1 : b])
            lab[i, :n] = labels[a : b - 1]
        rms = feat.pow(2).mean(-1, keepdim=True).sqrt()
        feat = feat + settings.noise * rms * torch.randn(feat.shape, generator=g)
        pred = head(feat, emb)  # [B, T, H]
        reg = (F.smooth_l1_loss(pred, goal, reduction="none").mean(-1) * valid).sum() / valid.sum()
        if settings.ce_weight <= 0:
            return reg
        logits = pred[valid] @ head.head.T  # [n, V']
        return reg + settings.ce_weight * F.cross_entropy(logits, lab[valid], ignore_index=-100)

    params = [p for p in head.parameters() if p.requires_grad]
    return _fit(params, settings.lr, settings.weight_decay, settings.steps, settings.eval_every, batch_loss,
                lambda final: evaluate_eagle(head, val, embed, settings.chain,
                                             windows=None if final or settings.keep_best else settings.eval_windows),
                "draft", report, keep_best=settings.keep_best)


@torch.no_grad()
def evaluate_eagle(head: EagleHead, split: Split, embed: Embeddings, k: int, windows: int | None = None) -> dict:
    """Held-out figures of the head drafting ``k`` tokens greedily from every position of the
    first ``windows`` validation windows (all by default), as decoding drafts (module docstring);
    computed in float32."""
    p = {n: t.detach().float() for n, t in head.params().items()}
    s = head.shape
    group = s.heads // s.kv_heads
    scale = s.head_dim ** -0.5
    count = split.starts.numel() - 1 if windows is None else min(windows, split.starts.numel() - 1)
    n_all = int(split.starts[count])
    right = torch.zeros(n_all, k, dtype=torch.bool)
    rows = head.head.float()
    for w in range(count):
        a, b = _window(split, w)
        n = b - a - 1
        if n <= 0:
            continue
        x0 = head.inputs(split.hidden[a : b - 1].float(), embed(split.tokens[a + 1 : b]), p)  # [n, H]
        q0, k0, v0 = head.qkv(x0, torch.arange(n), p)  # [n, heads|kv, d]
        attn = F.scaled_dot_product_attention(q0.transpose(0, 1), k0.transpose(0, 1), v0.transpose(0, 1),
                                              is_causal=True, enable_gqa=True)  # [heads, n, d]
        f = head.finish(x0, attn.transpose(0, 1).reshape(n, -1), p)  # [n, H]: f̂ of t + 1
        draft = head.ids[(f @ rows.T).argmax(-1)]  # [n]
        right[a : a + n, 0] = draft == split.labels[a : a + n, 0]
        causal = torch.ones(n, n, dtype=torch.bool).tril()  # [t, s]: s <= t
        ks: list[torch.Tensor] = []
        vs: list[torch.Tensor] = []
        for j in range(1, k):
            x = head.inputs(f, embed_any(embed, head, draft), p)  # row t: position t + j
            q, kj, vj = head.qkv(x, torch.arange(n) + j, p)
            ks.append(kj)
            vs.append(vj)
            qg = q.view(n, s.kv_heads, group, s.head_dim)  # [t, kv, g, d]
            tf = torch.einsum("tkgd,skd->tkgs", qg, k0) * scale  # [t, kv, g, s]
            tf = tf.masked_fill(~causal[:, None, None, :], float("-inf"))
            own_k, own_v = torch.stack(ks, 1), torch.stack(vs, 1)  # [t, j, kv, d]
            ex = torch.einsum("tkgd,tjkd->tkgj", qg, own_k) * scale  # [t, kv, g, j]
            prob = torch.softmax(torch.cat([tf, ex], -1), -1)
            out = (torch.einsum("tkgs,skd->tkgd", prob[..., :n], v0)
                   + torch.einsum("tkgj,tjkd->tkgd", prob[..., n:], own_v))  # [t, kv, g, d]
            f = head.finish(x, out.reshape(n, -1), p)
            draft = head.ids[(f @ rows.T).argmax(-1)]
            right[a : a + n, j] = draft == split.labels[a : a + n, j]
    return _figures(right, split, n_all)
