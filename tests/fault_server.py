"""A fault-injecting inference server, run as its own process on 127.0.0.1, for the remote-backend
fault tests (``tests/test_remote_faults.py``): it speaks enough of llama-server's API (``/health``,
``/props``, ``/infill``) and of the OpenAI API (``/v1/models``, ``/v1/completions``) for
``specd serve --backend`` to use it, and each request picks its fault by a marker in its prompt
(``FAULT=<mode>``), so one server serves a faulty session and a healthy one side by side:

- ``ok``: one token per event, ``TOKENS`` of them, then the proper end (``stop: true`` /
  ``finish_reason`` and ``data: [DONE]``, and the chunked body's terminating chunk);
- ``cut``: five tokens, then the connection closed with no terminating chunk (a killed server);
- ``reset``: five tokens, then a TCP reset;
- ``clean-eof``: five tokens, then the body ended properly (terminating chunk) but without the
  server's end marker (a proxy that ends the body early);
- ``no-done`` (OpenAI): a ``finish_reason``, then the body ended without ``data: [DONE]``;
- ``stall``: five tokens, then silence, the connection held open until the client goes;
- ``garbage``: five tokens, then an event that is not JSON;
- ``headers``: the request read, the connection closed before any status line;
- ``trickle``: a token every ``TRICKLE_S`` up to the request's token limit.

``GET /fault/log`` lists what each request did (its mode, tokens sent, and how it ended: ``done``,
``faulted``, or ``client-closed`` when the client hung up, i.e. the server would stop generating).

With ``--upstream URL`` it is a proxy in front of a real inference server instead: every request
goes to the server, and the events of a completion carrying a marker are the server's own until the
fault (``trickle`` delays each of them by ``TRICKLE_S``); at the fault the proxy hangs up on the
server, which stops generating.

Run: ``python tests/fault_server.py PORT [--upstream URL]``; it prints ``ready`` once listening.
"""

from __future__ import annotations

import http.client
import http.server
import json
import re
import select
import socket
import struct
import sys
import threading
import time

TOKENS = 8
TRICKLE_S = 0.5
STALL_MAX_S = 300.0
FAULTED_AFTER = 5
MODEL = "fault-model"
_MODE = re.compile(r"FAULT=([a-z-]+)")

LOG: list[dict] = []
LOG_LOCK = threading.Lock()
UPSTREAM: tuple[str, int] | None = None  # (host, port) of the real server behind, in proxy mode


