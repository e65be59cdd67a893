"""The LSP server through a real ``specd serve`` (tiny pair): the debounce follows the typing speed
(fast typing sends fewer completions to the daemon than slow typing, counted by the daemon's
``stats``), a newly opened document is warmed through the daemon's ``warm`` method, and a pause at
a line's end leaves the prompt of the line after Enter computed in the daemon.

The typing test runs the completion service in this process, over the LSP's daemon backend and
socket to the real daemon, on a fake clock and sleep (``tests/fake_time.py``): the gaps between keys
and the debounce's waits are exact however busy the machine is, while every request, cancel and
answer is the daemon's. (The ``specd lsp`` process's time cannot be moved from here over stdio.)
The warm test drives ``specd lsp`` itself over stdio, its daemon started on demand; it counts and
compares no times."""

from __future__ import annotations

import asyncio
import os
import tempfile
import time
from pathlib import Path
from typing import Iterator

import pytest
import pytest_lsp
from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient

from specd.daemon.client import Client
from specd.daemon.listener import is_listening
from specd.lsp.daemon_backend import DaemonBackend
from specd.lsp.server import apply_options
from specd.lsp.service import CompletionService, Suggestion
from specd.lsp.settings import LspSettings
from specd.lsp.shaping import completion_request, request_params
from specd.lsp.window import cut_window
from tests.daemon_harness import ServeProcess, short_dir
from tests.fake_time import FakeTime
from tests.lsp_session import TINY_SERVER, initialize, inline_params, open_doc
from tests.lsp_tiny import ENGINE_FLAGS, tiny_dirs
from tests.memory_documents import MemoryDocuments

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


@pytest.fixture
def daemon() -> Iterator[ServeProcess]:
    """A real ``specd serve`` on the tiny pair, as ``specd lsp`` would start it."""
    target, draft = tiny_dirs()
    serve = ServeProcess(short_dir() / "s.sock", ["--target", str(target), "--draft", str(draft), *ENGINE_FLAGS])
    try:
        yield serve.wait_ready()
    finally:
        serve.stop()


async def type_line(svc: CompletionService, docs: MemoryDocuments, fake: FakeTime, uri: str, gap_s: float,
                    wait_each: bool) -> None:
    """Types TYPED on line 1 of ``uri`` (opened as ``def f():\\n\\n``), one edit and one request per
    key, ``gap_s`` apart on the fake clock (after the answer, with ``wait_each``)."""
    text, pending = "", []
    for ch in TYPED:
        text += ch
        docs.put(uri, f"def f():\n{text}\n")
        svc.changed(uri, (1, len(text)))
        req = asyncio.ensure_future(svc.suggest(uri, 1, len(text)))
        if wait_each:
            await fake.run(req)
        else:
            pending.append(req)
        await fake.advance(gap_s)
    for req in pending:
        assert isinstance(await fake.run(req), (Suggestion, type(None)))  # every request is answered


def reached(before: dict, after: dict) -> int:
    """Completions that reached the daemon: served or cancelled (superseded) there."""
    return (after["served"] - before["served"]) + (after["cancelled"] - before["cancelled"])


async def reached_when_ended(daemon: ServeProcess, before: dict, sent: int) -> int:
    """:func:`reached` once the ``sent`` completions have all ended in the daemon (a cancel ends
    there a little after the service sent it; the bound is against hangs, not a timing assertion)."""
    deadline = time.monotonic() + 60
    while (n := reached(before, daemon.stats()["requests"])) < sent and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    return n


async def test_fast_typing_sends_fewer_completions_to_the_daemon_than_slow_typing(daemon: ServeProcess) -> None:
    fake = FakeTime()
    docs = MemoryDocuments()
    logs: list[str] = []
    settings = apply_options(LspSettings(), {"maxTokens": 4, "prewarm": False, "requestAhead": False}, logs.append)
    svc = CompletionService(DaemonBackend(daemon.socket, None, logs.append), docs, settings, logs.append,
                            clock=fake.clock, sleep=fake.sleep)
    docs.put(f"{ROOT}/warmup.py", "x = 1\n")
    svc.opened(f"{ROOT}/warmup.py")
    await fake.run(svc.suggest(f"{ROOT}/warmup.py", 1, 0))
    counts = {}
    try:
        for name, gap_s, wait_each in (("slow", 0.6, True), ("fast", 0.02, False)):
            uri = f"{ROOT}/{name}.py"
            docs.put(uri, "def f():\n\n")
            svc.opened(uri)
            await fake.advance(0.6)  # a pause: the first key is not typing yet
            before, sent = daemon.stats()["requests"], svc.counters.requests
            await type_line(svc, docs, fake, uri, gap_s, wait_each)
            counts[name] = await reached_when_ended(daemon, before, svc.counters.requests - sent)
    finally:
        await svc.close()
    assert counts["fast"] < counts["slow"] / 2, counts
    assert counts["fast"] >= 1  # the last key is still asked
    assert logs == []


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


async def warms_ended(daemon: ServeProcess, before: dict, count: int) -> None:
    """Waits until ``count`` more warms ended in the daemon (the bound is against hangs)."""
    deadline = time.monotonic() + 60
    while daemon.stats()["requests"]["warmed"] - before["warmed"] < count:
        assert time.monotonic() < deadline, "the warms did not reach the daemon"
        await asyncio.sleep(0.05)


@pytest.mark.parametrize("after_enter", [True, False])
async def test_a_pause_at_a_lines_end_leaves_the_line_after_enter_computed(daemon: ServeProcess,
                                                                            after_enter: bool) -> None:
    """The pause's warms through the real daemon; then the request the editor sends after Enter and
    the indentation finds its whole prompt cached (with the warm off, the text after the cursor
    is computed again: the control)."""
    fake = FakeTime()
    docs = MemoryDocuments()
    logs: list[str] = []
    settings = apply_options(LspSettings(), {"maxTokens": 4, "requestAhead": False, "debounce": False,
                                             "prewarmAfterEnter": after_enter}, logs.append)
    svc = CompletionService(DaemonBackend(daemon.socket, None, logs.append), docs, settings, logs.append,
                            clock=fake.clock, sleep=fake.sleep)
    uri = f"{ROOT}/enter_{after_enter}.py"
    text = "def f(x):\n    y = compute(x)\n\n\ndef g():\n    return f(2) + f(3)\n"
    try:
        docs.put(uri, text)
        before = daemon.stats()["requests"]
        svc.changed(uri, (1, 18))  # the cursor at the end of "    y = compute(x)"
        await fake.advance(settings.prewarm.pause_ms / 1e3 + 0.1)
        await warms_ended(daemon, before, 2 if after_enter else 1)
        entered = text.replace("compute(x)\n", "compute(x)\n    \n", 1)
        window = cut_window(entered, 2, 4, "utf-16", settings.window)
        assert window is not None
        with Client(daemon.socket, timeout=60) as c:
            r = c.call("complete", request_params(completion_request(window, settings), "another"))
        recomputed = r["stats"]["prompt_tokens"] - r["stats"]["prefill_reused"]
        if after_enter:
            assert recomputed <= 1
        else:
            assert recomputed > len(window.suffix) // 2  # the suffix, computed again
        assert logs == []
    finally:
        await svc.close()
