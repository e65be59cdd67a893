"""The shared vocabulary: the token ids draft and target both mean, and the only ones a completion
may hold.

A model's embedding and output head often have more rows than its tokenizer has tokens (padding:
Qwen2.5-Coder 0.5B-3B have 151,936 rows, 7B and larger 152,064, for the same 151,665 tokens; GGUF
conversions name the padding rows ``[PADn]``). What makes two models a pair is the tokenizer, not
the row count: the same text for every real id, the same control-token ids (FIM, end of text),
the same tokenizer model and merges. Padding rows mean nothing, so they are never drafted,
accepted or sampled: the allowed row covers ids ``0 .. n-1``, ``n`` the last real id + 1, and
sampling cuts every model's logits to those ``n`` columns (``specd.engine.sampling.restrict``, a
slice), whatever each model's padding. (llama.cpp pairs models the same way, by token text, with a
size difference of at most 128 rows; here any padding is accepted.)
"""

from __future__ import annotations

import torch

from specd.engine.errors import VocabularyMismatch
from specd.engine.prompt import STOP_TOKENS
from specd.models.tokenizer import Tokenizer

_HINT = "; pick a draft from the same model family"


def shared_vocabulary(target: Tokenizer, target_rows: int, draft: Tokenizer | None = None,
                      draft_rows: int = 0) -> torch.Tensor:
    """The allowed row ``[n]`` (bool) over the shared vocabulary: True at every real token id.

    Target alone: the tokenizer's real ids that have a row in the target. With a draft: a
    ``VocabularyMismatch`` naming the first difference when the tokenizers differ, or when a real
    token has no row in a model; row counts may differ (padding)."""
    real = target.real_token_ids()
    if draft is None:
        real = [i for i in real if i < target_rows]
    else:
        if not target.identical(draft):
            why = tokenizer_difference(target, draft)
            if why:
                raise VocabularyMismatch(f"draft and target tokenizers differ: {why}{_HINT}")
        for role, rows in (("target", target_rows), ("draft", draft_rows)):
            if real and real[-1] >= rows:
                raise VocabularyMismatch(
                    f"the {role} has {rows} token rows, too few for its tokenizer's {len(real)} real tokens "
                    f"(ids up to {real[-1]}): draft and target vocabularies differ{_HINT}")
    allowed = torch.zeros(real[-1] + 1 if real else 0, dtype=torch.bool)
    allowed[real] = True
    return allowed


def tokenizer_difference(target: Tokenizer, draft: Tokenizer) -> str | None:
    """What makes ``draft`` map text and ids differently from ``target``, in words (None: nothing).
    Compares the control tokens' ids, the text of every real id, the model type and the merges:
    what gives an id its meaning to a model trained on it. (The engine encodes text with the
    target's tokenizer only, so how each tokenizer splits text otherwise does not matter.)"""
    for token in STOP_TOKENS:
        t, d = target.token_id(token), draft.token_id(token)
        if t != d:
            return (f"the control token {token} is {_id(t)} in the target and {_id(d)} in the draft")
    tv, dv = target.real_vocab(), draft.real_vocab()
    if tv != dv:
        first = min(i for i in tv.keys() | dv.keys() if tv.get(i) != dv.get(i))
        return (f"the draft has {len(dv)} real tokens, the target {len(tv)}; id {first} is "
                f"{_text(dv.get(first))} in the draft and {_text(tv.get(first))} in the target")
    tr, dr = target.rules(), draft.rules()
    if tr.model_type != dr.model_type:
        return f"the target's tokenizer model is {tr.model_type}, the draft's {dr.model_type}"
    if tr.merges != dr.merges:
        rank = next((r for r, (a, b) in enumerate(zip(tr.merges, dr.merges)) if a != b),
                    min(len(tr.merges), len(dr.merges)))
        return (f"their merges differ: the target has {len(tr.merges)}, the draft {len(dr.merges)}; at rank {rank} "
                f"the target merges {_merge(tr.merges, rank)}, the draft {_merge(dr.merges, rank)}")
    return None


def _id(i: int | None) -> str:
    return "absent" if i is None else f"id {i}"


def _text(token: str | None) -> str:
    return "absent" if token is None else repr(token)


def _merge(merges: tuple[tuple[str, ...], ...], rank: int) -> str:
    return " + ".join(map(repr, merges[rank])) if rank < len(merges) else "nothing"
