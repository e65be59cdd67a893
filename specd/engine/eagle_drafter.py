"""Drafting with an EAGLE head (``specd.models.eagle``) over the target's own features.

The head attends over every earlier position it has seen, so it needs the target's feature (its
final-normed hidden state) at every position of the sequence, not only the last forward's. The
target hands them over as it computes them (``CausalLM.watch_hidden``): prefill chunks, decode
steps and verification forwards alike. They are kept by position, with the tokens they were
computed from; a position's feature is trusted only while those tokens are still the sequence's
(a rollback, a new prompt or a prefix-cache restore that no forward saw all show up as a
mismatch, and the features before it are then dropped).

At the top of a round the target's cache holds ``seq[:-1]``; the head's cache is brought up to
position ``len(seq) - 2`` (each row ``t`` fused from ``f_t`` and ``seq[t + 1]``) in one forward,
whose last row (``f_{len(seq) - 2}`` with ``seq[-1]``) the chain is drafted from: the rows the
last round accepted and the first draft share the weights' read. The head's own rows are reused across rounds
and requests while the tokens they were computed from match. Its context is the last ``window``
positions at most (the head was trained on windows of 512).

Drafts are the head's top tokens, verified as one-hot proposals (as ``head_drafter``): in greedy
mode a draft is accepted when it is the target's greedy token, so the output is exactly the
target's either way. That leaves the drafts free to lean to the context: with ``context_bias``
every token among the sequence's last ``CONTEXT`` gets that much added to its logit (tokens
outside the head's sub-vocabulary become candidates then). The target copies the file's own
identifiers more readily than one decoder layer predicts (bench/RESULTS.md, session 29).

With ``width`` > 1 the head's next choices at the first draft position go beside the chain as
**siblings** (a token tree: ``specd.engine.tree``), as many as the budget's branch gate takes:
they cost no head step, only verified rows, which come nearly free while their arithmetic hides
under the weights' read (on this 2-core CPU three to five rows, by the hour's memory speed;
bench/RESULTS.md, session 30). Each sibling is one-hot like the chain's
drafts, so the tree's verification keeps the output exactly the target's. After the round the
target hands over the accepted path's features in their positions' order (``CausalLM.keep``).
"""

from __future__ import annotations

import time

import torch

from specd.engine.budget import HEADS, DraftBudget
from specd.engine.drafters import Chain, OrdinaryForward, Proposal, with_siblings
from specd.engine.errors import UnsupportedDrafter
from specd.engine.sampling import SamplingParams
from specd.models.eagle import EagleHead
from specd.models.kv_cache import common_prefix
from specd.models.protocol import CausalLM


CONTEXT = 256  # the tokens ``context_bias`` favours: the sequence's last this many (chosen with it)


