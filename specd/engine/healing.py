"""Token healing: the prompt does not end on a token boundary the model rarely saw.

When the text before the cursor ends in whitespace (a line of tab indentation, a trailing space),
its last token is whitespace-only, ``\\t\\t\\t\\t`` or ``" "``, where the same text inside a file
tokenizes differently (``\\t\\t\\t`` + ``\\treturn``, ``" foo"``): the model, asked to continue
from there, often starts with one more tab or space. Token healing takes the last token out of
the text before the cursor and makes the completion start with exactly the text it held: the first
generated tokens are constrained to ids whose bytes start with the removed bytes, or are a prefix
of what is still to cover that the tokenizer itself writes first (``\\t\\t`` then ``\\treturn``
for ``\\t\\t\\t``), until the removed text is covered; then the removed text is stripped from the
completion, so the client sees only what follows the cursor. (Guidance and llama.cpp's
``--token-healing`` do the same, with every prefix allowed.)

Which prefixes (:meth:`VocabIndex.splits`): those the tokenizer writes as the first token of the
text still to cover followed by one more character. Six spaces of indentation before a word are
five spaces then `` word`` in a file; any prefix would let the model write six single spaces, a
tokenization it never saw, after which it loses its place (a Rust block site of the quality
bench's test split did: six ``" "``, then it dropped half the condition). On the dev split (126
sites, session 34) the rule changed one answer, for the better (a C++ block: 0 -> 18 accepted
characters); exact first lines stayed 67. Working out the prefixes costs about a millisecond a
new ending (97 short encodings), once: the masks are kept.

Which endings are healed (``token_healing``):

- ``off``: none;
- ``whitespace``: the last token is whitespace-only (spaces, tabs, newlines) and a strict prefix of
  a longer vocabulary token (else the constraint could only give the same token back);
- ``prefix``: any last token that is a strict prefix of a longer vocabulary token (``.ba`` of
  ``.bar``, ``(`` of ``()``): llama.cpp's and guidance's rule.

One token is taken out, never more: the token before it ends on a boundary the tokenizer itself
chose inside the prefix's text, which is where the model saw tokens end. "The text before the
cursor" is the prefix's tokens, or the plain prompt's text (a tokenizer without FIM tokens).

Exactness. Healing is a constraint on the decoding loop (``Decoding.constraint``, built by
:meth:`Healer.constraint`): while the tokens after the prompt have not covered the removed text,
the target's row for the next token is masked to the allowed ids, in a target step and in
verification alike (chain and tree), and the loop runs as on any prompt, with or without drafts.
So each healing token is the target's argmax over the allowed ids (greedy) or a draw from its
warped distribution restricted to them (sampling: masked, then temperature, top-k and top-p); a
draft the constraint disallows has target probability 0 and is rejected, and greedy speculative
text equals greedy target-only text with healing on. Drafters never see the constraint: they
draft after the prompt as usual, and the continuation cache's drafts start with the removed text.
Until session 27 the healing tokens were generated target-only before the loop, one step each:
two steps a request at a cursor after a newline and indentation (``"\n        "`` is covered by
``"\n       "`` then ``" self"``), about 30 ms each on the 2-core CPU, never speculated.

The vocabulary index (:class:`VocabIndex`: every ordinary token's bytes, sorted, control tokens
left out) is built once per tokenizer (about a second for Qwen's 151k tokens, at the engine's
start) and cached.

Measured (the quality bench's dev split, all 126 tasks in two halves of 63, ``specd bench
--scenario quality --split dev --systems specd --token-healing MODE``, greedy, the default pair),
off / whitespace / prefix: exact first lines 51 / 57 / 59, accepted characters 2264 / 2563 / 2604,
mean edit similarity 0.635 / 0.660 / 0.652, answers whose first line starts with more indentation
than the real one 3 / 1 / 0. Whitespace healing fixes the extra tab after tab indentation (Go) and
the space-then-word endings; the prefix rule adds operator endings (``=`` healed into ``==``,
``:`` into ``:=``). The default is ``prefix``.
"""

