"""Hostile framing against the real ``specd lsp`` over stdio: raw bytes in, framed answers out.

A malformed frame is skipped and the server goes on serving from the next ``Content-Length``
header; a message over the size cap is skipped the same way (never allocated), and end of input
after it is a clean exit. Every wait is bounded, so a server that stops answering fails the test
instead of hanging it. The :class:`~specd.lsp.framing.FrameReader` tests at the end run the same
reader on in-memory streams.
"""

from __future__ import annotations

import io
import json
import logging
import queue
import subprocess
import threading
from typing import Any

import pytest

from specd.lsp.framing import MAX_MESSAGE_BYTES, FrameReader
from tests.lsp_session import TINY_SERVER

WAIT_S = 60.0  # generous: the server process starts on two shared cores
INITIALIZE = {"processId": None, "rootUri": None, "capabilities": {}}


def frame(message: dict[str, Any]) -> bytes:
    body = json.dumps(message).encode()
    return b"Content-Length: %d\r\n\r\n%s" % (len(body), body)


def request(rid: int, method: str, params: Any = None) -> bytes:
    return frame({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})


def notification(method: str, params: Any = None) -> bytes:
    return frame({"jsonrpc": "2.0", "method": method, "params": params})


class StdioServer:
    """The real server process; a thread parses its stdout into messages for bounded waits."""

    def __init__(self, *flags: str) -> None:
        self.proc = subprocess.Popen([*TINY_SERVER, "--in-process", *flags], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.messages: queue.Queue[dict[str, Any] | None] = queue.Queue()
        threading.Thread(target=self._read_stdout, daemon=True).start()

    def _read_stdout(self) -> None:
        out = self.proc.stdout
        assert out is not None
        while True:
            length = None
            while (line := out.readline()) not in (b"\r\n", b""):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":", 1)[1])
            if not line or length is None:
                break
            self.messages.put(json.loads(out.read(length)))
        self.messages.put(None)

    def send(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def response(self, rid: int) -> dict[str, Any]:
        """The response to request ``rid`` (notifications before it are passed over)."""
        while True:
            try:
                message = self.messages.get(timeout=WAIT_S)
            except queue.Empty:
                raise AssertionError(f"no response to request {rid} within {WAIT_S}s") from None
            assert message is not None, f"stdout closed before the response to {rid}: {self.stderr()}"
            if message.get("id") == rid and "method" not in message:
                return message

    def finish(self) -> tuple[int, str]:
        """Close stdin (end of input); the exit status and stderr, within a bounded wait."""
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.close()
        except BrokenPipeError:
            pass
        try:
            self.proc.wait(timeout=WAIT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"the server did not exit at end of input: {self.stderr()}") from None
        return self.proc.returncode, self.stderr()

    def stderr(self) -> str:
        if self.proc.poll() is None:
            return "(still running)"
        assert self.proc.stderr is not None
        return self.proc.stderr.read().decode(errors="replace")

    def shutdown(self, rid: int) -> tuple[int, str]:
        """``shutdown`` then ``exit``; the exit status and stderr."""
        assert "error" not in self.response_to(request(rid, "shutdown"), rid)
        self.send(notification("exit"))
        return self.finish()

    def response_to(self, data: bytes, rid: int) -> dict[str, Any]:
        self.send(data)
        return self.response(rid)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if stream is not None:
                try:
                    stream.close()
                except BrokenPipeError:
                    pass


@pytest.fixture
def server():
    s = StdioServer()
    yield s
    s.kill()


def assert_clean(rc: int, stderr: str) -> None:
    assert rc == 0, stderr
    assert "MemoryError" not in stderr and "Traceback" not in stderr, stderr


@pytest.mark.parametrize("junk", [
    b"X\r\n\r\n{}",  # a body without a Content-Length header
    b"Content-Type: application/vscode-jsonrpc\r\n\r\n{}",
    b"Content-Length: many\r\n\r\n{}",
    b"garbage without a newline",
    b"Content-Length: 0\r\n\r\n",
])
def test_malformed_frame_before_initialize_is_skipped(server: StdioServer, junk: bytes) -> None:
    answer = server.response_to(junk + request(1, "initialize", INITIALIZE), 1)
    assert "capabilities" in answer["result"]
    rc, stderr = server.shutdown(2)
    assert_clean(rc, stderr)
    if junk.strip(b"\r\n"):
        assert "skipped" in stderr


def test_malformed_frame_between_requests_is_skipped(server: StdioServer) -> None:
    server.response_to(request(1, "initialize", INITIALIZE), 1)
    server.send(notification("initialized", {}))
    server.send(b"X\r\n\r\n{}")
    answer = server.response_to(request(2, "specd/noSuchMethod", {}), 2)
    assert answer["error"]["code"] == -32601  # answered: the stream is back in step
    rc, stderr = server.shutdown(3)
    assert_clean(rc, stderr)
    assert "skipped 7 bytes" in stderr  # all of b"X\r\n\r\n{}", logged


def test_huge_content_length_then_valid_frames(server: StdioServer) -> None:
    answer = server.response_to(b"Content-Length: 99999999999\r\n\r\n" + request(1, "initialize", INITIALIZE), 1)
    assert "capabilities" in answer["result"]
    rc, stderr = server.shutdown(2)
    assert_clean(rc, stderr)
    assert "99999999999" in stderr and str(MAX_MESSAGE_BYTES) in stderr  # the clear log line


def test_huge_content_length_then_end_of_input(server: StdioServer) -> None:
    server.send(b"Content-Length: 99999999999\r\n\r\n")
    rc, stderr = server.finish()
    assert_clean(rc, stderr)
    assert "99999999999" in stderr


def test_real_message_over_the_cap_is_skipped() -> None:
    """A genuine oversized message (whose text even quotes a header) is passed over whole."""
    server = StdioServer("--max-message-bytes", "4096")
    try:
        text = "Content-Length: 12\r\n\r\n" * 400  # escaped in the JSON: no header line inside the body
        big = notification("textDocument/didOpen", {"textDocument": {
            "uri": "file:///work/proj/big.py", "languageId": "python", "version": 1, "text": text}})
        assert len(big) > 4096
        answer = server.response_to(big + request(1, "initialize", INITIALIZE), 1)
        assert "capabilities" in answer["result"]
        rc, stderr = server.shutdown(2)
        assert_clean(rc, stderr)
        assert "over the cap of 4096 bytes" in stderr
    finally:
        server.kill()


def read_all(data: bytes, max_message_bytes: int = MAX_MESSAGE_BYTES) -> list[bytes]:
    reader = FrameReader(io.BufferedReader(io.BytesIO(data)), max_message_bytes, logging.getLogger("test"))
    bodies = []
    while (body := reader.read()) is not None:
        bodies.append(body)
    return bodies


def test_frame_reader_headers() -> None:
    assert read_all(b"Content-Length: 2\r\n\r\n{}") == [b"{}"]
    assert read_all(b"content-length:2\r\nContent-Type: x\r\n\r\n{}Content-Length: 1\n\n1") == [b"{}", b"1"]
    assert read_all(b"X\r\n\r\n{}Content-Length: 2\r\n\r\n[]") == [b"[]"]
    assert read_all(b"Content-Length: 2\r\nnot a header\r\n\r\n{}Content-Length: 1\r\n\r\n1") == [b"1"]
    assert read_all(b"Content-Length: 5\r\n\r\n{}") == []  # end of input inside a body
    assert read_all(b"") == [] and read_all(b"\r\n\r\n\r\n") == []


def test_frame_reader_skips_bodies_over_the_cap(caplog: pytest.LogCaptureFixture) -> None:
    body = json.dumps({"text": "Content-Length: 3\r\n" * 10_000}).encode()  # spans many read chunks
    data = b"Content-Length: %d\r\n\r\n%s" % (len(body), body) + b"Content-Length: 2\r\n\r\n{}"
    with caplog.at_level(logging.WARNING, logger="test"):
        assert read_all(data, max_message_bytes=1000) == [b"{}"]
    assert f"declares {len(body)} bytes, over the cap of 1000 bytes" in caplog.text
    assert read_all(b"Content-Length: 99999999999\r\n\r\n" + b"x" * 300_000) == []
