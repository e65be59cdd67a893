"""Profiled requests (specd.engine.timeline, specd.models.profile, the kernels' profile.h): the
timeline adds up, profiling changes no output, and the daemon's jobs run on the thread that built
its models (specd.daemon.model_thread)."""

from __future__ import annotations

import asyncio
import threading

import pytest
import torch

from specd.daemon.model_thread import ModelThread
from specd.daemon.local import LocalBackend
from specd.daemon.scheduler import Done, Job, Scheduler
from specd.engine.timeline import REQUEST_PHASES, ROUND_PHASES
from specd.models import int_linear, kernels
from specd.models.decoder import Decoder
from specd.models.profile import PhaseClock
from specd.requests import CompletionRequest, RequestError
from tests.tiny import tiny_config, tiny_engine, tiny_weights

PREFIX = "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    "


@pytest.mark.parametrize("mode", ["spec", "target"])
def test_timeline_adds_up_and_changes_nothing(mode: str) -> None:
    engine = tiny_engine(k=3)
    plain = engine.complete(CompletionRequest(PREFIX, max_tokens=12, mode=mode))
    engine.reset()
    profiled = engine.complete(CompletionRequest(PREFIX, max_tokens=12, mode=mode, profile=True))
    assert plain.timeline is None
    assert profiled.text == plain.text and profiled.tokens == plain.tokens
    t = profiled.timeline
    assert set(t["request_ms"]) == set(REQUEST_PHASES)
    rounds = t["rounds"]
    assert sum(r["tokens"] for r in rounds) == profiled.stats.new_tokens
    assert len(rounds) == profiled.stats.rounds
    for r in rounds:
        assert set(r["phases"]) <= set(ROUND_PHASES)
        assert sum(r["phases"].values()) == pytest.approx(r["ms"], abs=0.01)  # loop is the remainder
        target = r["models"]["target"]
        assert target["forwards"] == 1  # one target forward per round, whatever K
        assert target["forward"] <= r["phases"]["verify"] + 0.01
        assert target["embed"] + target["layers"] + target["head"] <= target["forward"] + 0.01
    drafted = [r for r in rounds if r["drafted"]]
    if mode == "spec":
        assert drafted and all(r["models"]["draft"]["forwards"] >= 1 for r in drafted)
    else:
        assert not drafted and all("draft" not in r["models"] for r in rounds)
    assert sum(r["ms"] for r in rounds) <= t["request_ms"]["decode"] + 0.01
    per = t["per_token_ms"]
    assert per["round"] == pytest.approx(sum(r["ms"] for r in rounds) / profiled.stats.new_tokens, rel=1e-3)
    # the clocks are detached afterwards: a later forward adds nothing anywhere
    assert engine.target.clock is None and (engine.draft is None or engine.draft.clock is None)


def test_profile_must_be_a_bool() -> None:
    with pytest.raises(RequestError, match="profile"):
        CompletionRequest(PREFIX, profile="yes").validate(512)  # type: ignore[arg-type]


@pytest.mark.skipif(not kernels.available(), reason=kernels.unavailable() or "")
@pytest.mark.parametrize("linear", [int_linear.Q8Linear, int_linear.Q4Linear], ids=["int8", "int4"])
def test_kernel_profile_splits_the_layers_and_changes_no_bit(linear: type) -> None:
    c = tiny_config(vocab=96, hidden=512, layers=2, heads=8, kv_heads=4)  # linears large enough for a team
    make = lambda name, weight: linear.from_float(weight())  # noqa: E731
    model = Decoder(c, tiny_weights(c, 0), compute_dtype=torch.float32, max_len=128, linear_factory=make)
    assert model.fused is not None
    tokens = torch.randint(0, 96, (24,), generator=torch.Generator().manual_seed(0))
    plain = model.forward(tokens)
    model.rollback(0)
    clock = PhaseClock()
    model.profile(clock)
    profiled = model.forward(tokens)
    model.profile(None)
    assert torch.equal(plain, profiled)
    s = clock.take()
    assert s["forwards"] == 1 and s["regions"] >= 1
    assert s["matmul"] > 0 and s["attention"] > 0
    assert s["matmul"] + s["attention"] + s["layer_other"] <= s["layers"] + 1e-4
    assert s["busy"] <= s["team"] + 1e-4  # a thread computes only while its region is open
    assert s["embed"] + s["layers"] + s["head"] <= s["forward"] + 1e-4
    model.rollback(0)
    model.forward(tokens)  # detached: nothing more is added
    assert clock.take() == {"forwards": 0.0}


async def test_daemon_jobs_run_on_the_thread_that_built_the_models() -> None:
    """One OpenMP pool: the model thread builds the engine, then runs every job."""
    thread = ModelThread()
    built_on, engine = thread.call(lambda: (threading.get_ident(), tiny_engine(k=2)))
    assert built_on == thread.ident != threading.get_ident()
    ran_on: set[int] = set()
    scheduler = Scheduler(LocalBackend(engine), thread=thread)
    scheduler.start(asyncio.get_running_loop())
    job = Job(CompletionRequest(PREFIX, max_tokens=6), lane="a", on_delta=lambda _: ran_on.add(threading.get_ident()))
    outcome = await scheduler.submit(job)
    scheduler.close(wait=10)
    assert isinstance(outcome, Done) and outcome.completion.text
    assert ran_on == {built_on}
    assert outcome.queued_ms <= outcome.latency_ms


def test_model_thread_hands_back_exceptions_and_stops() -> None:
    thread = ModelThread()
    with pytest.raises(ZeroDivisionError):
        thread.call(lambda: 1 / 0)
    assert thread.call(lambda: 7) == 7  # still serving after a failure
    thread.stop(wait=5)
    assert not any(t.ident == thread.ident and t.is_alive() for t in threading.enumerate())
