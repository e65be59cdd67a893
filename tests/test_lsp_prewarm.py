"""The completion service's scheduling: warm on open, after a pause and on a cursor jump (with the
prompt-shaping parameters of the request that would follow), never holding a completion up, errors
only logged; the debounce dropping requests replaced while they wait; request-ahead after an
accepted suggestion. The backend is a scripted one that records what reaches it (the daemon's side
is tested in test_lsp_daemon.py and test_daemon_*.py)."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from specd.lsp.backend import BackendUnavailable
from specd.lsp.documents import DocumentState
from specd.lsp.settings import DebounceSettings, LspSettings, PrewarmSettings
from specd.lsp.shaping import completion_request
from specd.lsp.service import CompletionService
from specd.lsp.window import cut_window
from specd.requests import CompletionRequest

URI = "file:///proj/fib.py"
DOC = "def fib(n):\n    \n" + "".join(f"x{i} = {i}\n" for i in range(60))
PAUSE_MS = 40.0


class Docs:
    def __init__(self) -> None:
        self.docs: dict[str, DocumentState] = {}

    def put(self, uri: str, text: str) -> None:
        old = self.docs.get(uri)
        self.docs[uri] = DocumentState(uri, (old.version + 1) if old and old.version else 1, text, "python",
                                       uri.removeprefix("file://"))

    def get(self, uri: str) -> DocumentState | None:
        return self.docs.get(uri)

    def root(self) -> str | None:
        return "/proj"

    def encoding(self) -> str:
        return "utf-16"


class Scripted:
    """Answers completions from a list (then the last one); records completes and warms."""

    def __init__(self, answers: list[str], warm_error: bool = False, warm_blocks: bool = False) -> None:
        self.answers = list(answers)
        self.completes: list[CompletionRequest] = []
        self.warms: list[CompletionRequest] = []
        self.warm_error = warm_error
        self.warm_blocks = warm_blocks
        self.warm_cancelled = 0

    def describe(self) -> str:
        return "scripted"

    async def start(self) -> None:
        pass

    async def complete(self, request: CompletionRequest, session: str) -> str:
        self.completes.append(request)
        await asyncio.sleep(0.001)
        return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]

    async def warm(self, request: CompletionRequest, session: str) -> int:
        self.warms.append(request)
        if self.warm_error:
            raise BackendUnavailable("daemon error -32603 on warm: model failure")
        if self.warm_blocks:
            try:
                await asyncio.sleep(60)
            except asyncio.CancelledError:
                self.warm_cancelled += 1
                raise
        return len(request.prefix)

    async def close(self) -> None:
        pass


def service(backend: Scripted, debounce: bool = False, **prewarm: object) -> tuple[CompletionService, Docs, list[str]]:
    docs = Docs()
    logs: list[str] = []
    settings = LspSettings(max_tokens=16, repo_context=False, debounce=DebounceSettings(enabled=debounce),
                           prewarm=PrewarmSettings(**{"pause_ms": PAUSE_MS, **prewarm}))
    return CompletionService(backend, docs, settings, logs.append), docs, logs


def request_at(svc: CompletionService, text: str, line: int, character: int) -> CompletionRequest:
    w = cut_window(text, line, character, "utf-16", svc.settings.window)
    assert w is not None
    return completion_request(w, "", svc.settings)


def type_at(docs: Docs, svc: CompletionService, text: str, line: int, col: int, ch: str) -> str:
    lines = text.split("\n")
    lines[line] = lines[line][:col] + ch + lines[line][col:]
    new = "\n".join(lines)
    docs.put(URI, new)
    svc.changed(URI, line, (line, col + len(ch)))
    return new


async def settle(ms: float = PAUSE_MS * 3) -> None:
    await asyncio.sleep(ms / 1e3)


async def test_a_newly_opened_document_is_warmed_with_the_prompt_its_first_request_uses() -> None:
    backend = Scripted(["return n"])
    svc, docs, _ = service(backend)
    docs.put(URI, DOC)
    svc.opened(URI)
    await settle(10)
    line = DOC.count("\n")  # under 200 lines: the end of the document
    assert backend.warms == [request_at(svc, DOC, line, 1 << 30)]


async def test_a_pause_after_an_edit_warms_the_cursors_prompt_unless_a_request_computed_it() -> None:
    backend = Scripted(["return n"])
    svc, docs, _ = service(backend, on_open=False)
    docs.put(URI, DOC)
    svc.opened(URI)
    text = type_at(docs, svc, DOC, 1, 4, "r")
    await settle()
    assert backend.warms == [request_at(svc, text, 1, 5)]
    text = type_at(docs, svc, text, 1, 5, "e")
    assert await svc.suggest(URI, 1, 6) is not None
    await settle()
    assert len(backend.warms) == 1 and len(backend.completes) == 1  # the request computed it


async def test_an_edit_far_from_the_previous_one_warms_at_once() -> None:
    backend = Scripted(["return n"])
    svc, docs, _ = service(backend, on_open=False, pause_ms=10_000.0)
    docs.put(URI, DOC)
    svc.opened(URI)
    text = type_at(docs, svc, DOC, 1, 4, "r")
    await settle(10)
    assert backend.warms == []  # near: waits for the pause
    text = type_at(docs, svc, text, 50, 0, "y")
    await settle(10)
    assert backend.warms == [request_at(svc, text, 50, 1)]


async def test_a_completion_cancels_the_documents_warm_and_does_not_wait_for_it() -> None:
    backend = Scripted(["return n"], warm_blocks=True)
    svc, docs, _ = service(backend)
    docs.put(URI, DOC)
    svc.opened(URI)
    await settle(10)
    assert len(backend.warms) == 1
    s = await asyncio.wait_for(svc.suggest(URI, 1, 4), timeout=5)  # the warm would block for 60 s
    assert s is not None and s.text == "return n"
    await settle(10)
    assert backend.warm_cancelled == 1


async def test_warm_errors_are_logged_and_completions_go_on() -> None:
    backend = Scripted(["return n"], warm_error=True)
    svc, docs, logs = service(backend)
    docs.put(URI, DOC)
    svc.opened(URI)
    await settle(10)
    assert any("warm failed" in m for m in logs) and svc.counters.warm_errors == 1
    s = await svc.suggest(URI, 1, 4)
    assert s is not None and s.text == "return n"


async def test_fast_typing_sends_fewer_requests_than_slow_typing() -> None:
    """Each key: an edit, then a request (as editors send them). Typed 30 ms apart, a request
    waits longer than the next key takes and is dropped; 500 ms apart (pauses) none waits."""
    counts = {}
    for name, gap_s in (("fast", 0.03), ("slow", 0.5)):
        backend = Scripted(["return n"])
        svc, docs, _ = service(backend, debounce=True, enabled=False)
        docs.put(URI, DOC)
        svc.opened(URI)
        text, col, pending = DOC, 4, []
        for ch in "return n":
            text = type_at(docs, svc, text, 1, col, ch)
            col += 1
            pending.append(asyncio.ensure_future(svc.suggest(URI, 1, col)))
            await asyncio.sleep(gap_s)
        answers = await asyncio.gather(*pending)
        assert answers[-1] is not None or name == "slow"  # the last key is answered
        counts[name] = len(backend.completes)
        keys = len("return n") - svc.counters.answered_locally  # keys that needed an answer from the backend
        assert counts[name] + svc.counters.debounced == keys  # every other one was dropped while it waited
        if name == "slow":
            assert svc.counters.debounced == 0
    assert counts["fast"] < counts["slow"]


async def test_an_accepted_suggestion_asks_for_the_next_one_ahead() -> None:
    backend = Scripted(["return n", "\n    # next"])
    svc, docs, _ = service(backend, enabled=False)
    docs.put(URI, DOC)
    svc.opened(URI)
    s = await svc.suggest(URI, 1, 4)
    assert s is not None and s.text == "return n" and len(backend.completes) == 1
    accepted = type_at(docs, svc, DOC, 1, 4, s.text)  # the editor inserts the suggestion
    await settle(10)
    assert len(backend.completes) == 2  # asked ahead, before the editor's next request
    assert backend.completes[1] == request_at(svc, accepted, 1, 12)
    nxt = await svc.suggest(URI, 1, 12)
    assert nxt is not None and nxt.text == "\n    # next"
    assert len(backend.completes) == 2 and svc.counters.answered_ahead == 1


async def test_typing_something_else_is_no_accept() -> None:
    backend = Scripted(["return n"])
    svc, docs, _ = service(backend, enabled=False)
    docs.put(URI, DOC)
    svc.opened(URI)
    assert await svc.suggest(URI, 1, 4) is not None
    type_at(docs, svc, DOC, 1, 4, "pass")
    await settle(10)
    assert len(backend.completes) == 1 and svc.counters.accepts == 0


@pytest.mark.parametrize("options,attr,value", [
    ({"prewarm": False}, "prewarm", False), ({"debounce": False}, "debounce", False),
    ({"requestAhead": False}, "request_ahead", False)])
def test_the_switches_are_editor_options(options, attr, value) -> None:
    from specd.lsp.server import apply_options

    warnings: list[str] = []
    s = apply_options(LspSettings(), options, warnings.append)
    got = getattr(s, attr)
    assert (got.enabled if dataclasses.is_dataclass(got) else got) is value and warnings == []
    assert apply_options(LspSettings(), {"prewarm": "yes"}, warnings.append) == LspSettings() and warnings


async def test_context_never_turns_a_suggestion_into_nothing() -> None:
    """An answer that is empty after post-processing while the request carried repository context
    is asked again without the context, and that answer is shown."""
    backend = Scripted(["   \n", "return n"])
    docs = Docs()
    settings = LspSettings(max_tokens=16, repo_context=True, debounce=DebounceSettings(enabled=False),
                           prewarm=PrewarmSettings(enabled=False))
    svc = CompletionService(backend, docs, settings, [].append)
    other = "file:///proj/util.py"
    docs.put(other, "def helper(x):\n    return x + 1\n")
    svc.opened(other)
    svc.changed(other, 1, (1, 4))
    docs.put(URI, DOC)
    svc.opened(URI)
    got = await svc.suggest(URI, 1, 4)
    assert [bool(r.context) for r in backend.completes] == [True, False]
    assert got is not None and got.text == "return n"
    assert svc.counters.context_retries == 1


async def test_an_empty_answer_without_context_is_not_asked_again() -> None:
    backend = Scripted(["   \n", "return n"])
    svc, docs, _ = service(backend, enabled=False)
    docs.put(URI, DOC)
    svc.opened(URI)
    assert await svc.suggest(URI, 1, 4) is None
    assert len(backend.completes) == 1 and svc.counters.context_retries == 0
