"""Who is at the other end of a Unix socket, and whether they are still there."""

from __future__ import annotations

import select
import socket
import struct
from typing import Protocol

_UCRED = struct.Struct("3i")  # pid, uid, gid


class HasFd(Protocol):
    def fileno(self) -> int: ...


def peer_credentials(sock: socket.socket) -> tuple[int, int, int]:
    """(pid, uid, gid) of the connected peer, from SO_PEERCRED (Linux)."""
    raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size)
    pid, uid, gid = _UCRED.unpack(raw)
    return pid, uid, gid


def peer_allowed(sock: socket.socket, uid: int) -> bool:
    """True when the peer runs as ``uid``; False when it does not or cannot be identified."""
    try:
        return peer_credentials(sock)[1] == uid
    except (OSError, AttributeError, struct.error):
        return False


def peer_closed(sock: HasFd) -> bool:
    """True when the peer closed the connection entirely (POLLHUP); a peer that only shut down its
    writing side (half-close, as ``nc``/``socat`` do at the end of their input) is still there.
    A socket that is already closed on this side (``fileno() == -1``, as after a transport saw a
    reset) counts as closed."""
    try:
        fd = sock.fileno()
        if fd < 0:
            return True
        poller = select.poll()
        poller.register(fd, select.POLLHUP | select.POLLERR)
        return any(ev & (select.POLLHUP | select.POLLERR | select.POLLNVAL) for _, ev in poller.poll(0))
    except (OSError, ValueError):
        return True