def _token(i: int) -> str:
    return str(i % 10)


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:
        pass

    # -- plumbing -------------------------------------------------------------------------------
    def _body(self) -> dict:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        self.raw = raw
        try:
            return json.loads(raw) if raw else {}
        except ValueError:
            return {}

    def _json(self, obj, status: int = 200) -> None:
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _event(self, obj) -> None:
        payload = obj if isinstance(obj, str) else json.dumps(obj)
        self._chunk(f"data: {payload}\n\n".encode())

    def _end_body(self) -> None:
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _client_gone(self, wait: float) -> bool:
        """Whether the client closed the connection, waiting up to ``wait`` seconds to see."""
        ready, _, _ = select.select([self.connection], [], [], wait)
        if not ready:
            return False
        try:
            return self.connection.recv(1, socket.MSG_PEEK) == b""
        except OSError:
            return True

    def _drop(self, reset: bool = False) -> None:
        if reset:
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        else:
            try:
                self.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self.connection.close()
        self.close_connection = True

    # -- routes ---------------------------------------------------------------------------------
    def _upstream(self, body: bytes | None) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        assert UPSTREAM is not None
        conn = http.client.HTTPConnection(*UPSTREAM, timeout=600)
        headers = {k: v for k, v in self.headers.items() if k.lower() in ("content-type", "accept", "authorization")}
        conn.request(self.command, self.path, body=body, headers=headers)
        return conn, conn.getresponse()

    def _relay_whole(self, body: bytes | None) -> None:
        conn, resp = self._upstream(body)
        data = resp.read()
        conn.close()
        self.send_response(resp.status)
        self.send_header("Content-Type", resp.getheader("Content-Type") or "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        if UPSTREAM is not None and self.path != "/fault/log":
            self._relay_whole(None)
        elif self.path == "/health":
            self._json({"status": "ok"})
        elif self.path == "/props":
            self._json({"default_generation_settings": {"n_ctx": 4096}, "model_path": f"/models/{MODEL}.gguf"})
        elif self.path == "/v1/models":
            self._json({"object": "list", "data": [{"id": MODEL, "object": "model"}]})
        elif self.path == "/fault/log":
            with LOG_LOCK:
                self._json(list(LOG))
        else:
            self._json({"error": {"message": f"no route {self.path}"}}, 404)

    def do_POST(self) -> None:
        body = self._body()
        if self.path == "/infill":
            prompt = body.get("input_prefix", "") + body.get("input_suffix", "")
            self._complete(body, prompt, "llama-server", int(body.get("n_predict", TOKENS)))
        elif self.path == "/v1/completions":
            prompt = body.get("prompt", "")
            self._complete(body, prompt, "openai", int(body.get("max_tokens", TOKENS)))
        else:
            self._json({"error": {"message": f"no route {self.path}"}}, 404)

    def _complete(self, body: dict, prompt: str, api: str, limit: int) -> None:
        found = _MODE.search(prompt)
        mode = found.group(1) if found else "ok"
        entry = {"api": api, "mode": mode, "stream": bool(body.get("stream")), "tokens": 0, "end": "running"}
        with LOG_LOCK:
            LOG.append(entry)
        if mode == "headers":
            entry["end"] = "faulted"
            self._drop()
            return
        if UPSTREAM is not None:
            self._relay(api, mode, entry, bool(body.get("stream")))
            return
        if not body.get("stream"):
            self._whole(api, prompt, limit, entry)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        count = limit if mode in ("ok", "trickle") else max(limit, FAULTED_AFTER + 1)
        try:
            for i in range(count):
                if mode not in ("ok", "trickle") and i == FAULTED_AFTER:
                    self._fault(mode, api, entry)
                    return
                if mode == "trickle" and i and self._client_gone(TRICKLE_S):
                    entry["end"] = "client-closed"
                    return
                self._event(self._piece(api, _token(i)))
                entry["tokens"] += 1
            self._event(self._last(api, prompt, entry["tokens"]))
            if api == "openai":
                self._event("[DONE]")
            self._end_body()
            entry["end"] = "done"
        except OSError:
            entry["end"] = "client-closed"

    def _relay(self, api: str, mode: str, entry: dict, stream: bool) -> None:
        """The real server's answer, its events passed on one by one until the fault."""
        if not stream:
            entry["end"] = "done"
            self._relay_whole(self.raw)
            return
        conn, resp = self._upstream(self.raw)
        self.send_response(resp.status)
        self.send_header("Content-Type", resp.getheader("Content-Type") or "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        event = b""
        try:
            while True:
                line = resp.readline()
                if not line:
                    break
                event += line
                if line.strip():
                    continue
                if mode not in ("ok", "trickle") and entry["tokens"] == FAULTED_AFTER:
                    conn.close()  # the real server stops generating
                    self._fault(mode, api, entry)
                    return
                if mode == "trickle" and entry["tokens"] and self._client_gone(TRICKLE_S):
                    entry["end"] = "client-closed"
                    return
                self._chunk(event)
                if event.startswith(b"data: ") and b"[DONE]" not in event:
                    entry["tokens"] += 1
                event = b""
            self._end_body()
            entry["end"] = "done"
        except OSError:
            entry["end"] = "client-closed"
        finally:
            conn.close()

    def _fault(self, mode: str, api: str, entry: dict) -> None:
        entry["end"] = "faulted"
        if mode == "cut":
            self._drop()
        elif mode == "reset":
            self._drop(reset=True)
        elif mode == "clean-eof":
            self._end_body()
        elif mode == "no-done":
            self._event(self._last(api, "", entry["tokens"]))
            self._end_body()
        elif mode == "garbage":
            self._chunk(b'data: {"content": "x", "oops\n\n')
            self._end_body()
        elif mode == "stall":
            deadline = time.monotonic() + STALL_MAX_S
            while time.monotonic() < deadline:
                if self._client_gone(0.1):
                    entry["end"] = "client-closed"
                    break
            self._drop()
        else:
            self._chunk(f"data: {json.dumps({'error': {'message': f'unknown fault {mode}'}})}\n\n".encode())
            self._end_body()

    @staticmethod
    def _piece(api: str, text: str) -> dict:
        if api == "llama-server":
            return {"content": text, "stop": False}
        return {"id": "cmpl-f", "object": "text_completion", "model": MODEL,
                "choices": [{"index": 0, "text": text, "finish_reason": None}]}

    @staticmethod
    def _last(api: str, prompt: str, n: int) -> dict:
        prompt_tokens = max(1, len(prompt) // 4)
        if api == "llama-server":
            return {"content": "", "stop": True, "stop_type": "limit", "tokens_predicted": n,
                    "tokens_evaluated": prompt_tokens, "id_slot": 0,
                    "timings": {"prompt_n": prompt_tokens, "predicted_n": n, "cache_n": 0}}
        return {"id": "cmpl-f", "object": "text_completion", "model": MODEL,
                "choices": [{"index": 0, "text": "", "finish_reason": "length"}],
                "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": n, "total_tokens": prompt_tokens + n}}

    def _whole(self, api: str, prompt: str, limit: int, entry: dict) -> None:
        """A non-streamed answer: warm requests, and the FIM check's token counts."""
        text = "".join(_token(i) for i in range(limit))
        entry["tokens"], entry["end"] = limit, "done"
        if api == "llama-server":
            self._json({**self._last(api, prompt, limit), "content": text})
            return
        fim = prompt.count("<|fim_")
        prompt_tokens = 1 if prompt == "a" else (fim if fim and len(prompt) < 60 else max(1, len(prompt) // 4))
        self._json({"id": "cmpl-f", "object": "text_completion", "model": MODEL,
                    "choices": [{"index": 0, "text": text, "finish_reason": "length"}],
                    "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": limit,
                              "total_tokens": prompt_tokens + limit}})


def main() -> None:
    global UPSTREAM
    port = int(sys.argv[1])
    if len(sys.argv) > 3 and sys.argv[2] == "--upstream":
        host_port = sys.argv[3].split("://", 1)[-1].split("/", 1)[0]
        host, _, up_port = host_port.partition(":")
        UPSTREAM = (host, int(up_port or 80))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
    server.daemon_threads = True
    print("ready", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
