"""Training data for draft heads: the target run over the corpus (``specd.heads.corpus``).

Each corpus file is tokenized and cut into windows of ``window`` tokens (at most
``windows_per_file`` of them, from the file's start); the target scores each window from an empty
cache in one forward with specd's own runtime, and per position ``t`` we keep

    tokens[t]   the corpus token at t                             int32 [N]
    argmax[t]   the target's greedy next token after t            int32 [N]
    hidden[t]   the target's final-normed hidden state at t       float16 [N, H]
                (what its output head reads, and what a head drafts from)

Windows go to shards (``shard-NNNNN.pt``), each a dict of those tensors plus ``starts``
(``[W + 1]`` window offsets), ``validation`` (``[W]``: the window's file is held out) and the
windows' languages and file names. ``manifest.json`` records the settings and how many scheduled windows are stored, so a run
stopped at any point resumes after the last stored shard.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Iterator

import torch

from specd.heads import corpus
from specd.models.protocol import CausalLM
from specd.models.tokenizer import Tokenizer

MANIFEST = "manifest.json"


@dataclass(frozen=True)
class DataSettings:
    model: str  # the target it was made from (name or path)
    window: int = 512
    windows_per_file: int = 4
    min_window: int = 64  # a file's last, shorter window is kept from this many tokens
    seed: int = 0
    shard_tokens: int = 16384


@dataclass(frozen=True)
class Item:
    language: str
    file: corpus.CorpusFile
    tokens: list[int]  # the window


def schedule(tokenizer: Tokenizer, settings: DataSettings) -> Iterator[Item]:
    """Windows in a fixed order: the language furthest behind its share of ``corpus.WEIGHTS``
    goes next, its files in the corpus's seeded order."""
    files = corpus.files(settings.seed)
    cursor = {lang: 0 for lang in files}
    pending: dict[str, list[Item]] = {lang: [] for lang in files}
    done = {lang: 0 for lang in files}
    while True:
        live = [lang for lang in files if pending[lang] or cursor[lang] < len(files[lang])]
        if not live:
            return
        lang = min(live, key=lambda la: (done[la] / corpus.WEIGHTS[la], la))
        while not pending[lang] and cursor[lang] < len(files[lang]):
            f = files[lang][cursor[lang]]
            cursor[lang] += 1
            text = corpus.read(f)
            if not text:
                continue
            ids = tokenizer.encode(text)
            for w in range(settings.windows_per_file):
                piece = ids[w * settings.window : (w + 1) * settings.window]
                if len(piece) >= settings.min_window:
                    pending[lang].append(Item(lang, f, piece))
        if not pending[lang]:
            continue
        item = pending[lang].pop(0)
        done[lang] += len(item.tokens)
        yield item


@torch.inference_mode()
def score(model: CausalLM, tokens: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """The target over one window from an empty cache: (argmax ``[n]`` int32, hidden ``[n, H]``
    float16)."""
    model.rollback(0)
    logits = model.forward(torch.tensor(tokens, dtype=torch.long))  # [n, V]
    hidden = model.last_hidden()
    if hidden is None:
        raise RuntimeError("this runtime does not keep hidden states; draft heads need the torch Decoder")
    return logits.argmax(-1).to(torch.int32), hidden.states.to(torch.float16)


class _Shard:
    def __init__(self) -> None:
        self.tokens: list[torch.Tensor] = []
        self.argmax: list[torch.Tensor] = []
        self.hidden: list[torch.Tensor] = []
        self.languages: list[str] = []
        self.files: list[str] = []
        self.validation: list[bool] = []

    @property
    def size(self) -> int:
        return sum(t.numel() for t in self.tokens)

    def add(self, item: Item, argmax: torch.Tensor, hidden: torch.Tensor) -> None:
        self.tokens.append(torch.tensor(item.tokens, dtype=torch.int32))
        self.argmax.append(argmax)
        self.hidden.append(hidden)
        self.languages.append(item.language)
        self.files.append(item.file.name)
        self.validation.append(item.file.validation)

    def save(self, path: Path) -> None:
        lengths = torch.tensor([0] + [t.numel() for t in self.tokens])
        tmp = path.with_suffix(".tmp")
        torch.save({"tokens": torch.cat(self.tokens), "argmax": torch.cat(self.argmax),
                    "hidden": torch.cat(self.hidden), "starts": lengths.cumsum(0),
                    "languages": self.languages, "files": self.files,
                    "validation": torch.tensor(self.validation)}, tmp)
        tmp.rename(path)


def shards(directory: Path) -> list[Path]:
    return sorted(directory.glob("shard-*.pt"))


def make(model: CausalLM, tokenizer: Tokenizer, out: Path, settings: DataSettings, max_tokens: int,
         report: Callable[[str], None] = print) -> dict:
    """Score scheduled windows until ``max_tokens`` corpus tokens are stored in ``out``
    (resuming after the last stored shard; a directory made with other settings is an error).
    Returns the manifest."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / MANIFEST
    manifest = {"settings": asdict(settings), "windows": 0, "shards": 0, "tokens": 0, "held_out_tokens": 0,
                "seconds": 0.0}
    if path.exists():
        manifest = json.loads(path.read_text())
        if manifest["settings"] != asdict(settings):
            raise ValueError(f"{out} holds data made with other settings ({manifest['settings']}); "
                             f"use another directory")
    shard = _Shard()
    t0 = time.perf_counter()

    def flush() -> None:
        nonlocal shard, t0
        if not shard.tokens:
            return
        shard.save(out / f"shard-{manifest['shards']:05d}.pt")
        manifest["shards"] += 1
        manifest["windows"] += len(shard.tokens)
        manifest["tokens"] += shard.size
        manifest["held_out_tokens"] += sum(t.numel() for t, v in zip(shard.tokens, shard.validation) if v)
        manifest["seconds"] = round(manifest["seconds"] + time.perf_counter() - t0, 1)
        t0 = time.perf_counter()
        path.write_text(json.dumps(manifest, indent=1))
        report(f"heads data: {manifest['tokens']}/{max_tokens} tokens ({manifest['held_out_tokens']} held out), "
               f"{manifest['windows']} windows, {manifest['tokens'] / max(manifest['seconds'], 1e-9):.0f} tokens/s")
        shard = _Shard()

    total = manifest["tokens"]
    for i, item in enumerate(schedule(tokenizer, settings)):
        if i < manifest["windows"]:  # stored by an earlier run
            continue
        if total >= max_tokens:
            break
        argmax, hidden = score(model, item.tokens)
        shard.add(item, argmax, hidden)
        total += len(item.tokens)
        if shard.size >= settings.shard_tokens:
            flush()
    flush()
    return manifest