class EagleDrafter:
    """See the module docstring."""

    def __init__(self, target: CausalLM, head: EagleHead, window: int = 512, context_bias: float = 0.0,
                 width: int = 1) -> None:
        if width < 1:
            raise ValueError(f"width must be >= 1, got {width}")
        if not target.watch_hidden(self._sink):
            raise UnsupportedDrafter("an EAGLE head needs a target runtime that hands over its hidden states "
                                     "(the torch Decoder, GGUF or quantized)")
        self.target = target
        self.head = head
        self.window = window
        self.context_bias = context_bias
        self.width = width  # candidates at the first draft position: the chain's and its siblings
        cap = target.max_len
        self.features = torch.zeros(cap, head.shape.hidden, dtype=torch.bfloat16)  # [cap, H] by position
        self.feature_tokens = torch.zeros(cap, dtype=torch.long)  # the sequence they were computed from
        self.feature_len = 0  # features[:feature_len] were computed from feature_tokens[:feature_len] ...
        self.feature_base = 0  # ... from this position on (earlier ones: not seen, or stale)
        self.cache = head.new_cache(cap)
        self.cache_tokens = torch.zeros(cap, dtype=torch.long)  # the sequence the head's rows were computed from
        self.rounds_without_state = 0
        self.round_rows = 1  # rows a round's own tokens add to the head's cache: the last round's drafts + 1
        self.first = OrdinaryForward()  # an ordinary round's first forward's time
        self.catch_up_ms = 0.0  # the last round's time on rows beyond its own (a new prompt's): not a draft's cost

    @property
    def max_len(self) -> int:
        return self.target.max_len

    def _sink(self, start: int, states: torch.Tensor, context: torch.Tensor) -> None:
        end = start + states.shape[0]
        if start < self.feature_base or start > self.feature_len or not torch.equal(
                self.feature_tokens[self.feature_base : start], context[self.feature_base : start].long()):
            self.feature_base = start  # what came before was computed from other tokens, or never seen
        self.features[start:end] = states.to(torch.bfloat16)
        self.feature_tokens[:end] = context[:end]
        self.feature_len = end

    def prefill(self, context: list[int]) -> int:
        """Bring the head's cache over the prompt (``context``: all its tokens but the last; the
        target's prefill has handed their features over), so the first round's forward holds
        its own row only: the prompt's rows are the prompt's cost, paid with its prefill (and by
        ``warm``), not by the first suggestion. Features a prefix-cache restore skipped are
        missing: then nothing is done now, and a round brings the rows as far as it can."""
        seq = torch.tensor(context, dtype=torch.long)
        last = len(context) - 1  # the first round drafts from this position's feature
        at = self._sync(seq, last) if last >= 1 else None
        if at is not None and at < last:
            self.head.extend(self.cache, self.features[at:last], context[at + 1 : last + 1])
            self.cache_tokens[: len(context)] = seq
        return 0

    def _sync(self, seq: torch.Tensor, last: int) -> int | None:
        """Roll the head's cache back to the rows still valid under ``seq`` and return the first
        row it lacks (rows up to ``last``, the draft's own first row, are to come); None when the
        target's features do not cover them."""
        if last < self.feature_base or self.feature_len < last + 1 or not torch.equal(
                self.feature_tokens[self.feature_base : last + 1], seq[self.feature_base : last + 1]):
            return None
        c = self.cache
        ok = common_prefix(self.cache_tokens, c.start + c.length + 1, seq)  # rows t < ok - 1 are valid
        c.rollback(max(0, min(ok - 1, last) - c.start))
        lo = max(self.feature_base, last - self.window)
        if c.length == 0 or c.start + c.length < lo or c.start < self.feature_base:
            # a fresh context: the rows before lo are not ours to attend (an empty cache may still
            # start where a longer request's window began, beyond this sequence's rows)
            c.start, c.length = lo, 0
            c.tokens.clear()
        return c.start + c.length

    def propose(self, seq: list[int], budget: DraftBudget, params: SamplingParams,
                generator: torch.Generator | None) -> Proposal:
        tokens = torch.tensor(seq, dtype=torch.long)
        if len(seq) < 2 or not budget.may_draft([]):
            return Chain(torch.zeros(0, dtype=torch.long), None, HEADS)
        last = len(seq) - 2  # the position drafting starts from
        at = self._sync(tokens, last)
        if at is None:
            self.rounds_without_state += 1
            return Chain(torch.zeros(0, dtype=torch.long), None, HEADS)
        # one forward over the rows the cache lacks and the draft's own first row (each row t
        # fused from f_t and seq[t + 1]); rows beyond the last round's own are catch-up, not a
        # draft step's cost: its time over an ordinary first forward's
        rows = last + 1 - at
        t0 = time.perf_counter()
        f = self.head.extend(self.cache, self.features[at : last + 1], seq[at + 1 : last + 2])[-1:]  # [1, H]
        ms = (time.perf_counter() - t0) * 1e3
        self.catch_up_ms = 0.0
        if rows > self.round_rows:  # before any ordinary round was timed: the rows' share
            self.catch_up_ms = self.first.catch_up(ms, ms * (rows - self.round_rows) / rows)
        else:
            self.first.observe(ms)
        favour = self.head.favour(tokens[-CONTEXT:], self.context_bias) if self.context_bias > 0 else None
        d = self.head.draft_after(self.cache, f, budget.k, budget.may_draft, budget.keeps, favour, self.width - 1)
        self.cache_tokens[: len(seq)] = tokens
        self.round_rows = len(d.tokens) + 1
        return with_siblings(d.tokens, d.probs, d.others, budget, HEADS, self.catch_up_ms)

    def commit(self, valid: int) -> None:
        """Nothing to roll back now: the next round checks the head's rows against its sequence."""

    def close(self) -> None:
        self.target.watch_hidden(None)
