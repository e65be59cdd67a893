"""``specd lsp`` through a real ``specd serve`` on the tiny pair: the server starts the daemon in
the background when none listens, serves completions through it, and starts it again after it
dies (answering empty, with a logged reason, in between)."""

from __future__ import annotations

import os
import signal
import tempfile
from pathlib import Path

import pytest_lsp
from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient

from specd.daemon.client import Client
from specd.daemon.listener import is_listening
from tests.lsp_session import DOC_TEXT, DOC_URI, TINY_SERVER, encoding_of, initialize, inline_params, open_doc, position

RUNTIME = Path(tempfile.mkdtemp(prefix="sdl-", dir="/tmp"))  # AF_UNIX paths stay short
SOCKET = RUNTIME / "specd" / "s.sock"
ENV = {**os.environ, "XDG_RUNTIME_DIR": str(RUNTIME), "XDG_CONFIG_HOME": str(RUNTIME / "config")}
ATTEMPTS = 50  # requests after a daemon death until it is back (each waits for the restart)


def stop_daemon(sig: int | None = None) -> int | None:
    """Stop the daemon on SOCKET (``shutdown``, or a signal); returns its pid."""
    if not is_listening(SOCKET):
        return None
    with Client(SOCKET, timeout=30) as c:
        pid = int(c.call("health")["pid"])
        if sig is None:
            c.call("shutdown")
    if sig is not None:
        os.kill(pid, sig)
    return pid


@pytest_lsp.fixture(config=ClientServerConfig(server_command=[*TINY_SERVER, "--socket", str(SOCKET)], server_env=ENV))
async def client(lsp_client: LanguageClient):
    lsp_client.init_result = await initialize(lsp_client, "neovim", maxTokens=8)  # type: ignore[attr-defined]
    open_doc(lsp_client)
    yield
    await lsp_client.shutdown_session()
    stop_daemon()


async def complete(client: LanguageClient) -> types.InlineCompletionList:
    at = position(DOC_TEXT, 2, 4, encoding_of(client.init_result))  # type: ignore[attr-defined]
    result = await client.text_document_inline_completion_async(inline_params(DOC_URI, at))
    assert isinstance(result, types.InlineCompletionList)
    return result


async def test_autostart_serve_and_restart_after_the_daemon_dies(client: LanguageClient) -> None:
    assert len((await complete(client)).items) == 1  # waits while the daemon starts
    assert is_listening(SOCKET)
    assert any("daemon" in m.message for m in client.log_messages)

    first_pid = stop_daemon(signal.SIGKILL)
    assert first_pid is not None
    for _ in range(ATTEMPTS):
        if len((await complete(client)).items) == 1:
            break
    else:
        raise AssertionError(f"no completion after the daemon died; log: {(SOCKET.parent / 'daemon.log').read_text()[-2000:]}")
    with Client(SOCKET, timeout=30) as c:
        assert int(c.call("health")["pid"]) != first_pid


def daemon_served() -> int:
    with Client(SOCKET, timeout=30) as c:
        return int(c.call("stats")["requests"]["served"])


async def test_typing_along_a_suggestion_is_answered_without_a_request(client: LanguageClient) -> None:
    """The rest of the suggestion on screen is the answer while the user types along it: no
    request reaches the daemon; a character that departs from it asks the daemon again."""
    from tests.lsp_session import insert

    enc = encoding_of(client.init_result)  # type: ignore[attr-defined]
    shown = (await complete(client)).items[0].insert_text
    assert isinstance(shown, str) and len(shown) >= 2 and "\n" not in shown[:1], shown
    served = daemon_served()
    at = position(DOC_TEXT, 2, 4, enc)
    insert(client, DOC_URI, 2, at, shown[0])
    text = DOC_TEXT.replace("\n    \n", "\n    " + shown[0] + "\n")
    again = await client.text_document_inline_completion_async(inline_params(DOC_URI, position(text, 2, 5, enc)))
    assert isinstance(again, types.InlineCompletionList) and len(again.items) == 1
    assert again.items[0].insert_text == shown[1:]
    assert daemon_served() == served  # answered by the LSP itself

    other = "Z" if shown[1] != "Z" else "Y"  # departs from the suggestion
    insert(client, DOC_URI, 3, position(text, 2, 5, enc), other)
    text = text.replace("\n    " + shown[0] + "\n", "\n    " + shown[0] + other + "\n")
    await client.text_document_inline_completion_async(inline_params(DOC_URI, position(text, 2, 6, enc)))
    assert daemon_served() == served + 1
