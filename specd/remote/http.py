"""A small HTTP/1.1 JSON client for the remote drivers: timeouts, a total deadline per request,
bounded retries, an API key, server-sent-event streams, and cancellation that closes the connection
at once.

Runs on the daemon's worker thread (stdlib ``http.client``). Two bounds hold a request: the socket
timeout (``timeout_s``: the longest silence, per read) and the deadline (``deadline_s``: the whole
request, connecting and retries included, however the server trickles its bytes). While a request
is open a watcher thread polls ``cancelled`` and the deadline; when either fires it shuts the
socket down: the blocked read returns at once, the server sees the connection close (llama-server
and vLLM then stop generating for it), and the call raises :class:`~specd.requests.Cancelled`, or
a :class:`RemoteError` naming the deadline.
"""

from __future__ import annotations

import http.client
import json
import socket
import ssl
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from specd.remote.errors import CannotConnect, RemoteError, RemoteUnreachable, StreamBroken
from specd.remote.spec import RemoteSpec
from specd.requests import Cancelled

CANCEL_POLL_S = 0.01
RETRY_BACKOFF_S = 0.25  # times the attempt number
MAX_ERROR_BODY = 4096
MAX_BODY = 64 << 20
RETRY_STATUS = (502, 503, 504)  # a proxy's or a loading server's "not now"


@dataclass(frozen=True)
class HttpSettings:
    connect_timeout_s: float = 3.0
    timeout_s: float = 30.0  # longest silence: before the answer starts, between chunks
    retries: int = 1
    api_key: str | None = None
    deadline_s: float = 0.0  # longest whole request, retries included (0: none)

    def __repr__(self) -> str:  # the key never shows
        return (f"HttpSettings(connect_timeout_s={self.connect_timeout_s}, timeout_s={self.timeout_s}, "
                f"retries={self.retries}, api_key={'***' if self.api_key else None}, deadline_s={self.deadline_s})")


Cancel = Callable[[], bool] | None


