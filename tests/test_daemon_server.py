"""The daemon over a real Unix socket: a real ``specd serve`` subprocess on tiny models."""

from __future__ import annotations

import json
import socket
import threading

import pytest

from specd.daemon import protocol as rpc
from specd.app import build_engine
from specd.engine.config import DRAFTERS
from specd.engine.engine import CompletionRequest, EngineConfig
from tests.daemon_harness import (LONG_PREFIX, LONG_TOKENS, Daemon, first_delta, read_until_terminal,
                                  send, short_dir, tiny_pair, wait_for)

PREFIX = "import os\n\ndef read(path):\n    "
SUFFIX = "\n\nprint(read('x'))\n"


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    return tiny_pair(tmp_path_factory.mktemp("tiny"))


@pytest.fixture(scope="module")
def daemon(models):
    d = Daemon(short_dir() / "s.sock", *models).wait_ready()
    yield d
    assert d.stop() == 0, d.output()


@pytest.fixture(scope="module")
def cold(models):
    """An in-process engine on the same models, reset before every request: cold output."""
    import torch

    target, draft = models
    threads = torch.get_num_threads()
    engine = build_engine(EngineConfig(target=str(target), draft=str(draft), max_len=4096, threads=1, k=4))  # as ENGINE_FLAGS

    def run(**kw) -> str:
        engine.reset()
        return engine.complete(CompletionRequest(**kw)).text

    yield run
    torch.set_num_threads(threads)  # build_engine set it process-wide


def test_health_and_stats(daemon) -> None:
    with daemon.client() as c:
        health = c.call("health")
        assert health["status"] == "ok" and health["engine"]["max_len"] == 4096
        assert health["engine"]["drafter"] in DRAFTERS and health["backend"]["drafter"] in DRAFTERS
        assert health["backend"]["drafter"] != "default"  # the one that runs
        c.call("complete", {"prefix": PREFIX, "max_tokens": 8})
        stats = c.call("stats")
    assert stats["requests"]["served"] >= 1 and stats["tokens"]["generated"] >= 8
    assert stats["latency_ms"]["p50"] > 0 and stats["latency_ms"]["p95"] >= stats["latency_ms"]["p50"]
    mem = stats["memory"]
    assert mem["rss_bytes"] > 0 and mem["target_weight_bytes"] > 0 and mem["draft_kv_cache_bytes"] > 0
    assert sum(stats["accepted_length_histogram"]) == stats["drafted_at"][0]
    assert set(stats["prefill_tokens"]) == {"reused", "computed"}


def test_streaming_deltas_add_up_to_the_result(daemon, cold) -> None:
    with daemon.client() as c:
        send(c, 1, "complete", {"prefix": PREFIX, "suffix": SUFFIX, "max_tokens": 24, "stream": True})
        deltas, msg = read_until_terminal(c, 1)
    assert "".join(deltas) == msg["result"]["text"] == cold(prefix=PREFIX, suffix=SUFFIX, max_tokens=24)
    assert msg["result"]["stats"]["new_tokens"] == 24


