"""Warm requests, preemption of a prefill and the prefix cache through the daemon: the scheduler
with a real tiny engine in process, then a real ``specd serve`` over its Unix socket."""

from __future__ import annotations

import asyncio
import random
import subprocess
import sys
import threading
import time

import pytest

from specd.daemon import protocol as rpc
from specd.daemon.scheduler import Done, Job, Scheduler, WasCancelled
from specd.daemon.local import LocalBackend
from specd.requests import CompletionRequest
from tests.daemon_harness import ENGINE_FLAGS, Daemon, env_for, read_until_terminal, send, short_dir, tiny_pair, wait_for
from tests.tiny import tiny_engine

BLOCK, CHUNK = 16, 8
FLAGS = ("--prefix-block-tokens", str(BLOCK), "--prefill-chunk-tokens", str(CHUNK), "--max-prefix-tokens", "3500")


def source_file(i: int, lines: int) -> str:
    return "".join(f"def f{i}_{j}(x{j}):\n    return x{j} * {i + j}\n" for j in range(lines))


async def test_a_completion_preempts_another_sessions_prefill_which_then_resumes() -> None:
    engine = tiny_engine(k=2, max_len=512, prefix_block_tokens=BLOCK, prefill_chunk_tokens=1)  # a slow prefill
    scheduler = Scheduler(LocalBackend(engine))
    scheduler.start(asyncio.get_running_loop())
    long = CompletionRequest(source_file(0, 14), max_tokens=6)  # ~420 one-token chunks
    short = CompletionRequest(source_file(1, 1), max_tokens=6)
    order: list[str] = []
    a = Job(long, lane="a", session="a")
    fa = scheduler.submit(a)
    fa.add_done_callback(lambda _: order.append("a"))
    await asyncio.to_thread(wait_for, lambda: engine.target.cache_len > 40, "a's prefill to be under way")
    fb = scheduler.submit(Job(short, lane="b", session="b"))
    fb.add_done_callback(lambda _: order.append("b"))
    out_a, out_b = await asyncio.gather(fa, fb)
    scheduler.close(wait=10)
    assert isinstance(out_a, Done) and isinstance(out_b, Done)
    assert order == ["b", "a"] and a.preemptions == 1 and scheduler.preemptions == 1
    assert out_a.completion.stats.prefill_reused >= 40 // BLOCK * BLOCK  # resumed from its cached blocks
    cold = tiny_engine(k=2, max_len=512)
    assert out_a.completion.tokens == cold.complete(long).tokens
    assert out_b.completion.tokens == cold.complete(short).tokens


async def test_a_completion_of_the_same_lane_waits_its_turn() -> None:
    engine = tiny_engine(k=2, max_len=512, prefix_block_tokens=BLOCK, prefill_chunk_tokens=1)
    scheduler = Scheduler(LocalBackend(engine))
    scheduler.start(asyncio.get_running_loop())
    a = Job(CompletionRequest(source_file(0, 14), max_tokens=4), lane="conn")
    fa = scheduler.submit(a)
    await asyncio.to_thread(wait_for, lambda: engine.target.cache_len > 40, "the prefill to be under way")
    fb = scheduler.submit(Job(CompletionRequest(source_file(1, 1), max_tokens=4), lane="conn"))
    out = await asyncio.gather(fa, fb)
    scheduler.close(wait=10)
    assert all(isinstance(o, Done) for o in out) and a.preemptions == 0


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    d = Daemon(short_dir() / "s.sock", *tiny_pair(tmp_path_factory.mktemp("tiny")), *FLAGS).wait_ready()
    yield d
    assert d.stop() == 0, d.output()


def test_warm_returns_the_prompt_tokens_and_a_completion_reuses_them(daemon) -> None:
    params = {"prefix": source_file(2, 20), "suffix": "\nmain()\n", "session": "w"}
    with daemon.client() as c:
        warmed = c.call("warm", params)
        c.call("warm", {"prefix": source_file(3, 20), "session": "other"})  # another file in between
        done = c.call("complete", {**params, "max_tokens": 4})
        stats = c.call("stats")
    assert warmed["tokens"] == done["stats"]["prompt_tokens"] - 1 > 500
    assert done["stats"]["prefill_reused"] >= warmed["tokens"] // BLOCK * BLOCK
    memory = stats["memory"]
    assert memory["prefix_cache_blocks"] > 0 and memory["prefix_cache_hit_tokens"] >= warmed["tokens"] // BLOCK * BLOCK
    assert 0 < memory["prefix_cache_bytes"] <= memory["prefix_cache_budget_bytes"]


