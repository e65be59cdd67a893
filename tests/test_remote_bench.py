"""``specd bench --modes target,remote --backend ...``: the FIM suite through specd's remote backend
beside the local engine, in one run (tiny local models; the server runs the draft GGUF)."""

from __future__ import annotations

import json

import pytest

from specd.cli import main
from tests.remote_servers import openai_compatible_server
from tests.test_bench import tiny_pair, two_tasks  # noqa: F401  (fixtures)


@pytest.fixture(scope="module")
def openai_url(tmp_path_factory):
    server, url = openai_compatible_server(tmp_path_factory.mktemp("server") / "server.log")
    yield url
    server.stop()


def test_the_fim_suite_runs_through_the_remote_backend(tiny_pair, two_tasks, openai_url, tmp_path, capsys) -> None:  # noqa: F811
    target, _ = tiny_pair
    out = tmp_path / "out"
    code = main(["bench", "--no-progress", "--no-plots", "--target", str(target), "--draft", "none",
                 "--tasks-file", str(two_tasks), "--modes", "target,remote", "--reps", "2", "--max-tokens", "8",
                 "--backend", f"openai:{openai_url}", "--remote-tokenizer", "qwen2.5-coder-0.5b", "--out", str(out)])
    stderr = capsys.readouterr().err
    assert code == 0, stderr
    doc = json.loads((out / "results.json").read_text())
    assert doc["config"]["modes"] == ["target", "remote"]
    remote = [r for r in doc["runs"] if r["mode"] == "remote"]
    assert len(remote) == 2 * 2  # tasks x reps
    assert all(r["new_tokens"] > 0 and r["total_ms"] > 0 and r["stop_reason"] for r in remote)
    by_task: dict[str, set[str]] = {}
    for r in remote:
        by_task.setdefault(r["task"], set()).add(r["text"])
    assert all(len(texts) == 1 for texts in by_task.values())  # greedy on the server: the same text each rep
    assert any(n.startswith("remote: the tasks through specd's remote backend") for n in doc["notes"])


def test_mode_remote_without_a_server_is_skipped_with_the_reason(tiny_pair, two_tasks, tmp_path, capsys) -> None:  # noqa: F811
    target, _ = tiny_pair
    out = tmp_path / "out"
    code = main(["bench", "--no-progress", "--no-plots", "--target", str(target), "--draft", "none",
                 "--tasks-file", str(two_tasks), "--modes", "target,remote", "--reps", "1", "--max-tokens", "4",
                 "--out", str(out)])
    assert code == 0, capsys.readouterr().err
    doc = json.loads((out / "results.json").read_text())
    assert doc["config"]["modes"] == ["target"]
    assert any("remote: skipped, give the server with --backend" in n for n in doc["notes"])
