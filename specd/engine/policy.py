"""How many tokens to draft each round.

``FixedK`` drafts K every round. ``AdaptiveK`` chooses K per round to maximise expected tokens per
second from a measured cost model and running acceptance estimates:

    E(K) = 1 + sum_{j=1..K} prod_{i<=j} a_i          (a_i: acceptance of draft position i,
                                                        given the ones before it were accepted)
    time(K) = K * t_draft + T_target(K + 1),  time(0) = T_target(1)

and picks K = 0 — plain decoding — when no K beats the target alone on this hardware. Each round a
policy hands the drafter a :class:`~specd.engine.budget.DraftBudget`: its K, its in-round gate
(``keep_drafting``: one more draft only where the draft's confidence makes it pay) and
``min_prob`` (a draft less sure than this is not proposed, as llama.cpp's ``p_min``).
"""

from __future__ import annotations

import json
import math
import statistics
import time
from dataclasses import dataclass
from typing import Callable, Protocol, Sequence

import torch

from specd.engine.budget import AHEAD, HEADS, LOOKUP, MODEL, DraftBudget
from specd.models.protocol import CausalLM


class KPolicy(Protocol):
    k_max: int

    def budget(self, seq: list[int], tokens_left: int) -> DraftBudget:
        """The next round's drafting rules; ``seq`` is the sequence so far (prompt and output),
        ``tokens_left`` the tokens the request may still emit (a round emits its drafts + 1)."""
        ...

    def observe(self, drafted: int, accepted: int, source: str = MODEL) -> None:
        """What a round did: ``drafted`` drafts from ``source`` (``specd.engine.budget``), of
        which the first ``accepted`` were kept."""
        ...

    def observe_costs(self, rows: int, verify_ms: float, draft_steps: int = 0, draft_ms: float = 0.0,
                      source: str = MODEL) -> None:
        """What a round cost: one target forward over ``rows`` tokens took ``verify_ms``, and
        ``draft_steps`` steps of the drafter ``source`` (``MODEL`` or ``HEADS``) took ``draft_ms``
        together (0: none)."""
        ...

    def observe_branch(self, tried: int, hit: bool, source: str = MODEL) -> None:
        """What a round's siblings did (``DraftBudget.branch``): the first draft was rejected and
        ``tried`` siblings were judged in turn, the last of them accepted if ``hit``."""
        ...


class _Budgets:
    """``budget`` from ``choose`` / ``keep_drafting`` (the policies below)."""

    k_max: int
    gated: bool
    min_prob: float

    def observe_costs(self, rows: int, verify_ms: float, draft_steps: int = 0, draft_ms: float = 0.0,
                      source: str = MODEL) -> None:
        pass  # (StructureK follows the daemon's own timings; the others keep their curve)

    def chosen_drafter(self) -> str:
        """Which drafter that pays a step per draft makes this round's drafts (``MODEL`` unless a
        policy chooses between two)."""
        return MODEL

    def choose(self, seq: list[int] | None = None) -> int: ...

    def keep_drafting(self, confidences: list[float]) -> bool: ...

    def keep_branching(self, confidences: list[float], siblings: int) -> bool:
        """Whether one more sibling beside the first draft is worth its verified row (see
        ``DraftBudget.branch``); here: always, up to the drafter's width."""
        return True

    def observe_branch(self, tried: int, hit: bool, source: str = MODEL) -> None:
        pass

    def choose_free(self) -> int | None:
        """How many free drafts (the previous suggestion's tokens) to verify next; None: as many
        as the request may still emit."""
        return None

    def choose_lookup(self) -> int | None:
        """How many prompt-lookup drafts to verify next; None: the round's K."""
        return None

    def budget(self, seq: list[int], tokens_left: int) -> DraftBudget:
        cap = max(tokens_left - 1, 0)  # K drafts + 1 recovered/bonus token: never past the budget
        k = min(self.choose(seq), cap)
        free, lookup = self.choose_free(), self.choose_lookup()
        return DraftBudget(k=k, gate=self.keep_drafting if self.gated else None, min_prob=self.min_prob,
                           free_k=cap if free is None else min(free, cap),
                           lookup_k=k if lookup is None else min(lookup, cap), drafter=self.chosen_drafter(),
                           branch=self.keep_branching)


