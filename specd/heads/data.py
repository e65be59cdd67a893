"""Training data for draft heads: the target run over the corpus (``specd.heads.corpus``).

Each corpus file is tokenized and cut into windows of ``window`` tokens (at most
``windows_per_file`` of them, from the file's start); the target scores each window from an empty
cache in one forward with specd's own runtime, and per position ``t`` we keep

    tokens[t]   the corpus token at t                             int32 [N]
    argmax[t]   the target's greedy next token after t            int32 [N]
    hidden[t]   the target's final-normed hidden state at t       float16 [N, H]
                (what its output head reads, and what a head drafts from)

With ``layout="fim"`` each window becomes what decoding meets instead: a cursor is placed in it
(seeded), the daemon's FIM prompt is built from the tokens before it (``min_prefix_tokens`` to
``max_prefix_tokens`` of them) and after a skipped middle (``suffix_tokens``), and the target then
generates up to ``generate`` tokens greedily; the stored sequence is the prompt plus the target's
own continuation (``argmax[t] == tokens[t + 1]`` along it), so a head learns the FIM boundary and
the text it drafts against.

Windows go to shards (``shard-NNNNN.pt``), each a dict of those tensors plus ``starts``
(``[W + 1]`` window offsets), ``validation`` (``[W]``: the window's file is held out) and the
windows' languages and file names. ``manifest.json`` records the settings and how many scheduled windows are stored, so a run
stopped at any point resumes after the last stored shard.
"""

from __future__ import annotations

import json
import random
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Iterator

import torch

from specd.heads import corpus
from specd.models.protocol import CausalLM
from specd.models.tokenizer import FIM_MIDDLE, FIM_PREFIX, FIM_SUFFIX, STOP_TOKENS, Tokenizer

MANIFEST = "manifest.json"


@dataclass(frozen=True)
class DataSettings:
    model: str  # the target it was made from (name or path)
    window: int = 512
    windows_per_file: int = 4
    min_window: int = 64  # a file's last, shorter window is kept from this many tokens
    seed: int = 0
    shard_tokens: int = 16384
    layout: str = "plain"  # or "fim" (see the module docstring)
    min_prefix_tokens: int = 64  # fim: the prompt's prefix, drawn between these
    max_prefix_tokens: int = 384  # (the daemon's prefix window)
    suffix_tokens: int = 32  # fim: the suffix window the shipped head's FIM data was made with (the daemon's until session 31; now 256)
    max_middle_skip: int = 24  # fim: corpus tokens between the cursor and the suffix, drawn from 0..this
    generate: int = 48  # fim: greedy tokens after the prompt
    repo: str = ""  # a repository's absolute path (specd.heads.repo); empty: the corpus (specd.heads.corpus)
    sources: tuple[str, ...] = corpus.CLASSIC  # the corpus's sources (specd.heads.corpus.SOURCES)

    def __post_init__(self) -> None:
        if self.layout not in LAYOUTS:
            raise ValueError(f"layout {self.layout!r}: use one of {', '.join(LAYOUTS)}")
        corpus.check_sources(tuple(self.sources))


LAYOUTS = ("plain", "fim")


def stored_settings(manifest: dict) -> dict:
    """A manifest's settings with the fields added since it was written at their defaults, as
    JSON holds them."""
    return _as_json({**asdict(DataSettings(manifest["settings"]["model"])), **manifest["settings"]})


def _as_json(settings: dict) -> dict:
    return json.loads(json.dumps(settings))


@dataclass(frozen=True)
class Item:
    language: str
    file: corpus.CorpusFile
    tokens: list[int]  # the window


def schedule(tokenizer: Tokenizer, settings: DataSettings) -> Iterator[Item]:
    """Windows in a fixed order: the corpus's (``corpus_schedule``), or with ``settings.repo`` a
    repository's (``repo_schedule``)."""
    if settings.repo:
        return repo_schedule(tokenizer, settings)
    return corpus_schedule(tokenizer, settings)


def repo_schedule(tokenizer: Tokenizer, settings: DataSettings) -> Iterator[Item]:
    """A repository's windows (``specd.heads.repo``), its files in a seeded order, window by window:
    every file's first window, then every file's second, ..., so a run stopped short still covers
    every file."""
    from specd.heads import repo

    found = repo.files(Path(settings.repo), settings.seed)
    flat = sorted((f for lst in found.values() for f in lst), key=lambda f: f.name)
    random.Random(f"{settings.seed}:repo").shuffle(flat)
    ids = {f.name: tokenizer.encode(corpus.read(f) or "") for f in flat}
    for w in range(settings.windows_per_file):
        for f in flat:
            piece = ids[f.name][w * settings.window : (w + 1) * settings.window]
            if len(piece) >= settings.min_window:
                yield Item(f.language, f, piece)


