"""The soak (``bench/soak.py``) on the real pair, short: one daemon at its defaults gets a seeded mix
of greedy requests (each checked against its target-only twin), sampled ones, warms, profiles,
dropped and cancelled streams, superseded sessions, parallel clients and malformed lines."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.real_models

SOAK = Path(__file__).resolve().parents[1] / "bench" / "soak.py"


def test_a_mixed_soak_keeps_greedy_exact_and_serves_everyone(tmp_path) -> None:
    out = tmp_path / "soak.json"
    proc = subprocess.run([sys.executable, str(SOAK), "--ops", "30", "--seed", "3", "--out", str(out)],
                          capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert "; 0 failures" in proc.stdout
