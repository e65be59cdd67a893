"""Daemon parts in-process: framing, protocol, peer credentials, config, stats, the scheduler (on a
real tiny engine), the continuation lookahead."""

from __future__ import annotations

import asyncio
import os
import socket
import threading

import pytest
import torch

from specd.config import ConfigError
from specd.daemon import protocol as rpc
from specd.daemon.config import DaemonConfig, daemon_config, default_socket_path
from specd.daemon.framing import TOO_LARGE, LineReader
from specd.daemon.local import LocalBackend
from specd.daemon.peer import peer_allowed, peer_closed, peer_credentials
from specd.daemon.scheduler import Done, Failed, Job, Scheduler, WasCancelled
from specd.daemon.stats import DaemonStats, percentile
from specd.engine.engine import CompletionRequest
from specd.engine.results import GenerationStats
from tests.tiny import tiny_engine

PREFIX = "def add(a, b):\n    return "
SUFFIX = "\n\nprint(add(1, 2))\n"


# -- framing -------------------------------------------------------------------------------------

async def _lines(data: bytes, limit: int) -> list:
    reader = asyncio.StreamReader()
    reader.feed_data(data)
    reader.feed_eof()
    lines = LineReader(reader, limit)
    out = []
    while (line := await lines.next()) is not None:
        out.append(line)
    return out


async def test_line_reader_bounds_memory_and_resynchronises() -> None:
    big = b"y" * 300_000
    got = await _lines(b'{"a":1}\n' + big + b"\n" + b"ok\r\n" + b"z" * 101 + b"\ntail", limit=100)
    assert got == [b'{"a":1}', TOO_LARGE, b"ok", TOO_LARGE, b"tail"]


async def test_line_reader_unterminated_oversized_line_at_eof() -> None:
    assert await _lines(b"a\n" + b"b" * 500, limit=100) == [b"a", TOO_LARGE]


# -- protocol ------------------------------------------------------------------------------------

def test_parse_message_and_complete_params() -> None:
    msg = rpc.parse_message(b'{"jsonrpc":"2.0","id":"a","method":"complete","params":'
                            b'{"prefix":"x","stop":"\\n","session":"s","stream":true,"temperature":0}}')
    p = rpc.parse_complete(msg.params)
    assert msg.id == "a" and p.session == "s" and p.stream and p.request.stop == ("\n",)
    note = rpc.parse_message(b'{"jsonrpc":"2.0","method":"cancel","params":{"id":3}}')
    assert not note.has_id and rpc.parse_cancel(note.params) == 3


@pytest.mark.parametrize("parse", [rpc.parse_complete, rpc.parse_warm])
def test_repository_context_is_an_unknown_parameter(parse) -> None:
    """``context`` (repository context, deleted: bench/HISTORY.md) is refused as any unknown name."""
    with pytest.raises(rpc.RpcError) as e:
        parse({"prefix": "x", "context": "<|repo_name|>r\n"})
    assert e.value.code == rpc.INVALID_PARAMS and e.value.data == {"field": "context"}
    assert "unknown parameter" in e.value.message


@pytest.mark.parametrize("line, code", [
    (b"{", rpc.PARSE_ERROR), (b"\xc3\x28", rpc.PARSE_ERROR), (b"[" * 100_000, rpc.PARSE_ERROR),
    (b'{"jsonrpc":"2.0","id":1,"method":"health","x":1}', rpc.INVALID_REQUEST),
    (b'{"jsonrpc":"2.0","id":true,"method":"health"}', rpc.INVALID_REQUEST),
    (b'{"jsonrpc":"2.0","id":1.5,"method":"health"}', rpc.INVALID_REQUEST),
    (b'{"jsonrpc":"1.0","id":1,"method":"health"}', rpc.INVALID_REQUEST),
    (b'{"jsonrpc":"2.0","id":1,"method":"__import__"}', rpc.METHOD_NOT_FOUND),
    (b'{"jsonrpc":"2.0","id":1,"method":"health","params":"x"}', rpc.INVALID_PARAMS),
])
def test_parse_errors(line: bytes, code: int) -> None:
    with pytest.raises(rpc.RpcError) as e:
        rpc.parse_message(line)
    assert e.value.code == code


def test_encode_escapes_lone_surrogates() -> None:
    out = rpc.encode(rpc.result("\ud800", {"text": "é"}))
    assert out.endswith(b"\n") and b"\\ud800" in out
    assert rpc.encode(rpc.result(1, {"text": "é"})).decode("utf-8").count("é") == 1


# -- peer credentials ----------------------------------------------------------------------------

