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
from specd.models.heads import MedusaHeads, RecurrentHead, recurrent_step


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
    eval_positions: int = 3000  # held-out positions looked at during training (all at the end)
    ce_weight: float = 0.1
    feature_weight: float = 1.0


@dataclass
class Split:
    """Positions of one split, flattened over windows: ``hidden`` ``[N, H]`` float16,
    ``labels`` ``[N, K]`` (the target's greedy tokens ``1..K`` after the next one; -1 past the
    window's end), ``follows`` ``[N]`` (the corpus's next token is the target's own), ``later``
    (where the hidden state whose head row gives each label is)."""

    hidden: torch.Tensor
    labels: torch.Tensor
    follows: torch.Tensor
    later: torch.Tensor  # [N, K]: the flat index of position t + j (-1 past the window's end)
    tokens: torch.Tensor  # [N]: the corpus tokens
    run: torch.Tensor  # [N]: how many of the K positions from t on the corpus follows the target's greedy token
    languages: list[str] = field(default_factory=list)  # per position's window, for per-language figures
    language_of: torch.Tensor | None = None  # [N] index into ``languages``
    starts: torch.Tensor | None = None  # [W + 1]: where each window begins in the flat arrays


def load(directories: Path | list[Path], k: int, max_tokens: int | None = None) -> tuple[Split, Split]:
    """(train, validation) from the shards in ``directories`` (one, or several pooled)."""
    directories = [directories] if isinstance(directories, Path) else list(directories)
    parts: dict[bool, dict[str, list]] = {v: {"hidden": [], "labels": [], "follows": [], "lang": [], "later": [],
                                              "tokens": [], "run": [], "n": 0, "starts": [0]}
             for v in (False, True)}
    languages: list[str] = []
    seen = 0
    for path in [p for d in directories for p in data.shards(d)]:
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
            later = torch.full((n, k), -1, dtype=torch.long)
            for j in range(1, k + 1):
                later[: max(0, n - j), j - 1] = torch.arange(j, n) + p["n"]
            p["later"].append(later)
            p["tokens"].append(tokens)
            run = torch.zeros(n, dtype=torch.long)
            for i in range(n - 1, -1, -1):  # consecutive greedy positions from i, at most k
                run[i] = min(k, 1 + int(run[i + 1])) if follows[i] and i + 1 < n else int(follows[i])
            p["run"].append(run)
            p["n"] += n
            p["starts"].append(p["n"])
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
            raise ValueError(f"{', '.join(map(str, directories))}: no {'held-out' if v else 'training'} windows")
        out.append(Split(torch.cat(p["hidden"]), torch.cat(p["labels"]), torch.cat(p["follows"]),
                         torch.cat(p["later"]), torch.cat(p["tokens"]), torch.cat(p["run"]), languages,
                         torch.cat(p["lang"]), torch.tensor(p["starts"])))
    return out[0], out[1]


def sub_vocabulary(train: Split, size: int) -> tuple[torch.Tensor, float]:
    """The ``size`` tokens the target most often predicts on ``train`` (sorted ids), and the share
    of training labels they cover."""
    counts = Counter(train.labels[:, 0][train.labels[:, 0] >= 0].tolist())
    top = [t for t, _ in counts.most_common(size)]
    covered = sum(counts[t] for t in top) / max(1, sum(counts.values()))
    return torch.tensor(sorted(top), dtype=torch.long), covered


def widen_vocabulary(ids: torch.Tensor, train: Split, extra: int) -> torch.Tensor:
    """``ids`` (a head's sub-vocabulary) and the ``extra`` tokens the target most often predicts on
    ``train`` that it lacks (a repository's own names: ``Ġscrapy``, ``Spider``), sorted."""
    labels = train.labels[:, 0]
    outside = labels[(labels >= 0) & ~torch.isin(labels, ids)]
    top = [t for t, _ in Counter(outside.tolist()).most_common(extra)]
    return torch.cat([ids, torch.tensor(top, dtype=torch.long)]).sort().values


