#!/usr/bin/env python
"""Load time and resident memory of ``specd serve`` with a pair (default: the default pair, gguf
target + INT4 draft).

Starts ``specd serve`` on a private socket, waits for its "listening" line (the models are loaded
then: the listener opens first, the line comes after the load), reads the daemon's RSS from
``/proc/<pid>/status`` (VmRSS, split into anonymous and file-backed pages, and the peak VmHWM), sends a
few greedy completions, reads it again and stops the daemon. Run several times; medians are printed.

    flock /tmp/specd-cpu.lock python bench/serve_memory.py --runs 3
    flock /tmp/specd-cpu.lock python bench/serve_memory.py --runs 3 -- --target-quant int8

Engine flags after ``--`` go to ``specd serve`` unchanged.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PROMPTS = [
    "def fibonacci(n):\n    ",
    "import os\n\ndef list_python_files(root):\n    ",
    "class Stack:\n    def __init__(self):\n        self.items = []\n\n    def push(self, x):\n        ",
    "def parse_args(argv):\n    parser = argparse.ArgumentParser()\n    ",
]


def status(pid: int) -> dict[str, int]:
    """VmRSS, RssAnon, RssFile, VmHWM of ``pid`` in bytes."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "RssAnon", "RssFile", "VmHWM"):
            out[key] = int(value.split()[0]) * 1024
    return out


def request(sock_path: str, rid: int, method: str, params: dict) -> dict:
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(sock_path)
        s.sendall((json.dumps({"jsonrpc": "2.0", "id": rid, "method": method, "params": params}) + "\n").encode())
        buf = b""
        while True:
            chunk = s.recv(1 << 16)
            if not chunk:
                raise RuntimeError(f"daemon closed the connection: {buf[-500:]!r}")
            buf += chunk
            for line in buf.split(b"\n")[:-1]:
                msg = json.loads(line)
                if msg.get("id") == rid:
                    return msg


def one_run(serve_flags: list[str], max_tokens: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="specd-mem-") as tmp:
        sock = os.path.join(tmp, "specd.sock")
        log = open(os.path.join(tmp, "serve.log"), "w+")
        t0 = time.perf_counter()
        proc = subprocess.Popen([shutil.which("specd") or "specd", "serve", "--socket", sock, *serve_flags],
                                stdout=log, stderr=subprocess.STDOUT)
        try:
            while True:
                if proc.poll() is not None:
                    log.seek(0)
                    raise RuntimeError(f"specd serve exited {proc.returncode}:\n{log.read()[-2000:]}")
                log.seek(0)
                if "listening on" in log.read():
                    break
                time.sleep(0.05)
            ready_s = time.perf_counter() - t0
            loaded = status(proc.pid)
            for i, prompt in enumerate(PROMPTS):
                msg = request(sock, i + 1, "complete", {"prefix": prompt, "max_tokens": max_tokens})
                if "error" in msg:
                    raise RuntimeError(f"complete failed: {msg['error']}")
            served = status(proc.pid)
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            log.close()
    row = {"ready_s": ready_s}
    row.update({f"loaded_{k}": v for k, v in loaded.items()})
    row.update({f"served_{k}": v for k, v in served.items()})
    return row


def main() -> int:
    argv = sys.argv[1:]
    serve_flags: list[str] = []
    if "--" in argv:
        at = argv.index("--")
        argv, serve_flags = argv[:at], argv[at + 1 :]
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=32)
    args = ap.parse_args(argv)
    rows = []
    for i in range(args.runs):
        row = one_run(serve_flags, args.max_tokens)
        rows.append(row)
        print(json.dumps({"run": i + 1, **{k: round(v, 2) if k == "ready_s" else v for k, v in row.items()}}),
              flush=True)
    med = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
    mb = {k: (f"{v:.2f} s" if k == "ready_s" else f"{v / 1e9:.3f} GB") for k, v in med.items()}
    print("median over", args.runs, "runs:", json.dumps(mb))
    return 0


if __name__ == "__main__":
    sys.exit(main())