from __future__ import annotations

import bisect
import dataclasses
import threading
import weakref
from dataclasses import dataclass, field
from typing import Callable

import torch

from specd.engine.config import HEALING
from specd.engine.speculative import Constraint
from specd.models.tokenizer import Tokenizer


def _byte_decoder() -> dict[str, int]:
    """GPT-2's byte-level alphabet (``bytes_to_unicode``), character -> byte."""
    bs = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


def _added_ids(tokenizer: Tokenizer) -> set[int]:
    """The tokenizer's added (control) tokens: ``<|endoftext|>``, FIM, chat and tool markers. They
    decode to text (``<tool_call>``) but are never produced from text, so they are never a healing
    candidate. (``specd.models.tokenizer.Tokenizer`` has no public call for them: the Hugging Face
    tokenizer inside is asked directly, when it can tell.)"""
    inner = getattr(tokenizer, "_tok", None)
    added = getattr(inner, "get_added_tokens_decoder", None)
    return set(added()) if callable(added) else set()


class VocabIndex:
    """Every ordinary token's bytes, sorted: the tokens that start with given bytes are one range."""

    def __init__(self, tokenizer: Tokenizer, exclude: frozenset[int] = frozenset()) -> None:
        skip = _added_ids(tokenizer) | set(exclude)
        vocab = {i: t for i, t in tokenizer.real_vocab().items() if i not in skip}
        table = _byte_decoder()
        as_bytes: dict[int, bytes] = {}
        for i, t in vocab.items():
            if all(ch in table for ch in t):
                as_bytes[i] = bytes(table[ch] for ch in t)
        if not _byte_level(tokenizer, as_bytes) or len(as_bytes) < len(vocab):
            # not a byte-level BPE: each token's own text (tokens that are part of a character left out)
            as_bytes = {}
            for i in vocab:
                text = tokenizer.decode([i])
                if text and "\ufffd" not in text:
                    as_bytes[i] = text.encode("utf-8")
        self.bytes = as_bytes
        order = sorted(as_bytes, key=as_bytes.__getitem__)
        self._sorted = [as_bytes[i] for i in order]
        self._ids = torch.tensor(order, dtype=torch.long)  # [N], in byte order
        self._by_bytes = {b: i for i, b in as_bytes.items()}
        self._size = max(as_bytes, default=-1) + 1
        self._masks: dict[tuple[bytes, int], torch.Tensor] = {}
        self._tokenizer = weakref.ref(tokenizer)  # for splits; the index is kept per tokenizer, weakly
        self._lock = threading.Lock()

    def _range(self, b: bytes) -> tuple[int, int]:
        """The positions in byte order of the tokens that start with ``b``."""
        lo = bisect.bisect_left(self._sorted, b)
        upper = _successor(b)
        hi = bisect.bisect_left(self._sorted, upper, lo) if upper is not None else len(self._sorted)
        return lo, hi

    def extends(self, b: bytes) -> bool:
        """Whether a longer token starts with ``b``."""
        lo, hi = self._range(b)
        return hi - lo > (1 if b in self._by_bytes else 0)

    def allowed(self, rest: bytes, n: int) -> torch.Tensor:
        """``[n]`` bool: the ids whose bytes start with ``rest``, and the strict prefixes of ``rest``
        the tokenizer itself writes first (:meth:`splits`). Shared: do not modify it (the last few
        are kept, the same few endings recur)."""
        key = (rest, n)
        mask = self._masks.get(key)
        if mask is None:
            lo, hi = self._range(rest)
            ids = self._ids[lo:hi]
            prefixes = self.splits(rest)
            if prefixes:
                ids = torch.cat([ids, torch.tensor(prefixes, dtype=torch.long)])
            mask = torch.zeros(max(n, self._size), dtype=torch.bool)
            mask[ids] = True
            mask = mask[:n]
            with self._lock:
                if len(self._masks) >= 64:
                    self._masks.pop(next(iter(self._masks)))
                self._masks[key] = mask
        return mask

    def splits(self, rest: bytes) -> list[int]:
        """The tokens shorter than ``rest`` that may start covering it: those the tokenizer writes
        first for ``rest`` followed by one more character (:data:`PROBES`), and that are a prefix
        of it. Six spaces before a word are written five spaces then `` word``, so five spaces is
        one; a single space is not (nothing in a file is six one-space tokens). ``rest`` that is
        not whole characters (a token ended inside one): every vocabulary prefix of it."""
        tokenizer = self._tokenizer()
        try:
            text = rest.decode("utf-8")
        except UnicodeDecodeError:
            text = None
        if text is None or tokenizer is None:
            return [i for k in range(1, len(rest)) if (i := self._by_bytes.get(rest[:k])) is not None]
        firsts = {ids[0] for c in PROBES if (ids := tokenizer.encode(text + c))}
        return sorted(i for i in firsts if len(b := self.bytes.get(i, rest)) < len(rest) and rest.startswith(b))


