"""``bench/compare_drafters.py``: the pooled and per-task figures RESULTS quotes, from bench JSON."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "bench" / "compare_drafters.py"


def _run(*args: object) -> dict:
    out = subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], check=True, capture_output=True, text=True)
    return json.loads(out.stdout)


def _acceptance(path: Path, rows: list[tuple[str, int, int]]) -> Path:
    path.write_text(json.dumps({"summary": {}, "rows": [
        {"id": i, "12": {"accepted": 0, "drafted": 1}, "40": {"accepted": a, "drafted": d}} for i, a, d in rows]}))
    return path


def test_acceptance_pools_counts_not_ratios(tmp_path: Path) -> None:
    old = _acceptance(tmp_path / "old.json", [("x", 1, 10), ("y", 9, 10)])
    new = _acceptance(tmp_path / "new.json", [("x", 3, 10), ("y", 1, 2)])
    out = _run("acceptance", old, new)
    assert out["pooled"]["A"] == [10, 20] and out["pooled"]["B"] == [4, 12]
    assert out["pooled"]["B_acceptance"] == round(4 / 12, 4)  # a mean of ratios would say 0.4
    assert (out["pairs"][0]["higher"], out["pairs"][0]["lower"]) == (1, 1)


def test_acceptance_refuses_files_over_other_prompts(tmp_path: Path) -> None:
    old = _acceptance(tmp_path / "old.json", [("x", 1, 10)])
    new = _acceptance(tmp_path / "new.json", [("z", 1, 10)])
    run = subprocess.run([sys.executable, str(SCRIPT), "acceptance", str(old), str(new)], capture_output=True, text=True)
    assert run.returncode != 0 and "not over the same prompts" in run.stderr


def test_race_compares_slopes_on_counted_tasks_only(tmp_path: Path) -> None:
    def task(i: str, counted: bool, a_long: float, b_long: float) -> dict:
        row = {"id": i, "counted": counted}
        for mode, wall in (("a", a_long), ("b", b_long)):
            row[f"{mode}_8"] = {"wall_ms": 100.0, "tokens": 8, "acceptance": 0.5}
            row[f"{mode}_40"] = {"wall_ms": wall, "tokens": 40, "acceptance": 0.5 if mode == "a" else 0.25}
        return row

    path = tmp_path / "race.json"
    path.write_text(json.dumps({"summary": {}, "raw": [
        task("t1", True, 420.0, 260.0), task("t2", True, 420.0, 580.0), task("t3", True, 420.0, 340.0),
        task("t4", False, 420.0, 9999.0)]}))
    out = _run("race", path, "a", "b")
    assert out["counted"] == 3 and out["b faster on"] == 2
    assert out["b / a per task median"] == 0.75  # slopes 10 / 5, 15, 7.5 ms a token over a's 10
    assert out["mean acceptance"] == {"a": 0.5, "b": 0.25}
