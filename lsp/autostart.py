"""Starting the daemon in the background when none listens on the socket."""

from __future__ import annotations

import asyncio
import os
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class DaemonSpawner:
    """Runs ``argv`` (a ``specd serve`` command line) detached, its stderr to ``log_path``, and
    waits until the socket accepts connections."""

    argv: list[str]
    log_path: Path
    ready_timeout_s: float = 180.0
    _process: subprocess.Popen | None = field(default=None, init=False)

    def spawn(self) -> subprocess.Popen:
        if self._process is not None and self._process.poll() is None:
            return self._process  # still starting (or running)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self._process = subprocess.Popen(
                self.argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log,
                start_new_session=True, close_fds=True, env=dict(os.environ))
        return self._process

    async def ensure_running(self, socket: Path) -> None:
        """Spawn the daemon and wait for its socket; raises OSError with the reason."""
        process = self.spawn()
        deadline = time.monotonic() + self.ready_timeout_s
        while True:
            try:
                _, writer = await asyncio.open_unix_connection(str(socket))
                writer.close()
                return
            except OSError:
                pass
            if process.poll() is not None:  # it exited: maybe another daemon won the race
                try:
                    _, writer = await asyncio.open_unix_connection(str(socket))
                    writer.close()
                    return
                except OSError:
                    raise OSError(f"the daemon exited with code {process.returncode}: {self.log_tail()}") from None
            if time.monotonic() > deadline:
                raise OSError(f"the daemon did not listen on {socket} within {self.ready_timeout_s:.0f} s")
            await asyncio.sleep(0.1)

    def log_tail(self, lines: int = 3) -> str:
        try:
            text = self.log_path.read_text(errors="replace").strip().splitlines()
        except OSError:
            return "(no log)"
        return " | ".join(text[-lines:])
