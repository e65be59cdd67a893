"""The draft model's prompt window: a shorter prompt for the draft than for the target.

A cold request prefills both models. The draft only guesses the next few tokens, and the text
nearest the cursor carries most of what it needs; a shorter draft prompt makes its prefill cheaper
while the target, which decides every token, still reads the whole prompt. The output contract is
untouched: the target verifies every draft, so greedy text stays the target's greedy text and
sampled text follows the target's distribution, whatever the draft was shown.

:class:`DraftWindow` cuts the target's FIM prompt to at most ``limit`` tokens with the same
structure: the repository context goes first (whole), then the far prefix; the
``<|fim_suffix|>{suffix}<|fim_middle|>`` tail is always kept. The prefix's cut moves in steps
of a quarter window (at a line start when one is near), so while the user types, the draft
prompt's start stays put and its KV cache stays valid.

:class:`WindowedDrafter` runs a drafter on that prompt: the draft's sequence is the draft prompt
followed by the tokens generated so far, the target's the full prompt followed by the same tokens;
positions differ by a constant ``shift``, which ``propose`` and ``commit`` translate.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from specd.engine.budget import DraftBudget
from specd.engine.drafters import Drafter, Proposal
from specd.engine.prompt import quantized_cut
from specd.engine.sampling import SamplingParams
from specd.models.tokenizer import Tokenizer
from specd.schema import ConfigError

FIM_TOKENS = 3  # <|fim_prefix|>, <|fim_suffix|>, <|fim_middle|>


@dataclass(frozen=True)
class DraftPrompt:
    """The draft's prompt for one request: ``tokens``, standing for the target's ``prompt_len``."""

    tokens: list[int]
    prompt_len: int

    @property
    def shift(self) -> int:
        """Target positions minus draft positions, for every token after the prompts."""
        return self.prompt_len - len(self.tokens)

    def view(self, seq: list[int]) -> list[int]:
        """The draft's sequence for the target's ``seq`` (the target prompt + generated tokens)."""
        return self.tokens + seq[self.prompt_len:]


def check_draft_window(limit: int, max_suffix_tokens: int) -> None:
    """A ``ConfigError`` when ``limit`` (``draft_prompt_tokens``) leaves no room for the prefix
    beside the suffix window."""
    least = max_suffix_tokens + FIM_TOKENS + 16
    if 0 < limit < least:
        raise ConfigError(
            f"engine.draft_prompt_tokens: {limit} leaves no room for the text before the cursor beside "
            f"the suffix window (max_suffix_tokens {max_suffix_tokens} + {FIM_TOKENS} FIM tokens): "
            f"use 0 (the draft reads the target's prompt) or at least {least}"
        )


class DraftWindow:
    """Cuts a prompt to the draft's window (``limit`` tokens; 0: the draft reads the whole prompt).
    ``fim``: the ids of ``<|fim_prefix|>``, ``<|fim_suffix|>``, ``<|fim_middle|>``, or None for a
    tokenizer without them (the prompt is then plain text, cut from its start)."""

    def __init__(self, limit: int, fim: tuple[int, int, int] | None, tokenizer: Tokenizer) -> None:
        if limit < 0:
            raise ValueError(f"draft window must be >= 0, got {limit}")
        self.limit = limit
        self.fim = fim
        self.tokenizer = tokenizer
        self.step = max(1, limit // 4)

    def cut(self, prompt: list[int]) -> DraftPrompt:
        """The draft's prompt for the target's ``prompt``: the whole prompt when it fits."""
        if self.limit == 0 or len(prompt) <= self.limit:
            return DraftPrompt(prompt, len(prompt))
        if self.fim is None:
            start = quantized_cut(len(prompt), self.limit, self.step)
            return DraftPrompt(prompt[start:], len(prompt))
        p, s, _ = self.fim
        at_p = prompt.index(p)  # the context before it holds no FIM token (it is text there)
        at_s = prompt.index(s, at_p)
        prefix, tail = prompt[at_p + 1 : at_s], prompt[at_s:]
        keep = max(0, self.limit - 1 - len(tail))  # the context is dropped first, whole
        start = self._line_start(prefix, quantized_cut(len(prefix), keep, self.step))
        return DraftPrompt([p, *prefix[start:], *tail], len(prompt))

    def _line_start(self, ids: list[int], start: int) -> int:
        """The first position at or after ``start``, within a step, that follows a newline."""
        if start == 0:
            return 0
        for i in range(start, min(len(ids), start + self.step)):
            if "\n" in self.tokenizer.decode([ids[i - 1]]):
                return i
        return start


class WindowedDrafter:
    """``inner`` drafting from ``prompt.tokens`` where the target reads the full prompt; the
    caller's sequences and positions are the target's."""

    def __init__(self, inner: Drafter, prompt: DraftPrompt) -> None:
        self.inner = inner
        self.prompt = prompt

    @property
    def max_len(self) -> int:
        return self.inner.max_len + self.prompt.shift

    def prefill(self, context: list[int]) -> int:
        return self.inner.prefill(self.prompt.tokens[:-1])

    def propose(self, seq: list[int], budget: DraftBudget, params: SamplingParams,
                generator: torch.Generator | None) -> Proposal:
        return self.inner.propose(self.prompt.view(seq), budget, params, generator)

    def commit(self, valid: int) -> None:
        self.inner.commit(valid - self.prompt.shift)
