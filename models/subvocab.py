"""A frequency-ranked sub-vocabulary for the draft's output head.

The 0.5B draft's head (151,936 × 896) is over a quarter of its weights and is read every step.
Scoring only the tokens that real code uses most cuts that cost; the draft then gives probability 0
to every other token. The target still scores the full vocabulary, and the acceptance rule handles
a draft zero (such tokens are only ever produced as recovered/bonus tokens), so the output
distribution stays exactly the target's.

The ranking is computed once from real source files found on this machine (the Python standard
library and installed packages) and stored next to the converted model as ``subvocab.json``.
"""

from __future__ import annotations

import json
import sys
import sysconfig
from collections import Counter
from pathlib import Path

import torch

from specd.models.tokenizer import Tokenizer

FILE_NAME = "subvocab.json"


def code_corpus(max_bytes: int = 8_000_000) -> list[Path]:
    """Python sources from the standard library and site-packages, in a fixed order."""
    roots = [Path(sysconfig.get_paths()["stdlib"]), Path(sysconfig.get_paths()["purelib"])]
    files: list[Path] = []
    total = 0
    for root in roots:
        for f in sorted(root.rglob("*.py")):
            if "test" in f.parts or f.name.startswith("test_"):
                continue
            try:
                size = f.stat().st_size
            except OSError:
                continue
            if size > 200_000:
                continue
            files.append(f)
            total += size
            if total >= max_bytes:
                return files
    return files


def rank_tokens(tokenizer: Tokenizer, files: list[Path]) -> list[int]:
    """Every token id: special tokens first, then by descending frequency over ``files`` (ties
    and unseen tokens by id)."""
    counts: Counter[int] = Counter()
    for f in files:
        try:
            counts.update(tokenizer.encode(f.read_text(encoding="utf-8")))
        except (OSError, UnicodeDecodeError):
            continue
    specials = [i for t, i in tokenizer.vocab().items() if t.startswith("<|") and t.endswith("|>")]
    first = set(specials)
    ranked = sorted(range(tokenizer.vocab_size), key=lambda i: (-counts.get(i, 0), i))
    return sorted(first) + [i for i in ranked if i not in first]


def build(directory: Path, tokenizer: Tokenizer, files: list[Path] | None = None) -> list[int]:
    files = code_corpus() if files is None else files
    ranked = rank_tokens(tokenizer, files)
    try:
        (directory / FILE_NAME).write_text(json.dumps({"files": len(files), "ranked": ranked}))
    except OSError as e:  # a read-only model directory: rank again next time
        print(f"specd: note: cannot store {FILE_NAME} in {directory}: {e}", file=sys.stderr)
    return ranked


def load(directory: Path, size: int, tokenizer: Tokenizer) -> list[int]:
    """The ``size`` most frequent token ids (computing the ranking once if missing)."""
    path = directory / FILE_NAME
    if path.exists():
        ranked = json.loads(path.read_text())["ranked"]
    else:
        print(f"specd: ranking draft tokens by frequency in local code (once) -> {path}", file=sys.stderr)
        ranked = build(directory, tokenizer)
    return sorted(ranked[:size])


class Places:
    """Where each token id sits among a head's sub-vocabulary rows ``ids`` ``[V']``."""

    def __init__(self, ids: torch.Tensor) -> None:
        self.of_id = torch.full((int(ids.max()) + 1,), -1, dtype=torch.long)  # [max id + 1]: row, or -1
        self.of_id[ids.long()] = torch.arange(ids.numel())

    def rows(self, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``tokens`` (ids, repeats allowed) -> ``(ids, rows)``: each distinct id once, and its
        row (``-1``: outside the sub-vocabulary)."""
        uniq = torch.unique(tokens.long())  # [u]
        where = torch.full_like(uniq, -1)
        inside = uniq < self.of_id.numel()
        where[inside] = self.of_id[uniq[inside]]
        return uniq, where
