"""``bench/race_pool.py``: decode races pooled across runs, as RESULTS quotes them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "bench" / "race_pool.py"


def _race(path: Path, tasks: str, slopes: list[tuple[float, float, float]], counted: list[bool] | None = None) -> Path:
    """A decode_race.py JSON: per task (spec, target, llama) ms a token; the summary's ratios are
    those of the counted tasks' medians, as decode_race.py writes them."""
    counted = counted or [True] * len(slopes)
    raw = [{"id": f"t{i}", "counted": c, "spec_ms_per_token": s, "target_ms_per_token": t, "llama_ms_per_token": l}
           for i, ((s, t, l), c) in enumerate(zip(slopes, counted))]
    med = {m: sorted(r[f"{m}_ms_per_token"] for r in raw if r["counted"]) for m in ("spec", "target", "llama")}
    mid = {m: v[len(v) // 2] for m, v in med.items()}  # odd counts here: the median is the middle
    summary = {"command": f"bench/decode_race.py --out {path} {tasks}", "counted": sum(counted),
               "modes": {m: {"ms_per_token_median": mid[m]} for m in mid},
               "target / llama": round(mid["target"] / mid["llama"], 3),
               "spec / llama": round(mid["spec"] / mid["llama"], 3),
               "target / spec (speedup)": round(mid["target"] / mid["spec"], 3)}
    path.write_text(json.dumps({"summary": summary, "raw": raw}))
    return path


def _pool(tmp_path: Path, *runs: Path) -> dict:
    out = tmp_path / "pooled.json"
    subprocess.run([sys.executable, str(SCRIPT), *map(str, runs), "--out", str(out), "--draws", "200"],
                   check=True, capture_output=True, text=True)
    return json.loads(out.read_text())


def test_per_task_ratios_pool_every_counted_pair_across_runs(tmp_path: Path) -> None:
    a = _race(tmp_path / "a.json", "tasks.jsonl", [(10, 30, 40), (20, 40, 40), (10, 20, 40), (99, 99, 1)],
              counted=[True, True, True, False])
    b = _race(tmp_path / "b.json", "tasks.jsonl", [(20, 38, 40), (20, 44, 40), (15, 32, 40)])
    got = _pool(tmp_path, a, b)["ratios"]
    t = got["target / llama"]
    # pairs 0.75, 1.0, 0.5 and 0.95, 1.1, 0.8: the uncounted task never enters
    assert t["per_task_pairs"] == 6 and t["per_task_median"] == 0.875
    assert t["runs"] == 2 and t["runs_meeting"] == 1  # run a's medians 30 / 40 meet <= 0.9, run b's 38 / 40 not
    lo, hi = t["per_task_90pct"]
    assert 0.5 <= lo <= t["per_task_median"] <= hi <= 1.1
    s = got["target / spec (speedup)"]
    assert s["per_task_median"] == 2.067  # target over spec: 3, 2, 2 and 1.9, 2.2, 2.133
    assert s["runs_meeting"] == 2  # the runs' medians: 30 / 10 = 3 and 38 / 20 = 1.9, both >= 1.8


def test_runs_of_different_task_files_are_not_pooled_unless_asked(tmp_path: Path) -> None:
    a = _race(tmp_path / "a.json", "one.jsonl", [(10, 30, 40)])
    b = _race(tmp_path / "b.json", "two.jsonl", [(10, 30, 40)])
    run = subprocess.run([sys.executable, str(SCRIPT), str(a), str(b)], capture_output=True, text=True)
    assert run.returncode == 2 and "--mixed" in run.stderr
    mixed = subprocess.run([sys.executable, str(SCRIPT), str(a), str(b), "--mixed"], capture_output=True, text=True)
    assert mixed.returncode == 0 and "one.jsonl, two.jsonl" in mixed.stdout
