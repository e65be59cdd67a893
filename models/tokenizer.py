"""The tokenizer shared by draft and target (Hugging Face ``tokenizers``)."""

from __future__ import annotations

import re
from pathlib import Path

from tokenizers import Tokenizer as _HFTokenizer

from specd.models.errors import ModelError


# What GGUF conversions (llama.cpp, transformers) name the embedding rows that have no token
_PLACEHOLDER = re.compile(r"\[PAD\d+\]")


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

    def real_token_ids(self) -> list[int]:
        """Ids of real tokens: every id the tokenizer knows except ``[PADn]`` placeholders, which
        stand for embedding rows no text maps to (a model may also have rows past the last id)."""
        return sorted(i for tok, i in self.vocab().items() if not _PLACEHOLDER.fullmatch(tok))