def test_concurrent_clients(daemon, cold) -> None:
    prompts = [f"x{i} = {i}\n" for i in range(8)]
    results: dict[int, list[str]] = {}

    def worker(i: int) -> None:
        with daemon.client() as c:
            results[i] = [c.call("complete", {"prefix": prompts[i], "max_tokens": 6 + j})["text"]
                          for j in range(3)]

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(len(prompts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i, p in enumerate(prompts):
        assert results[i] == [cold(prefix=p, max_tokens=6 + j) for j in range(3)]


def test_supersession(daemon) -> None:
    with daemon.client() as a, daemon.client() as b:
        send(a, 1, "complete", {"prefix": LONG_PREFIX, "max_tokens": LONG_TOKENS, "stream": True,
                                "session": "buffer-1"})
        first_delta(a, 1)  # the old request is running
        newer = b.call("complete", {"prefix": PREFIX, "max_tokens": 4, "session": "buffer-1"})
        _, old = read_until_terminal(a, 1)
    assert old["error"]["code"] == rpc.REQUEST_CANCELLED and "superseded" in old["error"]["message"]
    assert len(newer["text"]) > 0


def test_cancel(daemon) -> None:
    with daemon.client() as c:
        send(c, "long", "complete", {"prefix": LONG_PREFIX, "max_tokens": LONG_TOKENS, "stream": True})
        first_delta(c, "long")
        send(c, "c", "cancel", {"id": "long"})
        replies = {}
        while len(replies) < 2:
            msg = c.read_message()
            if "id" in msg:
                replies[msg["id"]] = msg
        assert replies["c"]["result"] == {"cancelled": True}
        assert replies["long"]["error"]["code"] == rpc.REQUEST_CANCELLED
        assert c.call("cancel", {"id": "long"}) == {"cancelled": False}  # already over
        assert c.call("complete", {"prefix": PREFIX, "max_tokens": 3})["text"]


def test_disconnect_in_the_middle_of_a_stream(daemon) -> None:
    before = daemon.stats()["requests"]["cancelled"]
    with daemon.client() as c:
        send(c, 1, "complete", {"prefix": LONG_PREFIX, "max_tokens": LONG_TOKENS, "stream": True})
        first_delta(c, 1)
    wait_for(lambda: daemon.stats()["requests"]["cancelled"] > before, "the abandoned request to end")
    wait_for(lambda: daemon.stats()["requests"]["running"] == 0, "the worker to be idle")
    with daemon.client() as c:
        assert c.call("complete", {"prefix": PREFIX, "max_tokens": 3})["text"]


def test_half_closed_client_still_gets_its_answer(daemon, cold) -> None:
    """``echo ... | nc -U`` shuts down its writing side at the end of input and waits to read."""
    s = socket.socket(socket.AF_UNIX)
    s.connect(str(daemon.socket))
    req = {"jsonrpc": "2.0", "id": 1, "method": "complete", "params": {"prefix": PREFIX, "max_tokens": 5}}
    s.sendall(json.dumps(req).encode() + b"\n")
    s.shutdown(socket.SHUT_WR)
    data = b""
    while chunk := s.recv(65536):
        data += chunk
    s.close()
    assert json.loads(data)["result"]["text"] == cold(prefix=PREFIX, max_tokens=5)


BAD = [
    (b'{"jsonrpc": "2.0", "id": 1, "method": "complete", "params": {"prefix": "x",', rpc.PARSE_ERROR, None),
    (b"\xff\xfe{}", rpc.PARSE_ERROR, None),
    (b'{"jsonrpc": "2.0", "id": 2, "method": "complete", "params": {"prefix": "x", "max_tokens": NaN}}',
     rpc.PARSE_ERROR, None),
    (b"[1, 2]", rpc.INVALID_REQUEST, None),
    (b'"hello"', rpc.INVALID_REQUEST, None),
    (b'{"id": 3, "method": "health"}', rpc.INVALID_REQUEST, 3),
    (b'{"jsonrpc": "2.0", "id": 4, "method": 7}', rpc.INVALID_REQUEST, 4),
    (b'{"jsonrpc": "2.0", "id": [5], "method": "health"}', rpc.INVALID_REQUEST, None),
    (b'{"jsonrpc": "2.0", "id": 6, "method": "explode"}', rpc.METHOD_NOT_FOUND, 6),
    (b'{"jsonrpc": "2.0", "id": 7, "method": "complete", "params": [1]}', rpc.INVALID_PARAMS, 7),
    (b'{"jsonrpc": "2.0", "id": 8, "method": "complete", "params": {"prefix": 1}}', rpc.INVALID_PARAMS, 8),
    (b'{"jsonrpc": "2.0", "id": 9, "method": "complete", "params": {"prefix": "x", "max_tokens": "5"}}',
     rpc.INVALID_PARAMS, 9),
    (b'{"jsonrpc": "2.0", "id": 10, "method": "complete", "params": {"prefix": "x", "temperature": -1}}',
     rpc.INVALID_PARAMS, 10),
    (b'{"jsonrpc": "2.0", "id": 11, "method": "complete", "params": {"prefix": "x", "color": "red"}}',
     rpc.INVALID_PARAMS, 11),
    (b'{"jsonrpc": "2.0", "id": 12, "method": "complete", "params": {"suffix": "x"}}', rpc.INVALID_PARAMS, 12),
    (b'{"jsonrpc": "2.0", "id": 13, "method": "complete", "params": {"prefix": "\\ud800"}}',
     rpc.INVALID_PARAMS, 13),
    (b'{"jsonrpc": "2.0", "id": 14, "method": "cancel", "params": {}}', rpc.INVALID_PARAMS, 14),
    (b'{"jsonrpc": "2.0", "id": 15, "method": "complete", "params": {"prefix": "x", "max_tokens": 100000}}',
     rpc.INVALID_PARAMS, 15),
    (b'{"jsonrpc": "2.0", "id": 16, "method": "complete", "params": {"prefix": "x", "stop": [""]}}',
     rpc.INVALID_PARAMS, 16),
    (b'{"jsonrpc": "2.0", "id": 17, "method": "complete", "params": {"prefix": "x", "temperature": 1e308}}',
     rpc.INVALID_PARAMS, 17),
    (b'{"jsonrpc": "2.0", "method": "complete", "params": {"prefix": "x"}}', rpc.INVALID_REQUEST, None),
    (b"x" * (1 << 20) + b"xx", rpc.PAYLOAD_TOO_LARGE, None),
]


@pytest.mark.parametrize("line, code, rid", BAD, ids=[str(i) for i in range(len(BAD))])
def test_bad_input_gets_the_right_error_and_changes_nothing(daemon, cold, line, code, rid) -> None:
    with daemon.client() as other, daemon.client() as c:
        send(other, 1, "complete", {"prefix": PREFIX, "max_tokens": 40, "stream": True})
        c.send_raw(line + b"\n")
        msg = c.read_message()
        assert msg["error"]["code"] == code, msg
        assert msg["id"] == rid
        if code == rpc.INVALID_PARAMS and msg["error"]["data"]["field"] != "params":
            assert msg["error"]["data"]["field"] in msg["error"]["message"]
        assert c.call("health")["status"] == "ok"  # the same connection carries on
        deltas, done = read_until_terminal(other, 1)
    assert done["result"]["text"] == "".join(deltas) == cold(prefix=PREFIX, max_tokens=40)


def test_an_underflowing_temperature_answers_as_greedy(daemon, cold) -> None:
    """1e-38 is below float32's smallest normal: ``logits / T`` used to overflow into padding tokens."""
    with daemon.client() as c:
        got = c.call("complete", {"prefix": PREFIX, "max_tokens": 12, "temperature": 1e-38, "seed": 1})["text"]
    assert got == cold(prefix=PREFIX, max_tokens=12)


def test_invalid_params_name_the_field(daemon) -> None:
    with daemon.client() as c:
        for field, value in [("top_p", 2.0), ("mode", "fast"), ("k", 99), ("seed", -1), ("session", 5),
                             ("stream", "yes"), ("top_k", 1.5)]:
            send(c, field, "complete", {"prefix": "x", field: value})
            msg = c.read_message()
            assert msg["error"]["code"] == rpc.INVALID_PARAMS and msg["error"]["data"]["field"] == field, msg


def test_duplicate_id_in_flight_is_refused(daemon) -> None:
    with daemon.client() as c:
        send(c, 1, "complete", {"prefix": LONG_PREFIX, "max_tokens": LONG_TOKENS, "stream": True})
        first_delta(c, 1)
        send(c, 1, "complete", {"prefix": "x"})
        msg = c.read_message()
        while msg.get("method"):
            msg = c.read_message()
        assert msg["error"]["code"] == rpc.INVALID_REQUEST and "in use" in msg["error"]["message"]
        send(c, 2, "cancel", {"id": 1})
        _, end = read_until_terminal(c, 1)
        assert end["error"]["code"] == rpc.REQUEST_CANCELLED


def test_kv_reuse_and_continuation_equal_cold_output(daemon, cold) -> None:
    before = daemon.stats()
    with daemon.client() as c:
        # typing along each suggestion, one or two characters at a time: every request after the
        # first continues the previous completion (its remainder is verified as drafts)
        prefix, typed_along = PREFIX, 0
        text = c.call("complete", {"prefix": prefix, "suffix": SUFFIX, "max_tokens": 16})["text"]
        for step in (1, 2, 1, 0):
            assert len(text) > step
            prefix += text[:step]
            params = {"prefix": prefix, "suffix": SUFFIX, "max_tokens": 16}
            text = c.call("complete", params)["text"]
            typed_along += 1
            assert text == cold(**params), params
        for params in [
            {"prefix": prefix + "z", "suffix": SUFFIX, "max_tokens": 16},  # typed something else
            {"prefix": prefix + "z", "suffix": SUFFIX[1:], "max_tokens": 16},  # deleted after the cursor
            {"prefix": prefix + "z", "suffix": SUFFIX[1:], "max_tokens": 16, "mode": "target"},
            {"prefix": prefix + "z", "suffix": SUFFIX[1:], "max_tokens": 16, "temperature": 0.7, "seed": 3},
        ]:
            assert c.call("complete", params)["text"] == cold(**params), params
    after = daemon.stats()
    assert after["continuations"]["requests"] - before["continuations"]["requests"] == typed_along
    assert after["prefill_tokens"]["reused"] > before["prefill_tokens"]["reused"]


def test_peer_is_the_same_user(daemon) -> None:
    """The socket is 0600 in a 0700 directory; SO_PEERCRED is checked on top (test_daemon_units)."""
    import stat

    assert stat.S_IMODE(daemon.socket.stat().st_mode) == 0o600
    assert stat.S_IMODE(daemon.socket.parent.stat().st_mode) == 0o700


# -- property-based fuzzing ---------------------------------------------------------------------

from hypothesis import HealthCheck, given, settings, strategies as st  # noqa: E402

_junk = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70),
                  st.floats(allow_nan=False, allow_infinity=False),  # NaN/Infinity: the parse-error cases
                  st.text(max_size=8), st.lists(st.integers(), max_size=3),
                  st.dictionaries(st.text(max_size=3), st.integers(), max_size=2))
