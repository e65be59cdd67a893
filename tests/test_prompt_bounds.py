"""An enormous document: the windows bound the work (the text encoded) and the memory (the KV
cached), whatever the document's size."""

from __future__ import annotations

from specd.engine.config import PromptWindows
from specd.engine.prompt import PromptBuilder
from specd.models.tokenizer import Tokenizer
from specd.requests import CompletionRequest
from tests.tiny import tiny_engine, tiny_tokenizer

WINDOWS = PromptWindows(max_prefix_tokens=200, max_suffix_tokens=32)


class CountingTokenizer(Tokenizer):
    """The tiny byte-level tokenizer, recording the length of every text it encodes."""

    def __init__(self) -> None:
        super().__init__(tiny_tokenizer()._tok)
        self.encoded: list[int] = []

    def encode(self, text: str) -> list[int]:
        self.encoded.append(len(text))
        return super().encode(text)


def document(lines: int) -> str:
    return "".join(f"def f{j}(x):\n    return x * {j}\n" for j in range(lines))


def test_an_enormous_document_is_encoded_only_around_the_cursor() -> None:
    tok = CountingTokenizer()
    builder = PromptBuilder(tok, WINDOWS)
    longest = max(len(t) for t in tok.vocab())
    bound = 4 * WINDOWS.max_prefix_tokens * longest
    for lines in (2_000, 200_000):  # ~60 kB, ~7 MB
        doc = document(lines)
        tok.encoded.clear()
        prompt = builder.build(doc, doc)
        assert max(tok.encoded) <= bound  # the same bound for 60 kB and 7 MB
        assert len(prompt) <= 3 + WINDOWS.max_prefix_tokens + WINDOWS.max_suffix_tokens


def test_the_window_of_an_enormous_document_holds_while_typing() -> None:
    builder = PromptBuilder(tiny_tokenizer(), WINDOWS)
    doc = document(200_000)
    first = builder.build(doc)
    for typed in ("r", "re", "ret", "retu"):
        now = builder.build(doc + typed)
        assert now[: len(first) - 2] == first[:-2]  # the same window: only the typed text is new


def test_a_warm_and_a_completion_of_an_enormous_document_cache_one_window() -> None:
    engine = tiny_engine(k=2, windows=WINDOWS)
    doc = document(200_000)
    tokens = engine.warm(CompletionRequest(doc, doc))
    assert tokens <= 3 + 200 + 32
    done = engine.complete(CompletionRequest(doc, doc, max_tokens=4))
    assert done.stats.prefill_reused == tokens
    memory = engine.memory()
    per_token = engine.target.kv_bytes_per_token() + engine.draft.kv_bytes_per_token()
    assert memory["prefix_cache_bytes"] <= tokens * per_token
