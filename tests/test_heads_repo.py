"""Fine-tuning a draft head on a user's own repository (specd heads train --repo): which files, the
data made from them, keeping the best parameters, and the command on the real target."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

from specd.cli.heads import _repo_dir
from specd.heads import data, repo, train
from specd.heads.train_eagle import EagleSettings, train_eagle
from tests.test_eagle_head import V, _head, _split
from tests.tiny import TINY_VOCAB, tiny_decoder, tiny_tokenizer


def _write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def _project(root: Path, modules: int = 12) -> None:
    files = {f"pkg/mod{i}.py": "".join(f"def f{i}_{j}(x):\n    return x * {j} + {i}\n\n" for j in range(30))
             for i in range(modules)}
    files |= {"web/app.ts": "export function add(a: number, b: number): number {\n  return a + b;\n}\n" * 20,
              "web/app.min.js": "var a=1;" * 100, "node_modules/dep/index.js": "module.exports = 1;\n",
              "README.md": "# a project\n", "notes.txt": "not code\n", "out/generated.py": "x = 1\n",
              "pkg/one_line.py": "x = [" + "1, " * 400 + "]\n"}
    _write(root, files)


def _names(found: dict[str, list]) -> set[str]:
    return {f.name for lst in found.values() for f in lst}


def test_a_git_repository_gives_its_tracked_source_files(tmp_path: Path) -> None:
    _project(tmp_path)
    (tmp_path / ".gitignore").write_text("out/\n")
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    found = repo.files(tmp_path)
    names = _names(found)
    assert set(found) == {"python", "typescript"}
    assert "repo:web/app.ts" in names and "repo:pkg/mod0.py" in names
    assert "repo:out/generated.py" not in names  # .gitignore
    assert not any("node_modules" in n or ".min." in n for n in names)  # vendored, minified
    assert "repo:pkg/one_line.py" not in names  # a generated-looking file (one long line)
    assert not any(n.endswith((".md", ".txt")) for n in names)
    held = {f.name for lst in found.values() for f in lst if f.validation}
    assert held and held != names
    assert found == repo.files(tmp_path)  # a fixed order and split


def test_a_plain_directory_is_walked_and_keeps_one_file_held_out(tmp_path: Path) -> None:
    _project(tmp_path, modules=1)
    (tmp_path / "build").mkdir()
    (tmp_path / "build" / "gen.py").write_text("y = 2\n")
    (tmp_path / ".hidden").mkdir()
    (tmp_path / ".hidden" / "secret.py").write_text("z = 3\n")
    found = repo.files(tmp_path)
    names = _names(found)
    assert "repo:out/generated.py" in names  # no .gitignore without git
    assert "repo:build/gen.py" not in names and "repo:.hidden/secret.py" not in names
    assert sum(f.validation for lst in found.values() for f in lst) >= 1


def test_a_path_without_source_files_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("nothing to learn\n")
    with pytest.raises(repo.RepoError, match="no source files"):
        repo.files(tmp_path)
    with pytest.raises(repo.RepoError, match="not a directory"):
        repo.files(tmp_path / "missing")


def test_repository_data_is_fim_windows_of_its_files_and_is_made_again_when_they_change(tmp_path: Path) -> None:
    root = tmp_path / "project"
    _project(root, modules=4)
    target = tiny_decoder(seed=6, vocab=TINY_VOCAB, max_len=600)
    tok = tiny_tokenizer()
    out = tmp_path / "data"
    settings = data.DataSettings("tiny", layout="fim", windows_per_file=repo.WINDOWS_PER_FILE, generate=4,
                                 shard_tokens=512, repo=str(root.resolve()))
    found = repo.files(root)
    assert not data.discard_if_changed(out, repo.fingerprint(found))
    manifest = data.make(target, tok, out, settings, max_tokens=10**6, report=lambda line: None)
    files = [name for path in data.shards(out) for name in torch.load(path)["files"]]
    long_enough = {f.name for lst in found.values() for f in lst
                   if len(tok.encode(f.path.read_text())) >= settings.min_window}
    assert long_enough and set(files) == long_enough  # every file, and nothing but the repository's
    assert max(files.count(n) for n in set(files)) > 1  # a long file gives several windows
    assert manifest["held_out_tokens"] > 0
    assert not data.discard_if_changed(out, repo.fingerprint(repo.files(root)))  # unchanged: the data stays
    assert data.shards(out)
    (root / "pkg" / "mod0.py").write_text("def changed():\n    pass\n" * 40)
    assert data.discard_if_changed(out, repo.fingerprint(repo.files(root)))
    assert not data.shards(out) and not (out / data.MANIFEST).exists()


def test_fine_tuning_keeps_the_best_parameters_it_judged() -> None:
    """With a learning rate that wrecks the head, the kept parameters are the starting ones; with a
    sane one they are a later step's, which drafts better than the start."""
    head, table = _head(seed=2)
    split = _split(head, seed=4)
    split.hidden = split.hidden.float()
    embed = train.Embeddings(lambda ids: table[ids], split)
    start = {n: t.detach().clone() for n, t in head.params().items()}
    wreck = EagleSettings(steps=20, windows=4, lr=5.0, noise=0.0, eval_every=10, chain=2, keep_best=True)
    log = train_eagle(head, split, split, embed, wreck, report=lambda _: None)
    assert log[0]["step"] == 0 and log[-1]["kept"] and log[-1]["step"] == 0
    assert max(train.expected_drafts(e["held_out"]) for e in log[1:-1]) < train.expected_drafts(log[0]["held_out"])
    for n, t in head.params().items():
        assert torch.equal(t, start[n]), n

    head, table = _head(seed=5)
    g = torch.Generator().manual_seed(6)
    w, n = 40, 16
    tok = torch.randint(V, (w * n,), generator=g)
    labels = torch.full((w * n, 1), -1, dtype=torch.long)
    for s in range(w):
        for t in range(s * n + 1, s * n + n - 1):
            labels[t, 0] = tok[t - 1]
    copy = train.Split(torch.randn(w * n, 32, generator=g).half(), labels, torch.ones(w * n, dtype=torch.bool),
                       torch.full((w * n, 1), -1), tok, torch.ones(w * n, dtype=torch.long), ["x"],
                       torch.zeros(w * n, dtype=torch.int8), torch.arange(0, w * n + 1, n))
    embed = train.Embeddings(lambda ids: table[ids], copy)
    learn = EagleSettings(steps=120, windows=8, lr=1e-2, noise=0.0, ce_weight=1.0, eval_every=40, chain=1,
                          keep_best=True)
    log = train_eagle(head, copy, copy, embed, learn, report=lambda _: None)
    kept = log[-1]
    assert kept["kept"] and kept["step"] > 0
    assert train.expected_drafts(kept["held_out"]) == max(train.expected_drafts(e["held_out"]) for e in log[:-1])
    assert train.expected_drafts(kept["held_out"]) > train.expected_drafts(log[0]["held_out"]) + 0.5


