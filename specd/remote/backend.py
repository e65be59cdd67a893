"""The daemon's Backend (:mod:`specd.daemon.backend`) over a remote inference server.

One streamed HTTP request per completion. Its text goes through the engine's own post-processing
(:class:`~specd.engine.textstream.TextStream`: the request's stop strings, the suffix guard, the
end-of-code rule), so a remote suggestion is cut where a local one would be; once the text must
end, the connection is closed and the server stops generating. A cancelled or superseded request
closes its connection at once (:mod:`specd.remote.http`).

A streamed answer counts only when it ends with the server's end marker (llama-server's final
``stop: true`` event; an OpenAI stream's ``finish_reason`` and ``data: [DONE]``). One that stops
before it (the server killed or restarted, a proxy cutting the connection, a stall past the read
timeout, garbage, the request's deadline) fails with :class:`~specd.remote.errors.IncompleteAnswer`:
what already streamed to the client stays as it was, and the error says the answer is incomplete.

``health`` answers at once from what the last request or check found; a check older than
``HEALTH_TTL_S`` is refreshed in the background. While the server cannot even be connected to,
requests fail at once (no connect timeouts paid per request) and a background check runs every
``PROBE_S`` until it answers again.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import replace
from typing import Any, Callable

from specd.engine.endofcode import CodeEnd
from specd.engine.results import Completion, GenerationStats
from specd.engine.suffix import SuffixGuard
from specd.engine.textstream import TextStream
from specd.remote.driver import Chunk, Driver
from specd.remote.errors import CannotConnect, IncompleteAnswer, RemoteError, RemoteUnreachable, StreamBroken
from specd.remote.http import Cancel, HttpClient, HttpSettings, Response, error_message
from specd.remote.prompt import RemotePrompt
from specd.requests import Cancelled, CompletionRequest

HEALTH_TTL_S = 2.0
HEALTH_TIMEOUT_S = 2.0
PROBE_S = 0.5  # while the server cannot be connected to: how often the background check tries


class _Joined:
    """TextStream's tokenizer for text that arrives as text: the pieces so far, joined."""

    @staticmethod
    def decode(pieces: list[str]) -> str:
        return "".join(pieces)


