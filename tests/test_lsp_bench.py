"""The typing bench replays keystrokes through the real server (tiny pair, in-process)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_typing_bench_on_tiny_models(tmp_path: Path) -> None:
    out = tmp_path / "typing.json"
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "lsp_typing.py"), "--tiny", "--chars", "6",
                           "--max-tokens", "4", "--json", str(out)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["keystrokes"] == 6 and result["suggestions_shown"] + result["superseded_or_empty"] == 6
    assert result["p50_ms"] <= result["p95_ms"]