@pytest.mark.real_models
def test_specd_heads_train_repo_on_the_real_target(tmp_path: Path) -> None:
    """The whole command on the default target and its shipped head, kept tiny: a repository of a few
    files, a few hundred tokens, two steps; it writes a head the daemon's loader takes, or says that
    no step drafted better (exit 1, nothing written)."""
    from specd.engine.config import DEFAULT_TARGET
    from specd.models import heads

    root = tmp_path / "project"
    _write(root, {f"m{i}.py": f"import scrapy\n\n\nclass Spider{i}(scrapy.Spider):\n    name = 'crawler{i}'\n\n"
                              f"    def parse(self, response):\n        yield scrapy.Request(response.url)\n" * 4
                  for i in range(3)})
    out = tmp_path / "repo-head.safetensors"
    cmd = ["specd", "heads", "train", "--repo", str(root), "--tokens", "400", "--steps", "2", "--eval-every", "1",
           "--out", str(out)]
    stored = _repo_dir(DEFAULT_TARGET, root)  # the repository's data, in specd's cache
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
        assert (stored / "data-fim" / data.MANIFEST).exists()
    finally:
        shutil.rmtree(stored, ignore_errors=True)
    assert done.returncode in (0, 1), done.stderr[-3000:]
    record = json.loads(out.with_suffix(".json").read_text())
    steps = [e["step"] for e in record["log"]]
    assert steps[:3] == [0, 1, 2] and record["log"][-1]["kept"]
    assert "3 python files" in done.stderr and "added to" in done.stderr
    gain = train.expected_drafts(record["log"][-1]["held_out"]) - train.expected_drafts(record["start"])
    if done.returncode == 0:
        assert gain > 0 and "Use it: specd serve" in done.stderr
        from specd.models.loader import resolve

        gguf = resolve(DEFAULT_TARGET).gguf
        head = heads.load(out, heads.HeadRows(gguf), heads.HeadRows(gguf, embedding=True))
        shipped = heads.load(heads.shipped(DEFAULT_TARGET), heads.HeadRows(gguf), heads.HeadRows(gguf, embedding=True))
        added = int(re.search(r"(\d+) tokens added to", done.stderr).group(1))
        assert bool(torch.isin(shipped.ids, head.ids).all()) and head.ids.numel() == shipped.ids.numel() + added
        assert torch.equal(head.ids, head.ids.sort().values)
    else:
        assert gain <= 0 and not out.exists() and "nothing written" in done.stderr


def test_a_widened_sub_vocabulary_adds_the_datas_most_frequent_missing_tokens() -> None:
    g = torch.Generator().manual_seed(3)
    table, rows = torch.randn(V, 32, generator=g), torch.randn(V, 32, generator=g)
    from specd.models.eagle import EagleHead, EagleShape

    ids = torch.arange(0, V, 2)  # the even tokens
    head = EagleHead(EagleShape(32, heads=4, kv_heads=2, head_dim=8, width=64), rows[ids], ids, lambda t: table[t])
    labels = torch.tensor([1] * 5 + [3] * 9 + [5] * 2 + [2] * 20 + [-1]).reshape(-1, 1)  # odd ones missing
    n = labels.shape[0]
    split = train.Split(torch.zeros(n, 32).half(), labels, torch.ones(n, dtype=torch.bool), torch.full((n, 1), -1),
                        torch.zeros(n, dtype=torch.long), torch.ones(n, dtype=torch.long))
    wider = train.widen_vocabulary(ids, split, 2)
    assert wider.tolist() == sorted(ids.tolist() + [1, 3])  # the two most frequent missing ones, sorted
    widened = head.with_vocabulary(rows[wider], wider)
    assert torch.equal(widened.ids, wider) and torch.equal(widened.head, rows[wider])
    for name, t in head.params().items():
        assert torch.equal(widened.params()[name], t), name
