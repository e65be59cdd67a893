"""specd bench on tiny models: it runs end to end and writes well-formed JSON, Markdown and PNGs;
bad input gives one clear error naming what is missing. No timing is asserted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specd.bench.errors import BenchError
from specd.bench.modes import Mode, parse_modes
from specd.bench.stats import position_acceptance, spread
from specd.bench.tasks import load_tasks, select_tasks
from specd.cli import main
from tests.tiny import save_tiny_model

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def tiny_pair(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("tiny")
    return save_tiny_model(root / "target", seed=0), save_tiny_model(root / "draft", seed=1)


@pytest.fixture(scope="module")
def two_tasks(tmp_path_factory) -> Path:
    """Two real tasks from bench/tasks.jsonl, windows shortened (the tiny tokenizer is byte-level)."""
    tasks = load_tasks()
    chosen = [next(t for t in tasks if t.category == c) for c in ("logic", "docs")]
    path = tmp_path_factory.mktemp("tasks") / "tasks.jsonl"
    lines = []
    for t in chosen:
        d = dict(t.__dict__, prefix=t.prefix[-120:], suffix=t.suffix[:60])
        lines.append(json.dumps(d))
    path.write_text("\n".join(lines) + "\n")
    return path


def bench(capsys, *args: str) -> tuple[int, str, str]:
    code = main(["bench", "--no-progress", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_bench_on_tiny_models(tiny_pair, two_tasks, tmp_path, capsys) -> None:
    target, draft = tiny_pair
    out = tmp_path / "out"
    code, stdout, stderr = bench(
        capsys, "--target", str(target), "--draft", str(draft), "--tasks-file", str(two_tasks),
        "--modes", "target,spec:k=2,llamacpp", "--reps", "2", "--max-tokens", "4", "--verify-curve",
        "--verify-reps", "1", "--out", str(out))
    assert code == 0, stderr
    doc = json.loads((out / "results.json").read_text())
    assert doc["config"]["modes"] == ["target", "spec:k=2"]
    assert len(doc["runs"]) == 2 * 2 * 2  # tasks x reps x modes, every raw measurement
    orders = [r["order"] for r in doc["runs"]]
    assert orders == sorted(orders)
    first_task = [r["mode"] for r in doc["runs"][:4]]
    assert first_task == ["target", "spec:k=2", "target", "spec:k=2"]  # interleaved A B A B
    for r in doc["runs"]:
        for key in ("prefill_ms", "ttft_ms", "decode_ms_per_token", "total_ms", "peak_rss_mb"):
            assert isinstance(r[key], (int, float)) and r[key] >= 0, (key, r)
        assert 1 <= r["new_tokens"] <= 4 and len(r["tokens"]) == r["new_tokens"]
    spec = doc["summary"]["spec:k=2"]
    assert 0 <= spec["metrics"]["acceptance_rate"]["median"] <= 1
    assert len(spec["acceptance_at"]) == 2
    assert spec["speedup_decode"]["n"] == 2 and spec["speedup_decode"]["median"] > 0
    assert spec["same_tokens_as_target"] == [4, 4]  # greedy speculative = greedy target
    assert set(doc["verify_curve"]["models"]) == {"target", "draft"}
    assert set(doc["verify_curve"]["models"]["target"]["median"]) == {"1", "2", "3", "5", "9", "17"}
    assert any("llamacpp" in n for n in doc["notes"])  # an anchor not available: skipped with a note

    report = (out / "report.md").read_text()
    assert "| mode | runs |" in report and "spec:k=2" in report and "llamacpp" in report
    assert doc["git"]["commit"] is None or doc["git"]["commit"][:10] in report
    for name in ("ms_per_token.png", "acceptance_by_position.png", "latency_cdf.png",
                 "speedup_by_category.png", "verify_curve.png"):
        data = (out / name).read_bytes()
        assert data.startswith(PNG_MAGIC) and len(data) > 1000, name
        assert f"]({name})" in report
    assert "decode ms/tok" in stdout and "spec:k=2" in stdout


def test_bench_warm_kv_reuses_the_prompt(tiny_pair, two_tasks, tmp_path, capsys) -> None:
    """--kv warm: each task's prompt is prefilled once, untimed; the timed runs reuse it and still
    produce the target's output."""
    target, draft = tiny_pair
    out = tmp_path / "warm"
    code, _, stderr = bench(
        capsys, "--target", str(target), "--draft", str(draft), "--tasks-file", str(two_tasks),
        "--modes", "target,spec:k=2,spec:auto:tree,spec:k=2:continue", "--reps", "2", "--max-tokens", "4", "--kv", "warm",
        "--no-plots",
        "--out", str(out))
    assert code == 0, stderr
    doc = json.loads((out / "results.json").read_text())
    assert doc["config"]["kv"] == "warm"
    for row in doc["per_task"]:
        assert row["cold_prefill_ms"] > 0
    prompt_len = {row["task"]: row["prompt_tokens"] for row in doc["per_task"]}
    for r in doc["runs"]:
        if r["mode"].endswith(":continue"):  # the prompt grew by the typed text: its start is reused
            assert 0 < r["prefill_reused"] < r["prompt_tokens"] - 1
        else:
            assert r["prefill_reused"] == prompt_len[r["task"]] - 1  # all but the last prompt token
    assert doc["summary"]["spec:k=2"]["same_tokens_as_target"] == [4, 4]
    assert doc["summary"]["spec:auto:tree"]["same_tokens_as_target"] == [4, 4]
    # continuing an accepted suggestion: the same text as the target on the same continued prompt
    assert doc["summary"]["spec:k=2:continue"]["same_tokens_as_target"] == [4, 4]
    assert doc["config"]["engine"]["k"] == "auto"