# the characters a healed text is followed by, for VocabIndex.splits: printable ASCII, tab, newline
PROBES = tuple(chr(c) for c in range(0x20, 0x7f)) + ("\t", "\n")


def _successor(b: bytes) -> bytes | None:
    """The least byte string above every string that starts with ``b`` (None: there is none)."""
    stripped = b.rstrip(b"\xff")
    if not stripped:
        return None
    return stripped[:-1] + bytes([stripped[-1] + 1])


def _byte_level(tokenizer: Tokenizer, as_bytes: dict[int, bytes]) -> bool:
    """Whether the byte-level reading agrees with the tokenizer's own decoding (on a sample)."""
    ids = sorted(as_bytes)
    sample = ids[:: max(1, len(ids) // 256)]
    checked = 0
    for i in sample:
        try:
            text = as_bytes[i].decode("utf-8")
        except UnicodeDecodeError:
            continue
        if tokenizer.decode([i]) != text:
            return False
        checked += 1
    return checked > 0


_INDEXES: "weakref.WeakKeyDictionary[Tokenizer, dict[frozenset[int], VocabIndex]]" = weakref.WeakKeyDictionary()
_INDEXES_LOCK = threading.Lock()


def vocab_index(tokenizer: Tokenizer, exclude: frozenset[int] = frozenset()) -> VocabIndex:
    """The tokenizer's index, built on first use and kept while the tokenizer lives."""
    with _INDEXES_LOCK:
        per = _INDEXES.setdefault(tokenizer, {})
        if exclude not in per:
            per[exclude] = VocabIndex(tokenizer, exclude)
        return per[exclude]


@dataclass
class Healing:
    """One request's healing: ``removed`` (the text taken out of the prompt) and, once generated,
    the constrained ``tokens`` that healed it (their text starts with ``removed``)."""

    removed: str
    removed_ids: list[int] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    covered: bool = False  # the tokens' text holds all of ``removed`` (False: max_tokens ran out)

    def decoder(self, tokenizer: Tokenizer) -> Tokenizer:
        """``tokenizer`` whose ``decode`` leaves ``removed`` out: what the client sees."""
        return _Stripped(tokenizer, self.removed)

    def written(self, tokenizer: Tokenizer) -> str:
        """What the healing tokens wrote past the cursor (past ``removed``)."""
        return _Stripped(tokenizer, self.removed).decode(self.tokens)

    def ahead(self, ahead: list[int], tokenizer: Tokenizer) -> list[int]:
        """The previous suggestion's tokens expected after the cursor (``continuation``) as tokens
        expected after the prompt, which lacks the removed text: that text and theirs, encoded."""
        return tokenizer.encode(self.removed + tokenizer.decode(ahead)) if ahead else []

    def visible_tokens(self, tokens: list[int], text: str, tokenizer: Tokenizer) -> list[int]:
        """Tokens whose text is ``text``, the completion as the client sees it (the continuation
        cache aligns the typed text on them): the tokens after the healing ones when these end at
        the cursor, else ``text`` encoded."""
        if self.written(tokenizer) == "":
            return tokens[len(self.tokens):]
        return tokenizer.encode(text)


class _Stripped(Tokenizer):
    """A tokenizer whose ``decode`` leaves a leading ``removed`` out (the text healed back in);
    everything else is the inner tokenizer's."""

    def __init__(self, inner: Tokenizer, removed: str) -> None:  # shares the inner tokenizer
        self.__dict__.update(inner.__dict__)
        self._inner = inner
        self._removed = removed

    def decode(self, ids: list[int]) -> str:
        text = self._inner.decode(ids)
        if text.startswith(self._removed):
            return text[len(self._removed):]
        return "" if self._removed.startswith(text.rstrip("\ufffd")) else text


class Healer:
    """Token healing for one engine (``mode``: one of :data:`~specd.engine.config.HEALING`, not
    ``off``); ``exclude``: ids never generated for healing (the stop tokens)."""

    def __init__(self, tokenizer: Tokenizer, mode: str, exclude: frozenset[int] = frozenset()) -> None:
        if mode not in HEALING or mode == "off":
            raise ValueError(f"token_healing must be one of {', '.join(h for h in HEALING if h != 'off')} "
                             f"for a Healer, got {mode!r}")
        self.tokenizer = tokenizer
        self.mode = mode
        self.index = vocab_index(tokenizer, exclude)

    def begin(self, removed: list[int]) -> Healing:
        """The healing of ``removed`` (what :meth:`cut` took out), before any token is generated."""
        return Healing(b"".join(self.index.bytes[i] for i in removed).decode("utf-8"), list(removed))

    def cut(self, ids: list[int]) -> int:
        """How many of the last ``ids`` (the text before the cursor) to take out: 0 or 1."""
        if not ids:
            return 0
        b = self.index.bytes.get(ids[-1])
        if not b:
            return 0
        if self.mode == "whitespace" and not b.isspace():
            return 0
        try:
            b.decode("utf-8")  # the removed text is whole characters (stripped as text later)
        except UnicodeDecodeError:
            return 0
        return 1 if self.index.extends(b) else 0

    def constraint(self, healing: Healing, prompt_len: int, n: int, allowed: torch.Tensor | None = None) -> Constraint:
        """The decoding loop's constraint (``Decoding.constraint``) that heals ``healing`` after a
        prompt of ``prompt_len`` tokens: while the tokens after the prompt have not covered
        ``healing.removed``, the next one must start with what is left of it or be a non-empty
        prefix of it (``VocabIndex.allowed`` over ``n`` ids, and ``allowed``, the shared
        vocabulary's mask, where given)."""
        removed = healing.removed.encode("utf-8")

        def after(seq: list[int]) -> torch.Tensor | None:
            _, rest = _cover(removed, seq[prompt_len:], self.index)
            if not rest:
                return None
            mask = self.index.allowed(rest, n)
            return mask & allowed[:n] if allowed is not None else mask
        return after

    def absorb(self, healing: Healing, tokens: list[int]) -> None:
        """Record which of the loop's first ``tokens`` healed ``healing``: the fewest whose text
        covers the removed text (all of them, ``covered`` False, when they never did)."""
        m, rest = _cover(healing.removed.encode("utf-8"), tokens, self.index)
        healing.tokens = list(tokens[:m])
        healing.covered = not rest


def _cover(removed: bytes, tokens: list[int], index: VocabIndex) -> tuple[int, bytes]:
    """How many of ``tokens`` (the first ones after the prompt) went into covering ``removed``,
    and what of it they leave. Tokens are taken as covering their length (the constraint allowed
    only those that fit); a draft that did not fit is rejected before anything after it counts."""
    rest, used = removed, 0
    for t in tokens:
        if not rest:
            break
        got = index.bytes.get(t, b"")
        rest = rest[len(got):] if len(got) < len(rest) else b""
        used += 1
    return used, rest
