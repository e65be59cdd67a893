"""Repository context (Qwen's ``<|repo_name|>``/``<|file_sep|>`` format) before the FIM block."""

from __future__ import annotations

import pytest

from specd.engine.engine import CompletionRequest, RequestError
from specd.engine.prompt import PromptBuilder, PromptWindows
from tests.tiny import tiny_engine, tiny_tokenizer

CONTEXT = "<|repo_name|>demo\n<|file_sep|>util.py\ndef helper():\n    return 1\n<|file_sep|>main.py\n"


def test_context_markers_are_control_tokens_before_the_fim_block() -> None:
    tok = tiny_tokenizer()
    builder = PromptBuilder(tok)
    ids = builder.build("x = ", "", CONTEXT)
    sep, repo, fim_prefix = (tok.token_id(t) for t in ("<|file_sep|>", "<|repo_name|>", "<|fim_prefix|>"))
    assert ids[0] == repo
    assert ids.count(sep) == 2
    assert ids.index(fim_prefix) > max(i for i, t in enumerate(ids) if t == sep)
    assert tok.decode(ids).startswith(CONTEXT + "<|fim_prefix|>x = <|fim_suffix|>")


def test_no_context_leaves_the_prompt_unchanged() -> None:
    builder = PromptBuilder(tiny_tokenizer())
    assert builder.build("a = 1\n", "b = 2\n", "") == builder.build("a = 1\n", "b = 2\n")


def test_other_special_text_in_context_stays_text() -> None:
    tok = tiny_tokenizer()
    ids = PromptBuilder(tok).build("x", "", "<|file_sep|>a.py\ns = '<|fim_middle|>'\n")
    assert ids.count(tok.token_id("<|fim_middle|>")) == 1  # only the FIM block's own


def test_long_context_keeps_its_tail_from_a_file_boundary() -> None:
    tok = tiny_tokenizer()
    builder = PromptBuilder(tok, PromptWindows(max_context_tokens=60))
    files = "".join(f"<|file_sep|>f{i}.py\n{'#' * 20}\n" for i in range(10))
    ids = builder.encode_context("<|repo_name|>r\n" + files)
    assert len(ids) <= 60
    assert ids[0] == tok.token_id("<|file_sep|>")
    assert tok.decode(ids).endswith("<|file_sep|>f9.py\n" + "#" * 20 + "\n")


def test_engine_completes_with_context_and_checks_its_type() -> None:
    engine = tiny_engine()
    done = engine.complete(CompletionRequest("def f():\n    ", max_tokens=8, context=CONTEXT))
    assert done.stats.new_tokens >= 1
    with pytest.raises(RequestError) as e:
        engine.complete(CompletionRequest("x", context=3))  # type: ignore[arg-type]
    assert e.value.field == "context"
