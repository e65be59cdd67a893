"""``specd lsp`` on the tiny random pair: ``python tests/lsp_tiny.py [specd lsp flags]``.

Writes the tiny models once into ``$SPECD_TINY_DIR`` (default: a per-user temp directory), then
runs the real ``specd lsp`` command with ``--target``/``--draft`` pointing at them. Used as the
server command of the pytest-lsp tests, the Neovim test and the typing bench.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ENGINE_FLAGS = ("--threads", "1", "--max-len", "4096")


def tiny_dirs() -> tuple[Path, Path]:
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from tests.tiny import save_tiny_model

    base = Path(os.environ.get("SPECD_TINY_DIR") or Path(tempfile.gettempdir()) / f"specd-tiny-{os.getuid()}")
    out = []
    for name, seed in (("target", 0), ("draft", 1)):
        final = base / name
        if not (final / "model.safetensors").exists():
            base.mkdir(parents=True, exist_ok=True)
            staging = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=base))
            save_tiny_model(staging, seed=seed)
            try:
                staging.rename(final)  # atomic: concurrent writers cannot leave half a model
            except OSError:
                pass  # another process won; its copy is identical
        out.append(final)
    return out[0], out[1]


def command_args(*extra: str) -> list[str]:
    target, draft = tiny_dirs()
    return ["lsp", "--target", str(target), "--draft", str(draft), *ENGINE_FLAGS, *extra]


if __name__ == "__main__":
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from specd.cli import main

    sys.exit(main(command_args(*sys.argv[1:])))
