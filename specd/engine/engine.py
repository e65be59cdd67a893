"""The engine: one object that turns (prefix, suffix) into a completion.

The daemon, the LSP server, the bench, the CLI and the tests all use it. It owns the target, the
optional draft and the tokenizer; it knows no socket and no editor. Contract: for the same request,
``mode="spec"`` and ``mode="target"`` produce the same distribution of text, and with
``temperature=0`` the same text (the target's greedy completion).
"""

from __future__ import annotations

import threading
from typing import Callable

import torch

from specd.engine.budget import HEADS, MODEL
from specd.engine.choice import ChoiceDrafter
from specd.engine.continuation import ContinuationCache, LookaheadDrafter
from specd.engine.drafters import Drafter, ModelDrafter
from specd.engine.eagle_drafter import EagleDrafter
from specd.engine.head_drafter import DraftHeads, HeadDrafter
from specd.engine.plan import Plan
from specd.engine.prefill import prefill
from specd.engine.prefix_cache import PrefixCache, block_bytes
from specd.engine.ngram import HybridDrafter, NgramDrafter
from specd.engine.policy import CostModel, FixedK, KPolicy, StructureK
from specd.engine.prompt import FIM_TOKENS, PromptBuilder
from specd.engine.sampling import SamplingParams, sampling_params
from specd.engine.structure import make_classifier
from specd.engine.endofcode import CodeEnd
from specd.engine.healing import Healer
from specd.engine.line_budget import LineBudget
from specd.engine.suffix import SuffixGuard
from specd.engine.textstream import TextStream
from specd.engine.results import Completion, GenerationStats
from specd.engine.speculative import Decoding, generate
from specd.engine.timeline import NO_TIMELINE, NoTimeline, Timeline
from specd.models.eagle import EagleHead
from specd.models.protocol import CausalLM
from specd.models.tokenizer import Tokenizer

# The settings and request types live in torch-free modules (the thin clients read them without
# loading the engine); they are imported here for the engine's use and for callers that import them
# from this module.
from specd.engine.config import DRAFTERS, HEAD_DRAFTERS, TREE, EngineConfig, resolve_drafter
from specd.engine.errors import VocabularyMismatch
from specd.engine.vocabulary import shared_vocabulary
from specd.requests import K_MAX, Cancelled, CompletionRequest, Preempted, RequestError
from specd.schema import ConfigError

def make_drafter(kind: str, draft: CausalLM | None, capacity: int,
                 branch: int = 1, branch_below: float = 1.0,
                 heads: DraftHeads | None = None, target: CausalLM | None = None,
                 context_bias: float = 0.0, head_width: int = 1) -> Drafter | None:
    """The drafter for ``--drafter``; None when there is nothing to draft with (target only).
    ``branch > 1``: the model drafter proposes token trees (see ``specd.engine.tree``).
    ``heads`` (with ``target``): draft heads on the target's state; ``context_bias``: an EAGLE
    head's or Medusa heads' lean toward the context's tokens; ``head_width``: an EAGLE head's or
    Medusa heads' candidates at the first draft position."""
    if kind not in DRAFTERS:
        raise ValueError(f"drafter must be one of {', '.join(DRAFTERS)}, got {kind!r}")
    model: Drafter | None = ModelDrafter(draft, branch, branch_below) if draft is not None else None
    if kind in HEAD_DRAFTERS:
        if heads is None or target is None:
            raise ValueError(f"drafter {kind!r} needs the heads and the target they read")
        on_target: Drafter = (EagleDrafter(target, heads, context_bias=context_bias, width=head_width)
                              if isinstance(heads, EagleHead)
                              else HeadDrafter(target, heads, width=head_width, context_bias=context_bias))
        if kind == "heads":
            return on_target
        if kind == "auto":
            if model is None:
                raise ValueError("drafter 'auto' needs the draft model too")
            on_target = ChoiceDrafter(model, on_target)  # K auto names the drafter per round
        # prompt lookup where the context repeats, as `both` does for a draft model
        return HybridDrafter(NgramDrafter(capacity=capacity), on_target)
    if kind == "model":
        return model
    ngram = NgramDrafter(capacity=capacity)
    if kind == "ngram" or model is None:
        return ngram
    return HybridDrafter(ngram, model)


def step_drafters(kind: str, costs: CostModel) -> dict[str, float] | None:
    """The drafters that pay a step per draft under ``--drafter kind``, each with its step (ms)
    from ``costs``, for K auto to price; None: the draft model's alone."""
    if kind == "auto":
        if costs.heads_ms is None:
            raise ValueError("drafter 'auto' needs the heads' step cost beside the draft model's (CostModel.heads_ms)")
        return {MODEL: costs.draft_ms, HEADS: costs.heads_ms}
    if kind in HEAD_DRAFTERS:
        return {HEADS: costs.draft_ms}
    return None