@dataclass
class FixedK(_Budgets):
    """``--k N``: N drafts every round, ungated; ``min_prob`` still ends a round on an unsure draft."""

    k_max: int
    min_prob: float = 0.0
    gated = False

    def choose(self, seq: list[int] | None = None) -> int:
        return self.k_max

    def keep_drafting(self, confidences: list[float]) -> bool:
        return True

    def observe(self, drafted: int, accepted: int, source: str = MODEL) -> None:
        pass


@dataclass(frozen=True)
class CostModel:
    """Measured milliseconds: one draft step, and a target forward over n = 1, 2, ... tokens;
    ``heads_ms``: one step of the draft heads, where they draft beside a draft model
    (``--drafter auto``; ``draft_ms`` is then the draft model's)."""

    draft_ms: float
    verify_ms: tuple[float, ...]  # index n-1: T_target(n)
    heads_ms: float | None = None

    def target(self, n: int) -> float:
        if n <= len(self.verify_ms):
            return self.verify_ms[n - 1]
        # beyond what was measured: extend linearly from the last two points
        a, b = self.verify_ms[-2], self.verify_ms[-1]
        return b + (b - a) * (n - len(self.verify_ms))

    def predicted_speedup(self, alpha: float, k_max: int = 8) -> tuple[float, int]:
        """The best speedup over target-only this cost curve allows at an i.i.d. acceptance
        ``alpha`` per draft, and its K: a round of K drafts emits (1 - alpha^(K+1)) / (1 - alpha)
        tokens for K draft steps and one T(K+1) forward; K = 0 (target-only) is 1.0. A
        prediction: real acceptance is neither i.i.d. nor constant."""
        best, best_k = 1.0, 0
        for k in range(1, k_max + 1):
            tokens = float(k + 1) if alpha >= 1.0 else (1 - alpha ** (k + 1)) / (1 - alpha)
            speed = tokens * self.target(1) / (k * self.draft_ms + self.target(k + 1))
            if speed > best:
                best, best_k = speed, k
        return best, best_k

    def to_json(self) -> str:
        d: dict[str, object] = {"draft_ms": self.draft_ms, "verify_ms": list(self.verify_ms)}
        if self.heads_ms is not None:
            d["heads_ms"] = self.heads_ms
        return json.dumps(d)

    @classmethod
    def from_json(cls, text: str) -> "CostModel":
        d = json.loads(text)
        heads = d.get("heads_ms")
        return cls(float(d["draft_ms"]), tuple(float(x) for x in d["verify_ms"]),
                   None if heads is None else float(heads))


def _chance(c: float) -> float:
    """A drafter's confidence as a probability (clamped to [0, 1])."""
    return min(max(c, 0.0), 1.0)


def _chain_odds(confidences: list[float]) -> tuple[float, float]:
    """(the chance every draft of a chain is accepted, the round's expected tokens), each
    draft's confidence counted as its acceptance."""
    survive, tokens = 1.0, 1.0
    for c in confidences:
        survive *= _chance(c)
        tokens += survive
    return survive, tokens


