"""Model runtimes, loading and conversion (installed as ``specd.models``).

A model here knows nothing of speculation: it scores new tokens against its own KV cache and can
move that cache back. The engine (``specd.engine``) builds speculative decoding on top.

Importing the package loads nothing heavy: the light modules (``registry``, ``modes``,
``errors``) serve paths that must not import torch (``specd complete --socket``, ``specd lsp``);
the names below load their modules on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {"Decoder": "specd.models.decoder", "KVCache": "specd.models.kv_cache",
         "ModelConfig": "specd.models.config"}

__all__ = ["Decoder", "KVCache", "ModelConfig"]


def __getattr__(name: str) -> Any:
    """``from specd.models import Decoder``: imported on first use (it imports torch)."""
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_LAZY[name]), name)
