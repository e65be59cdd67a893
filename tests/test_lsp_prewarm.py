"""The completion service's scheduling: warm on open, after a pause and on a cursor jump (with the
prompt-shaping parameters of the request that would follow), never holding a completion up, errors
only logged; the debounce dropping requests replaced while they wait; request-ahead after an
accepted suggestion. The backend is a scripted one that records what reaches it (the daemon's side
is tested in test_lsp_daemon.py and test_daemon_*.py). Time is a fake clock and sleep
(``tests/fake_time.py``) that the tests move: typing speeds, pauses and waits are exact, however
busy the machine."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from specd.lsp.settings import DebounceSettings, LspSettings, PrewarmSettings
from specd.lsp.shaping import completion_request
from specd.lsp.service import CompletionService
from specd.lsp.window import cut_window
from specd.requests import CompletionRequest
from tests.fake_time import FakeTime
from tests.memory_documents import MemoryDocuments as Docs
from tests.scripted_backend import Scripted

URI = "file:///proj/fib.py"
DOC = "def fib(n):\n    \n" + "".join(f"x{i} = {i}\n" for i in range(60))
PAUSE_MS = 40.0


@pytest.fixture
def fake() -> FakeTime:
    return FakeTime()


def service(backend: Scripted, fake: FakeTime, debounce: bool = False,
            **prewarm: object) -> tuple[CompletionService, Docs, list[str]]:
    docs = Docs()
    logs: list[str] = []
    settings = LspSettings(max_tokens=16, debounce=DebounceSettings(enabled=debounce),
                           prewarm=PrewarmSettings(**{"pause_ms": PAUSE_MS, **prewarm}))
    return CompletionService(backend, docs, settings, logs.append, clock=fake.clock, sleep=fake.sleep), docs, logs


def request_at(svc: CompletionService, text: str, line: int, character: int) -> CompletionRequest:
    w = cut_window(text, line, character, "utf-16", svc.settings.window)
    assert w is not None
    return completion_request(w, svc.settings)


def type_at(docs: Docs, svc: CompletionService, text: str, line: int, col: int, ch: str) -> str:
    lines = text.split("\n")
    lines[line] = lines[line][:col] + ch + lines[line][col:]
    new = "\n".join(lines)
    docs.put(URI, new)
    svc.changed(URI, (line, col + len(ch)))
    return new


async def settle(fake: FakeTime, ms: float = PAUSE_MS * 3) -> None:
    await fake.advance(ms / 1e3)


async def test_a_newly_opened_document_is_warmed_with_the_prompt_its_first_request_uses(fake: FakeTime) -> None:
    backend = Scripted(["return n"], fake.sleep)
    svc, docs, _ = service(backend, fake)
    docs.put(URI, DOC)
    svc.opened(URI)
    await settle(fake, 10)
    line = DOC.count("\n")  # under 200 lines: the end of the document
    assert backend.warms == [request_at(svc, DOC, line, 1 << 30)]


async def test_a_pause_after_an_edit_warms_the_cursors_prompt_unless_a_request_computed_it(fake: FakeTime) -> None:
    backend = Scripted(["return n"], fake.sleep)
    svc, docs, _ = service(backend, fake, on_open=False, after_enter=False)
    docs.put(URI, DOC)
    svc.opened(URI)
    text = type_at(docs, svc, DOC, 1, 4, "r")
    await settle(fake)
    assert backend.warms == [request_at(svc, text, 1, 5)]
    text = type_at(docs, svc, text, 1, 5, "e")
    assert await fake.run(svc.suggest(URI, 1, 6)) is not None
    await settle(fake)
    assert len(backend.warms) == 1 and len(backend.completes) == 1  # the request computed it


async def test_an_edit_far_from_the_previous_one_warms_at_once(fake: FakeTime) -> None:
    backend = Scripted(["return n"], fake.sleep)
    svc, docs, _ = service(backend, fake, on_open=False, pause_ms=10_000.0)
    docs.put(URI, DOC)
    svc.opened(URI)
    text = type_at(docs, svc, DOC, 1, 4, "r")
    await settle(fake, 10)
    assert backend.warms == []  # near: waits for the pause
    text = type_at(docs, svc, text, 50, 0, "y")
    await settle(fake, 10)
    assert backend.warms == [request_at(svc, text, 50, 1)]


async def test_a_completion_cancels_the_documents_warm_and_does_not_wait_for_it(fake: FakeTime) -> None:
    backend = Scripted(["return n"], fake.sleep, warm_blocks=True)
    svc, docs, _ = service(backend, fake)
    docs.put(URI, DOC)
    svc.opened(URI)
    await settle(fake, 10)
    assert len(backend.warms) == 1
    s = await asyncio.wait_for(fake.run(svc.suggest(URI, 1, 4)), timeout=5)  # the warm would block for 60 s
    assert s is not None and s.text == "return n"
    await settle(fake, 10)
    assert backend.warm_cancelled == 1


async def test_warm_errors_are_logged_and_completions_go_on(fake: FakeTime) -> None:
    backend = Scripted(["return n"], fake.sleep, warm_error=True)
    svc, docs, logs = service(backend, fake)
    docs.put(URI, DOC)
    svc.opened(URI)
    await settle(fake, 10)
    assert any("warm failed" in m for m in logs) and svc.counters.warm_errors == 1
    s = await fake.run(svc.suggest(URI, 1, 4))
    assert s is not None and s.text == "return n"


async def test_fast_typing_sends_fewer_requests_than_slow_typing(fake: FakeTime) -> None:
    """Each key: an edit, then a request (as editors send them). Typed 30 ms apart, a request
    waits longer than the next key takes and is dropped; 500 ms apart (pauses) none waits."""
    counts = {}
    for name, gap_s in (("fast", 0.03), ("slow", 0.5)):
        backend = Scripted(["return n"], fake.sleep)
        svc, docs, _ = service(backend, fake, debounce=True, enabled=False)
        docs.put(URI, DOC)
        svc.opened(URI)
        text, col, pending = DOC, 4, []
        for ch in "return n":
            text = type_at(docs, svc, text, 1, col, ch)
            col += 1
            pending.append(asyncio.ensure_future(svc.suggest(URI, 1, col)))
            await fake.advance(gap_s)
        answers = await fake.run(asyncio.gather(*pending))
        assert answers[-1] is not None or name == "slow"  # the last key is answered
        counts[name] = len(backend.completes)
        keys = len("return n") - svc.counters.answered_locally  # keys that needed an answer from the backend
        assert counts[name] + svc.counters.debounced == keys  # every other one was dropped while it waited
        if name == "slow":
            assert svc.counters.debounced == 0
    assert counts["fast"] < counts["slow"]


async def test_an_accepted_suggestion_asks_for_the_next_one_ahead(fake: FakeTime) -> None:
    backend = Scripted(["return n", "\n    # next"], fake.sleep)
    svc, docs, _ = service(backend, fake, enabled=False)
    docs.put(URI, DOC)
    svc.opened(URI)
    s = await fake.run(svc.suggest(URI, 1, 4))
    assert s is not None and s.text == "return n" and len(backend.completes) == 1
    accepted = type_at(docs, svc, DOC, 1, 4, s.text)  # the editor inserts the suggestion
    await settle(fake, 10)
    assert len(backend.completes) == 2  # asked ahead, before the editor's next request
    assert backend.completes[1] == request_at(svc, accepted, 1, 12)
    nxt = await fake.run(svc.suggest(URI, 1, 12))
    assert nxt is not None and nxt.text == "\n    # next"
    assert len(backend.completes) == 2 and svc.counters.answered_ahead == 1


async def test_typing_something_else_is_no_accept(fake: FakeTime) -> None:
    backend = Scripted(["return n"], fake.sleep)
    svc, docs, _ = service(backend, fake, enabled=False)
    docs.put(URI, DOC)
    svc.opened(URI)
    assert await fake.run(svc.suggest(URI, 1, 4)) is not None
    type_at(docs, svc, DOC, 1, 4, "pass")
    await settle(fake, 10)
    assert len(backend.completes) == 1 and svc.counters.accepts == 0


@pytest.mark.parametrize("options,attr,value", [
    ({"prewarm": False}, "prewarm", False), ({"debounce": False}, "debounce", False),
    ({"requestAhead": False}, "request_ahead", False), ({"prewarmAfterEnter": False}, "prewarm.after_enter", False)])
def test_the_switches_are_editor_options(options, attr, value) -> None:
    from specd.lsp.server import apply_options

    warnings: list[str] = []
    s = apply_options(LspSettings(), options, warnings.append)
    got: object = s
    for name in attr.split("."):
        got = getattr(got, name)
    assert (got.enabled if dataclasses.is_dataclass(got) else got) is value and warnings == []
    assert apply_options(LspSettings(), {"prewarm": "yes"}, warnings.append) == LspSettings() and warnings


async def test_an_empty_answer_is_not_asked_again(fake: FakeTime) -> None:
    backend = Scripted(["   \n", "return n"], fake.sleep)
    svc, docs, _ = service(backend, fake, enabled=False)
    docs.put(URI, DOC)
    svc.opened(URI)
    assert await fake.run(svc.suggest(URI, 1, 4)) is None
    assert len(backend.completes) == 1


def enter_at(text: str, line: int, indent: str) -> str:
    """``text`` with Enter and ``indent`` typed at the end of ``line``."""
    lines = text.split("\n")
    return "\n".join(lines[: line + 1] + [indent] + lines[line + 1 :])


async def test_a_pause_at_a_lines_end_warms_the_line_after_enter_too(fake: FakeTime) -> None:
    backend = Scripted(["return n"], fake.sleep)
    svc, docs, _ = service(backend, fake, on_open=False)
    docs.put(URI, DOC)
    svc.opened(URI)
    text = type_at(docs, svc, DOC, 1, 4, "r")
    await settle(fake)
    # the cursor's prompt first, then the next line's at the line's indentation
    assert backend.warms == [request_at(svc, text, 1, 5), request_at(svc, enter_at(text, 1, "    "), 2, 4)]
    text = type_at(docs, svc, text, 1, 5, "e")
    assert await fake.run(svc.suggest(URI, 1, 6)) is not None
    await settle(fake)
    # the request computed the cursor's prompt: only the line after Enter is warmed
    assert backend.warms[2:] == [request_at(svc, enter_at(text, 1, "    "), 2, 4)]


async def test_after_a_line_that_opens_a_block_the_next_line_is_warmed_one_level_deeper(fake: FakeTime) -> None:
    backend = Scripted(["return n"], fake.sleep)
    svc, docs, _ = service(backend, fake, on_open=False)
    doc = "if x:\n  y = 1\n  if y:\n    pass\n\n"
    docs.put(URI, doc)
    svc.opened(URI)
    text = type_at(docs, svc, doc, 4, 0, "while y:")
    await settle(fake)
    assert backend.warms[-1] == request_at(svc, enter_at(text, 4, "  "), 5, 2)  # the document's level: 2 spaces


async def test_a_pause_inside_a_line_warms_no_line_after_enter(fake: FakeTime) -> None:
    backend = Scripted(["return n"], fake.sleep)
    svc, docs, _ = service(backend, fake, on_open=False)
    docs.put(URI, DOC)
    svc.opened(URI)
    text = type_at(docs, svc, DOC, 2, 0, "y")  # "yx0 = 0": text after the cursor
    await settle(fake)
    assert backend.warms == [request_at(svc, text, 2, 1)]


async def test_a_warm_that_does_not_complete_is_not_followed_by_the_next(fake: FakeTime) -> None:
    backend = Scripted(["return n"], fake.sleep, warm_error=True)
    svc, docs, logs = service(backend, fake, on_open=False)
    docs.put(URI, DOC)
    svc.opened(URI)
    type_at(docs, svc, DOC, 1, 4, "r")
    await settle(fake)
    assert len(backend.warms) == 1 and svc.counters.warm_errors == 1
