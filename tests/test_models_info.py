"""``specd models info``: the pair's resident memory, measured in the process holding it, after
loading and after one completion (when memory-mapped GGUF weights have been read)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from specd.models import q8
from tests.test_gguf_float import _tiny


@pytest.mark.skipif(q8.unavailable() is not None, reason=str(q8.unavailable()))
def test_info_reports_the_measured_rss_of_a_gguf_pair(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECD_CACHE_DIR", str(tmp_path / "cache"))
    target = _tiny(tmp_path, "target.gguf")
    draft = _tiny(tmp_path, "draft.gguf")
    proc = subprocess.run(
        [sys.executable, "-m", "specd", "models", "info", "--json", "--target", str(target), "--draft", str(draft),
         "--target-quant", "gguf", "--draft-quant", "int4", "--draft-head-vocab", "0", "--max-len", "256",
         "--threads", "1"],
        capture_output=True, text=True, timeout=300, env=dict(os.environ))
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["models"]["target"]["quant"] == "gguf" and report["models"]["draft"]["quant"] == "int4"
    served = report["after_completion"]
    assert report["rss_bytes"] == served["rss_bytes"]  # the headline figure is the one after a completion
    for when in ("after_load", "after_completion"):
        m = report[when]
        parts = m["anon_bytes"] + m["file_bytes"] + m["shmem_bytes"]  # the kernel's RSS is their sum
        assert abs(parts - m["rss_bytes"]) < 8 * 2**20, (when, m)
    # the completion read the target's memory-mapped blocks: its file-backed pages grew
    assert served["file_bytes"] > report["after_load"]["file_bytes"]