class AdaptiveK(_Budgets):
    """K chosen per round from the cost model and a running acceptance estimate per draft
    position.

    - **Estimate**: the prior counts as ``prior_weight`` observations; each draft position's
      estimate is the running mean of its observations (with the prior) until that mean would
      weigh a new observation less than ``decay``, then an exponential average with weight
      ``decay``. So a pair whose drafts are never accepted turns K down within a few rounds
      (the prior 0.7 falls below a typical break-even of ~0.3 after ~6 rejections), and
      afterwards 0.03 remembers ~30 rounds: steady enough that noise does not flip K between
      neighbouring break-evens (bench/HISTORY.md has the measurements).
    - **Probes**: at K = 0 nothing is drafted, so nothing would ever be observed again: after
      ``probe_every`` rounds at K = 0 one round drafts a single token. A probe that is rejected
      doubles the wait (up to ``probe_max`` rounds), so on a pair that never accepts the probes'
      cost vanishes; an accepted probe, or any round that chooses K > 0, resets it. Where no
      acceptance could make drafting pay (a draft step dearer than the target's), it never probes.
    - **Source**: it learns from the rounds whose drafts came from ``source`` (a draft model's by
      default) and ignores the others.
    - **Siblings** (``keep_branching``): a drafter's next choices beside its first draft, each
      with its own running estimate by rank (the chance it is right when the first draft and the
      siblings before it are not), from ``SIBLING_PRIOR``. A sibling is taken when that chance
      times the round's time beats the round's expected tokens times its extra verified row: on a
      cost curve flat over a few rows, nearly always; where each row costs, only a likely one.
    """

    gated = True
    # The EAGLE head's 2nd and 3rd choices were right in 0.21-0.22 and 0.14-0.15 of the rounds its
    # first draft missed (dev tasks, rounds without a lookup match; bench/RESULTS.md, session 30)
    SIBLING_PRIOR = 0.1
    SIBLINGS = 7

    def __init__(self, cost: CostModel, k_max: int = 8, prior: float = 0.7, decay: float = 0.03,
                 min_prob: float = 0.0, prior_weight: float = 4.0, probe_every: int = 16,
                 probe_max: int = 512, source: str = MODEL) -> None:
        self.cost = cost
        self.source = source
        self.min_prob = min_prob
        self.k_max = k_max
        self.decay = decay
        self.prior_weight = prior_weight
        self.alpha = [prior] * k_max  # conditional acceptance per draft position
        self.seen = [0] * k_max  # observations per draft position
        self.sibling = [self.SIBLING_PRIOR] * self.SIBLINGS  # per sibling rank, given the earlier ones missed
        self.sibling_seen = [0] * self.SIBLINGS
        self.probe_base = self.probe_every = probe_every
        self.probe_max = probe_max
        self.idle = 0  # rounds at K = 0 since the last drafting round
        self.probing = False  # this round drafts one token only to keep the estimate alive
        self.set_cost(cost)

    def set_cost(self, cost: CostModel) -> None:
        """Price rounds by ``cost`` from now on (the estimates are kept)."""
        self.cost = cost
        # probes only where drafting can pay at all: with every draft accepted, some K beats the target alone
        self.can_pay = self.k_max > 0 and cost.predicted_speedup(1.0, self.k_max)[0] > 1.0

    def expected_rate(self, k: int) -> float:
        """Expected tokens per millisecond when drafting ``k``."""
        tokens, survive = 1.0, 1.0
        for i in range(k):
            survive *= self.alpha[i]
            tokens += survive
        ms = self.cost.target(1) if k == 0 else k * self.cost.draft_ms + self.cost.target(k + 1)
        return tokens / ms

    def best_k(self) -> int:
        """The K the estimates and costs say pays best now (no probing)."""
        return max(range(self.k_max + 1), key=lambda k: (self.expected_rate(k), -k))

    def choose(self, seq: list[int] | None = None) -> int:
        k = self.best_k()
        self.probing = False
        if k > 0:
            self.idle, self.probe_every = 0, self.probe_base
            return k
        self.idle += 1
        if self.can_pay and self.idle >= self.probe_every:
            self.idle, self.probing = 0, True
            return 1
        return 0

    def keep_drafting(self, confidences: list[float]) -> bool:
        """The zero-cost gate: draft once more only if that draft's expected tokens per ms beat
        stopping here. The drafts so far count with the drafter's own confidence as their
        acceptance (this round's evidence); the next one with the running estimate. Continue iff
        ``S * a_next * t > E * dt``: ``S`` the chance every draft so far is accepted, ``E`` and
        ``t`` the expected tokens and the time if the round stops now, ``dt`` one more draft step
        plus the extra verified row."""
        drafted = len(confidences)
        if drafted >= self.k_max:
            return False
        survive, tokens = _chain_odds(confidences)
        cost = self.cost
        t = drafted * cost.draft_ms + cost.target(drafted + 1)
        dt = cost.draft_ms + cost.target(drafted + 2) - cost.target(drafted + 1)
        return survive * self.alpha[drafted] * t > tokens * dt

    def keep_branching(self, confidences: list[float], siblings: int) -> bool:
        """Take sibling ``siblings`` (0-based) beside the first of the chain drafts whose
        confidences are ``confidences`` iff ``G * t > E * dt``: ``G`` the tokens it adds (the
        first draft and the earlier siblings missing, it right: one token more), ``E`` and ``t``
        the round's expected tokens and time without it, ``dt`` its extra verified row."""
        if not confidences or siblings >= len(self.sibling):
            return False
        _, tokens = _chain_odds(confidences)
        missed = 1.0 - _chance(confidences[0])  # ... and every earlier sibling
        for r in range(siblings):
            tokens += missed * self.sibling[r]
            missed *= 1.0 - self.sibling[r]
        rows = 1 + len(confidences) + siblings
        cost = self.cost
        t = len(confidences) * cost.draft_ms + cost.target(rows)
        dt = cost.target(rows + 1) - cost.target(rows)
        return missed * self.sibling[siblings] * t > tokens * dt

    def observe_branch(self, tried: int, hit: bool, source: str = MODEL) -> None:
        if source != self.source:
            return
        for r in range(min(tried, len(self.sibling))):
            weight = self._weight(self.sibling_seen[r])
            self.sibling_seen[r] += 1
            right = 1.0 if hit and r == tried - 1 else 0.0
            self.sibling[r] += weight * (right - self.sibling[r])

    def _weight(self, seen: int) -> float:
        """A new observation's weight in an estimate seen ``seen`` times before (see the class
        docstring: a running mean with the prior, then an exponential average)."""
        return max(self.decay, 1.0 / (self.prior_weight + seen + 1))

    def observe(self, drafted: int, accepted: int, source: str = MODEL) -> None:
        if source != self.source:
            return
        if self.probing and drafted:
            self.probing = False
            self.probe_every = self.probe_base if accepted else min(2 * self.probe_every, self.probe_max)
        for i in range(min(drafted, self.k_max)):
            weight = self._weight(self.seen[i])
            self.seen[i] += 1
            if i < accepted:
                self.alpha[i] += weight * (1.0 - self.alpha[i])
            else:  # position accepted+1 was rejected; later ones were never judged
                self.alpha[i] += weight * (0.0 - self.alpha[i])
                break


