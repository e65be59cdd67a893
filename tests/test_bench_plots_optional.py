"""matplotlib is optional (the ``bench`` extra): without it ``specd bench`` says so before it starts,
skips the plots and still gives its numbers, never a traceback at the end. matplotlib is made
unimportable in a subprocess by a meta path finder that refuses it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from specd.bench.plots import MISSING_NOTE, unavailable
from specd.bench.tasks import load_tasks
from tests.tiny import save_tiny_model

BLOCK_MATPLOTLIB = """
import sys

class _NoMatplotlib:
    def find_spec(self, name, path=None, target=None):
        if name == "matplotlib" or name.startswith("matplotlib."):
            raise ModuleNotFoundError(f"No module named {name!r} (blocked by the test)", name=name)
        return None

sys.meta_path.insert(0, _NoMatplotlib())
"""


def run_without_matplotlib(code: str, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", BLOCK_MATPLOTLIB + code, *args], capture_output=True,
                          text=True, cwd=cwd, timeout=300)


def test_the_check_names_the_extra_without_matplotlib(tmp_path: Path) -> None:
    assert unavailable() is None  # the test extra installs matplotlib: plots are drawn here
    proc = run_without_matplotlib(
        "from specd.bench.plots import unavailable\n"
        "import matplotlib\n", cwd=tmp_path)
    assert proc.returncode != 0 and "blocked by the test" in proc.stderr  # the blocker works
    proc = run_without_matplotlib(
        "from specd.bench.plots import unavailable\n"
        "print(unavailable())\n", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == MISSING_NOTE
    assert "pip install 'specd[bench]'" in MISSING_NOTE and "Traceback" not in proc.stderr


def test_bench_without_matplotlib_skips_the_plots_with_a_note_at_the_start(tmp_path: Path) -> None:
    target = save_tiny_model(tmp_path / "target", seed=0)
    task = next(t for t in load_tasks() if t.category == "logic")
    tasks = tmp_path / "tasks.jsonl"  # one real task, windows shortened (the tiny tokenizer is byte-level)
    tasks.write_text(json.dumps(dict(task.__dict__, prefix=task.prefix[-120:], suffix=task.suffix[:60])) + "\n")
    out = tmp_path / "out"
    proc = run_without_matplotlib(
        "import sys\nfrom specd.cli import main\nsys.exit(main(sys.argv[1:]))\n",
        "bench", "--no-progress", "--no-warmup", "--target", str(target), "--draft", "none", "--modes", "target",
        "--tasks-file", str(tasks), "--reps", "1", "--max-tokens", "4", "--out", str(out), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    note = f"specd bench: note: {MISSING_NOTE}"
    assert proc.stderr.splitlines()[0] == note, proc.stderr  # said before any work
    assert f"note: {MISSING_NOTE}" in proc.stdout  # and again under the table, with the numbers
    assert "decode ms/tok" in proc.stdout and "and plots" not in proc.stdout
    doc = json.loads((out / "results.json").read_text())
    assert len(doc["runs"]) == 1 and MISSING_NOTE in doc["notes"]
    assert MISSING_NOTE in (out / "report.md").read_text()
    assert not list(out.glob("*.png"))
