"""Anchor ``llamacpp-server``: llama.cpp's own ``llama-server`` on the same target GGUF, asked through
``/infill`` as llama.vim / llama.vscode ask it (their CPU settings, greedy), every request cold.

The binaries come from specd's cache (``python -m specd.bench.llamacpp_build``, see
:mod:`specd.bench.llamacpp_bin`); without them the mode is skipped with a note naming that command.
``/infill`` takes text, not token ids: the server tokenizes the task's prefix and suffix itself and
keeps at most ¾·n_batch prefix and n_batch/4 − 2 suffix tokens (384 and 126 at ``-b 512``), so its
prompt is usually shorter than specd's; ``prompt_tokens`` is what the server processed."""

from __future__ import annotations

import atexit
import os
import tempfile
from pathlib import Path

from specd.bench.llamacpp_bin import BUILD_COMMAND, LlamaServer, find_binaries, unavailable_note
from specd.bench.measurement import Measurement
from specd.bench.modes import Mode
from specd.bench.tasks import Task

MIN_CTX = 1024

NOTE = ("llamacpp-server: llama.cpp's llama-server ({version}) from specd's anchor cache, `{args}`; each task's "
        "prefix/suffix text through /infill, greedy, cold (slot erased, cache_prompt false); the server keeps at "
        "most 384 prefix / 126 suffix tokens at -b 512, so prompt tokens are its own; prefill = timings.prompt_ms, "
        "decode ms/token = predicted_ms / predicted_n, TTFT ≈ prefill (the first token is sampled from the prompt "
        "batch), end-to-end = HTTP wall time; peak RSS is the server process's")


def unavailable(gguf: Path | None, mode: Mode) -> str | None:
    if find_binaries() is None:
        return f"{mode.name}: skipped, {unavailable_note()}"
    if gguf is None or not gguf.is_file():
        return (f"{mode.name}: no GGUF file for the target ({gguf or 'the target was not given as a GGUF'}); "
                "use a published name (`specd models pull`) or --target FILE.gguf")
    return None


def _server_hwm_mb(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0
    except (OSError, ValueError, IndexError):
        pass
    return None


class LlamaServerRunner:
    def __init__(self, mode: Mode, gguf: Path, threads: int, n_ctx: int) -> None:
        bins = find_binaries()
        if bins is None:
            raise RuntimeError(f"no llama.cpp binaries: run `{BUILD_COMMAND}`")
        self.mode = mode
        # /slots/0?action=erase needs --slot-save-path (nothing is saved there: the runner only erases)
        self._slots = tempfile.TemporaryDirectory(prefix="specd-llama-slots-")
        self.server = LlamaServer(bins, gguf, threads or os.cpu_count() or 1, ctx=max(n_ctx, MIN_CTX),
                                  extra_args=("--slot-save-path", self._slots.name))
        self.server.start()
        atexit.register(self.close)
        args = self.server.command()[1:]
        args = args[:args.index("--slot-save-path")]
        self.settings = NOTE.format(version=bins.version.splitlines()[0] if bins.version else "?",
                                    args=" ".join(args).replace(str(gguf), gguf.name))

    def run(self, task: Task, prompt: list[int], max_tokens: int, rep: int, order: int) -> Measurement:
        server = self.server
        if not server.erase_slot(0):
            raise RuntimeError("llama-server refused /slots/0?action=erase: the run would not be cold")
        r = server.infill(task.prefix, task.suffix, max_tokens, cache_prompt=False)
        stop = {"eos": "stop_token", "limit": "max_tokens", "word": "stop_word"}.get(r.stop_type, r.stop_type)
        return Measurement(
            task=task.id, category=task.category, mode=self.mode.name, rep=rep, order=order,
            prompt_tokens=r.prompt_n + r.cache_n, new_tokens=r.predicted_n, prefill_ms=r.prompt_ms,
            ttft_ms=r.prompt_ms, decode_ms_per_token=r.decode_ms_per_token or 0.0, total_ms=r.wall_ms,
            peak_rss_mb=_server_hwm_mb(server.proc.pid) if server.proc else None, stop_reason=stop,
            text=r.text, tokens=r.tokens, prefill_reused=r.cache_n,
        )

    def close(self) -> None:
        self.server.stop()
        self._slots.cleanup()