class LiveCosts:
    """The stored step-cost curve, following what this process's own rounds take.

    A curve is timed once and stored (``measure_costs``), in whatever moment the host was in; its
    T(n)/T(1) shape then decides K for every daemon after, and on a shared host it moves: a
    contended memory bus slows the bandwidth-bound one-token step more than the arithmetic of
    extra verified rows (bench/RESULTS.md, session 15: one stored curve priced a second row as
    dear as a draft step while the daemon's steps ran 40 % slower than it said). Every round's
    target forward is timed anyway, so: the curve is shifted by the running difference between
    what the rounds' forwards took and what the curve says for their row counts (an added cost
    per forward), and the draft step follows the measured draft-model steps. Both are running
    means with the stored value counted as ``prior`` observations, then exponential averages of
    weight ``weight``.

    The shape moves too: a verified row is free while its arithmetic hides under the weights'
    read, so the faster the host's memory in the hour, the fewer rows are free (here three in a
    fast hour, five in a slow one; bench/RESULTS.md, session 30). So each row count that the
    rounds verified at least ``shaped`` times takes its own running difference instead (a plain
    mean, then the same exponential average; more rows never cost less than fewer). Row counts
    the rounds rarely verify keep the stored shape, shifted.
    ``observe`` says when the curve it gives has moved by more than ``moved`` of one step since
    the last one it gave."""

    def __init__(self, stored: CostModel, prior: float = 4.0, weight: float = 0.05, moved: float = 0.03,
                 steps: dict[str, float] | None = None, shaped: int = 8) -> None:
        """``steps``: each drafter's stored step (ms) by its source, where a policy chooses among
        several (default: the stored curve's ``draft_ms`` as the draft model's)."""
        self.stored = stored
        self.prior, self.weight, self.moved, self.shaped = prior, weight, moved, shaped
        self.offset = 0.0  # ms added to every forward
        self.by_rows: dict[int, tuple[float, int]] = {}  # rows -> (ms added to such forwards, forwards seen)
        self.steps = dict(steps) if steps else {MODEL: stored.draft_ms}  # ms a draft step, by drafter
        self.forwards = 0
        self.drafts = 0  # rounds whose draft steps were timed, all drafters together
        self._seen = {source: 0 for source in self.steps}
        self._given = {source: self.current(source) for source in self.steps}

    @property
    def draft_ms(self) -> float:
        """The first drafter's step (the only one, unless a policy chooses among several)."""
        return next(iter(self.steps.values()))

    def _mix(self, old: float, new: float, count: int, prior: float | None = None) -> float:
        """``old`` moved toward ``new``, the ``count``-th observation, after ``prior`` (default:
        ``self.prior``) observations of ``old``."""
        return old + max(self.weight, 1.0 / ((self.prior if prior is None else prior) + count)) * (new - old)

    def observe(self, rows: int, verify_ms: float, draft_steps: int = 0, draft_ms: float = 0.0,
                source: str = MODEL) -> bool:
        if rows >= 1 and verify_ms > 0:
            self.forwards += 1
            extra = verify_ms - self.stored.target(rows)
            self.offset = self._mix(self.offset, extra, self.forwards)
            was, seen = self.by_rows.get(rows, (extra, 0))
            self.by_rows[rows] = (self._mix(was, extra, seen + 1, prior=0.0), seen + 1)
        if draft_steps > 0 and draft_ms > 0 and source in self.steps and math.isfinite(self.steps[source]):
            self.drafts += 1
            self._seen[source] += 1
            self.steps[source] = self._mix(self.steps[source], draft_ms / draft_steps, self._seen[source])
        moved = False
        verify = self._verify()
        for name, before in self._given.items():
            now = self.current(name, verify)
            if (max(abs(a - b) for a, b in zip(now.verify_ms, before.verify_ms)) > self.moved * before.target(1)
                    or abs(now.draft_ms - before.draft_ms) > self.moved * before.draft_ms):
                self._given[name] = now
                moved = True
        return moved

    def _verify(self) -> tuple[float, ...]:
        """T(1), T(2), ...: the stored curve, each row count shifted by its own rounds' running
        difference where it has ``shaped`` of them, else by all rounds'; non-decreasing, and a
        forward never under half its stored time."""
        out: list[float] = []
        for n, v in enumerate(self.stored.verify_ms, start=1):
            extra, seen = self.by_rows.get(n, (0.0, 0))
            out.append(max(v + (extra if seen >= self.shaped else self.offset), 0.5 * v, out[-1] if out else 0.0))
        return tuple(out)

    def current(self, source: str | None = None, verify: tuple[float, ...] | None = None) -> CostModel:
        """The curve the rounds measured (``_verify``), priced with drafter ``source``'s step
        (default: the first drafter's)."""
        step = self.steps[source] if source is not None else self.draft_ms
        return CostModel(step, verify if verify is not None else self._verify())


