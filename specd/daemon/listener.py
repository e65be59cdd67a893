"""The listening socket: a private directory (0700), a lock held for the daemon's life, a stale
socket removed only when nothing answers on it, the socket itself 0600."""

from __future__ import annotations

import errno
import fcntl
import os
import socket
import stat
from pathlib import Path

MAX_PATH_BYTES = 107  # sun_path holds 108 bytes including the terminating NUL


class ListenerError(RuntimeError):
    """The daemon cannot listen on the requested path (message says why)."""


def is_listening(path: Path) -> bool:
    """True when something accepts connections on the Unix socket at ``path``."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(2.0)
    try:
        s.connect(str(path))
        return True
    except OSError:
        return False
    finally:
        s.close()


def _private_dir(directory: Path) -> None:
    """Create ``directory`` 0700; an existing one must belong to us, and the default ``specd``
    directories are made private again if their mode was widened."""
    if not directory.exists():
        directory.mkdir(mode=0o700, parents=True)
        os.chmod(directory, 0o700)
    st = directory.stat()
    if st.st_uid != os.getuid():
        raise ListenerError(f"socket directory {directory} belongs to uid {st.st_uid}, not to you")
    if stat.S_IMODE(st.st_mode) & 0o077 and (directory.name == "specd" or directory.name.startswith("specd-")):
        os.chmod(directory, 0o700)


class Listener:
    """Owns the socket file: ``open()`` binds it, ``close()`` removes it (if it is still ours)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.sock: socket.socket | None = None
        self._lock_fd: int | None = None
        self._inode: int | None = None

    def open(self) -> socket.socket:
        path = self.path
        if len(os.fsencode(str(path))) > MAX_PATH_BYTES:
            raise ListenerError(f"socket path {path} is longer than {MAX_PATH_BYTES} bytes")
        _private_dir(path.parent)
        self._lock()
        if path.exists() or path.is_symlink():
            if not stat.S_ISSOCK(path.lstat().st_mode):
                self.close()
                raise ListenerError(f"{path} exists and is not a socket; remove it or pick another --socket")
            if is_listening(path):
                self.close()
                raise ListenerError(f"a specd daemon is already listening on {path}")
            path.unlink()  # stale: left by a daemon that died
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)
        try:
            sock.bind(str(path))
        except OSError as e:
            sock.close()
            self.close()
            raise ListenerError(f"cannot bind {path}: {e.strerror}") from e
        finally:
            os.umask(old)
        os.chmod(path, 0o600)
        sock.listen(128)
        sock.setblocking(False)
        self._inode = path.stat().st_ino
        self.sock = sock
        return sock

    def _lock(self) -> None:
        lock_path = self.path.with_name(self.path.name + ".lock")
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            os.close(fd)
            if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise ListenerError(f"a specd daemon is already running on {self.path}") from None
            raise
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._lock_fd = fd

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None
        try:
            if self._inode is not None and self.path.stat().st_ino == self._inode:
                self.path.unlink()
        except FileNotFoundError:
            pass
        self._inode = None
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # releases the flock; the lock file itself stays (harmless)
            self._lock_fd = None
