"""Training Medusa heads on the data ``specd.heads.data`` stored, and the held-out figures.

Labels are the target's own greedy tokens (self-distillation): head ``j`` at position ``t`` learns
``argmax[t + j]``, the token the target itself would emit ``j`` tokens after the next one, so what
the heads learn is exactly what verification will accept in greedy decoding.

Held-out acceptance is measured on the validation files' windows (never trained on), at positions
where the corpus continues the way the target would (``tokens[t + 1] == argmax[t]``, as in
decoding, where the token after ``h_t`` is always the target's own): ``acceptance[j]`` is the share
of those positions where heads ``1..j`` all guess the target's greedy tokens (head 1 alone: the
first-position acceptance; the chain's expected accepted drafts at K is the sum over j <= K).
"""

from __future__ import annotations

import math
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F

from specd.heads import data
from specd.models.heads import MedusaHeads


@dataclass(frozen=True)
class TrainSettings:
    heads: int = 4
    vocab: int = 8192  # sub-vocabulary rows
    steps: int = 1000
    batch: int = 512
    lr: float = 1e-3
    weight_decay: float = 0.0
    seed: int = 0
    eval_every: int = 200


@dataclass
class Split:
    """Positions of one split, flattened over windows: ``hidden`` ``[N, H]`` float16,
    ``labels`` ``[N, K]`` (the target's greedy tokens ``1..K`` after the next one; -1 past the
    window's end), ``follows`` ``[N]`` (the corpus's next token is the target's own)."""

    hidden: torch.Tensor
    labels: torch.Tensor
    follows: torch.Tensor
    languages: list[str] = field(default_factory=list)  # per position's window, for per-language figures
    language_of: torch.Tensor | None = None  # [N] index into ``languages``


def load(directory: Path, k: int, max_tokens: int | None = None) -> tuple[Split, Split]:
    """(train, validation) from the shards in ``directory``."""
    parts: dict[bool, dict[str, list]] = {v: {"hidden": [], "labels": [], "follows": [], "lang": []} for v in (False, True)}
    languages: list[str] = []
    seen = 0
    for path in data.shards(directory):
        s = torch.load(path)
        starts = s["starts"].tolist()
        for w in range(len(starts) - 1):
            a, b = starts[w], starts[w + 1]
            n = b - a
            argmax = s["argmax"][a:b].long()
            tokens = s["tokens"][a:b].long()
            labels = torch.full((n, k), -1, dtype=torch.long)
            for j in range(1, k + 1):
                labels[: max(0, n - j), j - 1] = argmax[j:]
            follows = torch.zeros(n, dtype=torch.bool)
            follows[: n - 1] = tokens[1:] == argmax[:-1]
            lang = s["languages"][w]
            if lang not in languages:
                languages.append(lang)
            p = parts[bool(s["validation"][w])]
            p["hidden"].append(s["hidden"][a:b])
            p["labels"].append(labels)
            p["follows"].append(follows)
            p["lang"].append(torch.full((n,), languages.index(lang), dtype=torch.int8))
            seen += n
        if max_tokens is not None and seen >= max_tokens:
            break
    out = []
    for v in (False, True):
        p = parts[v]
        if not p["hidden"]:
            raise ValueError(f"{directory}: no {'held-out' if v else 'training'} windows")
        out.append(Split(torch.cat(p["hidden"]), torch.cat(p["labels"]), torch.cat(p["follows"]), languages,
                         torch.cat(p["lang"])))
    return out[0], out[1]


def sub_vocabulary(train: Split, size: int) -> tuple[torch.Tensor, float]:
    """The ``size`` tokens the target most often predicts on ``train`` (sorted ids), and the share
    of training labels they cover."""
    counts = Counter(train.labels[:, 0][train.labels[:, 0] >= 0].tolist())
    top = [t for t, _ in counts.most_common(size)]
    covered = sum(counts[t] for t in top) / max(1, sum(counts.values()))
    return torch.tensor(sorted(top), dtype=torch.long), covered


def _reduced(labels: torch.Tensor, ids: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """Labels as sub-vocabulary indices (-100, ignored, for tokens outside it or past the end)."""
    where = torch.full((vocab_size,), -100, dtype=torch.long)
    where[ids] = torch.arange(ids.numel())
    out = torch.full_like(labels, -100)
    ok = labels >= 0
    out[ok] = where[labels[ok]]
    return out


@torch.no_grad()
def evaluate(heads: MedusaHeads, split: Split, batch: int = 2048) -> dict:
    """Held-out figures: per head the top-1 agreement with the target's greedy token (all
    positions and decoding-like ones), and the chain acceptance (heads 1..j all right)."""
    k = heads.k
    right = torch.zeros(split.hidden.shape[0], k, dtype=torch.bool)
    for lo in range(0, split.hidden.shape[0], batch):
        h = split.hidden[lo : lo + batch].float()
        guess = heads.ids[heads(h).argmax(-1)]  # [n, K] token ids
        right[lo : lo + batch] = guess == split.labels[lo : lo + batch]
    valid = split.labels[:, k - 1] >= 0  # every head has a label
    chain = right.int().cumprod(1).bool()  # [N, K]: heads 1..j all right
    def rates(mask: torch.Tensor) -> dict:
        m = valid & mask
        n = int(m.sum())
        return {"positions": n, "head_top1": [round(float(right[m, j].float().mean()), 4) for j in range(k)],
                "chain": [round(float(chain[m, j].float().mean()), 4) for j in range(k)]}
    out = {"all": rates(torch.ones_like(valid)), "decoding": rates(split.follows)}
    if split.language_of is not None:
        out["by_language"] = {lang: rates(split.follows & (split.language_of == i))["chain"]
                              for i, lang in enumerate(split.languages)}
    return out


def train(heads: MedusaHeads, train_split: Split, val: Split, settings: TrainSettings,
          report: Callable[[str], None] = print) -> list[dict]:
    """AdamW on the summed cross-entropy of the heads; returns the log (loss, held-out figures)."""
    g = torch.Generator().manual_seed(settings.seed)
    labels = _reduced(train_split.labels, heads.ids, int(max(train_split.labels.max(), heads.ids.max())) + 1)
    usable = (labels != -100).any(1).nonzero().flatten()  # positions with at least one label
    opt = torch.optim.AdamW([heads.weight, heads.bias], lr=settings.lr, weight_decay=settings.weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / 50) * 0.5 * (1 + math.cos(math.pi * min(s, settings.steps) / settings.steps)))
    log: list[dict] = []
    t0 = time.perf_counter()
    running = 0.0
    for step in range(1, settings.steps + 1):
        pick = usable[torch.randint(usable.numel(), (settings.batch,), generator=g)]
        h = train_split.hidden[pick].float()  # [B, H]
        y = labels[pick]  # [B, K]
        logits = heads(h)  # [B, K, V']
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1), ignore_index=-100)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        running = 0.98 * running + 0.02 * float(loss) if step > 1 else float(loss)
        if step % settings.eval_every == 0 or step == settings.steps:
            figures = evaluate(heads, val)
            entry = {"step": step, "loss": round(running, 4), "seconds": round(time.perf_counter() - t0, 1),
                     "held_out": figures}
            log.append(entry)
            d = figures["decoding"]
            report(f"step {step}: loss {running:.3f}, held-out head top-1 {d['head_top1']}, chain {d['chain']} "
                   f"({d['positions']} positions), {entry['seconds']:.0f} s")
    return log