class StructureK(_Budgets):
    """``AdaptiveK`` per kind of text (``specd.engine.structure``): each kind learns its own
    acceptance per draft position, starting from a prior that says boilerplate is predictable and
    prose is not. The kind is judged each round from the sequence so far.

    **Two drafters** (``drafters``: each one's step in ms by its source, ``MODEL`` and ``HEADS``):
    each kind keeps an estimate per drafter, priced with that drafter's own step, and each round
    drafts with the one whose best K promises the most tokens per millisecond (``chosen_drafter``).
    The other one is not observed while it is not chosen, so its estimate could stay too low for
    ever: after ``explore_every`` rounds of a kind without it, it drafts one round at its own best
    K (at least one draft). An exploration that does not make it the best again doubles the wait
    (up to ``explore_max`` rounds); being chosen on its merits resets it."""

    PRIORS = {"boilerplate": 0.85, "code": 0.7, "text": 0.5}
    # Free drafts cost no draft step, but each verified row costs what the curve says: their count
    # is chosen like K, with draft cost 0 and an acceptance estimate per source. The rest of a
    # suggestion the user is typing along (AHEAD) is the target's own earlier text; prompt lookup
    # (LOOKUP) is right less often: its first draft 0.49-0.85 by match length on the quality
    # bench's dev split (bench/RESULTS.md, session 14).
    LOOKAHEAD_PRIOR = 0.8
    LOOKAHEAD_MAX = 32
    LOOKUP_PRIOR = 0.6
    LOOKUP_MAX = 8
    gated = True

    def __init__(self, cost: CostModel, classify: Callable[[list[int]], str], k_max: int = 8,
                 priors: dict[str, float] | None = None, min_prob: float = 0.0,
                 drafters: dict[str, float] | None = None, explore_every: int = 16, explore_max: int = 256) -> None:
        self.classify = classify
        self.min_prob = min_prob
        self.k_max = k_max
        self.live = LiveCosts(cost, steps=drafters)
        self.cost = self.live.current()
        priors = priors or self.PRIORS
        # estimates by drafter, then by kind; `policies`: the first drafter's (the only one, mostly)
        self.by_drafter = {source: {kind: AdaptiveK(self.live.current(source), k_max, prior, source=source)
                                    for kind, prior in priors.items()}
                           for source in self.live.steps}
        self.policies = next(iter(self.by_drafter.values()))
        self.current = "code"
        self.drafter = next(iter(self.by_drafter))
        self.rounds = {kind: 0 for kind in self.policies}
        self.explore_base = explore_every
        self.explore_max = explore_max
        self.waited = {(kind, source): 0 for kind in self.policies for source in self.by_drafter}
        self.explore_every = {(kind, source): explore_every for kind in self.policies for source in self.by_drafter}
        free = CostModel(0.0, cost.verify_ms)
        self.lookahead = AdaptiveK(free, self.LOOKAHEAD_MAX, self.LOOKAHEAD_PRIOR, source=AHEAD)
        self.lookup = AdaptiveK(free, self.LOOKUP_MAX, self.LOOKUP_PRIOR, source=LOOKUP)

    def observe_costs(self, rows: int, verify_ms: float, draft_steps: int = 0, draft_ms: float = 0.0,
                      source: str = MODEL) -> None:
        if self.live.observe(rows, verify_ms, draft_steps, draft_ms, source):
            self.cost = cost = self.live.current()
            for name, policies in self.by_drafter.items():
                for policy in policies.values():
                    policy.set_cost(self.live.current(name))
            free = CostModel(0.0, cost.verify_ms)
            self.lookahead.set_cost(free)
            self.lookup.set_cost(free)

    def choose(self, seq: list[int] | None = None) -> int:
        kind = self.classify(seq) if seq is not None else "code"
        self.current = kind = kind if kind in self.policies else "code"
        self.rounds[kind] += 1
        self.drafter, exploring = self._pick(kind)
        policy = self.by_drafter[self.drafter][kind]
        if exploring:  # one round at its best K, at least 1
            return max(1, policy.best_k())
        return policy.choose()

    def _pick(self, kind: str) -> tuple[str, bool]:
        """The drafter for this round of ``kind``, and whether the round explores it."""
        if len(self.by_drafter) == 1:
            return self.drafter, False

        def rate(source: str) -> float:
            policy = self.by_drafter[source][kind]
            return policy.expected_rate(policy.best_k())
        best = max(self.by_drafter, key=rate)  # ties: the first drafter
        for source in self.by_drafter:
            key = (kind, source)
            if source == best:
                self.waited[key] = 0
                continue
            self.waited[key] += 1
            if self.waited[key] >= self.explore_every[key]:
                self.explore_every[key] = min(2 * self.explore_every[key], self.explore_max)
                self.waited[key] = 0
                return source, True
        self.explore_every[kind, best] = self.explore_base
        return best, False

    def chosen_drafter(self) -> str:
        return self.drafter

    def keep_drafting(self, confidences: list[float]) -> bool:
        return self.by_drafter[self.drafter][self.current].keep_drafting(confidences)

    def keep_branching(self, confidences: list[float], siblings: int) -> bool:
        return self.by_drafter[self.drafter][self.current].keep_branching(confidences, siblings)

    def observe(self, drafted: int, accepted: int, source: str = MODEL) -> None:
        estimates = [policies[self.current] for policies in self.by_drafter.values()]
        for estimate in (*estimates, self.lookahead, self.lookup):
            estimate.observe(drafted, accepted, source)  # each learns from its own source only

    def observe_branch(self, tried: int, hit: bool, source: str = MODEL) -> None:
        for policies in self.by_drafter.values():
            policies[self.current].observe_branch(tried, hit, source)

    def choose_free(self) -> int | None:
        return self.lookahead.choose()

    def choose_lookup(self) -> int | None:
        return self.lookup.choose()


