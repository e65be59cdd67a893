"""The quality scenario: its task set (real code, seven languages, disjoint dev and test splits),
its metrics, and a run through a real daemon (tiny models) and, with the real pair, beside a real
llama-server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from specd.bench.quality import accepted_chars, edit_similarity, levenshtein, score_answer
from specd.bench.tasks import Task, load_tasks, quality_tasks_path
from specd.cli import main
from specd.lsp.postprocess import postprocess
from tests.bench_script import load_bench_script
from tests.tiny import save_tiny_model

LANGUAGES = {"python", "javascript", "typescript", "c", "cpp", "go", "rust"}


@pytest.fixture(scope="module")
def tasks() -> list[Task]:
    return load_tasks(quality_tasks_path())


def test_the_task_set_covers_seven_languages_with_disjoint_splits(tasks) -> None:
    assert len(tasks) >= 300
    assert {t.language for t in tasks} == LANGUAGES
    per = Counter((t.language, t.split) for t in tasks)
    for lang in LANGUAGES:
        assert per[(lang, "dev")] >= 12 and per[(lang, "test")] >= 30, lang
        kinds = {t.kind for t in tasks if t.language == lang and t.split == "test"}
        assert kinds == {"line_start", "mid_line", "block"}, lang
    files = {split: {(t.package, t.file) for t in tasks if t.split == split} for split in ("dev", "test")}
    assert not files["dev"] & files["test"]  # no file is both tuned on and reported on
    assert len({t.id for t in tasks}) == len(tasks)
    for t in tasks:
        assert t.expected.strip() and len(t.prefix) >= 1000 and t.suffix, t.id
        if t.kind == "block":
            assert t.expected.count("\n") >= 1, t.id
        else:
            assert "\n" not in t.expected, t.id


def test_metrics() -> None:
    assert levenshtein("kitten", "sitting") == 3 and levenshtein("", "abc") == 3
    assert edit_similarity("x = 1\nmore lines", "x = 1") == 1.0  # only the lines the answer spans
    assert edit_similarity("", "abcd") == 0.0
    assert 0 < edit_similarity("x = 2", "x = 1") < 1
    assert accepted_chars("return a + b\n    c", "return a + c") == len("return a + ")
    assert accepted_chars("", "anything") == 0


def _task(**kw) -> Task:
    base = dict(id="t", language="python", category="line", kind="line_start", cursor="line_start", package="p",
                version="1", file="a.py", line=1, column=1, prefix="def f(a, b):\n    ", suffix="\n\nprint(f(1, 2))\n",
                expected="return a + b", split="test")
    base.update(kw)
    return Task(**base)


def test_an_answer_is_scored_raw_and_as_the_lsp_shows_it() -> None:
    task = _task()
    right = score_answer(task, "return a + b\n\nprint(f(1, 2))", postprocess)
    assert right["raw"]["exact"] and right["shown"]["exact"]
    assert right["shown"]["accepted"] == len("return a + b")
    # the block ends at the dedent: the cut loses nothing right (the real text goes on with the suffix)
    assert right["cut"] is not None and not right["cut"]["emptied"]
    wrong = score_answer(task, "return a - b", postprocess)
    assert not wrong["raw"]["exact"] and wrong["shown"]["accepted"] == len("return a ")
    mid = _task(kind="mid_line", cursor="mid_line", prefix="def f(a, b):\n    return a", expected=" + b",
                suffix="  # sum\n")
    shown = score_answer(mid, " + b  # sum\nx = 1", postprocess)
    assert shown["raw"]["exact"] is False  # the raw first line repeats the rest of the line
    assert shown["shown"]["exact"] and shown["cut"] and shown["cut"]["lost_right"] is False


def _short_tasks(tasks: list[Task], path: Path, n_per_kind: int = 1) -> Path:
    chosen = [next(t for t in tasks if t.kind == k and t.split == "test" and t.language == lang)
              for k in ("line_start", "mid_line") for lang in ("python", "go")][: 2 * n_per_kind]
    path.write_text("".join(json.dumps(dict(t.__dict__, prefix=t.prefix[-300:], suffix=t.suffix[:120])) + "\n"
                            for t in chosen))
    return path


def test_quality_scenario_through_a_real_daemon(tasks, tmp_path, capsys) -> None:
    root = tmp_path / "tiny"
    target = save_tiny_model(root / "target", seed=0)
    out = tmp_path / "out"
    code = main(["bench", "--no-progress", "--scenario", "quality", "--systems", "specd", "--target", str(target),
                 "--draft", "none", "--tasks-file", str(_short_tasks(tasks, tmp_path / "q.jsonl")),
                 "--max-tokens", "8", "--threads", "1", "--out", str(out)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    doc = json.loads((out / "results.json").read_text())
    assert doc["scenario"] == "quality" and len(doc["answers"]) == 2
    for a in doc["answers"]:
        assert a["system"] == "specd" and a["tokens"] >= 1 and {"raw", "shown"} <= set(a)
    assert doc["summary"]["specd"]["shown"]["all"]["n"] == 2
    assert "quality (shown)" in captured.out and (out / "report.md").is_file()


def test_bad_systems_are_refused(tasks, tmp_path, capsys) -> None:
    code = main(["bench", "--no-progress", "--scenario", "quality", "--systems", "specd,vllm",
                 "--tasks-file", str(_short_tasks(tasks, tmp_path / "q.jsonl")), "--out", str(tmp_path / "o")])
    assert code == 2 and "vllm" in capsys.readouterr().err


def test_quality_scenario_beside_llama_server_on_the_real_pair(tasks, tmp_path, capsys) -> None:
    """The default pair in specd's daemon and the same target GGUF in llama-server, two tasks."""
    from specd.bench.llamacpp_bin import find_binaries
    from specd.models.pull import is_pulled
    from specd.models.registry import PUBLISHED
    from specd.engine.config import DEFAULT_DRAFT, DEFAULT_TARGET

    missing = [n for n in (DEFAULT_TARGET, DEFAULT_DRAFT) if not is_pulled(PUBLISHED[n])]
    if find_binaries() is None or missing:
        reason = "llama-server is not built (python -m specd.bench.llamacpp_build)" if find_binaries() is None \
            else f"models not pulled: {missing} (specd models pull)"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    out = tmp_path / "out"
    code = main(["bench", "--no-progress", "--scenario", "quality", "--tasks-file",
                 str(_short_tasks(tasks, tmp_path / "q.jsonl")), "--max-tokens", "16", "--out", str(out)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    doc = json.loads((out / "results.json").read_text())
    systems = Counter(a["system"] for a in doc["answers"])
    assert systems == {"specd": 2, "llama-server": 2}
    for a in doc["answers"]:
        assert a["text"].strip(), a  # a real model completes real code with something
    assert "llama-server exact" in captured.out


def test_first_per_kind_takes_each_language_and_kind_alike(tasks) -> None:
    from specd.bench.quality import first_per_kind

    test = [t for t in tasks if t.split == "test"]
    chosen = first_per_kind(test, 5)
    assert Counter((t.language, t.kind) for t in chosen) == {(lang, k): 5 for lang in LANGUAGES
                                                             for k in ("line_start", "mid_line", "block")}
    assert [t.id for t in chosen] == [t.id for t in test if t in chosen]  # file order kept


def test_the_fresh_split_shares_no_source_with_dev_or_test_and_is_never_shipped(tasks) -> None:
    assert {t.split for t in tasks} == {"dev", "test"}
    qt = load_bench_script("quality_tasks")
    fresh = {s.fetch for s in qt.SOURCES if s.split == "fresh"}
    shipped = {s.fetch for s in qt.SOURCES if s.split in ("dev", "test")}
    assert fresh and not fresh & shipped
    # --fresh must name a file of its own: the shipped one holds dev and test only
    r = subprocess.run([sys.executable, str(Path(qt.__file__)), "--fresh", "5"], capture_output=True, text=True)
    assert r.returncode == 2 and "--out" in r.stderr
