"""Reading newline-delimited messages with bounded memory.

A line longer than the limit is never held whole: the reader discards it chunk by chunk up to its
newline and reports :data:`TOO_LARGE`, then carries on with the next line.
"""

from __future__ import annotations

import asyncio
from typing import Final

CHUNK = 64 * 1024


class _TooLarge:
    def __repr__(self) -> str:
        return "TOO_LARGE"


TOO_LARGE: Final = _TooLarge()


class LineReader:
    def __init__(self, reader: asyncio.StreamReader, limit: int) -> None:
        self._reader = reader
        self._limit = limit
        self._buf = bytearray()
        self._eof = False

    async def next(self) -> bytes | _TooLarge | None:
        """The next line without its newline, TOO_LARGE, or None at end of stream. A final line
        without a newline counts as a line."""
        discarding = False
        while True:
            nl = self._buf.find(b"\n")
            if nl >= 0:
                line = bytes(self._buf[:nl])
                del self._buf[: nl + 1]
                if discarding or len(line) > self._limit:
                    return TOO_LARGE
                return line.rstrip(b"\r")
            if len(self._buf) > self._limit:
                discarding = True
                self._buf.clear()
            if self._eof:
                if discarding:
                    return TOO_LARGE
                if self._buf.strip():
                    line = bytes(self._buf)
                    self._buf.clear()
                    return line
                return None
            chunk = await self._reader.read(CHUNK)
            if not chunk:
                self._eof = True
            else:
                self._buf += chunk
