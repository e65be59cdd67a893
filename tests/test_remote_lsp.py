"""``specd lsp`` against a shared server: the team's setup. The editor's ``specd lsp --config
team.toml`` starts ``specd serve`` in the background, whose ``[daemon] backend`` points at a real
OpenAI-compatible server (llama-cpp-python's, else llama-server) on the draft GGUF; ghost text comes
back through the remote backend, and the daemon loaded no model."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import pytest
import pytest_lsp
from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient

from specd.daemon.client import Client
from tests.lsp_session import DOC_TEXT, DOC_URI, encoding_of, initialize, inline_params, open_doc, position
from tests.remote_servers import openai_compatible_server

RUNTIME = Path(tempfile.mkdtemp(prefix="sdr-", dir="/tmp"))  # AF_UNIX paths stay short
SOCKET = RUNTIME / "specd" / "s.sock"
CONFIG = RUNTIME / "team.toml"
ENV = {**os.environ, "XDG_RUNTIME_DIR": str(RUNTIME), "XDG_CONFIG_HOME": str(RUNTIME / "config")}
LSP = [sys.executable, "-m", "specd", "lsp", "--socket", str(SOCKET), "--config", str(CONFIG)]


@pytest.fixture(scope="module")
def shared_server(tmp_path_factory):
    """An OpenAI-compatible server, and the team's config file pointing at it."""
    server, url = openai_compatible_server(tmp_path_factory.mktemp("server") / "server.log")
    CONFIG.write_text(f'[daemon]\nbackend = "openai:{url}"\nremote_timeout_s = 120.0\n')
    yield server
    if SOCKET.exists():
        with Client(SOCKET, timeout=30) as c:
            c.call("shutdown")
    server.stop()


@pytest.fixture(scope="module", autouse=True)
def _server_first(shared_server):
    return shared_server


@pytest_lsp.fixture(config=ClientServerConfig(server_command=LSP, server_env=ENV))
async def client(lsp_client: LanguageClient):
    lsp_client.init_result = await initialize(lsp_client, "neovim", maxTokens=16)  # type: ignore[attr-defined]
    open_doc(lsp_client)
    yield
    await lsp_client.shutdown_session()


async def test_ghost_text_comes_from_the_shared_server(client: LanguageClient) -> None:
    at = position(DOC_TEXT, 2, 4, encoding_of(client.init_result))  # type: ignore[attr-defined]
    result = await client.text_document_inline_completion_async(inline_params(DOC_URI, at))
    assert isinstance(result, types.InlineCompletionList) and len(result.items) == 1
    assert str(result.items[0].insert_text).strip()
    with Client(SOCKET, timeout=30) as c:
        health = c.call("health")
        stats = c.call("stats")
    assert health["status"] == "ok" and health["engine"]["backend"] == "openai"
    assert stats["requests"]["served"] >= 1
    assert "target_weight_bytes" not in stats["memory"]  # the daemon the LSP started loaded no model
