"""``specd/status`` (``lsp/status.py``): the real ``specd lsp`` tells the editor it is loading, then
ready, with the last suggestion's latency; and degraded, with the reason, when no daemon can be
reached. The VS Code extension (``lsp/vscode/``) shows it in its status bar."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import pytest
import pytest_lsp
from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient

from tests.lsp_session import DOC_TEXT, DOC_URI, TINY_SERVER, encoding_of, initialize, inline_params, open_doc, position

NO_DAEMON = Path("/nonexistent-specd-test") / "specd.sock"


def watch(client: LanguageClient) -> list[dict[str, Any]]:
    seen: list[dict[str, Any]] = []

    @client.feature("specd/status")
    def on_status(_ls: LanguageClient, params: Any) -> None:
        seen.append({k: getattr(params, k, None) for k in ("state", "message", "latencyMs")})

    return seen


async def until(seen: list[dict[str, Any]], state: str, limit_s: float = 300.0) -> dict[str, Any]:
    for _ in range(int(limit_s * 20)):
        for s in seen:
            if s["state"] == state:
                return s
        await asyncio.sleep(0.05)
    raise AssertionError(f"no {state!r} status within {limit_s} s: {seen}")


@pytest_lsp.fixture(config=ClientServerConfig(server_command=[*TINY_SERVER, "--in-process"]))
async def client(lsp_client: LanguageClient):
    lsp_client.seen = watch(lsp_client)  # type: ignore[attr-defined]
    lsp_client.init_result = await initialize(lsp_client, "visual-studio-code", maxTokens=16, debounce=False,
                                                statusNotifications=True)  # type: ignore[attr-defined]
    yield
    await lsp_client.shutdown_session()


async def test_loading_then_ready_with_latency(client: LanguageClient) -> None:
    seen = client.seen  # type: ignore[attr-defined]
    await until(seen, "ready")
    assert seen[0]["state"] == "loading", seen
    enc = encoding_of(client.init_result)  # type: ignore[attr-defined]
    open_doc(client)
    at = position(DOC_TEXT, 2, 4, enc)
    result = await client.text_document_inline_completion_async(inline_params(DOC_URI, at))
    assert isinstance(result, types.InlineCompletionList) and result.items
    for _ in range(100):  # the notification follows the answer
        if seen[-1]["latencyMs"] is not None:
            break
        await asyncio.sleep(0.05)
    last = seen[-1]
    assert last["state"] == "ready" and isinstance(last["latencyMs"], (int, float)) and last["latencyMs"] > 0, seen


@pytest_lsp.fixture(config=ClientServerConfig(server_command=[*TINY_SERVER, "--socket", str(NO_DAEMON), "--no-autostart"]))
async def unreachable(lsp_client: LanguageClient):
    lsp_client.seen = watch(lsp_client)  # type: ignore[attr-defined]
    lsp_client.init_result = await initialize(lsp_client, "visual-studio-code", debounce=False,
                                                statusNotifications=True)  # type: ignore[attr-defined]
    yield
    await lsp_client.shutdown_session()


async def test_degraded_when_no_daemon(unreachable: LanguageClient) -> None:
    seen = unreachable.seen  # type: ignore[attr-defined]
    degraded = await until(seen, "degraded", 60.0)
    assert str(NO_DAEMON) in degraded["message"], degraded
    assert seen[0]["state"] == "loading", seen
    enc = encoding_of(unreachable.init_result)  # type: ignore[attr-defined]
    open_doc(unreachable)
    result = await unreachable.text_document_inline_completion_async(inline_params(DOC_URI, position(DOC_TEXT, 2, 4, enc)))
    assert isinstance(result, types.InlineCompletionList) and not result.items
    assert seen[-1]["state"] == "degraded", seen


@pytest_lsp.fixture(config=ClientServerConfig(server_command=[*TINY_SERVER, "--in-process"]))
async def not_asked(lsp_client: LanguageClient):
    lsp_client.seen = watch(lsp_client)  # type: ignore[attr-defined]
    lsp_client.init_result = await initialize(lsp_client, "neovim", maxTokens=16, debounce=False)  # type: ignore[attr-defined]
    yield
    await lsp_client.shutdown_session()


async def test_only_when_asked_for(not_asked: LanguageClient) -> None:
    enc = encoding_of(not_asked.init_result)  # type: ignore[attr-defined]
    open_doc(not_asked)
    result = await not_asked.text_document_inline_completion_async(inline_params(DOC_URI, position(DOC_TEXT, 2, 4, enc)))
    assert isinstance(result, types.InlineCompletionList) and result.items
    await asyncio.sleep(0.3)
    assert not_asked.seen == []  # type: ignore[attr-defined]
