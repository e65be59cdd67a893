"""What the LSP server asks of the engine and how it shapes prompts and answers."""

from __future__ import annotations

from dataclasses import dataclass, field

from specd.lsp.context import ContextLimits
from specd.lsp.postprocess import Rules
from specd.lsp.window import WindowLimits


@dataclass(frozen=True)
class LspSettings:
    max_tokens: int = 64
    window: WindowLimits = field(default_factory=WindowLimits)
    context: ContextLimits = field(default_factory=ContextLimits)
    rules: Rules = field(default_factory=Rules)
    repo_context: bool = True  # recently edited open documents before the FIM block