_params = st.fixed_dictionaries({}, optional={
    "prefix": st.one_of(st.text(max_size=40), _junk),
    "suffix": st.one_of(st.text(max_size=20), _junk),
    "max_tokens": st.one_of(st.integers(-2, 6), _junk),
    "temperature": st.one_of(st.floats(0, 3, allow_nan=False), _junk),
    "top_p": st.one_of(st.floats(0, 1.2, allow_nan=False), _junk),
    "top_k": st.one_of(st.integers(-1, 50), _junk),
    "seed": st.one_of(st.integers(-1, 2**64), _junk),
    "stop": st.one_of(st.lists(st.text(max_size=3), max_size=3), _junk),
    "mode": st.one_of(st.sampled_from(["spec", "target", "fast"]), _junk),
    "stream": st.one_of(st.booleans(), _junk),
    "session": st.one_of(st.sampled_from(["a", "b"]), _junk),
    "k": st.one_of(st.integers(-1, 40), _junk),
    "bogus": _junk,
})
_ERROR_CODES = {rpc.PARSE_ERROR, rpc.INVALID_REQUEST, rpc.METHOD_NOT_FOUND, rpc.INVALID_PARAMS,
                rpc.REQUEST_CANCELLED}


def _answer_for(c, rid) -> list[dict]:
    """Every non-delta message up to the answer to a sentinel request sent after ``rid``'s answer."""
    got = []
    while True:
        msg = c.read_message()
        if msg.get("method") == "complete/delta":
            continue
        got.append(msg)
        if msg.get("id") == rid:
            break
    send(c, "sentinel", "health")
    while (msg := c.read_message()).get("id") != "sentinel":
        if msg.get("method") != "complete/delta":
            got.append(msg)
    return got


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(method=st.sampled_from(["complete", "complete", "complete", "cancel", "stats", "health", "nope"]),
       params=st.one_of(_params, _junk))
