"""The EAGLE head (specd.models.eagle): drafting from its cache computes what training computed."""

from __future__ import annotations

import pytest
import torch

from specd.heads.train import Embeddings, Split
from specd.heads.train_eagle import EagleSettings, evaluate_eagle, train_eagle
from specd.models import kernels
from specd.models.eagle import EagleHead, EagleShape

H, V = 32, 50


def _head(seed: int = 0) -> tuple[EagleHead, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    table = torch.randn(V, H, generator=g)  # the "target's" embedding rows
    rows = torch.randn(V, H, generator=g)  # its output rows, the whole vocabulary as the sub-vocabulary
    torch.manual_seed(seed)
    head = EagleHead(EagleShape(H, heads=4, kv_heads=2, head_dim=8, width=64), rows, torch.arange(V),
                     lambda ids: table[ids])
    with torch.no_grad():  # non-zero output projections, so attention and the MLP both count
        head.wo.normal_(0, 0.3)
        head.down.normal_(0, 0.3)
    return head, table


def test_cached_rows_match_the_teacher_forced_window() -> None:
    head, _ = _head()
    g = torch.Generator().manual_seed(1)
    feats = torch.randn(9, H, generator=g)
    toks = torch.randint(V, (9,), generator=g).tolist()
    with torch.no_grad():
        whole = head(feats[None], head.embed_rows(torch.tensor(toks))[None])[0]  # [9, H] float32
    cache = head.new_cache(16)
    parts = [head.extend(cache, feats[:4], toks[:4]), head.extend(cache, feats[4:5], toks[4:5]),
             head.extend(cache, feats[5:], toks[5:])]
    cached = torch.cat(parts).float()
    assert cache.length == 9 and cache.tokens == toks
    assert torch.allclose(cached, whole, atol=0.05 * float(whole.abs().max())), (cached - whole).abs().max()


@pytest.mark.skipif(not kernels.available(), reason="specd's C kernels are not built here")
def test_the_c_layer_computes_what_the_torch_layer_computes() -> None:
    """Drafting's fused C layer against the torch layer on the same INT8 matrices: the same
    features and cached keys and values, up to float rounding, whole windows and single rows."""
    head, table = _head()
    torch_head = EagleHead(head.shape, head.head, head.ids, head.embed_rows, fused=False)
    torch_head.load_state_dict(head.state_dict())
    g = torch.Generator().manual_seed(4)
    feats = torch.randn(11, H, generator=g)
    toks = torch.randint(V, (11,), generator=g).tolist()
    caches = [head.new_cache(24), torch_head.new_cache(24)]
    for c in caches:
        c.start = 5  # rows at target positions 5..: the rotary angles follow the positions
    outs = [[h.extend(c, feats[a:b], toks[a:b]) for a, b in ((0, 6), (6, 7), (7, 11))]
            for h, c in zip((head, torch_head), caches)]
    assert head._fused and not torch_head._fused  # the two paths did run
    for fused, plain in zip(*outs):
        assert torch.allclose(fused, plain, atol=1e-4, rtol=1e-4), (fused - plain).abs().max()
    fc, tc = caches
    assert fc.length == tc.length == 11
    assert torch.allclose(fc.k[:, :11], tc.k[:, :11], atol=1e-4) and torch.allclose(fc.v[:, :11], tc.v[:, :11], atol=1e-4)


def test_draft_leaves_the_cache_one_row_longer() -> None:
    head, _ = _head()
    g = torch.Generator().manual_seed(2)
    cache = head.new_cache(32)
    head.extend(cache, torch.randn(5, H, generator=g), [1, 2, 3, 4, 5])
    before = cache.k[:, :5].clone()
    d = head.draft(cache, torch.randn(H, generator=g), 7, k=4)
    tokens, tops = d.tokens, d.probs
    assert len(tokens) == 4 and all(0 < p <= 1 for p in tops)
    assert cache.length == 6 and cache.tokens == [1, 2, 3, 4, 5, 7]
    assert torch.equal(cache.k[:, :5], before)
    again = head.draft(cache, torch.randn(H, generator=torch.Generator().manual_seed(3)), 9, k=4).tokens
    assert cache.length == 7 and len(again) == 4


def _sub_head(sub: int = 20, seed: int = 7) -> tuple[EagleHead, torch.Tensor]:
    """A head over a sub-vocabulary of ``sub`` of the V ids (the even ones first), reading any
    other id's output row from ``rows``; returns it and ``rows`` ``[V, H]``."""
    g = torch.Generator().manual_seed(seed)
    table, rows = torch.randn(V, H, generator=g), torch.randn(V, H, generator=g)
    ids = torch.arange(0, V, 2)[:sub]
    torch.manual_seed(seed)
    head = EagleHead(EagleShape(H, heads=4, kv_heads=2, head_dim=8, width=64), rows[ids], ids,
                     lambda t: table[t], out_rows=lambda t: rows[t])
    with torch.no_grad():
        head.wo.normal_(0, 0.3)
        head.down.normal_(0, 0.3)
    return head, rows


def _first_draft(head: EagleHead, favour=None) -> tuple[int, float, torch.Tensor]:
    """The head's first draft from a fixed cache and feature: (token, its probability, ``f̂``)."""
    g = torch.Generator().manual_seed(11)
    cache = head.new_cache(16)
    head.extend(cache, torch.randn(4, H, generator=g), [1, 2, 3, 4])
    f = head.extend(cache, torch.randn(1, H, generator=g), [5])
    d = head.draft_after(cache, f, 1, favour=favour)
    return d.tokens[0], d.probs[0], f.float()


def test_favoured_tokens_are_drafted_from_the_biased_distribution() -> None:
    """``favour``: every favoured id gets the bias on its logit, in the sub-vocabulary or outside
    it (its output row read then), and the draft is the top of that distribution, with the
    head's own probability for it (over the same candidates, without the bias)."""
    head, rows = _sub_head()
    plain, _, f = _first_draft(head)
    logits = (f @ rows.T)[0]  # [V]: every id's logit, as the head's output rows give it
    in_sub = torch.zeros(V, dtype=torch.bool)
    in_sub[head.ids] = True
    assert plain == int(logits.masked_fill(~in_sub, float("-inf")).argmax())
    order = logits.argsort(descending=True).tolist()
    inside = next(t for t in order if in_sub[t] and t != plain)  # the runner-up in the sub-vocabulary
    outside = next(t for t in order if not in_sub[t])  # the best id the sub-vocabulary lacks
    favoured = torch.tensor([inside, outside, inside, V - 1])  # repeats are harmless; V - 1: beyond every sub id
    for bias in (0.5, 4.0, 40.0):
        favour = head.favour(favoured, bias)
        biased = logits + bias * torch.isin(torch.arange(V), favoured).float()
        candidates = in_sub | torch.isin(torch.arange(V), favoured)
        expected = biased.masked_fill(~candidates, float("-inf"))
        token, prob, _ = _first_draft(head, favour)
        assert token == int(expected.argmax())
        own = torch.softmax(logits.masked_fill(~candidates, float("-inf")), -1)
        assert prob == pytest.approx(float(own[token]), rel=1e-3)
    assert token in favoured.tolist()  # a large enough bias always drafts a favoured id


def test_a_head_without_output_rows_favours_its_sub_vocabulary_only() -> None:
    head, rows = _sub_head()
    head.out_rows = None
    outside = torch.tensor([t for t in range(V) if t not in set(head.ids.tolist())][:5])
    favour = head.favour(outside, 100.0)
    assert favour.extra_ids.numel() == 0 and favour.sub.numel() == 0
    assert _first_draft(head, favour)[0] == _first_draft(head)[0]


def _split(head: EagleHead, seed: int, windows: int = 3, n: int = 12, k: int = 3) -> Split:
    """Windows whose labels are the head's own greedy chain from every position (so a perfect
    evaluator scores 1.0 wherever the corpus follows them)."""
    g = torch.Generator().manual_seed(seed)
    hidden, tokens, starts = [], [], [0]
    for _ in range(windows):
        hidden.append(torch.randn(n, H, generator=g))
        tokens.append(torch.randint(V, (n,), generator=g))
        starts.append(starts[-1] + n)
    hid, tok = torch.cat(hidden), torch.cat(tokens)
    labels = torch.full((hid.shape[0], k), -1, dtype=torch.long)
    for w in range(windows):
        a, b = starts[w], starts[w + 1]
        for t in range(a, b - 1):  # the head's chain from t, drafted through its cache
            cache = head.new_cache(64)
            if t > a:
                head.extend(cache, hid[a:t], tok[a + 1 : t + 1].tolist())
            chain = head.draft(cache, hid[t], int(tok[t + 1]), k).tokens
            labels[t, : len(chain)] = torch.tensor(chain)
    follows = torch.ones(hid.shape[0], dtype=torch.bool)
    run = torch.full((hid.shape[0],), k)
    later = torch.full((hid.shape[0], k), -1)
    return Split(hid.half(), labels, follows, later, tok, run, ["x"], torch.zeros(hid.shape[0], dtype=torch.int8),
                 torch.tensor(starts))


def test_held_out_figures_draft_as_decoding_does() -> None:
    head, table = _head()
    split = _split(head, seed=4)
    split.hidden = split.hidden.float()  # the evaluator reads what the drafts were made from
    embed = Embeddings(lambda ids: table[ids], split)
    figures = evaluate_eagle(head, split, embed, k=3)
    chain = figures["decoding"]["chain"]
    assert min(chain) >= 0.85, chain  # bfloat16 drafting vs float32 figures: near ties may differ; misaligned ~1/V


def test_training_learns_a_copy_task() -> None:
    """Labels that only attention can get (the token two positions back): the head must learn them."""
    head, table = _head(seed=5)
    g = torch.Generator().manual_seed(6)
    w, n = 40, 16
    tok = torch.randint(V, (w * n,), generator=g)
    starts = torch.arange(0, w * n + 1, n)
    labels = torch.full((w * n, 1), -1, dtype=torch.long)
    for s in range(w):
        a = s * n
        for t in range(a + 1, a + n - 1):
            labels[t, 0] = tok[t - 1]  # what follows position t + 1: the token at t - 1
    split = Split(torch.randn(w * n, H, generator=g).half(), labels, torch.ones(w * n, dtype=torch.bool),
                  torch.full((w * n, 1), -1), tok, torch.ones(w * n, dtype=torch.long), ["x"],
                  torch.zeros(w * n, dtype=torch.int8), starts)
    embed = Embeddings(lambda ids: table[ids], split)
    before = evaluate_eagle(head, split, embed, k=1)["decoding"]["chain"][0]
    settings = EagleSettings(steps=120, windows=8, lr=1e-2, noise=0.0, ce_weight=1.0, eval_every=120, chain=1)
    train_eagle(head, split, split, embed, settings, report=lambda _: None)
    after = evaluate_eagle(head, split, embed, k=1)["decoding"]["chain"][0]
    assert before < 0.2 and after > 0.8, (before, after)