def test_a_warm_is_preempted_by_a_completion(daemon) -> None:
    """A completion arriving while a warm runs ends the warm (-32800, "preempted") between two of
    its chunks; what it computed stays cached. The warm may also finish first on a fast machine:
    fresh prompts are tried until one is preempted."""
    for attempt in range(6):
        huge = source_file(40 + attempt, 90)  # ~3,200 prompt tokens in chunks of 8
        with daemon.client() as w, daemon.client() as c:
            blocks = daemon.stats()["memory"]["prefix_cache_blocks"]
            send(w, "warm", "warm", {"prefix": huge, "session": "big"})
            # under way: a few blocks stored (both models)
            wait_for(lambda: daemon.stats()["memory"]["prefix_cache_blocks"] >= blocks + 8, "the warm to run")
            done = c.call("complete", {"prefix": "def g():\n    ", "max_tokens": 4, "session": "typing"})
            _, warm = read_until_terminal(w, "warm")
            assert done["stats"]["new_tokens"] > 0
            if "result" in warm:  # it finished before the completion came
                continue
            assert warm["error"]["code"] == rpc.REQUEST_CANCELLED and "preempted" in warm["error"]["message"]
            before = daemon.stats()["memory"]["prefix_cache_hit_tokens"]
            again = w.call("warm", {"prefix": huge, "session": "big"})  # resumes from its cached blocks
            assert again["tokens"] > 3000
            assert daemon.stats()["memory"]["prefix_cache_hit_tokens"] > before
            return
    pytest.fail("no warm was preempted in six tries")


def test_every_request_gets_exactly_one_answer_under_preemption_and_cancels(daemon) -> None:
    """Clients in several sessions send completions with long prompts (their prefills preempt
    each other), some cancelled at random moments; each id is answered exactly once."""
    rng = random.Random(3)
    plan = [[(f"c{k}-{i}", source_file(10 * k + i, rng.randint(20, 80)), rng.random() < 0.3) for i in range(4)]
            for k in range(4)]
    pauses = [[rng.uniform(0.0, 0.4) for _ in range(4)] for _ in range(4)]  # requests arrive during prefills
    answers: dict[str, list[dict]] = {}
    errors: list[BaseException] = []

    def client(k: int) -> None:
        try:
            with daemon.client() as c:
                for (rid, prefix, cancel), pause in zip(plan[k], pauses[k]):
                    time.sleep(pause)
                    send(c, rid, "complete", {"prefix": prefix, "max_tokens": 8, "session": f"s{k}-{rid}"})
                    if cancel:
                        time.sleep(pause / 4)
                        send(c, f"x-{rid}", "cancel", {"id": rid})
                want = {rid for rid, _, _ in plan[k]} | {f"x-{rid}" for rid, _, cancel in plan[k] if cancel}
                seen: set[str] = set()
                while not want <= seen:
                    msg = c.read_message()
                    if "id" in msg:
                        answers.setdefault(msg["id"], []).append(msg)
                        seen.add(msg["id"])
                c.sock.settimeout(0.5)  # nothing more may come for these ids
                try:
                    while True:
                        msg = c.read_message()
                        if "id" in msg:
                            answers.setdefault(msg["id"], []).append(msg)
                except (TimeoutError, OSError, EOFError, ConnectionError):
                    pass
        except BaseException as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=client, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert not errors, errors
    for rid, _, cancel in (item for p in plan for item in p):
        got = answers.get(rid, [])
        assert len(got) == 1, (rid, got)
        ok = "result" in got[0] or got[0]["error"]["code"] == rpc.REQUEST_CANCELLED
        assert ok, got[0]
        if not cancel:
            assert "result" in got[0], got[0]
    with daemon.client() as c:  # still serving, nothing left behind
        assert c.call("complete", {"prefix": "x = ", "max_tokens": 2})["stats"]["new_tokens"] >= 0
        stats = c.call("stats")
    assert stats["requests"]["queued"] == 0 and stats["requests"]["running"] == 0
    assert stats["requests"]["preempted"] > 0  # prefills were paused and resumed


def test_a_prefix_cache_too_small_for_one_prompt_stops_the_daemon_at_start(tmp_path) -> None:
    target, draft = tiny_pair(tmp_path)
    runtime = short_dir()
    # the tiny pair: 512 bytes of KV per token (float16, both models' layers in C); a 3535-token
    # longest prompt (3500 + 32 + 3 FIM tokens) needs 1.7 MB
    run = subprocess.run([sys.executable, "-m", "specd", "serve", "--socket", str(runtime / "s.sock"),
                          "--target", str(target), "--draft", str(draft), *ENGINE_FLAGS,
                          "--max-prefix-tokens", "3500", "--prefix-cache-mb", "1"],
                         capture_output=True, text=True, env=env_for(runtime), timeout=300)
    assert run.returncode == 2
    assert "engine.prefix_cache_mb: 1 MB cannot hold one longest prompt" in run.stderr
    assert "512 bytes of KV per token" in run.stderr and "at least 2" in run.stderr
    assert not (runtime / "s.sock").exists()
