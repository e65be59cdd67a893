"""What the completion service keeps per document goes when the document closes: its state object,
its work in flight (completion, request sent ahead, warm, pause timer), and its entries in what
spans documents (the shown-suggestion cache). A scripted backend and a fake clock
(``tests/fake_time.py``)."""

from __future__ import annotations

import asyncio

from specd.lsp.counters import ServiceCounters
from specd.lsp.per_document import DocumentStates
from specd.lsp.prewarm import Prewarmer
from specd.lsp.service import CompletionService
from specd.lsp.settings import DebounceSettings, LspSettings, PrewarmSettings
from specd.lsp.shaping import completion_request
from specd.lsp.window import cut_window
from tests.fake_time import FakeTime
from tests.memory_documents import MemoryDocuments
from tests.scripted_backend import Scripted

URI = "file:///proj/fib.py"
OTHER = "file:///proj/util.py"
DOC = "def fib(n):\n    \n" + "".join(f"x{i} = {i}\n" for i in range(60))
UTIL = "def helper(x):\n    return x + 1\n"


def service(fake: FakeTime, backend: Scripted) -> tuple[CompletionService, MemoryDocuments]:
    docs = MemoryDocuments()
    settings = LspSettings(max_tokens=16, debounce=DebounceSettings(enabled=False),
                           prewarm=PrewarmSettings(pause_ms=40.0))
    return CompletionService(backend, docs, settings, [].append, clock=fake.clock, sleep=fake.sleep), docs


def edit(docs: MemoryDocuments, svc: CompletionService, uri: str, text: str, line: int, col: int,
         ch: str) -> str:
    lines = text.split("\n")
    lines[line] = lines[line][:col] + ch + lines[line][col:]
    new = "\n".join(lines)
    docs.put(uri, new)
    svc.changed(uri, (line, col + len(ch)))
    return new


def others_running() -> set[asyncio.Task]:
    return {t for t in asyncio.all_tasks() if t is not asyncio.current_task() and not t.done()}


async def test_closing_a_document_drops_all_it_kept_and_stops_its_work() -> None:
    fake = FakeTime()
    backend = Scripted(["return n", "\n    # next"], fake.sleep)
    svc, docs = service(fake, backend)
    docs.put(OTHER, UTIL)
    svc.opened(OTHER)
    docs.put(URI, DOC)
    svc.opened(URI)
    svc.changed(OTHER, (1, 4))
    shown = await fake.run(svc.suggest(URI, 1, 4))
    assert shown is not None and shown.text == "return n"
    await fake.run(svc.suggest(OTHER, 1, 4))
    await fake.advance(1.0)  # the pause timers so far fired
    assert others_running() == set()
    accepted = edit(docs, svc, URI, DOC, 1, 4, shown.text)  # accepted: the next one is asked for ahead
    assert svc.counters.aheads == 1
    typed = edit(docs, svc, URI, accepted, 1, 12, "x")  # the ahead superseded; a pause timer armed
    await fake.settle()
    requests = len(backend.completes)
    pending = asyncio.ensure_future(svc.suggest(URI, 1, 13))
    await fake.settle()
    assert len(backend.completes) == requests + 1  # a completion in flight
    assert svc.tracked() == {URI, OTHER} and others_running()

    docs.close(URI)
    svc.closed(URI)
    assert await fake.run(pending) is None  # superseded by the close
    await fake.settle()
    assert others_running() == set()  # no work left for it: completion, request ahead, warm, pause timer
    assert svc.tracked() == {OTHER}  # its state is gone

    await fake.advance(10.0)
    assert len(backend.completes) == requests + 1  # nothing sent for it after the close
    w = cut_window(typed + "n", 1, 13, "utf-16", svc.settings.window)
    assert w is not None and svc.shown.along(URI, w) is None


async def test_a_reopened_document_starts_afresh() -> None:
    """The cursor kept before the close is gone: a reopened document is warmed where a newly
    opened one is (the end of its first prompt window), not at the old cursor."""
    fake = FakeTime()
    backend = Scripted(["return n"], fake.sleep)
    svc, docs = service(fake, backend)
    docs.put(URI, DOC)
    svc.opened(URI)
    assert await fake.run(svc.suggest(URI, 1, 4)) is not None  # the cursor is kept: line 1
    docs.close(URI)
    svc.closed(URI)
    docs.put(URI, DOC)
    svc.opened(URI)
    await fake.advance(0.01)
    end = DOC.count("\n")
    w = cut_window(DOC, end, 1 << 30, "utf-16", svc.settings.window)
    assert w is not None
    assert backend.warms[-1] == completion_request(w, svc.settings)


async def test_dropping_a_state_stops_its_timer_and_forgets_it() -> None:
    fake = FakeTime()
    states = DocumentStates()
    fired: list[str] = []
    state = states.of(URI)
    assert states.of(URI) is state  # made once, on first use
    prewarm = Prewarmer(Scripted(["x"], fake.sleep), ServiceCounters(), [].append, [].append, fake.sleep)
    prewarm.after_pause(state.warm, 0.04, lambda: fired.append(URI))
    ticket = state.ticket
    states.drop(URI)
    await fake.advance(1.0)
    assert fired == [] and states.get(URI) is None and states.uris() == frozenset()
    assert state.ticket != ticket  # a request waiting on it finds itself replaced
