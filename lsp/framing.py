"""LSP base-protocol framing (``Content-Length`` headers, a blank line, a JSON body) read from
stdin, hardened against hostile input; it replaces pygls' stdio read loop (``pygls.io_.run_async``),
which stops answering for good after a body without a header and allocates whatever length a
header declares.

:class:`FrameReader` resynchronises instead: bytes that are not part of a well-formed frame are
skipped, and logged, up to the next ``Content-Length:`` header line (found anywhere in a line, so
``{}Content-Length: 12`` after a headerless body is found too). A body declared larger than the cap
is never allocated: it is skipped the same way. That is exact for a real JSON body, which cannot hold
a header line: a raw line break cannot appear inside a JSON string, and ``Content-Length:`` cannot
appear outside one. Everything is read in bounded chunks, so no input makes the server allocate
more than the cap.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from concurrent.futures import Executor
from threading import Event
from typing import Any, BinaryIO, Callable

from pygls.exceptions import JsonRpcException
from pygls.protocol import JsonRPCProtocol

MAX_MESSAGE_BYTES = 64 << 20
"""The default cap on one message body (``specd lsp --max-message-bytes``); larger ones are skipped."""
CHUNK_BYTES = 64 << 10
"""The most read at once while looking for a header line or skipping input."""
CARRY_BYTES = 256
"""How much of an over-long line is kept when a header may straddle two chunks."""
PREVIEW_BYTES = 80
"""How much of the skipped input the log line shows."""

CONTENT_LENGTH = re.compile(rb"content-length[ \t]*:[ \t]*(\d+)[ \t]*\r?\n\Z", re.IGNORECASE)
OTHER_HEADER = re.compile(rb"[!-9;-~]+:[^\r\n]*\r?\n\Z")  # e.g. Content-Type: ...


class FrameReader:
    """Reads message bodies from a binary stream (blocking; run it in a worker thread).

    :meth:`read` returns the next body, or ``None`` at end of input. Malformed input and bodies over
    ``max_message_bytes`` are skipped with a warning on ``log``.
    """

    def __init__(self, stream: BinaryIO, max_message_bytes: int, log: logging.Logger) -> None:
        if max_message_bytes < 1:
            raise ValueError("max_message_bytes must be at least 1")
        self.stream = stream
        self.max_message_bytes = max_message_bytes
        self.log = log
        self._skipped = 0
        self._preview = b""

    def read(self) -> bytes | None:
        """The next well-formed body at most ``max_message_bytes`` long; ``None`` at end of input."""
        rescan = b""
        while True:
            length = self._find_header(rescan)
            if length is None:
                return None
            headers = self._rest_of_headers(length)
            if isinstance(headers, bytes):
                rescan = headers
                continue
            length, rescan = headers, b""
            if length == 0:
                self.log.warning("lsp: skipped a message declaring Content-Length: 0")
                continue
            if length > self.max_message_bytes:
                self.log.warning("lsp: a message declares %d bytes, over the cap of %d bytes "
                                 "(--max-message-bytes); skipping it", length, self.max_message_bytes)
                continue  # its body goes by as skipped input, up to the next header
            body = self._read_exactly(length)
            if body is None:
                self.log.warning("lsp: end of input inside a message body (%d bytes declared)", length)
                return None
            return body

    def _find_header(self, rescan: bytes) -> int | None:
        """Skips input, starting with ``rescan`` (a line already read), up to and including the next
        ``Content-Length`` line; its value, or ``None`` at end of input."""
        carry = b""
        while True:
            chunk = rescan or self.stream.readline(CHUNK_BYTES)
            rescan = b""
            if not chunk:
                self._skip(carry)
                self._report("before end of input")
                return None
            line = carry + chunk
            if not chunk.endswith(b"\n"):  # an over-long line: keep its tail, a header may start there
                carry = line[-CARRY_BYTES:]
                self._skip(line[:-CARRY_BYTES])
                continue
            carry = b""
            match = CONTENT_LENGTH.search(line)
            if match is None:
                self._skip(line)
                continue
            self._skip(line[:match.start()])
            self._report("before the next Content-Length header")
            return int(match.group(1))

    def _rest_of_headers(self, length: int) -> int | bytes:
        """Reads the header lines after ``Content-Length`` up to the blank line: the length (the last
        one given), or, when a line is neither a header nor the blank line, that line (to search
        for the next header from; ``b""`` at end of input)."""
        while True:
            line = self.stream.readline(CHUNK_BYTES)
            if line in (b"\r\n", b"\n"):
                return length
            match = CONTENT_LENGTH.match(line)
            if match is not None:
                length = int(match.group(1))
            elif OTHER_HEADER.fullmatch(line) is None:
                if line:
                    self.log.warning("lsp: skipped a malformed header block (Content-Length: %d, then %r)",
                                     length, line[:PREVIEW_BYTES])
                else:
                    self.log.warning("lsp: end of input inside a header block")
                return line

    def _read_exactly(self, n: int) -> bytes | None:
        """``n`` bytes (``n`` at most the cap), or ``None`` if the input ends first."""
        parts: list[bytes] = []
        left = n
        while left:
            part = self.stream.read(min(left, CHUNK_BYTES))
            if not part:
                return None
            parts.append(part)
            left -= len(part)
        return b"".join(parts)

    def _skip(self, data: bytes) -> None:
        if data:
            if len(self._preview) < PREVIEW_BYTES:
                self._preview += data[:PREVIEW_BYTES - len(self._preview)]
            self._skipped += len(data)

    def _report(self, where: str) -> None:
        if self._skipped:
            more = "..." if self._skipped > len(self._preview) else ""
            self.log.warning("lsp: skipped %d bytes of malformed input %s: %r%s", self._skipped, where,
                             self._preview, more)
        self._skipped, self._preview = 0, b""


async def serve_frames(stop_event: Event, reader: FrameReader, protocol: JsonRPCProtocol, executor: Executor,
                       error_handler: Callable[[Exception, type[JsonRpcException]], Any],
                       log: logging.Logger) -> None:
    """Hands each body from ``reader`` (read in ``executor``) to ``protocol`` until end of input or
    ``stop_event``; as ``pygls.io_.run_async``, a body that cannot be handled is logged and reported."""
    loop = asyncio.get_running_loop()
    while not stop_event.is_set():
        body = await loop.run_in_executor(executor, reader.read)
        if body is None:
            break
        try:
            protocol.handle_message(json.loads(body, object_hook=protocol.structure_message))
        except Exception as exc:
            log.exception("Unable to handle message")
            error_handler(exc, JsonRpcException)
