"""Peak resident memory of this process, per run: reset the high-water mark, read it after."""

from __future__ import annotations

import resource
import sys
from pathlib import Path


def reset_peak() -> bool:
    """Reset VmHWM (Linux ``clear_refs`` = 5); False where the kernel does not allow it."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def peak_rss_mb() -> float:
    """VmHWM from /proc (since the last reset), else ru_maxrss (since the process started)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss / (1024 * 1024) if sys.platform == "darwin" else rss / 1024