@torch.inference_mode()
def measure_costs(target: CausalLM, draft: CausalLM | None, sizes: tuple[int, ...] = tuple(range(1, 10)),
                  context: int = 128, reps: int = 5, draft_step: Callable[[], object] | None = None) -> CostModel:
    """Time target forwards over n new tokens (after ``context`` cached ones) and one draft step:
    every n from 1 to 9 by default (the curve is not linear: a second row can be nearly free and
    later ones cost more as the kernels turn compute-bound; sizes not in ``sizes`` are
    interpolated);
    ``reps`` rounds, each timing every size and the draft once, interleaved (so the machine's
    drift touches all alike), medians. A forward over more tokens never costs less than one over
    fewer (a cheaper T(2) than T(1) is noise, and it would make the policy over-value drafting
    one token), so the curve is made non-decreasing. The caches are left empty. ``draft_step``
    (with no draft model): what one draft costs instead, e.g. one step of draft heads; with a draft
    model too, it is timed as well, into ``heads_ms``."""
    measured, draft_ms, step_ms = _time_steps(target, draft, sizes, context, reps, draft_step)
    verify: list[float] = []
    for n in range(1, max(sizes) + 1):  # interpolate the sizes not measured
        lo = max(s for s in sizes if s <= n)
        hi = min(s for s in sizes if s >= n)
        frac = 0.0 if hi == lo else (n - lo) / (hi - lo)
        verify.append(measured[lo] + frac * (measured[hi] - measured[lo]))
    if draft is None:
        return CostModel(step_ms, convex_curve(verify))
    return CostModel(draft_ms, convex_curve(verify), step_ms if draft_step is not None else None)