def test_peer_credentials_on_a_real_socket_pair() -> None:
    a, b = socket.socketpair(socket.AF_UNIX)
    try:
        pid, uid, _ = peer_credentials(a)
        assert pid == os.getpid() and uid == os.getuid()
        assert peer_allowed(a, os.getuid()) and not peer_allowed(a, os.getuid() + 1)
        assert not peer_closed(a)
        b.shutdown(socket.SHUT_WR)
        assert not peer_closed(a)  # half-closed: still there to read the answers
        b.close()
        assert peer_closed(a)
    finally:
        a.close()


# -- config --------------------------------------------------------------------------------------

def test_daemon_config(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    assert DaemonConfig().socket_path == tmp_path / "specd" / "specd.sock"
    monkeypatch.delenv("XDG_RUNTIME_DIR")
    assert f"specd-{os.getuid()}" in str(default_socket_path())
    c = daemon_config({"max_message_bytes": 4096, "socket": "~/x.sock"}, {"drain_timeout_s": 2.5})
    assert c.max_message_bytes == 4096 and c.drain_timeout_s == 2.5 and "~" not in str(c.socket)
    for bad in ({"max_message_bytes": "big"}, {"reuse": 1}, {"colour": "red"}, {"drain_timeout_s": -1}):
        with pytest.raises(ConfigError):
            daemon_config(bad, {})


# -- stats ---------------------------------------------------------------------------------------

def test_stats_histogram_and_percentiles() -> None:
    s = DaemonStats()
    g = GenerationStats(prompt_tokens=10, prefill_reused=4, new_tokens=7, rounds=4, drafted=8, accepted=3,
                        drafted_at=[4, 4], accepted_at=[2, 1], by_source={"model": [3, 6, 3], "lookup": [1, 2, 0]})
    s.served_one(g, 10.0, 0)
    s.served_one(g, 30.0, 5)
    d = s.as_dict({}, {"queued": 0, "running": 0})
    assert d["accepted_length_histogram"] == [4, 2, 2]  # rounds accepting 0, 1, 2 drafts
    assert d["by_source"] == {"lookup": {"rounds": 2, "drafted": 4, "accepted": 0, "acceptance_rate": 0.0},
                              "model": {"rounds": 6, "drafted": 12, "accepted": 6, "acceptance_rate": 0.5}}
    assert d["prefill_tokens"] == {"reused": 8, "computed": 10}
    assert d["continuations"] == {"requests": 1, "tokens_offered": 5}
    assert percentile([1, 2, 3, 4], 50) == 2 and percentile([1.0] * 19 + [9.0], 95) == 1.0
    assert d["memory"]["rss_bytes"] > 0


# -- scheduler on a real tiny engine -------------------------------------------------------------

async def _run(scheduler: Scheduler, job: Job):
    return await scheduler.submit(job)


class GatedEngine:
    """What the scheduler needs of an engine (``complete``, ``reset``), delegated to a real one
    behind a gate: the worker waits inside its job until the test opens the gate, so the test can
    fill the queue while a job is running."""

    def __init__(self, engine) -> None:
        self.engine = engine
        self.entered = threading.Event()  # the worker is inside a job
        self.gate = threading.Event()

    def complete(self, request, on_delta=None, cancelled=None, preempted=None):
        self.entered.set()
        if not self.gate.wait(timeout=60):
            raise TimeoutError("the test never opened the gate")
        return self.engine.complete(request, on_delta=on_delta, cancelled=cancelled, preempted=preempted)

    def reset(self) -> None:
        self.engine.reset()

    async def wait_entered(self) -> None:
        assert await asyncio.to_thread(self.entered.wait, 60), "the worker never started a job"


async def test_round_robin_across_sessions() -> None:
    engine = GatedEngine(tiny_engine(k=2))
    scheduler = Scheduler(LocalBackend(engine))
    scheduler.start(asyncio.get_running_loop())
    order: list[str] = []
    try:  # the worker is held inside the first job while the queue fills
        first = Job(CompletionRequest(PREFIX, max_tokens=2), lane="A")
        futures = {"a0": scheduler.submit(first)}
        await engine.wait_entered()
        assert scheduler.counts() == {"queued": 0, "warming": 0, "running": 1, "preempted": 0}
        for name, lane in [("a1", "A"), ("a2", "A"), ("a3", "A"), ("b1", "B"), ("c1", "C"), ("b2", "B")]:
            futures[name] = scheduler.submit(Job(CompletionRequest(PREFIX, max_tokens=2), lane=lane))
        for name, f in futures.items():
            f.add_done_callback(lambda _, n=name: order.append(n))
        assert scheduler.counts() == {"queued": 6, "warming": 0, "running": 1, "preempted": 0}
    finally:
        engine.gate.set()
    await asyncio.gather(*futures.values())
    assert order == ["a0", "a1", "b1", "c1", "a2", "b2", "a3"]
    scheduler.close(wait=10)


async def test_supersession_of_a_queued_job_and_cancel() -> None:
    engine = GatedEngine(tiny_engine(k=2))
    scheduler = Scheduler(LocalBackend(engine))
    scheduler.start(asyncio.get_running_loop())
    try:  # the worker is held inside the first job while the others queue
        running = scheduler.submit(Job(CompletionRequest(PREFIX, max_tokens=3), lane="x"))
        await engine.wait_entered()
        old = scheduler.submit(Job(CompletionRequest(PREFIX, max_tokens=3), lane="s", session="s"))
        new = scheduler.submit(Job(CompletionRequest(PREFIX, max_tokens=3), lane="s", session="s"))
        doomed = Job(CompletionRequest(PREFIX, max_tokens=3), lane="y")
        cancelled = scheduler.submit(doomed)
        scheduler.cancel(doomed, "cancelled by the client")
        assert scheduler.counts() == {"queued": 1, "warming": 0, "running": 1, "preempted": 0}  # only the newer "s" job waits
    finally:
        engine.gate.set()
    old_out, new_out, c_out, r_out = await asyncio.gather(old, new, cancelled, running)
    assert isinstance(old_out, WasCancelled) and "superseded" in old_out.reason
    assert isinstance(c_out, WasCancelled) and isinstance(new_out, Done) and isinstance(r_out, Done)
    scheduler.close(wait=10)


async def test_model_failure_fails_one_request_and_the_daemon_serves_on() -> None:
    engine = tiny_engine(k=2)
    scheduler = Scheduler(LocalBackend(engine))
    scheduler.start(asyncio.get_running_loop())
    real_forward = engine.target.forward
    calls = {"n": 0}

    def failing_forward(*args, **kw):  # fault injection: the third target forward runs out of memory
        calls["n"] += 1
        if calls["n"] == 3:
            raise MemoryError("simulated: cannot allocate")
        return real_forward(*args, **kw)

    engine.target.forward = failing_forward
    try:
        out = await scheduler.submit(Job(CompletionRequest(PREFIX, SUFFIX, max_tokens=20), lane="a"))
        assert isinstance(out, Failed) and not out.invalid and isinstance(out.error, MemoryError)
        again = await scheduler.submit(Job(CompletionRequest(PREFIX, SUFFIX, max_tokens=20), lane="a"))
    finally:
        engine.target.forward = real_forward
    assert isinstance(again, Done)
    cold = tiny_engine(k=2).complete(CompletionRequest(PREFIX, SUFFIX, max_tokens=20))
    assert again.completion.tokens == cold.tokens
    scheduler.close(wait=10)


# -- continuation ---------------------------------------------------------------------------------

@pytest.mark.parametrize("draft_seed", [1, 0])  # a poor draft, and the target itself as the draft
def test_continuation_lookahead_equals_cold(draft_seed: int) -> None:
    torch.manual_seed(0)
    engine = tiny_engine(k=3, draft_seed=draft_seed)
    first = engine.complete(CompletionRequest(PREFIX, SUFFIX, max_tokens=16))
    assert len(first.text) > 4
    prefix = PREFIX
    text = first.text
    for step in (1, 2, 0):
        prefix += text[:step]
        warm = engine.complete(CompletionRequest(prefix, SUFFIX, max_tokens=16))
        cold = tiny_engine(k=3, draft_seed=draft_seed).complete(CompletionRequest(prefix, SUFFIX, max_tokens=16))
        assert warm.lookahead > 0
        assert warm.tokens == cold.tokens and warm.text == cold.text
        text = warm.text
    # sampling and target mode never use the lookahead
    sampled = engine.complete(CompletionRequest(prefix, SUFFIX, max_tokens=8, temperature=0.9, seed=5))
    assert sampled.lookahead == 0
    assert sampled.tokens == tiny_engine(k=3, draft_seed=draft_seed).complete(
        CompletionRequest(prefix, SUFFIX, max_tokens=8, temperature=0.9, seed=5)).tokens


def test_engine_reset_forgets_everything() -> None:
    engine = tiny_engine(k=2)
    engine.complete(CompletionRequest(PREFIX, SUFFIX, max_tokens=8))
    engine.reset()
    again = engine.complete(CompletionRequest(PREFIX, SUFFIX, max_tokens=8))
    assert again.stats.prefill_reused == 0 and again.lookahead == 0
