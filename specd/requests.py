"""What a completion request is, and how it is checked: the one request type every face sends.

The CLI, the LSP server, the daemon's ``complete`` method and the bench build a
:class:`CompletionRequest`; the engine serves it. The daemon's wire parameters are derived from its
fields (:func:`specd.schema.json_types`), the CLI's request flags too. This module imports neither
torch nor the engine, so the thin clients (``specd complete --socket``, ``specd lsp`` over the
daemon) stay light.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from specd.schema import setting

MODES = ("spec", "target")
K_MAX = 32  # the most drafts per round a request or the engine's settings may ask for
# Temperatures below this are greedy: the warped distribution is already one-hot on the argmax in
# float32, and smaller ones would overflow ``logits / T``.
GREEDY_BELOW = 1e-4
# Above this the warped distribution is uniform over the vocabulary to float32 precision: such a
# request is refused rather than answered with noise.
MAX_TEMPERATURE = 100.0


class RequestError(ValueError):
    """A request that cannot be served as given; the message names the field."""

    def __init__(self, field_name: str, message: str) -> None:
        super().__init__(f"{field_name}: {message}")
        self.field = field_name


class Cancelled(Exception):
    """The request was cancelled; raised between speculative rounds (and prefill chunks)."""


class Preempted(Cancelled):
    """The request was paused during its prefill, between chunks, for another session's request;
    what it computed stays in the prefix cache and it is run again later (the daemon's scheduler)."""


def _int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


@dataclass(frozen=True)
class CompletionRequest:
    prefix: str = setting(help="text before the cursor", flag=None)
    suffix: str = setting("", help="text after the cursor", flag=None)
    max_tokens: int = setting(64, help="longest completion, in tokens")
    temperature: float = setting(0.0, help=f"sampling temperature in [0, {MAX_TEMPERATURE:g}]; 0 is greedy")
    top_p: float = setting(1.0, help="nucleus sampling: keep the smallest set of tokens holding this mass")
    top_k: int = setting(0, help="keep the k most probable tokens (0: all)")
    seed: int | None = setting(None, help="random seed for sampling (none: a fresh one)")
    stop: tuple[str, ...] = setting((), help="strings that end the completion before them", flag=None,
                                    accepts=(list, str))
    mode: str = setting("spec", choices=MODES, help="spec (speculative) or target (the target alone)")
    k: int | None = setting(None, help="drafts per round (none: the engine's K setting)", flag=None)
    tree: bool | None = setting(None, help="token trees on or off (none: the engine's tree setting)", flag=None)
    line_budget_ms: float | None = setting(
        None, help="once the completion has generated this many ms, end it at the next line end (llama.vim's "
                   "t_max_predict_ms; 0: the first line only; none: no limit)", flag=None)
    profile: bool = setting(False, help="answer with a timeline of where the time went, round by round "
                                        "(see specd.engine.timeline)", flag=None)

    def validate(self, max_len: int) -> CompletionRequest:
        """This request, once every field has its type and range (``max_tokens`` up to
        ``max_len``); raises :class:`RequestError` naming the first field that does not."""
        if not isinstance(self.prefix, str) or not isinstance(self.suffix, str):
            raise RequestError("prefix", "prefix and suffix must be strings")
        if not self.prefix and not self.suffix:
            raise RequestError("prefix", "empty prompt: give a prefix or a suffix")
        if not _int(self.max_tokens) or not 1 <= self.max_tokens <= max_len:
            raise RequestError("max_tokens", f"must be an integer in 1..{max_len}, got {self.max_tokens!r}")
        if self.mode not in MODES:
            raise RequestError("mode", f"must be one of {', '.join(MODES)}, got {self.mode!r}")
        if self.k is not None and (not _int(self.k) or not 0 <= self.k <= K_MAX):
            raise RequestError("k", f"must be an integer in 0..{K_MAX}, got {self.k!r}")
        if self.line_budget_ms is not None and (not _number(self.line_budget_ms) or self.line_budget_ms < 0):
            raise RequestError("line_budget_ms", f"must be a number >= 0 or null, got {self.line_budget_ms!r}")
        if not isinstance(self.profile, bool):
            raise RequestError("profile", f"must be true or false, got {self.profile!r}")
        if self.tree is not None and not isinstance(self.tree, bool):
            raise RequestError("tree", f"must be true or false, got {self.tree!r}")
        if self.seed is not None and (not _int(self.seed) or self.seed < 0):
            raise RequestError("seed", f"must be a non-negative integer, got {self.seed!r}")
        if not isinstance(self.stop, (tuple, list)) or not all(isinstance(s, str) and s for s in self.stop):
            raise RequestError("stop", "must be a list of non-empty strings")
        self._validate_sampling()
        return self

    def _validate_sampling(self) -> None:
        t, p, k = self.temperature, self.top_p, self.top_k
        if not _number(t) or not 0.0 <= t <= MAX_TEMPERATURE:
            got = float(t) if _number(t) else repr(t)
            raise RequestError("temperature", f"temperature must be in [0, {MAX_TEMPERATURE:g}] (0 = greedy), got {got}")
        if not _number(p) or not 0.0 < p <= 1.0:
            raise RequestError("top_p", f"top_p must be in (0, 1], got {float(p) if _number(p) else repr(p)}")
        if not _int(k) or k < 0:
            raise RequestError("top_k", f"top_k must be an integer >= 0, got {k!r}")