def convex_curve(verify: Sequence[float]) -> tuple[float, ...]:
    """T(1), T(2), ... made non-decreasing and convex: the extra cost of each further row is never
    negative and never less than the row before's (a verification turns from bandwidth-bound to
    compute-bound as rows are added: the second row is nearly free, later ones cost a row's
    arithmetic each). A curve timed on a noisy host breaks that shape (seen here: T(2) 47.8,
    T(3) 71.1, T(4) 71.1 ms, which made K = 2 look 50 % dearer than K = 1 and K auto draft one
    token a round in every daemon after), and one bad point then decides K for as long as the
    curve is stored; the least-squares fit of the increments with this shape (pool adjacent
    violators) keeps T(1) and spreads a bump over its neighbours. (A dip, T(n+1) < T(n), is
    first raised to T(n): more rows never cost less.)"""
    if not verify:
        return ()
    rising = [float(verify[0])]
    for v in verify[1:]:
        rising.append(max(float(v), rising[-1]))
    steps = [b - a for a, b in zip(rising, rising[1:])]
    # increments that fall by no more than rounding are no violation: a curve this function made
    # (its pooled increments, summed back, differ in the last bits) comes back unchanged
    tol = 1e-9 * max(1.0, abs(rising[-1]))
    pools: list[list[float]] = []  # [mean increment, count], non-decreasing means
    for d in steps:
        pools.append([d, 1.0])
        while len(pools) > 1 and pools[-2][0] > pools[-1][0] + tol:
            (m1, c1), (m2, c2) = pools[-2], pools.pop()
            pools[-1] = [(m1 * c1 + m2 * c2) / (c1 + c2), c1 + c2]
    if len(pools) == len(steps):  # already convex: the points as they are, not re-summed
        return tuple(rising)
    out = [float(verify[0])]
    for mean, count in pools:
        for _ in range(int(count)):
            out.append(out[-1] + mean)
    return tuple(out)


