"""What the LSP server asks of the engine and how it shapes prompts and answers."""

from __future__ import annotations

from dataclasses import dataclass, field

from specd.lsp.postprocess import Rules
from specd.lsp.window import WindowLimits


# llama.vim's default t_max_predict_ms (not tuned here). On the quality bench's test split (bench/RESULTS.md,
# session 11, simulated at the daemon's 43 ms/token) it keeps 93 % of the characters a block site's
# suggestion gets right and cuts a third of the decode time after the first line
LINE_BUDGET_MS: float | None = 1000.0


@dataclass(frozen=True)
class DebounceSettings:
    """The adaptive debounce (after Tabby's): a completion waits ``rate · base − expected response``
    before it goes to the daemon, ``base`` following the user's typing interval."""

    enabled: bool = True
    base_ms: float = 200.0  # typing interval assumed until enough keystrokes were seen
    min_interval_ms: float = 100.0  # the measured base is clamped to this range...
    max_interval_ms: float = 400.0  # ...and longer gaps (pauses) are not typing
    window: int = 20  # latest typing intervals averaged
    min_samples: int = 4  # intervals needed before the base follows them
    # the wait in typing intervals where a suggestion is most wanted, and where it is least (mid-word,
    # text after the cursor); Tabby waits 1.5-3 intervals (a suggestion appears once the user
    # pauses); a request here is superseded cheaply in the daemon, so it waits at most one interval
    # and only bursts faster than min_interval_ms are held back
    rate_min: float = 0.5
    rate_max: float = 1.0
    min_ms: float = 0.0  # the wait's bounds
    max_ms: float = 1000.0
    response_window: int = 10  # latest daemon response times averaged for the expected response


@dataclass(frozen=True)
class PrewarmSettings:
    """When the server asks the daemon to compute a prompt ahead (``warm``, lowest priority)."""

    enabled: bool = True
    pause_ms: float = 400.0  # idle time after an edit before the cursor's prompt is warmed
    jump_lines: int = 20  # an edit this many lines from the previous one is a cursor jump: warm at once
    on_open: bool = True  # warm a newly opened document's prompt
    # at a pause at the end of a line with text, warm as well the prompt of the line after Enter, with
    # the indentation an editor gives it (specd.lsp.enter; bench/enter_warm.py measures it)
    after_enter: bool = True


@dataclass(frozen=True)
class LspSettings:
    max_tokens: int = 64
    window: WindowLimits = field(default_factory=WindowLimits)
    rules: Rules = field(default_factory=Rules)
    debounce: DebounceSettings = field(default_factory=DebounceSettings)
    prewarm: PrewarmSettings = field(default_factory=PrewarmSettings)
    request_ahead: bool = True  # after an accepted suggestion, ask for the next one at once
    # a multi-line suggestion ends at the first line end after this many ms of generation (llama.vim's
    # t_max_predict_ms; None: no limit); mid-line suggestions are one line anyway
    line_budget_ms: float | None = LINE_BUDGET_MS
