"""The tokenizer shared by draft and target (Hugging Face ``tokenizers``)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from tokenizers import Tokenizer as _HFTokenizer

from specd.models.errors import ModelError


# What GGUF conversions (llama.cpp, transformers) name the embedding rows that have no token
_PLACEHOLDER = re.compile(r"\[PAD\d+\]")


# Qwen2.5-Coder's fill-in-the-middle tokens, and the tokens a completion ends at (the engine's prompt
# layout, the remote backend's and the draft heads' training data share them)
FIM_PREFIX, FIM_SUFFIX, FIM_MIDDLE = "<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"
STOP_TOKENS = (
    "<|endoftext|>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>",
    "<|repo_name|>", "<|file_sep|>", "<|im_start|>", "<|im_end|>",
)


@dataclass(frozen=True)
class TokenizerRules:
    """Beside the vocabulary, what the ids were made by: the model type (``BPE``) and its merges in
    rank order. Read from the tokenizer's own serialization, so two tokenizers built by different
    tools (Hugging Face's ``tokenizer.json``, transformers from a GGUF) compare by content."""

    model_type: str
    merges: tuple[tuple[str, ...], ...]


class Tokenizer:
    def __init__(self, inner: _HFTokenizer) -> None:
        self._tok = inner
        # User text is text: "<|fim_suffix|>" typed in a file must not become the control token.
        self._tok.encode_special_tokens = True

    @classmethod
    def from_file(cls, path: Path) -> "Tokenizer":
        try:
            return cls(_HFTokenizer.from_file(str(path)))
        except Exception as e:
            raise ModelError(f"cannot read tokenizer {path}: {e}") from e

    def encode(self, text: str) -> list[int]:
        return self._tok.encode(text, add_special_tokens=False).ids

    def decode(self, ids: list[int]) -> str:
        return self._tok.decode(ids, skip_special_tokens=False)

    def token_id(self, token: str) -> int | None:
        return self._tok.token_to_id(token)

    def vocab(self) -> dict[str, int]:
        return self._tok.get_vocab(with_added_tokens=True)

    @property
    def vocab_size(self) -> int:
        return self._tok.get_vocab_size(with_added_tokens=True)

    def identical(self, other: "Tokenizer") -> bool:
        """Whether both serialize to the same JSON (the same file, or the same build of it)."""
        return self is other or self._tok.to_str() == other._tok.to_str()

    def real_vocab(self) -> dict[int, str]:
        """Id -> text of every real token (``[PADn]`` placeholders left out)."""
        return {i: tok for tok, i in self.vocab().items() if not _PLACEHOLDER.fullmatch(tok)}

    def rules(self) -> TokenizerRules:
        """See :class:`TokenizerRules` (parses the serialized tokenizer: call it once)."""
        model = json.loads(self._tok.to_str()).get("model") or {}
        merges = tuple(tuple(m.split(" ", 1)) if isinstance(m, str) else tuple(m) for m in model.get("merges") or ())
        return TokenizerRules(str(model.get("type", "?")), merges)

    def real_token_ids(self) -> list[int]:
        """Ids of real tokens: every id the tokenizer knows except ``[PADn]`` placeholders, which
        stand for embedding rows no text maps to (a model may also have rows past the last id)."""
        return sorted(i for tok, i in self.vocab().items() if not _PLACEHOLDER.fullmatch(tok))
