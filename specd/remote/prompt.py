"""The prompt a remote server gets, shaped by the engine's own definition
(:class:`specd.engine.prompt.PromptBuilder`): the same prefix and suffix windows (in the model's
tokens, so the prompt's start moves in the same quarter-window steps and the server's prefix cache
survives keystrokes), and for ``/v1/completions`` the same FIM layout, as text.

The tokenizer (Hugging Face ``tokenizers``, no torch) only measures and cuts; the server tokenizes
again what it gets.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from specd.engine.config import PromptWindows
from specd.engine.prompt import STOP_TOKENS, PromptBuilder
from specd.models.errors import ModelError
from specd.models.registry import PUBLISHED, model_dir
from specd.models.tokenizer import Tokenizer
from specd.remote.errors import RemoteError
from specd.requests import CompletionRequest

__all__ = ["STOP_TOKENS", "InfillParts", "RemotePrompt", "find_tokenizer", "load_tokenizer"]


def find_tokenizer(spec: str) -> Path:
    """``tokenizer.json`` for a model spec: the file itself, a directory holding one, or a
    published model's (where ``specd models pull`` converts it: ``<model dir>/converted/``)."""
    if spec in PUBLISHED:
        path = model_dir(spec) / "converted" / "tokenizer.json"
        if not path.is_file():
            raise RemoteError(f"the tokenizer of {spec} is not in the cache ({path}): run `specd models pull {spec}`, "
                              "or give --remote-tokenizer PATH (a tokenizer.json)")
        return path
    path = Path(spec).expanduser()
    if path.is_dir():
        path = path / "tokenizer.json"
    if not path.is_file():
        raise RemoteError(f"--remote-tokenizer {spec}: no tokenizer.json there (give a tokenizer.json, a directory "
                          f"holding one, or one of {', '.join(PUBLISHED)})")
    return path


def load_tokenizer(spec: str) -> Tokenizer:
    try:
        return Tokenizer.from_file(find_tokenizer(spec))
    except ModelError as e:
        raise RemoteError(str(e)) from None


@dataclass(frozen=True)
class InfillParts:
    """llama-server's ``/infill`` fields: the windowed prefix and suffix."""

    prefix: str
    suffix: str


class RemotePrompt:
    def __init__(self, tokenizer: Tokenizer, windows: PromptWindows = PromptWindows()) -> None:
        self.builder = PromptBuilder(tokenizer, windows)
        self.tokenizer = tokenizer

    @property
    def has_fim(self) -> bool:
        return self.builder.fim is not None

    def fim_text(self, request: CompletionRequest) -> str:
        """The whole prompt as text, exactly the engine's token layout (FIM tokens written as
        their strings, which the server parses back into the control tokens)."""
        if not self.has_fim:
            raise RemoteError("the tokenizer has no FIM tokens (<|fim_prefix|>, <|fim_suffix|>, <|fim_middle|>): "
                              "specd cannot write a fill-in-the-middle prompt for this model")
        return self.tokenizer.decode(self.builder.build(request.prefix, request.suffix))

    def infill_parts(self, request: CompletionRequest) -> InfillParts:
        return InfillParts(self.builder.window_prefix(request.prefix),
                           self.builder.window_suffix(request.suffix, request.prefix))

