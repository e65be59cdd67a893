"""Bad input at the command line: one clear error line, non-zero exit, no traceback."""

from __future__ import annotations

import subprocess
import sys

import pytest


def run(*args: str, env_cache=None, tmp_path=None):
    import os

    env = dict(os.environ)
    if env_cache is not None:
        env["SPECD_CACHE_DIR"] = str(env_cache)
    return subprocess.run([sys.executable, "-m", "specd", *args], capture_output=True, text=True,
                          timeout=120, env=env)


def assert_clean_error(proc, *needles: str) -> None:
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("specd: error:")]
    assert len(errors) == 1, proc.stderr  # one error line (progress lines may precede it)
    for n in needles:
        assert n in proc.stderr, proc.stderr


def test_unknown_model(tmp_path) -> None:
    assert_clean_error(run("complete", "--prefix", "x = ", "--target", "no-such-model", env_cache=tmp_path),
                       "unknown model 'no-such-model'")


def test_model_not_pulled(tmp_path) -> None:
    assert_clean_error(run("complete", "--prefix", "x = ", env_cache=tmp_path), "specd models pull")


def test_corrupt_gguf(tmp_path) -> None:
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"GGUF" + b"\x00" * 100)
    assert_clean_error(run("complete", "--prefix", "x = ", "--target", str(bad), "--draft", "none",
                           env_cache=tmp_path), "broken.gguf")


def test_missing_file(tmp_path) -> None:
    assert_clean_error(run("complete", "--prefix", "x = ", "--target", str(tmp_path / "gone.gguf"),
                           env_cache=tmp_path), "unknown model")


@pytest.mark.parametrize("args, needle", [
    (["--prefix", ""], "empty prompt"),
    (["--prefix", "x", "--max-tokens", "-4"], "max_tokens"),
    (["--prefix", "x", "--max-tokens", "100000000"], "max_tokens"),
    (["--prefix", "x", "--temperature", "-1"], "temperature"),
])
def test_bad_request(tmp_path, args, needle) -> None:
    assert_clean_error(run("complete", *args, env_cache=tmp_path), needle)


def test_models_list(tmp_path) -> None:
    proc = run("models", "list", env_cache=tmp_path)
    assert proc.returncode == 0
    assert "qwen2.5-coder-1.5b" in proc.stdout and "not pulled" in proc.stdout


def test_pull_unknown_name(tmp_path) -> None:
    assert_clean_error(run("models", "pull", "gpt-5", env_cache=tmp_path), "unknown model 'gpt-5'")
