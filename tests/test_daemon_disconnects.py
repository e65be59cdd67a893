"""Clients that go away in every way seen in the wild: the daemon cancels what they left queued,
keeps serving everyone else, and its counters add up. A real ``specd serve`` on tiny models."""

from __future__ import annotations

import json
import random
import socket
import struct
import time

import pytest

from tests.daemon_harness import LONG_PREFIX, LONG_TOKENS, Daemon, send, short_dir, tiny_pair, wait_for

PREFIX = "import os\n\ndef read(path):\n    "


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    d = Daemon(short_dir() / "s.sock", *tiny_pair(tmp_path_factory.mktemp("tiny"))).wait_ready()
    yield d
    assert d.stop() == 0, d.output()


def _request(rid, params: dict) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": rid, "method": "complete", "params": params}).encode() + b"\n"


def _connect(daemon: Daemon) -> socket.socket:
    s = socket.socket(socket.AF_UNIX)
    s.connect(str(daemon.socket))
    return s


def _reset(s: socket.socket) -> None:
    """Close so that the kernel sends a reset: SO_LINGER 0 (as a killed client's unread data does)."""
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    s.close()


def _idle(daemon: Daemon) -> dict:
    """Stats once nothing is queued or running (a bound against hangs, not a timing assertion)."""
    wait_for(lambda: (st := daemon.stats()["requests"])["queued"] == 0 and st["running"] == 0,
             "the queue to drain")
    return daemon.stats()["requests"]


def _terminal(before: dict, after: dict) -> int:
    return sum(after[k] - before[k] for k in ("served", "cancelled", "failed", "rejected"))


def test_a_client_gone_with_an_unread_answer_has_its_queue_cancelled(daemon) -> None:
    """Ten requests, the first answered at once and never read, then close: the unread answer
    makes the close a reset, and the other nine must be cancelled, not worked through."""
    before = daemon.stats()["requests"]
    s = _connect(daemon)
    s.sendall(_request(0, {"prefix": PREFIX, "max_tokens": 1}))
    for rid in range(1, 10):
        s.sendall(_request(rid, {"prefix": LONG_PREFIX, "max_tokens": LONG_TOKENS}))
    wait_for(lambda: daemon.stats()["requests"]["served"] > before["served"], "the first answer")
    s.close()  # the answer is unread: the peer sees a reset
    after = _idle(daemon)
    assert after["cancelled"] - before["cancelled"] == 9, (before, after)
    assert after["served"] - before["served"] == 1
    with daemon.client() as c:
        assert c.call("complete", {"prefix": PREFIX, "max_tokens": 3})["text"]


def test_every_way_of_leaving_drains_the_queue_and_the_counters_add_up(daemon) -> None:
    """Bounded load: clients that read everything, half-close, close with answers unread, reset,
    cancel some requests, or disconnect mid-stream. Every request ends exactly once (served,
    cancelled or rejected), nothing stays queued, and a well-behaved client is served throughout."""
    rng = random.Random(7)
    before = daemon.stats()["requests"]
    sent = 0
    answered_in_full = 0
    for round_ in range(12):
        s = _connect(daemon)
        n = rng.randint(1, 4)
        for rid in range(n):
            long = rng.random() < 0.5
            params = {"prefix": LONG_PREFIX if long else PREFIX,
                      "max_tokens": LONG_TOKENS if long else rng.randint(1, 8), "stream": rng.random() < 0.3}
            if rng.random() < 0.2:
                params["session"] = "shared"  # a newer request with the session supersedes an older one
            s.sendall(_request(rid, params))
            sent += 1
        if rng.random() < 0.2:
            s.sendall(_request("bad", {"prefix": 5}))  # rejected, counted once
            sent += 1
        how = round_ % 6
        if how == 0:  # read a little, then close with answers pending
            s.recv(1)
            s.close()
        elif how == 1:  # reset at once
            _reset(s)
        elif how == 2:  # cancel one, then reset
            s.sendall(json.dumps({"jsonrpc": "2.0", "method": "cancel", "params": {"id": 0}}).encode() + b"\n")
            time.sleep(0.05)
            _reset(s)
        elif how == 3:  # half-close and read every answer (nc/socat)
            s.shutdown(socket.SHUT_WR)
            s.settimeout(120)
            while s.recv(65536):
                pass
            s.close()
            answered_in_full += 1
        elif how == 4:  # wait for an answer, leave it unread, close
            time.sleep(0.3)
            s.close()
        else:  # half-close, then go away without reading
            s.shutdown(socket.SHUT_WR)
            time.sleep(0.05)
            s.close()
        with daemon.client() as c:  # everyone else is still served
            assert c.call("complete", {"prefix": PREFIX, "max_tokens": 2})["text"] is not None
            sent += 1
    after = _idle(daemon)
    assert _terminal(before, after) == sent, (sent, before, after)
    assert answered_in_full == 2