def test_fuzzed_requests_get_exactly_one_answer(daemon, method, params) -> None:
    with daemon.client() as c:
        send(c, 77, method, params)
        replies = [m for m in _answer_for(c, 77) if m.get("id") == 77]
        assert len(replies) == 1, replies
        (reply,) = replies
        assert ("result" in reply) != ("error" in reply)
        if "error" in reply:
            assert reply["error"]["code"] in _ERROR_CODES, reply
            assert reply["error"]["message"]
        assert c.call("health")["status"] == "ok"


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(line=st.binary(min_size=1, max_size=200).filter(lambda b: b"\n" not in b and b.strip()))
def test_fuzzed_bytes_get_an_error_and_the_connection_survives(daemon, line) -> None:
    with daemon.client() as c:
        c.send_raw(line + b"\n")
        msg = c.read_message()
        assert msg["id"] is None and msg["error"]["code"] in (rpc.PARSE_ERROR, rpc.INVALID_REQUEST)
        assert c.call("health")["status"] == "ok"


def test_profiled_request_answers_with_its_timeline(daemon, cold) -> None:
    with daemon.client() as c:
        plain = c.call("complete", {"prefix": PREFIX, "suffix": SUFFIX, "max_tokens": 10})
        profiled = c.call("complete", {"prefix": PREFIX, "suffix": SUFFIX, "max_tokens": 10, "profile": True})
        with pytest.raises(Exception, match="profile"):
            c.call("complete", {"prefix": PREFIX, "max_tokens": 4, "profile": 1})
    assert "timeline" not in plain
    assert profiled["text"] == plain["text"] == cold(prefix=PREFIX, suffix=SUFFIX, max_tokens=10)
    t = profiled["timeline"]
    assert sum(r["tokens"] for r in t["rounds"]) == profiled["stats"]["new_tokens"]
    daemon_ms = t["daemon_ms"]
    assert 0 <= daemon_ms["queued"] <= daemon_ms["latency"]
    assert sum(t["request_ms"].values()) <= daemon_ms["latency"]
