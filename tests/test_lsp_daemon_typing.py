"""``specd lsp`` through a real ``specd serve`` (tiny pair): the debounce follows the typing speed
(fast typing sends fewer completions to the daemon than slow typing, counted by the daemon's
``stats``), and a newly opened document is warmed through the daemon's ``warm`` method."""

from __future__ import annotations

import asyncio
import os
import tempfile
import time
from pathlib import Path

import pytest_lsp
from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient

from specd.daemon.client import Client
from specd.daemon.listener import is_listening
from tests.lsp_session import TINY_SERVER, encoding_of, initialize, inline_params, insert, open_doc, position, sent

RUNTIME = Path(tempfile.mkdtemp(prefix="sdt-", dir="/tmp"))  # AF_UNIX paths stay short
SOCKET = RUNTIME / "specd" / "s.sock"
ENV = {**os.environ, "XDG_RUNTIME_DIR": str(RUNTIME), "XDG_CONFIG_HOME": str(RUNTIME / "config")}
ROOT = "file:///work/proj"
TYPED = "value = compute(alpha, beta)"


def stats() -> dict:
    with Client(SOCKET, timeout=60) as c:
        return c.call("stats")["requests"]


def stop_daemon() -> None:
    if is_listening(SOCKET):
        with Client(SOCKET, timeout=30) as c:
            c.call("shutdown")


@pytest_lsp.fixture(config=ClientServerConfig(server_command=[*TINY_SERVER, "--socket", str(SOCKET)], server_env=ENV))
async def client(lsp_client: LanguageClient):
    yield
    await lsp_client.shutdown_session()
    stop_daemon()


async def type_line(client: LanguageClient, uri: str, gap_s: float, wait_each: bool) -> None:
    """Types TYPED on line 1 of ``uri`` (opened as ``def f():\\n\\n``), one didChange and one
    inline request per key, ``gap_s`` apart (after the answer, with ``wait_each``)."""
    enc = encoding_of(client.init_result)  # type: ignore[attr-defined]
    text, pending = "", []
    for version, ch in enumerate(TYPED, start=2):
        insert(client, uri, version, position("\n" + text, 1, len(text), enc), ch)
        text += ch
        req = await sent(client.text_document_inline_completion_async(
            inline_params(uri, position("\n" + text, 1, len(text), enc))))
        if wait_each:
            await req
        else:
            pending.append(req)
        await asyncio.sleep(gap_s)
    for req in pending:
        assert isinstance(await req, types.InlineCompletionList)  # every request is answered


def reached(before: dict, after: dict) -> int:
    """Completions that reached the daemon: served or cancelled (superseded) there."""
    return (after["served"] - before["served"]) + (after["cancelled"] - before["cancelled"])


async def test_fast_typing_sends_fewer_completions_to_the_daemon_than_slow_typing(client: LanguageClient) -> None:
    client.init_result = await initialize(client, "neovim", maxTokens=4, prewarm=False,  # type: ignore[attr-defined]
                                          requestAhead=False)
    open_doc(client, f"{ROOT}/warmup.py", "x = 1\n")
    await client.text_document_inline_completion_async(inline_params(f"{ROOT}/warmup.py", types.Position(1, 0)))
    counts = {}
    for name, gap_s, wait_each in (("slow", 0.6, True), ("fast", 0.02, False)):
        uri = f"{ROOT}/{name}.py"
        open_doc(client, uri, "def f():\n\n")
        await asyncio.sleep(0.6)  # a pause: the first key is not typing yet
        before = stats()
        await type_line(client, uri, gap_s, wait_each)
        await asyncio.sleep(0.3)
        counts[name] = reached(before, stats())
    assert counts["fast"] < counts["slow"] / 2, counts
    assert counts["fast"] >= 1  # the last key is still asked


async def test_a_newly_opened_document_is_warmed_through_the_daemon(client: LanguageClient) -> None:
    client.init_result = await initialize(client, "neovim", maxTokens=4)  # type: ignore[attr-defined]
    open_doc(client, f"{ROOT}/first.py", "x = 1\n")  # starts the daemon (autostart)
    await client.text_document_inline_completion_async(inline_params(f"{ROOT}/first.py", types.Position(1, 0)))
    before = stats()
    open_doc(client, f"{ROOT}/second.py", "import os\n\n\ndef main():\n    return os.getcwd()\n")
    deadline = time.monotonic() + 60
    while stats()["warmed"] == before["warmed"]:
        assert time.monotonic() < deadline, "no warm reached the daemon after didOpen"
        await asyncio.sleep(0.1)
    assert stats()["served"] == before["served"]  # a warm, not a completion
    assert not any("warm failed" in m.message for m in client.log_messages)