@pytest.mark.parametrize("args, needles", [
    (["--modes", "target,warp"], ["unknown mode 'warp'", "spec:k=N", "hf-assisted", "llamacpp"]),
    (["--modes", "target:k=3"], ["only spec and llamacpp-lookup take :k=N"]),
    (["--tasks", "no-such-task"], ["'no-such-task' matches no task", "boilerplate"]),
    (["--reps", "0"], ["--reps"]),
])
def test_bad_input(args, needles, capsys) -> None:
    code, _, err = bench(capsys, *args)
    assert code == 2
    lines = [l for l in err.splitlines() if l.startswith("specd: error:")]
    assert len(lines) == 1, err
    for n in needles:
        assert n in err, err


def test_missing_or_empty_task_file(tmp_path, capsys) -> None:
    code, _, err = bench(capsys, "--tasks-file", str(tmp_path / "gone.jsonl"))
    assert code == 2 and "gone.jsonl not found" in err and "build_tasks.py" in err
    (tmp_path / "empty.jsonl").write_text("\n")
    code, _, err = bench(capsys, "--tasks-file", str(tmp_path / "empty.jsonl"))
    assert code == 2 and "holds no tasks" in err


def test_spec_without_draft(tiny_pair, capsys) -> None:
    code, _, err = bench(capsys, "--target", str(tiny_pair[0]), "--draft", "none", "--modes", "spec:k=4")
    assert code == 2 and "spec:k=4 needs a draft model" in err