@torch.inference_mode()
def costs_hold(cost: CostModel, target: CausalLM, draft: CausalLM | None, sizes: tuple[int, ...] = (1, 4),
               context: int = 16, reps: int = 3, draft_step: Callable[[], object] | None = None,
               tolerance: float = 2.0) -> bool:
    """Whether a stored cost curve still describes this machine: a few forwards at ``sizes`` and
    one draft step, timed as :func:`measure_costs` times them, each within ``tolerance``× of the
    curve. A curve measured while the CPU was taken by something else (seen here: 2,008 ms for a
    50 ms step, stored and then believed by every daemon after) fails this and is measured again.
    It runs at every start, so after a short ``context``: the curve's 128 cached tokens change a
    step by a few per cent, far inside the tolerance, and prefilling them took 2.1 s of a 10.5 s
    start of the default pair here (0.7 s with 16)."""
    measured, draft_ms, step_ms = _time_steps(target, draft, sizes, context, reps, draft_step)
    pairs = [(measured[n], cost.target(n)) for n in sizes]
    if draft is not None:
        pairs.append((draft_ms, cost.draft_ms))
    if draft_step is not None:
        pairs.append((step_ms, cost.draft_ms if draft is None else (cost.heads_ms or 0.0)))
    return all(now > 0 and then > 0 and 1 / tolerance <= now / then <= tolerance for now, then in pairs)


def _time_steps(target: CausalLM, draft: CausalLM | None, sizes: tuple[int, ...], context: int, reps: int,
                draft_step: Callable[[], object] | None) -> tuple[dict[int, float], float, float]:
    """Median ms of a target forward over each n in ``sizes`` after ``context`` cached tokens, of
    one draft-model step and of one ``draft_step`` (inf where not given), over ``reps``
    interleaved rounds; the caches are left empty."""

    def timed(model: CausalLM, n: int) -> float:
        model.rollback(context)
        t0 = time.perf_counter()
        model.forward((torch.arange(n) * 7 + 3) % model.vocab_size)
        return (time.perf_counter() - t0) * 1e3

    models = [m for m in (target, draft) if m is not None]
    for m in models:
        m.rollback(0)
        m.forward((torch.arange(context) * 13 + 5) % m.vocab_size)
    runs: dict[int, list[float]] = {n: [] for n in sizes}
    draft_runs: list[float] = []
    step_runs: list[float] = []
    for _ in range(reps):
        for n in sizes:
            runs[n].append(timed(target, n))
        if draft is not None:
            draft_runs.append(timed(draft, 1))
        if draft_step is not None:
            t0 = time.perf_counter()
            draft_step()
            step_runs.append((time.perf_counter() - t0) * 1e3)
    for m in models:
        m.rollback(0)

    def median(v: list[float]) -> float:
        return statistics.median(v) if v else float("inf")
    return {n: statistics.median(v) for n, v in runs.items()}, median(draft_runs), median(step_runs)