def corpus_schedule(tokenizer: Tokenizer, settings: DataSettings) -> Iterator[Item]:
    """The corpus's windows: the language furthest behind its share of ``corpus.WEIGHTS`` goes
    next, its files in the corpus's seeded order."""
    files = corpus.files(settings.seed, settings.sources)
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


def fim_prompt(tokenizer: Tokenizer, window: list[int], settings: DataSettings) -> list[int]:
    """The daemon's FIM prompt (``specd.engine.prompt``'s layout) around a seeded cursor in ``window``."""
    rng = random.Random(f"{settings.seed}:{len(window)}:{window[:8]}")
    n = len(window)
    cursor = rng.randint(min(16, n - 1), max(min(16, n - 1), n - 8))
    prefix = window[max(0, cursor - rng.randint(settings.min_prefix_tokens, settings.max_prefix_tokens)):cursor]
    after = cursor + rng.randint(0, settings.max_middle_skip)
    suffix = window[after : after + settings.suffix_tokens]
    ids = [tokenizer.token_id(t) for t in (FIM_PREFIX, FIM_SUFFIX, FIM_MIDDLE)]
    if None in ids:
        raise ValueError("this tokenizer has no FIM tokens; use layout plain")
    p, s, m = ids
    return [p, *prefix, s, *suffix, m]


@torch.inference_mode()
def score_fim(model: CausalLM, prompt: list[int], generate: int, stops: set[int]
              ) -> tuple[list[int], torch.Tensor, torch.Tensor]:
    """The target over a FIM prompt, then greedily on: (the sequence ``[n]``, argmax ``[n]`` int32,
    hidden ``[n, H]`` float16); the sequence ends before the first stop token (which is the last
    argmax) or after ``generate`` tokens."""
    argmax, hidden = score(model, prompt)
    seq, argmaxes, states = list(prompt), [argmax], [hidden]
    for _ in range(generate):
        nxt = int(argmaxes[-1][-1])
        if nxt in stops:
            break
        seq.append(nxt)
        logits = model.forward(torch.tensor([nxt], dtype=torch.long))  # [1, V]
        argmaxes.append(logits.argmax(-1).to(torch.int32))
        states.append(model.last_hidden().states.to(torch.float16))
    return seq, torch.cat(argmaxes), torch.cat(states)


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

    def add(self, item: Item, tokens: list[int], argmax: torch.Tensor, hidden: torch.Tensor) -> None:
        self.tokens.append(torch.tensor(tokens, dtype=torch.int32))
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


SOURCES = "sources.sha256"  # beside the shards: the fingerprint of the files they were made from


def discard_if_changed(out: Path, fingerprint: str) -> bool:
    """Make ``out`` hold data of sources whose fingerprint is ``fingerprint`` (a repository's
    files as they are now: ``specd.heads.repo.fingerprint``): data made from other sources is
    deleted, since a stored run resumes by counting windows, which only holds while the sources
    stay as they were. Returns whether it was."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / SOURCES
    stale = path.exists() and path.read_text().strip() != fingerprint
    if stale:
        for shard in shards(out):
            shard.unlink()
        (out / MANIFEST).unlink(missing_ok=True)
    path.write_text(fingerprint + "\n")
    return stale


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
        if stored_settings(manifest) != _as_json(asdict(settings)):
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
    stops = {i for i in (tokenizer.token_id(t) for t in STOP_TOKENS) if i is not None}
    for i, item in enumerate(schedule(tokenizer, settings)):
        if i < manifest["windows"]:  # stored by an earlier run
            continue
        if total >= max_tokens:
            break
        if settings.layout == "fim":
            tokens, argmax, hidden = score_fim(model, fim_prompt(tokenizer, item.tokens, settings),
                                               settings.generate, stops)
        else:
            tokens = item.tokens
            argmax, hidden = score(model, tokens)
        shard.add(item, tokens, argmax, hidden)
        total += len(tokens)
        if shard.size >= settings.shard_tokens:
            flush()
    flush()
    return manifest