def _reduced(labels: torch.Tensor, ids: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """Labels as sub-vocabulary indices (-100, ignored, for tokens outside it or past the end)."""
    where = torch.full((vocab_size,), -100, dtype=torch.long)
    where[ids] = torch.arange(ids.numel())
    out = torch.full_like(labels, -100)
    ok = labels >= 0
    out[ok] = where[labels[ok]]
    return out


@torch.no_grad()
def evaluate(heads: MedusaHeads, split: Split, batch: int = 1024, positions: int | None = None) -> dict:
    """Held-out figures: per head the top-1 agreement with the target's greedy token (all
    positions and decoding-like ones), and the chain acceptance (heads 1..j all right); the heads
    run as they draft (bfloat16). ``positions``: only the first that many (a quick look)."""
    k = heads.k
    n = split.hidden.shape[0] if positions is None else min(positions, split.hidden.shape[0])
    right = torch.zeros(n, k, dtype=torch.bool)
    w, b, head = (t.detach().to(torch.bfloat16) for t in (heads.weight, heads.bias, heads.head))
    for lo in range(0, n, batch):
        h = split.hidden[lo : min(n, lo + batch)].to(torch.bfloat16)  # [n, H]
        z = h[:, None, :] + torch.nn.functional.silu(torch.einsum("nh,kgh->nkg", h, w) + b)  # [n, K, H]
        guess = heads.ids[(z @ head.T).argmax(-1)]  # [n, K] token ids
        right[lo : lo + batch] = guess == split.labels[lo : min(n, lo + batch)]
    return _figures(right, split, n)


def _figures(right: torch.Tensor, split: Split, n: int) -> dict:
    """Per-draft-position agreement ``right`` ``[n, K]`` -> the figures: ``head_top1[j]`` over
    all positions, ``chain[j]`` (drafts 1..j+1 all right) over positions where the corpus follows
    the target's greedy tokens for j+1 positions, i.e. exactly what greedy drafting from there
    would meet ("decoding")."""
    k = right.shape[1]
    labels, run = split.labels[:n], split.run[:n]
    lang_of = None if split.language_of is None else split.language_of[:n]
    valid = labels[:, k - 1] >= 0  # every position has a label
    chain = right.int().cumprod(1).bool()  # [N, K]: heads 1..j all right
    def rates(mask: torch.Tensor, greedy: bool) -> dict:
        m = valid & mask
        out = {"positions": int(m.sum()), "head_top1": [round(float(right[m, j].float().mean()), 4) for j in range(k)]}
        if greedy:
            out["chain"] = [round(float(chain[m & (run > j), j].float().mean()), 4) for j in range(k)]
            out["positions"] = int((m & (run > 0)).sum())
            out["head_top1"] = [round(float(right[m & (run > j), j].float().mean()), 4) for j in range(k)]
        return out
    out = {"all": rates(torch.ones_like(valid), False), "decoding": rates(torch.ones_like(valid), True)}
    if lang_of is not None:
        out["by_language"] = {lang: rates(lang_of == i, True)["chain"] for i, lang in enumerate(split.languages)}
    return out


def _batch_ce(features: torch.Tensor, labels: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """Cross-entropy of ``labels`` (sub-vocabulary indices, -100: none; any shape) among the
    batch's own labels: ``features`` ``[..., H]`` scored against just those head ``rows`` (a
    sampled softmax, ~10x cheaper than the whole sub-vocabulary); 0 when the batch has no label."""
    cand = labels[labels >= 0].unique()  # [C]
    if not cand.numel():
        return features.new_zeros(())
    where = torch.full((rows.shape[0],), -100, dtype=torch.long)
    where[cand] = torch.arange(cand.numel())
    target = torch.where(labels >= 0, where[labels.clamp(min=0)], torch.full_like(labels, -100))
    logits = features @ rows[cand].T  # [..., C]
    return F.cross_entropy(logits.reshape(-1, cand.numel()), target.reshape(-1), ignore_index=-100)


def expected_drafts(held_out: dict) -> float:
    """Drafts a greedy chain gets accepted a round, by the held-out figures: the sum of ``chain``."""
    return float(sum(held_out["decoding"]["chain"]))


def _fit(params: list[torch.nn.Parameter], lr: float, weight_decay: float, steps: int, eval_every: int,
         batch_loss: Callable[[], torch.Tensor], figures: Callable[[bool], dict], what: str,
         report: Callable[[str], None], keep_best: bool = False) -> list[dict]:
    """AdamW with 50 warm-up steps (fewer when ``steps`` is short) and a cosine decay over
    ``steps``; every ``eval_every`` steps (and at the end) the held-out ``figures(final)`` are
    logged and reported. With ``keep_best`` (fine-tuning: ``figures`` must then look at the same
    positions every time) the starting parameters are judged too (step 0) and the parameters end
    as they were at the best judgement (``expected_drafts``); the log's last entry is that one,
    marked ``"kept": true``. Returns the log."""
    warm = min(50, max(1, steps // 10))
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warm) * 0.5 * (1 + math.cos(math.pi * min(s, steps) / steps)))
    log: list[dict] = []
    t0 = time.perf_counter()
    running = 0.0
    best: tuple[float, int, list[torch.Tensor]] | None = None

    def judge(step: int, final: bool) -> None:
        nonlocal best
        held_out = figures(final)
        entry = {"step": step, "loss": round(running, 4), "seconds": round(time.perf_counter() - t0, 1),
                 "held_out": held_out}
        log.append(entry)
        d = held_out["decoding"]
        report(f"step {step}: loss {running:.3f}, held-out {what} top-1 {d['head_top1']}, chain {d['chain']} "
               f"({d['positions']} positions), {entry['seconds']:.0f} s")
        if keep_best and (best is None or expected_drafts(held_out) > best[0]):
            best = (expected_drafts(held_out), len(log) - 1, [p.detach().clone() for p in params])

    if keep_best:
        judge(0, False)
    for step in range(1, steps + 1):
        loss = batch_loss()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        value = float(loss.detach())
        running = 0.98 * running + 0.02 * value if step > 1 else value
        if step % eval_every == 0 or step == steps:
            judge(step, step == steps)
    if keep_best and best is not None:
        with torch.no_grad():
            for p, saved in zip(params, best[2]):
                p.copy_(saved)
        kept = dict(log[best[1]], kept=True)
        log.append(kept)
        report(f"kept the parameters of step {kept['step']} (held-out drafts accepted a round "
               f"{best[0]:.3f}; at step 0 {expected_drafts(log[0]['held_out']):.3f})")
    return log


def train(heads: MedusaHeads, train_split: Split, val: Split, settings: TrainSettings,
          report: Callable[[str], None] = print) -> list[dict]:
    """AdamW on two losses per head (EAGLE's pair, applied to Medusa): ``feature_weight`` times the
    block's output regressed onto the target's own hidden state at ``t + j`` (smooth L1: the state
    whose head row is the label, so no head matmul is needed for it), and ``ce_weight`` times the
    cross-entropy of the label among the batch's labels (:func:`_batch_ce`; Medusa-1's own loss).
    Returns the log."""
    if settings.feature_weight <= 0 and settings.ce_weight <= 0:
        raise ValueError("no loss to train on: feature_weight and ce_weight are both 0")
    g = torch.Generator().manual_seed(settings.seed)
    labels = _reduced(train_split.labels, heads.ids, int(max(train_split.labels.max(), heads.ids.max())) + 1)
    usable = (train_split.later[:, 0] >= 0).nonzero().flatten()  # positions with at least one label

    def batch_loss() -> torch.Tensor:
        pick = usable[torch.randint(usable.numel(), (settings.batch,), generator=g)]
        h = train_split.hidden[pick].float()  # [B, H]
        later = train_split.later[pick]  # [B, K]
        has = later >= 0
        goal = train_split.hidden[later.clamp(min=0)].float()  # [B, K, H]
        z = heads.features(h)  # [B, K, H]
        loss = z.new_zeros(())
        if settings.feature_weight > 0:
            regress = F.smooth_l1_loss(z, goal, reduction="none").mean(-1)  # [B, K]
            loss = settings.feature_weight * (regress * has).sum() / has.sum().clamp(min=1)
        if settings.ce_weight > 0:
            loss = loss + settings.ce_weight * _batch_ce(z, labels[pick], heads.head)  # labels [B, K]
        return loss

    return _fit([heads.weight, heads.bias], settings.lr, settings.weight_decay, settings.steps, settings.eval_every,
                batch_loss, lambda final: evaluate(heads, val, positions=None if final else settings.eval_positions),
                "head", report)


@dataclass(frozen=True)
class RecurrentSettings:
    width: int = 2048
    vocab: int = 8192
    steps: int = 600
    batch: int = 512
    lr: float = 1e-3
    unroll: int = 2  # steps trained on the head's own features (the first on the target's)
    noise: float = 0.05  # gaussian noise on the input feature, times its RMS (EAGLE's augmentation)
    ce_weight: float = 0.1
    seed: int = 0
    eval_every: int = 100
    eval_positions: int = 3000
    chain: int = 4  # draft positions the held-out figures follow


class Embeddings:
    """The target's embedding rows for the tokens of the data, looked up by token id."""

    def __init__(self, rows, *splits: Split) -> None:
        ids = torch.cat([s.tokens for s in splits]).unique()
        self.where = torch.full((int(ids.max()) + 1,), -1, dtype=torch.long)
        self.where[ids] = torch.arange(ids.numel())
        self.table = rows(ids)  # [U, H] float32

    def __call__(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.table[self.where[tokens]]


@torch.no_grad()
def evaluate_recurrent(head: RecurrentHead, split: Split, embed: Embeddings, k: int,
                       positions: int | None = None, batch: int = 1024) -> dict:
    """Held-out figures of a recurrent head drafting ``k`` tokens greedily from each position
    (each step fed its own draft, as in decoding), against the target's greedy tokens."""
    n = split.hidden.shape[0] if positions is None else min(positions, split.hidden.shape[0])
    right = torch.zeros(n, k, dtype=torch.bool)
    w1, b1, w2, b2, rows = (t.detach().to(torch.bfloat16) for t in (head.w1, head.b1, head.w2, head.b2, head.head))
    nxt = split.later[:n, 0]
    for lo in range(0, n, batch):
        hi = min(n, lo + batch)
        f = split.hidden[lo:hi].to(torch.bfloat16)
        tok = split.tokens[nxt[lo:hi].clamp(min=0)]  # the token after t (the target's own where it follows)
        for j in range(k):
            f = recurrent_step(f, embed_any(embed, head, tok).to(torch.bfloat16), w1, b1, w2, b2)
            tok = head.ids[(f @ rows.T).argmax(-1)]
            right[lo:hi, j] = tok == split.labels[lo:hi, j]
    return _figures(right, split, n)


def embed_any(embed: Embeddings, head: RecurrentHead, tokens: torch.Tensor) -> torch.Tensor:
    """Embeddings of ``tokens``: from the table where the data has them, else read from the target."""
    known = tokens < embed.where.numel()
    known[known.clone()] &= embed.where[tokens[known]] >= 0
    out = torch.empty(tokens.numel(), embed.table.shape[1])
    if bool(known.any()):
        out[known] = embed(tokens[known])
    if not bool(known.all()):
        out[~known] = head.embed_rows(tokens[~known])
    return out


def train_recurrent(head: RecurrentHead, train_split: Split, val: Split, embed: Embeddings,
                    settings: RecurrentSettings, report: Callable[[str], None] = print) -> list[dict]:
    """AdamW on EAGLE's two losses, unrolled ``settings.unroll`` steps: each step's feature
    regressed (smooth L1) onto the target's hidden state at that position, plus ``ce_weight``
    times the cross-entropy of the target's greedy token among the batch's labels
    (:func:`_batch_ce`). The first step reads the target's state with noise added; later steps
    read the head's own features (as drafting does), fed the corpus's tokens."""
    g = torch.Generator().manual_seed(settings.seed)
    u = settings.unroll
    labels = _reduced(train_split.labels, head.ids, int(max(train_split.labels.max(), head.ids.max())) + 1)
    usable = (train_split.later[:, min(u, train_split.later.shape[1] - 1)] >= 0).nonzero().flatten()

    def batch_loss() -> torch.Tensor:
        pick = usable[torch.randint(usable.numel(), (settings.batch,), generator=g)]
        f = train_split.hidden[pick].float()  # [B, H]
        rms = f.pow(2).mean(-1, keepdim=True).sqrt()
        f = f + settings.noise * rms * torch.randn(f.shape, generator=g)
        loss = torch.zeros(())
        for j in range(u):
            at = train_split.later[pick, j]  # [B]: position t + 1 + j
            f = head.step(f, embed(train_split.tokens[at]))  # fed the token at that position
            loss = loss + F.smooth_l1_loss(f, train_split.hidden[at].float())
            if settings.ce_weight > 0:  # the target's greedy token after position t + 1 + j
                loss = loss + settings.ce_weight * _batch_ce(f, labels[pick, j], head.head)
        return loss

    return _fit([head.w1, head.b1, head.w2, head.b2], settings.lr, 0.0, settings.steps, settings.eval_every,
                batch_loss, lambda final: evaluate_recurrent(head, val, embed, settings.chain,
                                                            positions=None if final else settings.eval_positions),
                "draft", report)
