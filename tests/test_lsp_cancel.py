"""Cancellation and staleness through the real server (in-process engine, tiny pair): a long
generation (thousands of tokens if left alone) is cut short by ``$/cancelRequest``, by a newer
request for the document, or by an edit; the server keeps serving."""

from __future__ import annotations

import pytest
import pytest_lsp
from lsprotocol import types
from pygls.exceptions import JsonRpcRequestCancelled
from pytest_lsp import ClientServerConfig, LanguageClient

from tests.lsp_session import (DOC_TEXT, DOC_URI, EDITORS, TINY_SERVER, configure, encoding_of, initialize,
                               inline_params, insert, open_doc, position, sent)

LONG = 3000  # tokens: a minute of work on the tiny pair unless cancelled


@pytest_lsp.fixture(config=ClientServerConfig(server_command=[*TINY_SERVER, "--in-process"]), params=EDITORS)
async def client(lsp_client: LanguageClient, request: pytest.FixtureRequest):
    lsp_client.init_result = await initialize(lsp_client, request.param, maxTokens=LONG)  # type: ignore[attr-defined]
    open_doc(lsp_client)
    yield
    await lsp_client.shutdown_session()


def end_of_doc(client: LanguageClient) -> types.Position:
    return position(DOC_TEXT, 2, 4, encoding_of(client.init_result))  # type: ignore[attr-defined]


async def still_serving(client: LanguageClient, at: types.Position) -> None:
    configure(client, maxTokens=8)
    result = await client.text_document_inline_completion_async(inline_params(DOC_URI, at))
    assert isinstance(result, types.InlineCompletionList) and len(result.items) == 1


async def test_cancel_request(client: LanguageClient) -> None:
    at = end_of_doc(client)
    pending = await sent(client.protocol.send_request_async(
        types.TEXT_DOCUMENT_INLINE_COMPLETION, inline_params(DOC_URI, at), msg_id="long-1"))
    client.protocol.notify(types.CANCEL_REQUEST, types.CancelParams(id="long-1"))
    with pytest.raises(JsonRpcRequestCancelled):
        await pending
    await still_serving(client, at)


async def test_newer_request_for_the_document_supersedes(client: LanguageClient) -> None:
    at = end_of_doc(client)
    older = await sent(client.text_document_inline_completion_async(inline_params(DOC_URI, at)))
    configure(client, maxTokens=8)
    newer = await sent(client.text_document_inline_completion_async(inline_params(DOC_URI, at)))
    first, second = await older, await newer
    assert isinstance(first, types.InlineCompletionList) and len(first.items) == 0
    assert isinstance(second, types.InlineCompletionList) and len(second.items) == 1


async def test_an_edit_makes_the_answer_empty(client: LanguageClient) -> None:
    at = end_of_doc(client)
    pending = await sent(client.text_document_inline_completion_async(inline_params(DOC_URI, at)))
    insert(client, DOC_URI, 2, at, "x")
    result = await pending
    assert isinstance(result, types.InlineCompletionList) and len(result.items) == 0
    await still_serving(client, types.Position(at.line, at.character + 1))
