"""``specd models info``: the pair's resident memory, measured in the process holding it, after
loading and after one completion (when memory-mapped GGUF weights have been read); each model's
bytes per step, its floor at the measured bandwidth, and the quant mode ``auto`` resolved to."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from specd.models import kernels
from tests.test_gguf_float import _tiny


@pytest.mark.skipif(kernels.unavailable() is not None, reason=str(kernels.unavailable()))
def test_info_reports_the_measured_rss_of_a_gguf_pair(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECD_CACHE_DIR", str(tmp_path / "cache"))
    target = _tiny(tmp_path, "target.gguf")
    draft = _tiny(tmp_path, "draft.gguf")
    proc = subprocess.run(
        [sys.executable, "-m", "specd", "models", "info", "--json", "--target", str(target), "--draft", str(draft),
         "--target-quant", "auto", "--draft-quant", "int4", "--draft-head-vocab", "0", "--max-len", "256",
         "--threads", "1"],
        capture_output=True, text=True, timeout=300, env=dict(os.environ))
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["models"]["target"]["quant"] == "auto" and report["models"]["draft"]["quant"] == "int4"
    # auto is reported as what it ran as: a GGUF source on the CPU with specd's kernels runs as gguf
    assert report["models"]["target"]["quant_resolved"] == "gguf"
    assert "GgufLinear" in report["models"]["target"]["runtime"]  # what the loader built agrees
    assert report["models"]["draft"]["quant_resolved"] == "int4"
    assert report["bandwidth_gbs"] > 0 and "torch.sum" in report["bandwidth_method"]
    for role, r in report["models"].items():
        assert r["quant_resolved"] != "auto", role
        # the linear layers and the head, never more than every weight held
        assert 0 < r["step_bytes"] <= r["weights_total"], (role, r)
        assert r["step_bytes"] == r["weights"]["linear"] + r["weights"]["head"], (role, r)
        floor = r["step_bytes"] / (report["bandwidth_gbs"] * 1e9) * 1e3
        assert r["floor_ms"] == pytest.approx(floor, rel=1e-9), (role, r, report["bandwidth_gbs"])
    served = report["after_completion"]
    assert report["rss_bytes"] == served["rss_bytes"]  # the headline figure is the one after a completion
    for when in ("after_load", "after_completion"):
        m = report[when]
        parts = m["anon_bytes"] + m["file_bytes"] + m["shmem_bytes"]  # the kernel's RSS is their sum
        assert abs(parts - m["rss_bytes"]) < 8 * 2**20, (when, m)
    # the completion read the target's memory-mapped blocks: its file-backed pages grew
    assert served["file_bytes"] > report["after_load"]["file_bytes"]
