"""A whole editor session against the real ``specd lsp --in-process`` on the tiny pair, as Neovim
and as VS Code: initialize, open, change, completion, inline completion, shutdown."""

from __future__ import annotations

import pytest
import pytest_lsp
from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient

from tests.lsp_session import (DOC_TEXT, DOC_URI, EDITORS, TINY_SERVER, completion_params, encoding_of,
                               initialize, inline_params, insert, open_doc, position)


@pytest_lsp.fixture(config=ClientServerConfig(server_command=[*TINY_SERVER, "--in-process"]), params=EDITORS)
async def client(lsp_client: LanguageClient, request: pytest.FixtureRequest):
    lsp_client.init_result = await initialize(lsp_client, request.param, maxTokens=24)  # type: ignore[attr-defined]
    yield
    await lsp_client.shutdown_session()


async def test_capabilities(client: LanguageClient) -> None:
    caps = client.init_result.capabilities  # type: ignore[attr-defined]
    assert caps.inline_completion_provider is not None
    assert caps.completion_provider is not None and "." in (caps.completion_provider.trigger_characters or [])
    offered = (client.capabilities.general.position_encodings if client.capabilities and client.capabilities.general else None) or ["utf-16"]
    assert encoding_of(client.init_result) == getattr(offered[0], "value", offered[0])  # type: ignore[attr-defined]


async def test_open_change_then_complete_both_ways(client: LanguageClient) -> None:
    enc = encoding_of(client.init_result)  # type: ignore[attr-defined]
    open_doc(client)
    insert(client, DOC_URI, 2, position(DOC_TEXT, 2, 4, enc), "if n < 2:\n        return n\n    ")
    text = "# 😀 café\ndef fib(n):\n    if n < 2:\n        return n\n    \n"
    at = position(text, 4, 4, enc)

    inline = await client.text_document_inline_completion_async(inline_params(DOC_URI, at))
    assert isinstance(inline, types.InlineCompletionList) and len(inline.items) == 1
    item = inline.items[0]
    assert isinstance(item.insert_text, str) and item.insert_text.strip()
    assert item.range == types.Range(at, at)

    listed = await client.text_document_completion_async(completion_params(DOC_URI, at))
    assert isinstance(listed, types.CompletionList) and len(listed.items) == 1
    edit = listed.items[0].text_edit
    assert isinstance(edit, types.TextEdit)
    assert edit.range.start.line == edit.range.end.line == at.line and edit.range.end == at
    assert edit.new_text == item.insert_text  # nothing typed before the cursor: same text (greedy)


async def test_non_ascii_cursor_line(client: LanguageClient) -> None:
    enc = encoding_of(client.init_result)  # type: ignore[attr-defined]
    text = "s = 'é😀'  # x\nt = 's"
    open_doc(client, f"{DOC_URI}.2.py", text)
    at = position(text, 0, 7, enc)  # after the emoji, before the closing quote
    result = await client.text_document_completion_async(completion_params(f"{DOC_URI}.2.py", at))
    assert isinstance(result, types.CompletionList)
    for item in result.items:
        assert isinstance(item.text_edit, types.TextEdit) and item.text_edit.range.end == at
        assert "\n" not in item.text_edit.new_text  # mid-line: one line
