"""A GGUF file in a Hugging Face repository, named as ``owner/repo:file.gguf`` or ``owner/repo:QUANT``.

``--target Qwen/Qwen2.5-Coder-7B-Instruct-GGUF:qwen2.5-coder-7b-instruct-q4_k_m.gguf`` names the file;
``--target Qwen/Qwen2.5-Coder-7B-Instruct-GGUF:Q4_K_M`` picks the repository's one ``.gguf`` whose
name holds the quant tag (case-insensitive), as llama.cpp's ``-hf owner/repo:quant`` does. The file
is downloaded once into the Hugging Face cache (``huggingface_hub``; ``HF_HUB_OFFLINE=1`` serves it
from the cache without a network) and then runs as any local ``.gguf``: memory-mapped, its
tokenizer built once beside specd's cache. A file split in parts (``-00001-of-00003.gguf``) is
refused: join it with llama.cpp's ``llama-gguf-split --merge`` and pass the file.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from specd.models.errors import ModelError

SPEC = re.compile(r"(?P<repo>[\w.-]+/[\w.-]+):(?P<what>[\w.+-]+(?:/[\w.+-]+)*)")
_SPLIT = re.compile(r"-\d{5}-of-\d{5}\.gguf$")


def is_hub_gguf(spec: str) -> bool:
    """Whether ``spec`` has the form ``owner/repo:file.gguf`` or ``owner/repo:QUANT``."""
    return SPEC.fullmatch(spec) is not None


def pick(files: list[str], tag: str, repo: str) -> str:
    """The one ``.gguf`` among ``files`` whose name holds ``tag`` (case-insensitive); ModelError
    naming the candidates when none or several do, or when the match is split in parts."""
    matches = sorted(f for f in files if f.lower().endswith(".gguf") and tag.lower() in Path(f).name.lower())
    whole = [f for f in matches if not _SPLIT.search(f)]
    if len(whole) == 1:
        return whole[0]
    if not matches:
        ggufs = sorted(f for f in files if f.lower().endswith(".gguf"))
        raise ModelError(f"{repo}: no .gguf file matches {tag!r}; the repository has: "
                         f"{', '.join(ggufs) if ggufs else 'no .gguf file'}")
    if not whole:
        raise ModelError(f"{repo}: {tag!r} is split in parts ({', '.join(matches)}); specd reads one file: "
                         f"join them with llama.cpp's llama-gguf-split --merge and pass the result")
    raise ModelError(f"{repo}: {tag!r} matches several files ({', '.join(whole)}): name one as {repo}:FILE")


def _hub_options() -> dict:
    """The cache and offline settings as the environment has them now (huggingface_hub reads them
    once, at its import; a caller that sets them later is still obeyed)."""
    env = os.environ
    options: dict = {}
    cache = env.get("HF_HUB_CACHE") or (os.path.join(env["HF_HOME"], "hub") if env.get("HF_HOME") else None)
    if cache:
        options["cache_dir"] = cache
    if env.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on"):
        options["local_files_only"] = True
    return options


def local_path(spec: str) -> Path:
    """The downloaded file (downloading it once); ModelError when it cannot be had."""
    m = SPEC.fullmatch(spec)
    if m is None:
        raise ModelError(f"{spec!r} is not owner/repo:file.gguf or owner/repo:QUANT")
    repo, what = m["repo"], m["what"]
    try:
        # imported here: only hub sources need it, and it takes a while to import
        from huggingface_hub import hf_hub_download, list_repo_files

        options = _hub_options()
        if what.lower().endswith(".gguf"):
            name = what
        elif options.get("local_files_only"):
            raise ModelError(f"{spec}: offline (HF_HUB_OFFLINE), a quant tag cannot be looked up: name the file, "
                             f"{repo}:FILE.gguf")
        else:
            name = pick(list_repo_files(repo), what, repo)
        if _SPLIT.search(name):
            pick([name], Path(name).name, repo)  # the split-file refusal
        return Path(hf_hub_download(repo, name, **options))
    except ModelError:
        raise
    except Exception as e:
        raise ModelError(f"cannot fetch {spec!r} from the Hugging Face hub: {type(e).__name__}: {e}") from e


def cached_path(spec: str) -> Path | None:
    """The file when an ``owner/repo:file.gguf`` spec is already in the Hugging Face cache (no
    network), else None (a quant tag is only resolved by :func:`local_path`)."""
    m = SPEC.fullmatch(spec)
    if m is None or not m["what"].lower().endswith(".gguf"):
        return None
    try:
        from huggingface_hub import try_to_load_from_cache

        found = try_to_load_from_cache(m["repo"], m["what"], cache_dir=_hub_options().get("cache_dir"))
    except Exception:
        return None
    return Path(found) if isinstance(found, str) else None
