"""``bench/profile_rounds.py``: a profile's rounds grouped by drafts, and the time to the first N
tokens, the figures RESULTS quotes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "bench" / "profile_rounds.py"


def _round(ms: float, tokens: int, drafted: int, accepted: int, draft_ms: float = 0.0) -> dict:
    return {"ms": ms, "tokens": tokens, "drafted": drafted, "accepted": accepted,
            "phases": {"draft": draft_ms, "verify": ms - draft_ms}}


def test_rounds_are_grouped_by_drafts_and_pooled_per_token(tmp_path: Path) -> None:
    spec = [[_round(30, 1, 0, 0), _round(40, 3, 2, 2, 4.0), _round(40, 1, 2, 0, 4.0)],
            [_round(36, 2, 1, 1, 2.0), _round(40, 3, 2, 2, 6.0)]]
    target = [[_round(30, 1, 0, 0)] * 4, [_round(32, 1, 0, 0)] * 2]
    runs = [{"mode": "spec", "timeline": {"rounds": r}} for r in spec]
    runs += [{"mode": "target", "timeline": {"rounds": r}} for r in target]
    path = tmp_path / "results.json"
    path.write_text(json.dumps({"runs": runs}))
    out = json.loads(subprocess.run([sys.executable, str(SCRIPT), str(path)], check=True, capture_output=True,
                                    text=True).stdout)
    two = out["by_drafts"]["2"]
    assert two["rounds"] == 3 and two["acceptance"] == round(4 / 6, 3)
    assert two["tokens_per_round"] == round(7 / 3, 3) and two["ms_per_token"] == round(120 / 7, 2)
    assert two["draft_ms"] == 4.0
    assert out["tokens"] == 10 and out["ms_per_token"] == round(186 / 10, 2)
    # the first 2 tokens: 70 ms (two rounds) and 36 ms (one) -> median 53; target 60 and 64 -> 62
    assert out["ms_to_n_tokens"]["spec"]["2"] == 53.0 and out["ms_to_n_tokens"]["target"]["2"] == 62.0
    assert out["ms_to_n_tokens"]["spec"]["16"] is None  # no request made 16 tokens