def make_prefix_cache(config: EngineConfig, models: list[CausalLM]) -> PrefixCache | None:
    """The prefix cache ``config`` asks for (None: off); a ``ConfigError`` when its budget cannot
    hold the blocks of one longest prompt of every model."""
    if config.prefix_cache_mb == 0:
        return None
    w, b = config.windows, config.prefix_block_tokens
    longest = min(config.max_len, w.max_prefix_tokens + w.max_suffix_tokens + FIM_TOKENS)
    per_token = sum(m.kv_bytes_per_token() for m in models)
    need = block_bytes(per_token, longest, b)
    budget = config.prefix_cache_mb << 20
    if budget < need:
        raise ConfigError(
            f"engine.prefix_cache_mb: {config.prefix_cache_mb} MB cannot hold one longest prompt "
            f"({longest} tokens: the prefix and suffix windows, at most max_len) at {per_token} bytes "
            f"of KV per token "
            f"(both models): set it to at least {-(-need // (1 << 20))}, or 0 to turn the prefix cache off"
        )
    return PrefixCache(budget, b)


class Engine:
    def __init__(
        self,
        target: CausalLM,
        tokenizer: Tokenizer,
        draft: CausalLM | None = None,
        draft_tokenizer: Tokenizer | None = None,
        config: EngineConfig = EngineConfig(),
        costs: CostModel | None = None,
        heads: DraftHeads | None = None,
    ) -> None:
        """``costs``: the measured step costs ``k="auto"`` chooses K from (``specd.app`` measures
        or reads them); required when K is auto and there is a drafter. ``heads``: the draft heads
        ``config.drafter`` ``heads``, ``heads+ngram`` or ``auto`` drafts with (``auto``: beside
        the draft model, ``costs.heads_ms`` their step)."""
        # the ids a completion may hold: the tokenizer's real tokens (a VocabularyMismatch when
        # the draft's ids mean something else); every model's padding rows are cut off
        self._allowed = (shared_vocabulary(tokenizer, target.vocab_size, draft_tokenizer or tokenizer, draft.vocab_size)
                         if draft is not None else shared_vocabulary(tokenizer, target.vocab_size))
        # the drafter that runs: --drafter as configured (``self.config`` keeps it: what clients
        # compare), ``default`` resolved by whether heads were handed over
        drafter = resolve_drafter(config.drafter, heads is not None)
        self.drafter = drafter
        self.target = target
        self.draft = draft
        self.tokenizer = tokenizer
        self.config = config
        self.prompts = PromptBuilder(tokenizer, config.windows)
        self._healer = (Healer(tokenizer, config.token_healing, self.prompts.stop_ids)
                        if config.token_healing != "off" else None)
        if not (config.k == "auto" or (isinstance(config.k, int) and 0 <= config.k <= K_MAX)):
            raise ValueError(f"k must be 0..{K_MAX} or 'auto', got {config.k!r}")
        if config.tree not in TREE or config.tree_width < 1:
            raise ValueError(f"tree must be 'on' or 'off' and tree_width >= 1, got {config.tree!r}, {config.tree_width}")
        # chain and token-tree drafters over the same draft model; config.tree picks the default,
        # a request may ask for the other
        self._chain = make_drafter(drafter, draft, target.max_len, 1, config.tree_branch_below, heads=heads,
                                   target=target, context_bias=config.head_context_bias,
                                   head_width=config.head_width)
        # draft heads: one drafter for both (an EAGLE drafter is the one that watches the target;
        # its trees are --head-width's, whatever the request asks)
        self._tree = (self._chain if drafter in HEAD_DRAFTERS else
                      make_drafter(drafter, draft, target.max_len, config.tree_width, config.tree_branch_below,
                                   heads=heads, target=target))
        self._policy: StructureK | None = None
        if config.k == "auto" and self._chain is not None:
            if costs is None:
                raise ValueError("k='auto' needs the measured step costs: build the engine with "
                                 "specd.app.build_engine, or pass costs")
            self._policy = StructureK(costs, make_classifier(tokenizer), min_prob=config.draft_min_prob,
                                      drafters=step_drafters(drafter, costs))
        self._lock = threading.Lock()  # one generation at a time: the KV caches are shared state
        self._continuation = ContinuationCache()
        # the draft model's cache follows the prompt unless only n-gram lookup drafts
        self._draft_cached = draft if draft is not None and drafter != "ngram" else None
        self._prefix = make_prefix_cache(config, [m for m in (target, self._draft_cached) if m is not None])

    def complete(
        self,
        request: CompletionRequest,
        on_delta: Callable[[str], None] | None = None,
        cancelled: Callable[[], bool] | None = None,
        preempted: Callable[[], bool] | None = None,
    ) -> Completion:
        """Run one completion. ``on_delta`` receives text as it is verified; ``cancelled`` is
        polled between prefill chunks and rounds and, when it returns True, the request ends with
        ``Cancelled``. ``preempted`` is polled between prefill chunks (after at least one): when it
        returns True the prefill stops with ``Preempted``, its computed blocks cached, to be run
        again later."""
        params = sampling_params(request.validate(self.config.max_len), allowed=self._allowed)
        timeline: Timeline | NoTimeline = NO_TIMELINE
        if request.profile:
            timeline = Timeline({role: m for role, m in (("target", self.target), ("draft", self.draft))
                                 if m is not None})
        try:
            return self._complete(request, params, timeline, on_delta, cancelled, preempted)
        finally:
            if isinstance(timeline, Timeline):
                timeline.close()

    def _complete(self, request: CompletionRequest, params: SamplingParams, timeline: Timeline | NoTimeline,
                  on_delta: Callable[[str], None] | None, cancelled: Callable[[], bool] | None,
                  preempted: Callable[[], bool] | None) -> Completion:
        with timeline.span("prompt"):
            prompt, removed = self._build(request)
        if len(prompt) + request.max_tokens > self.config.max_len:
            raise RequestError(
                "max_tokens",
                f"prompt ({len(prompt)} tokens) plus max_tokens ({request.max_tokens}) exceeds the "
                f"context of {self.config.max_len} tokens",
            )
        generator = torch.Generator().manual_seed(request.seed if request.seed is not None else torch.seed())
        budget = LineBudget(request.line_budget_ms)
        # token healing: the removed text comes back in the first tokens; the client sees what follows it
        healing = self._healer.begin(removed) if self._healer is not None and removed else None
        stream = TextStream(healing.decoder(self.tokenizer) if healing else self.tokenizer, request.stop, on_delta,
                            (SuffixGuard(request.suffix), CodeEnd(request.prefix), budget))

        def on_round(tokens: list[int]) -> bool:
            if cancelled is not None and cancelled():
                raise Cancelled()
            return stream.update(tokens)

        with self._lock:
            between_chunks = _interrupts(cancelled, preempted)
            constraint = None
            if healing is not None and self._healer is not None:
                # token healing: the first tokens, drafted and verified as any others, must cover the
                # removed text (the constraint masks the target's rows until they do)
                n = int(params.allowed.numel()) if params.allowed is not None else self.target.vocab_size
                constraint = self._healer.constraint(healing, len(prompt), n, params.allowed)
            ahead = self._continuation.lookahead(request.prefix, request.suffix, self.tokenizer) if params.greedy else []
            if healing is not None:
                ahead = healing.ahead(ahead, self.tokenizer)
            plan = self.plan(request, prompt, ahead)
            decoding = Decoding(request.max_tokens, params, self.prompts.stop_ids, generator, constraint)

            def prefill_models(prompt: list[int], with_draft: bool) -> int:
                return self._prefill_locked(prompt, with_draft, between_chunks)

            try:
                tokens, stats = generate(self.target, prompt, decoding, plan.drafter, plan.policy, on_round,
                                         prefill_models, timeline)
            except Cancelled:
                raise
            except BaseException:  # a model failure: do not trust what the caches hold
                self._reset_locked()
                raise
            healed = 0
            if healing is not None and self._healer is not None:
                self._healer.absorb(healing, tokens)
                healed = len(healing.tokens)
            with timeline.span("finish"):
                text = stream.finish(tokens)
                if stats.stop_reason == "stop_string" and budget.at is not None and budget.at == len(text):
                    stats.stop_reason = "line_budget"
                if stats.stop_reason in ("stop_string", "line_budget"):
                    # a round emits several tokens: drop those past the cut, so the tokens returned do
                    # not depend on how many tokens each round happened to verify
                    tokens = _covering(stream.tokenizer, tokens, text, healed)
                if params.greedy:
                    self._continuation.remember(request.prefix, request.suffix, text,
                                                healing.visible_tokens(tokens, text, self.tokenizer) if healing
                                                else tokens)
        proposed = plan.drafter.proposed if isinstance(plan.drafter, LookaheadDrafter) else 0
        return Completion(text, tokens, stats, proposed,
                          timeline.as_dict() if isinstance(timeline, Timeline) else None)

    @property
    def policy(self) -> StructureK | None:
        """The adaptive K policy (``k="auto"``), None with a fixed K."""
        return self._policy

    def plan(self, request: CompletionRequest, prompt: list[int], ahead: list[int] | None = None) -> Plan:
        """The K policy and drafter that decode ``request``, whose prompt (less the text token
        healing took out) is ``prompt``. ``ahead``: tokens expected next (the rest of the last
        suggestion), drafted first; only a greedy request should pass them, as sampling stays
        seeded."""
        if request.k is not None:
            policy: KPolicy = FixedK(request.k, self.config.draft_min_prob)
        elif self._policy is not None:
            policy = self._policy
        else:
            policy = FixedK(self.config.k if isinstance(self.config.k, int) else 0, self.config.draft_min_prob)
        if request.mode != "spec":
            return Plan(policy, None)
        tree = self.config.tree == "on" if request.tree is None else request.tree
        drafter = self._tree if tree else self._chain
        if drafter is not None and ahead:
            drafter = LookaheadDrafter(ahead, len(prompt), drafter)
        return Plan(policy, drafter)

    def reset(self) -> None:
        """Forget every cached state (KV caches, the last suggestion): the next request runs cold."""
        with self._lock:
            self._reset_locked()

    def forget_suggestion(self) -> None:
        """Forget the last suggestion only (the KV caches stay): the next request reuses cached
        context but cannot be answered from a previous completion."""
        with self._lock:
            self._continuation.clear()

    def _reset_locked(self) -> None:
        self._continuation.clear()
        if self._prefix is not None:
            self._prefix.clear()
        for model in (self.target, self.draft):
            if model is not None:
                model.rollback(0)

    def _build(self, request: CompletionRequest) -> tuple[list[int], list[int]]:
        """The request's prompt and the tokens token healing took out of its end (none when off)."""
        return self.prompts.build_healed(request.prefix, request.suffix,
                                         self._healer.cut if self._healer is not None else None)

    def _prefill_locked(self, prompt: list[int], with_draft: bool, between_chunks: Callable[[], None]) -> int:
        """The target's cache and, when ``with_draft``, the draft's up to ``prompt[:-1]``, through
        the prefix cache, in chunks; returns the target positions reused (live or restored)."""
        chunk = self.config.prefill_chunk_tokens
        done = prefill(self.target, "target", torch.tensor(prompt[:-1], dtype=torch.long), self._prefix, chunk,
                       between_chunks)
        if with_draft and self._draft_cached is not None:
            prefill(self._draft_cached, "draft", torch.tensor(prompt[:-1], dtype=torch.long), self._prefix,
                    chunk, between_chunks)
        if with_draft and self._chain is not None:  # a drafter's own state (an EAGLE head's rows)
            self._chain.prefill(prompt[:-1])
        return done.reused

    @property
    def prefix_cache(self) -> PrefixCache | None:
        """The KV blocks of earlier prompts (None when ``prefix_cache_mb`` is 0)."""
        return self._prefix

    def warm(self, request: CompletionRequest, cancelled: Callable[[], bool] | None = None) -> int:
        """Bring both models' caches (and the prefix cache) up to the prompt ``request`` would
        use, generating nothing; returns the prompt tokens now cached. ``cancelled`` is polled
        between prefill chunks; what was computed before it stays cached."""
        request.validate(self.config.max_len)
        prompt, _ = self._build(request)
        if len(prompt) > self.config.max_len:
            raise RequestError("prefix", f"the prompt ({len(prompt)} tokens) exceeds the context of "
                                         f"{self.config.max_len} tokens")
        with self._lock:
            if cancelled is not None and cancelled():
                raise Cancelled()
            try:
                self._prefill_locked(prompt, True, _interrupts(cancelled, None))
            except Cancelled:
                raise
            except BaseException:
                self._reset_locked()
                raise
            return len(prompt) - 1  # as generate() leaves the caches: all but the last token

    def memory(self) -> dict[str, int]:
        """Resident bytes: model weights and KV caches (runtimes that cannot tell report 0)."""
        out = {}
        for role, model in (("target", self.target), ("draft", self.draft)):
            if model is not None:
                resident = model.resident_bytes()
                out[f"{role}_weight_bytes"] = int(resident.get("weights", 0))
                out[f"{role}_kv_cache_bytes"] = int(resident.get("kv_cache", 0))
        if self._prefix is not None:
            out.update(self._prefix.report())
        return out


def _interrupts(cancelled: Callable[[], bool] | None, preempted: Callable[[], bool] | None) -> Callable[[], None]:
    """What a prefill calls between chunks: raises ``Cancelled`` or ``Preempted``."""
    def between_chunks() -> None:
        if cancelled is not None and cancelled():
            raise Cancelled()
        if preempted is not None and preempted():
            raise Preempted()
    return between_chunks


def _covering(tokenizer: Tokenizer, tokens: list[int], text: str, least: int = 0) -> list[int]:
    """The shortest prefix of ``tokens``, of at least ``least``, whose text reaches ``len(text)`` characters."""
    for m in range(least, len(tokens) + 1):
        if len(tokenizer.decode(tokens[:m])) >= len(text):
            return tokens[:m]
    return tokens