class _Watch:
    """Shuts ``conn``'s socket when ``cancelled()`` turns True (``fired``) or the monotonic
    ``deadline`` passes (``expired``), until :meth:`stop`."""

    def __init__(self, conn: http.client.HTTPConnection, cancelled: Cancel, deadline: float | None = None) -> None:
        self.conn = conn
        self.cancelled = cancelled
        self.deadline = deadline
        self.fired = False
        self.expired = False
        self._done = threading.Event()
        self._thread: threading.Thread | None = None
        if cancelled is not None or deadline is not None:
            self._thread = threading.Thread(target=self._run, name="specd-remote-watch", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while not self._done.wait(CANCEL_POLL_S):
            if self.cancelled is not None and self.cancelled():
                self.fired = True
            elif self.deadline is not None and time.monotonic() >= self.deadline:
                self.expired = True
            else:
                continue
            sock = self.conn.sock
            if sock is not None:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
            return

    def stop(self) -> None:
        self._done.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()


class Response:
    """An open response: its status, and its body read whole (:meth:`json`) or as events
    (:meth:`events`); :meth:`close` closes the connection. After :meth:`events`, ``ended`` says
    how the body ended: ``"done"`` (``data: [DONE]``), ``"json"`` (a plain JSON body, read whole)
    or ``"eof"`` (the connection closed, or the chunked body ended, without ``[DONE]``)."""

    def __init__(self, client: "HttpClient", what: str, conn: http.client.HTTPConnection,
                 resp: http.client.HTTPResponse, watch: _Watch, deadline_s: float = 0.0) -> None:
        self.client, self.what, self.conn, self.resp, self.watch = client, what, conn, resp, watch
        self.deadline_s = deadline_s
        self.ended: str | None = None

    def close(self) -> None:
        self.watch.stop()
        try:
            self.conn.close()
        except OSError:
            pass

    def __enter__(self) -> "Response":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _failed(self, e: BaseException) -> Exception:
        if self.watch.fired:
            return Cancelled()
        if self.watch.expired:
            return deadline_error(self.what, self.deadline_s)
        if isinstance(e, (socket.timeout, TimeoutError)):
            return RemoteError(f"{self.what}: no answer for {self.client.settings.timeout_s:g} s "
                               "(the server is slow or stuck; --remote-timeout)")
        return StreamBroken(f"{self.what}: the connection broke: {type(e).__name__}: {e}")

    def _stopped(self) -> None:
        """After a read returned: raise if the watcher shut the socket (cancel, deadline)."""
        if self.watch.fired:
            raise Cancelled()
        if self.watch.expired:
            raise deadline_error(self.what, self.deadline_s)

    def json(self) -> Any:
        try:
            body = self.resp.read(MAX_BODY + 1)
        except (OSError, http.client.HTTPException) as e:
            raise self._failed(e) from None
        self._stopped()
        return parse_json(body, self.what)

    def events(self) -> Iterator[Any]:
        """The JSON payloads of a server-sent-event stream (``data: {...}`` lines) until
        ``data: [DONE]`` or the end; a plain JSON body (a server that does not stream) is one event."""
        if "json" in (self.resp.getheader("Content-Type") or "") and "event-stream" not in (
                self.resp.getheader("Content-Type") or ""):
            answer = self.json()
            self.ended = "json"
            yield answer
            return
        while True:
            try:
                line = self.resp.readline(MAX_BODY)
            except (OSError, http.client.HTTPException, ValueError) as e:
                raise self._failed(e) from None
            self._stopped()
            if not line:
                self.ended = "eof"
                return
            text = line.decode("utf-8", "replace").strip()
            if not text or text.startswith(":"):
                continue
            field, _, value = text.partition(":")
            value = value.strip()
            if field == "data":
                if value == "[DONE]":
                    self.ended = "done"
                    return
                yield parse_json(value.encode(), self.what)
            elif field == "error":
                raise RemoteError(f"{self.what}: the server reported an error: {error_message(value)}")
            # other fields (event:, id:, retry:) carry nothing the drivers use


class HttpClient:
    def __init__(self, spec: RemoteSpec, settings: HttpSettings = HttpSettings()) -> None:
        self.spec = spec
        self.settings = settings

    def _connection(self, timeout: float) -> http.client.HTTPConnection:
        if self.spec.https:
            return http.client.HTTPSConnection(self.spec.host, self.spec.port, timeout=timeout,
                                               context=ssl.create_default_context())
        return http.client.HTTPConnection(self.spec.host, self.spec.port, timeout=timeout)

    def headers(self, body: bool) -> dict[str, str]:
        out = {"Accept": "application/json, text/event-stream", "User-Agent": "specd"}
        if body:
            out["Content-Type"] = "application/json"
        if self.settings.api_key:
            out["Authorization"] = f"Bearer {self.settings.api_key}"
        return out

    def open(self, method: str, path: str, body: Any = None, cancelled: Cancel = None,
             timeout_s: float | None = None, retries: int | None = None) -> Response:
        """Send the request; the response once its status line and headers are in. An HTTP error
        status raises :class:`RemoteError` with the server's message; a server that cannot be
        reached is retried ``retries`` times (default: the settings'), then raises
        :class:`RemoteUnreachable`; a cancel raises Cancelled. The settings' ``deadline_s`` bounds
        everything from here to the response's last byte (connecting, retries, reading)."""
        url = self.spec.url + path
        what = f"{method} {url}"
        data = json.dumps(body).encode() if body is not None else None
        attempts = 1 + (self.settings.retries if retries is None else retries)
        budget = self.settings.deadline_s
        deadline = time.monotonic() + budget if budget > 0 else None
        last: Exception | None = None
        for attempt in range(attempts):
            if attempt:
                _sleep(RETRY_BACKOFF_S * attempt, cancelled, deadline)
            if cancelled is not None and cancelled():
                raise Cancelled()
            wait = timeout_s or self.settings.timeout_s
            connect_wait = min(self.settings.connect_timeout_s, wait)
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise deadline_error(what, budget, last)
                connect_wait = min(connect_wait, left)
            conn = self._connection(connect_wait)
            try:
                conn.connect()
            except (OSError, ssl.SSLError) as e:
                conn.close()
                last = CannotConnect(f"{what}: cannot connect: {_reason(e)}")
                continue
            assert conn.sock is not None
            conn.sock.settimeout(wait)
            watch = _Watch(conn, cancelled, deadline)
            try:
                conn.request(method, self.spec.base_path + path, body=data, headers=self.headers(data is not None))
                resp = conn.getresponse()
            except (OSError, http.client.HTTPException) as e:
                watch.stop()
                conn.close()
                if watch.fired:
                    raise Cancelled() from None
                if watch.expired:
                    raise deadline_error(what, budget) from None
                if isinstance(e, (socket.timeout, TimeoutError)):
                    raise RemoteError(f"{what}: no answer for {wait:g} s "
                                      "(the server is slow or stuck; --remote-timeout)") from None
                last = RemoteUnreachable(f"{what}: the connection broke before an answer: {_reason(e)}")
                continue
            response = Response(self, what, conn, resp, watch, budget)
            if resp.status >= 400:
                try:
                    detail = resp.read(MAX_ERROR_BODY)
                except (OSError, http.client.HTTPException):
                    detail = b""
                response.close()
                if watch.fired:
                    raise Cancelled()
                if watch.expired:
                    raise deadline_error(what, budget)
                message = f"{what}: HTTP {resp.status} {resp.reason}: {error_message(detail.decode('utf-8', 'replace'))}"
                if resp.status in RETRY_STATUS:
                    last = RemoteUnreachable(message)
                    continue
                raise RemoteError(message)
            return response
        assert last is not None
        if attempts > 1:
            raise type(last)(f"{last} (after {attempts} attempts)")
        raise last

    def get_json(self, path: str, cancelled: Cancel = None, timeout_s: float | None = None,
                 retries: int | None = None) -> Any:
        with self.open("GET", path, None, cancelled, timeout_s, retries) as r:
            return r.json()

    def post_json(self, path: str, body: Any, cancelled: Cancel = None) -> Any:
        with self.open("POST", path, body, cancelled) as r:
            return r.json()


def deadline_error(what: str, deadline_s: float, last: Exception | None = None) -> RemoteError:
    why = f" (last try: {last})" if last is not None else ""
    return RemoteError(f"{what}: no complete answer within {deadline_s:g} s, the request's deadline "
                       f"(the server is slow or trickling; --remote-deadline){why}")


def parse_json(data: bytes, what: str) -> Any:
    if len(data) > MAX_BODY:
        raise RemoteError(f"{what}: the answer is over {MAX_BODY >> 20} MiB")
    try:
        return json.loads(data)
    except (ValueError, UnicodeDecodeError):
        snippet = data[:200].decode("utf-8", "replace")
        raise RemoteError(f"{what}: the server sent malformed JSON: {snippet!r}") from None


def error_message(text: str) -> str:
    """The message inside an error body (OpenAI's ``{"error": {"message"}}``, llama-server's,
    vLLM's ``{"message"}``, FastAPI's ``{"detail"}``), else the text itself, shortened."""
    try:
        obj = json.loads(text)
    except ValueError:
        return text.strip()[:500] or "(no details)"
    for key in ("error", "detail", "message"):
        if isinstance(obj, dict) and key in obj:
            inner = obj[key]
            if isinstance(inner, dict) and "message" in inner:
                return str(inner["message"])[:500]
            return (inner if isinstance(inner, str) else json.dumps(inner))[:500]
    return text.strip()[:500]


def _reason(e: BaseException) -> str:
    if isinstance(e, ConnectionRefusedError):
        return "connection refused (is the server running?)"
    if isinstance(e, (socket.timeout, TimeoutError)):
        return "timed out"
    if isinstance(e, socket.gaierror):
        return f"unknown host ({e})"
    return f"{type(e).__name__}: {e}"


def _sleep(seconds: float, cancelled: Cancel, limit: float | None = None) -> None:
    deadline = time.monotonic() + seconds
    if limit is not None:
        deadline = min(deadline, limit)
    while time.monotonic() < deadline:
        if cancelled is not None and cancelled():
            raise Cancelled()
        time.sleep(min(CANCEL_POLL_S * 5, max(0.0, deadline - time.monotonic())))
