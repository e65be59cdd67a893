"""End to end on the real default pair (Qwen2.5-Coder 1.5B target, 0.5B draft)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from specd.engine.engine import CompletionRequest

pytestmark = pytest.mark.real_models

PROMPTS = [
    ('import argparse\n\n\ndef parse_args():\n    parser = argparse.ArgumentParser()\n    parser.add_argument("--input", type=str)\n',
     "\n    return parser.parse_args()\n"),
    ("class Stack:\n    def __init__(self):\n        self.items = []\n\n    def push(self, item):\n",
     "\n\n    def pop(self):\n        return self.items.pop()\n"),
]


@pytest.mark.parametrize("k", [2, 4])
@pytest.mark.parametrize("prompt", range(len(PROMPTS)))
def test_greedy_matches_target_on_real_pair(real_engine, prompt: int, k: int) -> None:
    prefix, suffix = PROMPTS[prompt]
    target = real_engine.complete(CompletionRequest(prefix, suffix, max_tokens=24, mode="target"))
    spec = real_engine.complete(CompletionRequest(prefix, suffix, max_tokens=24, mode="spec", k=k))
    assert spec.tokens == target.tokens, (spec.text, target.text)
    assert spec.stats.accepted > 0  # the 0.5B draft agrees with the 1.5B target on code
    assert target.text.strip()


def test_cli_complete_same_text_in_both_modes(tmp_path) -> None:
    prefix = tmp_path / "prefix.py"
    prefix.write_text('def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n')
    outs = {}
    for mode in ("target", "spec"):
        proc = subprocess.run(
            [sys.executable, "-m", "specd", "complete", "--prefix-file", str(prefix),
             "--suffix", "\n\nprint(fibonacci(10))\n", "--max-tokens", "24", "--mode", mode, "--json"],
            capture_output=True, text=True, timeout=600,
        )
        assert proc.returncode == 0, proc.stderr
        outs[mode] = json.loads(proc.stdout)
    assert outs["spec"]["text"] == outs["target"]["text"]
    stats = outs["spec"]["stats"]
    for key in ("mode", "new_tokens", "rounds", "drafted", "accepted", "acceptance_rate",
                "mean_accepted_len", "prefill_ms", "decode_ms_per_token", "total_ms"):
        assert key in stats
    assert stats["mode"] == "spec" and outs["target"]["stats"]["mode"] == "target"
    assert stats["mean_accepted_len"] == pytest.approx(1 + stats["accepted"] / stats["rounds"], abs=1e-3)


def test_an_empty_suffix_gets_code_not_chat(real_engine) -> None:
    """At the end of a file the instruct models finish the function, then write a closing fence
    and prose about the code: the completion ends before the fence."""
    c = real_engine.complete(CompletionRequest("def fibonacci(n):\n    ", "", max_tokens=96))
    assert "```" not in c.text and "In this code" not in c.text, c.text
    assert "return" in c.text
