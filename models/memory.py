"""Process memory as the OS sees it."""

from __future__ import annotations

import os
import resource


def rss_bytes() -> int:
    """Current resident set size (Linux /proc), else the peak from getrusage."""
    try:
        with open("/proc/self/statm") as f:
            pages = int(f.read().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def resident_split() -> dict[str, int]:
    """This process's resident bytes by kind (Linux ``/proc/self/status``): ``anon`` (heap: copies,
    quantized layers, KV caches), ``file`` (pages of memory-mapped files: a GGUF run as stored,
    shared with the page cache), ``shmem``; empty where /proc is missing."""
    keys = {"RssAnon": "anon", "RssFile": "file", "RssShmem": "shmem"}
    out: dict[str, int] = {}
    try:
        with open("/proc/self/status") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key in keys:
                    out[keys[key]] = int(value.split()[0]) * 1024
    except (OSError, ValueError, IndexError):
        return {}
    return out