def test_missing_models(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("SPECD_CACHE_DIR", str(tmp_path))
    code, _, err = bench(capsys, "--quick", "--no-plots", "--out", str(tmp_path / "o"))
    assert code == 2 and "not downloaded yet" in err and "specd models pull" in err


def test_outputs_go_under_the_current_directory_not_the_checkout(tmp_path, monkeypatch) -> None:
    import argparse

    from specd.cli.bench import _out_dir

    monkeypatch.chdir(tmp_path)
    out = _out_dir(argparse.Namespace(out=None))
    assert out.is_dir() and out.parent == tmp_path / "specd-bench"
    given = _out_dir(argparse.Namespace(out=tmp_path / "a" / "b"))
    assert given == tmp_path / "a" / "b" and given.is_dir()
    (tmp_path / "file").write_text("")
    with pytest.raises(BenchError, match="--out"):
        _out_dir(argparse.Namespace(out=tmp_path / "file" / "x"))


def test_every_scenario_takes_its_folder_from_the_one_out_dir(tiny_pair, two_tasks, monkeypatch, capsys) -> None:
    """The scenarios ask specd.cli.bench._out_dir for their folder (checked before any work runs)."""
    import specd.cli.bench as cli_bench

    asked: list[str] = []

    def out_dir(args):
        asked.append(args.scenario)
        raise BenchError("no folder today")

    monkeypatch.setattr(cli_bench, "_out_dir", out_dir)
    for scenario in ("tasks", "editor", "profile", "quality"):
        code, _, err = bench(capsys, "--scenario", scenario, "--target", str(tiny_pair[0]), "--draft", str(tiny_pair[1]),
                             "--tasks-file", str(two_tasks), "--tasks", "logic,docs", "--systems", "specd",
                             "--split", "all", "--no-plots")
        assert code == 2 and "no folder today" in err, (scenario, err)
    assert asked == ["tasks", "editor", "profile", "quality"]


def test_specd_bench_imports_none_of_the_study_scripts() -> None:
    """The study scripts in the checkout's bench/ build on specd.bench, never the other way round."""
    import ast

    root = Path(__file__).resolve().parents[1]
    scripts = {p.stem for p in (root / "bench").glob("*.py")} | {"bench", "tests"}
    package = root / "specd" / "bench"
    found = []
    for path in [*package.glob("*.py"), root / "specd" / "cli" / "bench.py", root / "specd" / "cli" / "bench_editor.py",
                 root / "specd" / "cli" / "bench_quality.py"]:
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
            found += [f"{path.name}: {n}" for n in names if n.split(".")[0] in scripts]
            if isinstance(node, ast.Attribute) and node.attr == "path" and getattr(node.value, "id", "") == "sys":
                found.append(f"{path.name}: sys.path")
    assert found == []


def test_parse_modes() -> None:
    modes = parse_modes("spec:k=2,spec,llamacpp-lookup", default_k=4)
    assert [m.name for m in modes] == ["target", "spec:k=2", "spec:k=4", "llamacpp-lookup:k=10"]
    assert Mode("hf-assisted").is_anchor and Mode("spec", 4).needs_draft
    assert [m.name for m in parse_modes("all", 3)][:2] == ["target", "spec:k=3"]
    with pytest.raises(BenchError, match="empty"):
        parse_modes(" , ", 4)
    modes = parse_modes("spec:auto,spec:k=2:tree,spec:auto:tree", default_k="auto")
    assert [m.name for m in modes] == ["target", "spec:auto", "spec:k=2:tree", "spec:auto:tree"]
    assert modes[1].auto and modes[1].k is None and modes[2].tree and modes[2].k == 2
    assert parse_modes("spec", default_k="auto")[1].name == "spec:auto"
    assert [m.name for m in parse_modes("spec:auto:continue", "auto")] == ["target", "target:continue",
                                                                         "spec:auto:continue"]
    with pytest.raises(BenchError, match="only target and spec take :continue"):
        parse_modes("llamacpp:continue", 4)
    with pytest.raises(BenchError, match="only spec takes"):
        parse_modes("llamacpp:tree", 4)


def test_lookup_draft() -> None:
    """llamacpp-lookup's drafter (the engine's n-gram lookup, n = 3 .. 1): the newest earlier match
    of the longest tail n-gram."""
    from specd.bench.anchor_llamacpp import MAX_NGRAM
    from specd.engine.ngram import lookup

    def lookup_draft(seq: list[int], k: int) -> list[int]:
        return lookup(seq, k, MAX_NGRAM, 1)

    seq = [1, 2, 3, 9, 8, 1, 2, 3, 7, 6, 5, 0, 2, 3]
    assert lookup_draft(seq, 10) == [7, 6, 5, 0, 2, 3]  # "2 3" (no earlier "0 2 3"), newest match
    assert lookup_draft(seq, 2) == [7, 6]  # at most k tokens
    assert lookup_draft(seq + [1, 2, 3], 3) == [7, 6, 5]  # the 3-gram "1 2 3" wins over newer "2 3"
    assert lookup_draft([5, 4, 5], 4) == [4, 5]  # 1-gram, continuation runs to the end
    assert lookup_draft([7, 7, 7], 4) == [7]  # overlapping: the newest earlier "7 7" is at 0
    assert lookup_draft([1, 2, 3], 4) == [] and lookup_draft([1], 4) == [] and lookup_draft([], 4) == []
    assert lookup_draft(seq, 0) == []


def test_select_tasks() -> None:
    tasks = load_tasks()
    assert 30 <= len(tasks) <= 40
    assert {t.category for t in tasks} == {"boilerplate", "logic", "docs"}
    assert {t.cursor for t in tasks} == {"line_start", "mid_line", "block_start"}
    for t in tasks:
        assert t.package and t.version and t.file and t.line >= 1 and t.expected
        assert 300 <= t.prefix_tokens + t.suffix_tokens <= 800
    docs = select_tasks(tasks, "docs")
    assert docs and all(t.category == "docs" for t in docs)
    assert [t.id for t in select_tasks(tasks, "py-*,c")] == [t.id for t in tasks if t.id.startswith("py-") or t.language == "c"]


def test_stats() -> None:
    s = spread([4.0, 1.0, 3.0, 2.0, None])
    # quartiles by nearest rank (specd.percentile, the daemon's definition); the median is the mean of the middle two
    assert s == {"n": 4, "median": 2.5, "p25": 1.0, "p75": 3.0, "min": 1.0, "max": 4.0}
    assert spread([5.0, 1.0, 4.0, 2.0, 3.0]) == {"n": 5, "median": 3.0, "p25": 2.0, "p75": 4.0, "min": 1.0, "max": 5.0}
    assert spread([]) == {"n": 0}


def test_profile_scenario_through_a_real_daemon(tiny_pair, two_tasks, tmp_path, capsys) -> None:
    """specd bench --profile starts specd serve, sends profiled requests, and reports the
    per-token timeline, the per-request overhead and the step's spread (no timing asserted)."""
    target, draft = tiny_pair
    out = tmp_path / "out"
    code, stdout, stderr = bench(
        capsys, "--profile", "--target", str(target), "--draft", str(draft), "--tasks-file", str(two_tasks),
        "--k", "auto", "--reps", "1", "--max-tokens", "12", "--threads", "1", "--out", str(out))
    assert code == 0, stderr
    doc = json.loads((out / "results.json").read_text())
    assert doc["scenario"] == "profile" and len(doc["runs"]) == 2 * 2  # tasks x modes
    for r in doc["runs"]:
        t = r["timeline"]
        assert sum(x["tokens"] for x in t["rounds"]) == r["stats"]["new_tokens"]
        assert t["daemon_ms"]["latency"] >= sum(t["request_ms"].values())
    target_only = doc["summary"]["target"]
    assert target_only["per_token_ms"]["verify"]["median"] > 0
    assert "draft" not in target_only["per_token_ms"] and "draft" in doc["summary"]["spec"]["per_token_ms"]
    assert target_only["target_step_ms"]["n"] == sum(r["stats"]["rounds"] for r in doc["runs"] if r["mode"] == "target")
    assert "ms per token" in stdout and "target.forward" in stdout
    spec = [r["stats"] for r in doc["runs"] if r["mode"] == "spec"]  # drafts counted per source
    assert sum(c["drafted"] for c in doc["summary"]["spec"]["by_source"].values()) == sum(s["drafted"] for s in spec)
    assert doc["summary"]["target"]["by_source"] == {}
    # K auto: the daemon's measured step costs, and the speedup they predict
    costs = doc["step_costs"]
    assert costs["draft_ms"] > 0 and len(costs["verify_ms"]) >= 2
    assert {"0.5", "0.9"} <= set(doc["prediction"]["speedup_at"]) and "predicted speedup" in stdout
    after = doc["step_costs_after"]  # K auto's curve after the runs: shifted by the rounds' own timings
    assert len(after["verify_ms"]) == len(costs["verify_ms"]) and after["draft_ms"] > 0 and "after the runs" in stdout
    assert (out / "report.md").read_text().startswith("# specd bench --scenario profile")