class RemoteBackend:
    def __init__(self, driver: Driver, http: HttpClient, prompt: RemotePrompt, max_len: int = 4096) -> None:
        self.driver = driver
        self.http = http
        self.prompt = prompt
        self._default_max_len = max_len
        self._facts: dict[str, Any] = {}
        self._checked = False  # the server passed check() once (model, FIM tokens)
        self._lock = threading.Lock()
        self._state: dict[str, Any] = {"ok": False, "error": "not checked yet"}
        self._state_at = 0.0
        self._refreshing = False
        self._down: tuple[str, float] | None = None  # (why, since when): no connection to the server

    # -- what the daemon reports ------------------------------------------------------------------
    @property
    def max_len(self) -> int:
        return int(self._facts.get("max_len", self._default_max_len))

    def describe(self) -> dict[str, Any]:
        """What serves (no API key: it is never reported)."""
        return {"backend": self.driver.name, "url": self.http.spec.url, "model": self._facts.get("model"),
                "max_len": self.max_len, **{k: getattr(self.prompt.builder.windows, k) for k in
                                            ("max_prefix_tokens", "max_suffix_tokens", "mid_line_suffix_tokens")}}

    def health(self) -> dict[str, Any]:
        with self._lock:
            stale = time.monotonic() - self._state_at > HEALTH_TTL_S
            if stale and not self._refreshing:
                self._refreshing = True
                threading.Thread(target=self._refresh, name="specd-remote-health", daemon=True).start()
            out = {**self._state, "backend": self.driver.name, "url": self.http.spec.url,
                   "checked_s_ago": round(time.monotonic() - self._state_at, 1) if self._state_at else None}
            if self._down is not None:
                out["unreachable_s"] = round(time.monotonic() - self._down[1], 1)
            return out

    def _refresh(self) -> None:
        """Check the server; while it cannot be reached, or answers "not now" (a loading
        llama-server's 503, a proxy's 502), again every ``PROBE_S`` until it answers."""
        try:
            while True:
                try:
                    self.check(timeout_s=HEALTH_TIMEOUT_S)
                except RemoteUnreachable:
                    time.sleep(PROBE_S)  # check() recorded it; not back yet
                    continue
                except RemoteError:
                    pass  # check() recorded it
                return
        finally:
            with self._lock:
                self._refreshing = False

    def _record(self, ok: bool, error: RemoteError | None = None) -> None:
        with self._lock:
            self._state = {"ok": True} if ok else {"ok": False, "error": str(error)}
            self._state_at = time.monotonic()
            if not isinstance(error, CannotConnect):
                self._down = None
            elif self._down is None:
                self._down = (str(error), self._state_at)
            probe = self._down is not None and not self._refreshing
            if probe:
                self._refreshing = True
        if probe:
            threading.Thread(target=self._refresh, name="specd-remote-probe", daemon=True).start()

    def _gate(self) -> None:
        """Fail at once while the server cannot be connected to (the background check watches)."""
        with self._lock:
            down = self._down
        if down is not None:
            raise CannotConnect(f"the server at {self.http.spec.url} cannot be reached (for "
                                f"{time.monotonic() - down[1]:.1f} s; requests fail at once while specd checks it every "
                                f"{PROBE_S:g} s in the background): {down[0]}")

    def check(self, cancelled: Cancel = None, timeout_s: float | None = None) -> dict[str, Any]:
        """Ask the server whether it can serve (reachable, the model, its FIM tokens); records
        the answer for ``health``; raises RemoteError naming what is wrong."""
        http = self.http if timeout_s is None else HttpClient(self.http.spec, _shorter(self.http, timeout_s))
        try:
            facts = self.driver.check(http, self.prompt, cancelled)
        except RemoteError as e:
            self._record(False, e)
            raise
        self._facts.update(facts)
        self._checked = True
        self._record(True)
        return facts

    def memory(self) -> dict[str, int]:
        return {}  # the weights and caches live on the server

    def reset(self) -> None:
        pass  # the server owns its prompt cache; nothing is cached here

    # -- serving ------------------------------------------------------------------------------
    def complete(self, request: CompletionRequest, on_delta: Callable[[str], None] | None = None,
                 cancelled: Cancel = None, preempted: Cancel = None) -> Completion:
        """``preempted`` is never polled: the server schedules its own batch, and a request
        here is one HTTP stream that is either running or cancelled."""
        self._gate()
        if not self._checked:
            self.check(cancelled)
        request.validate(self.max_len)
        body = self.driver.body(request, self.prompt)
        streamed: list[str] = []  # what the client was sent, as it was sent

        def deliver(text: str) -> None:
            streamed.append(text)
            if on_delta is not None:
                on_delta(text)

        stream = TextStream(_Joined(), tuple(request.stop) + self.driver.stop_strings(), deliver,  # type: ignore[arg-type]
                            (SuffixGuard(request.suffix), CodeEnd(request.prefix)))
        stats = GenerationStats(mode="remote")
        pieces: list[str] = []
        t0 = time.perf_counter()
        try:
            with self.http.open("POST", self.driver.path, body, cancelled) as response:
                final = cut = False  # the server's final event seen; specd ended the text itself
                try:
                    for event in response.events():
                        if isinstance(event, dict) and "error" in event:  # an error reported mid-stream
                            raise RemoteError(f"{response.what}: the server reported an error: "
                                              f"{error_message(json.dumps(event))}")
                        chunk = self.driver.parse(event)
                        _count(stats, chunk)
                        final = final or chunk.stop_reason is not None
                        if chunk.text:
                            if not pieces:
                                stats.ttft_ms = (time.perf_counter() - t0) * 1e3
                            pieces.append(chunk.text)
                            if stream.update(pieces):
                                stats.stop_reason = "stop_string"
                                cut = True
                                break  # leaving the block closes the connection: the server stops
                        if cancelled is not None and cancelled():
                            raise Cancelled()
                        if final and self.driver.ended(final, None):
                            break  # the server's last event (llama-server's stop: true): complete
                except RemoteError as e:  # the answer had started: what streamed is all there is
                    raise _incomplete(response, e, len(pieces), "".join(streamed)) from None
                if not cut and not self.driver.ended(final, response.ended):
                    raise IncompleteAnswer(
                        f"{response.what}: the server closed the stream after {_tokens(len(pieces))} without "
                        f"its end marker ({self.driver.end_marker}): the answer is incomplete",
                        len(pieces), "".join(streamed))
        except RemoteError as e:
            self._record(False, e)
            raise
        self._record(True)
        text = stream.finish(pieces)
        if stats.stop_reason == "" and len(text) < len("".join(pieces)):
            stats.stop_reason = "stop_string"  # a guard cut the final line
        stats.stop_reason = stats.stop_reason or "stop_token"
        if not stats.new_tokens:
            stats.new_tokens = len(pieces)  # servers stream about one token per event
        if not stats.prompt_tokens:  # a server that reports no usage while streaming
            stats.prompt_tokens = self.driver.prompt_tokens(request, self.prompt) or 0
        stats.total_ms = (time.perf_counter() - t0) * 1e3
        stats.prefill_ms = stats.ttft_ms
        return Completion(text, [], stats)

    def warm(self, request: CompletionRequest, cancelled: Cancel = None) -> int:
        self._gate()
        if not self._checked:
            self.check(cancelled)
        request.validate(self.max_len)
        try:
            answer = self.http.post_json(self.driver.path, self.driver.warm_body(request, self.prompt), cancelled)
            chunk = self.driver.parse(answer)
        except RemoteError as e:
            self._record(False, e)
            raise
        self._record(True)
        return chunk.prompt_tokens or 0


def _tokens(n: int) -> str:
    return f"{n} token" + ("" if n == 1 else "s")


def _incomplete(response: Response, e: RemoteError, tokens: int, streamed: str) -> IncompleteAnswer:
    """``e``, raised while a streamed answer was being read, as an incomplete answer."""
    if isinstance(e, StreamBroken):
        why = str(e).split(": the connection broke: ", 1)[-1]
        message = f"{response.what}: the server closed the stream after {_tokens(tokens)} ({why})"
    else:
        message = f"{e}, after {_tokens(tokens)} had streamed"
    return IncompleteAnswer(message + ": the answer is incomplete", tokens, streamed)


def _count(stats: GenerationStats, chunk: Chunk) -> None:
    if chunk.stop_reason is not None and not stats.stop_reason:
        stats.stop_reason = chunk.stop_reason
    if chunk.prompt_tokens is not None:
        stats.prompt_tokens = chunk.prompt_tokens
    if chunk.cached_tokens is not None:
        stats.prefill_reused = chunk.cached_tokens
    if chunk.new_tokens is not None:
        stats.new_tokens = chunk.new_tokens


def _shorter(http: HttpClient, timeout_s: float) -> HttpSettings:
    """The client's settings with every wait at most ``timeout_s`` and no retry (health checks)."""
    s = http.settings
    return replace(s, connect_timeout_s=min(s.connect_timeout_s, timeout_s), timeout_s=min(s.timeout_s, timeout_s),
                   retries=0)
