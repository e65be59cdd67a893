"""Bad input and heavy input against the real server: errors or empty answers, never a popup, and
the server keeps serving."""

from __future__ import annotations

import asyncio
import json
from concurrent.futures import Future

import pytest
import pytest_lsp
from lsprotocol import types
from pygls.exceptions import JsonRpcInvalidParams, JsonRpcMethodNotFound
from pytest_lsp import ClientServerConfig, LanguageClient

from tests.lsp_session import (DOC_TEXT, DOC_URI, TINY_SERVER, completion_params, encoding_of, initialize,
                               inline_params, insert, open_doc, position)


@pytest_lsp.fixture(config=ClientServerConfig(server_command=[*TINY_SERVER, "--in-process"]))
async def client(lsp_client: LanguageClient):
    lsp_client.init_result = await initialize(lsp_client, "visual-studio-code", maxTokens=8)  # type: ignore[attr-defined]
    open_doc(lsp_client)
    yield
    assert lsp_client.messages == []  # never a window/showMessage popup
    await lsp_client.shutdown_session()


async def serves(client: LanguageClient) -> None:
    at = position(DOC_TEXT, 2, 4, encoding_of(client.init_result))  # type: ignore[attr-defined]
    result = await client.text_document_inline_completion_async(inline_params(DOC_URI, at))
    assert isinstance(result, types.InlineCompletionList) and len(result.items) == 1


async def test_document_never_opened(client: LanguageClient) -> None:
    uri = "file:///work/proj/never.py"
    listed = await client.text_document_completion_async(completion_params(uri, types.Position(0, 0)))
    inline = await client.text_document_inline_completion_async(inline_params(uri, types.Position(0, 0)))
    assert isinstance(listed, types.CompletionList) and len(listed.items) == 0
    assert isinstance(inline, types.InlineCompletionList) and len(inline.items) == 0
    assert any("not open" in m.message for m in client.log_messages)
    await serves(client)


@pytest.mark.parametrize("line, character", [(99, 0), (2, 10_000), (0, 2**31 - 1)])
async def test_positions_outside_the_document(client: LanguageClient, line: int, character: int) -> None:
    result = await client.text_document_completion_async(completion_params(DOC_URI, types.Position(line, character)))
    assert isinstance(result, types.CompletionList)
    if line >= 3:
        assert len(result.items) == 0 and any("outside" in m.message for m in client.log_messages)
    await serves(client)


def raw_request(client: LanguageClient, rid: str, method: str, params: object) -> "asyncio.Future[object]":
    """Write a request as raw JSON (the typed client cannot send malformed params) and wait for
    the answer to its id."""
    body = json.dumps({"jsonrpc": "2.0", "id": rid, "method": method, "params": params}).encode()
    answer: Future[object] = Future()
    client.protocol._request_futures[rid] = answer  # the client routes the response by id
    client.protocol.writer.write(b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
    return asyncio.wrap_future(answer)


@pytest.mark.parametrize("method, params", [
    (types.TEXT_DOCUMENT_COMPLETION, {"textDocument": 5}),
    (types.TEXT_DOCUMENT_INLINE_COMPLETION, {"position": "here"}),
    (types.TEXT_DOCUMENT_COMPLETION, {"textDocument": {"uri": DOC_URI}, "position": {"line": -1, "character": 0}}),
])
async def test_malformed_params_get_an_error(client: LanguageClient, method: str, params: object) -> None:
    with pytest.raises(JsonRpcInvalidParams):
        await raw_request(client, "bad-1", method, params)
    await serves(client)


async def test_unknown_method_and_broken_json(client: LanguageClient) -> None:
    with pytest.raises(JsonRpcMethodNotFound):
        await client.protocol.send_request_async("specd/noSuchMethod", {})
    body = b'{"jsonrpc": "2.0", "id": 77, "method": '
    client.protocol.writer.write(b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
    await serves(client)


async def test_change_to_an_unopened_document_is_logged(client: LanguageClient) -> None:
    uri = "file:///work/proj/ghost.py"
    assert not any(uri in m.message for m in client.log_messages)
    insert(client, uri, 3, types.Position(0, 0), "x")
    await serves(client)  # the server handles notifications in order: its log came before this answer
    # a window/logMessage (never a showMessage popup: the fixture checks) names the document
    assert any(uri in m.message for m in client.log_messages), [m.message for m in client.log_messages]


async def test_did_change_storm_then_complete(client: LanguageClient) -> None:
    enc = encoding_of(client.init_result)  # type: ignore[attr-defined]
    text = DOC_TEXT
    for version in range(2, 302):  # 300 keystrokes, no waiting
        at = position(text, 2, len(text.split("\n")[2]), enc)
        insert(client, DOC_URI, version, at, "é")
        text = _append_on_line(text, 2, "é")
    at = position(text, 2, len(text.split("\n")[2]), enc)
    result = await client.text_document_inline_completion_async(inline_params(DOC_URI, at))
    assert isinstance(result, types.InlineCompletionList) and len(result.items) == 1
    assert result.items[0].range == types.Range(at, at)


def _append_on_line(text: str, line: int, s: str) -> str:
    lines = text.split("\n")
    lines[line] += s
    return "\n".join(lines)


async def test_large_file(client: LanguageClient) -> None:
    big = "".join(f"value_{i} = {i} * 2  # ünïcödé\n" for i in range(60_000))  # about 2 MB
    uri = "file:///work/proj/big.py"
    open_doc(client, uri, big)
    enc = encoding_of(client.init_result)  # type: ignore[attr-defined]
    at = position(big, 30_000, 0, enc)
    result = await client.text_document_completion_async(completion_params(uri, at))
    assert isinstance(result, types.CompletionList) and len(result.items) <= 1
    await serves(client)

