"""The code the draft heads are trained on, named here and nowhere else.

Sources (all on this machine or fetched from Debian's archive, never from installed third-party
Python packages, which is where specd's figures are checked on code it has not seen):

    python  the standard library of the interpreter that runs specd (``sysconfig``'s stdlib),
            without its test suites and without the packages the quality bench draws its dev
            tasks from (email, json, asyncio, http, logging)
    c       that interpreter's C headers (``sysconfig``'s include) and glibc's headers in
            /usr/include (the top level only: /usr/include/c++ holds the quality bench's C++ tasks)
    javascript  Debian's node-acorn and node-underscore packages (``apt-get download``)

Files are split by a hash of their path: ``VALIDATION_PERCENT`` of them are held out for the
held-out acceptance figures and never trained on. The order is a seeded shuffle per language, so a
short run sees every language in the proportions of ``WEIGHTS``.
"""

from __future__ import annotations

import hashlib
import random
import re
import subprocess
import sysconfig
from dataclasses import dataclass
from pathlib import Path

CACHE = Path.home() / ".cache" / "specd" / "heads-sources"
VALIDATION_PERCENT = 5
# share of the tokens each language gets in a run (a short run keeps these proportions)
WEIGHTS = {"python": 0.7, "c": 0.15, "javascript": 0.15}
# the quality bench's dev tasks come from these standard-library packages: not trained on
QUALITY_DEV_STDLIB = ("email", "json", "asyncio", "http", "logging")
_TESTS = re.compile(r"(^|/)(test|tests|idle_test|unittest/test|lib2to3/tests)(/|$)")
MAX_FILE_BYTES = 400_000


@dataclass(frozen=True)
class CorpusFile:
    language: str
    path: Path
    name: str  # stable across machines: the source and the path inside it
    held_out: bool | None = None  # None: decided by the name's hash (VALIDATION_PERCENT)

    @property
    def validation(self) -> bool:
        if self.held_out is not None:
            return self.held_out
        return int(hashlib.sha256(self.name.encode()).hexdigest(), 16) % 100 < VALIDATION_PERCENT


def _deb(package: str) -> Path:
    """Debian ``package``'s files (downloaded and unpacked once into ``CACHE``)."""
    dest = CACHE / package
    if not dest.is_dir():
        CACHE.mkdir(parents=True, exist_ok=True)
        subprocess.run(["apt-get", "download", package], cwd=CACHE, check=True, capture_output=True)
        deb = max(CACHE.glob(f"{package}_*.deb"))
        subprocess.run(["dpkg-deb", "-x", str(deb), str(dest)], check=True, capture_output=True)
    return dest


def _python() -> list[CorpusFile]:
    root = Path(sysconfig.get_paths()["stdlib"])
    out = []
    for f in sorted(root.rglob("*.py")):
        rel = f.relative_to(root).as_posix()
        if rel.startswith(("site-packages/", "dist-packages/")) or _TESTS.search(rel):
            continue
        if rel.split("/")[0] in QUALITY_DEV_STDLIB:
            continue
        out.append(CorpusFile("python", f, f"stdlib/{rel}"))
    return out


def _c() -> list[CorpusFile]:
    include = Path(sysconfig.get_paths()["include"])
    out = [CorpusFile("c", f, f"cpython-include/{f.relative_to(include).as_posix()}")
           for f in sorted(include.rglob("*.h"))]
    glibc = Path("/usr/include")
    out += [CorpusFile("c", f, f"usr-include/{f.name}") for f in sorted(glibc.glob("*.h"))]
    return out


def _javascript() -> list[CorpusFile]:
    out = []
    for package in ("node-acorn", "node-underscore"):
        root = _deb(package)
        for f in sorted(root.rglob("*.js")):
            rel = f.relative_to(root).as_posix()
            if ".min." in f.name or _TESTS.search(rel):
                continue
            out.append(CorpusFile("javascript", f, f"deb:{package}/{rel}"))
    return out


SOURCES = {"python": _python, "c": _c, "javascript": _javascript}


def files(seed: int = 0) -> dict[str, list[CorpusFile]]:
    """Every corpus file by language, each list in a seeded shuffled order; files that are too
    large, empty or not UTF-8 left out."""
    out = {}
    for language, find in SOURCES.items():
        found = []
        for f in find():
            try:
                size = f.path.stat().st_size
            except OSError:
                continue
            if 0 < size <= MAX_FILE_BYTES:
                found.append(f)
        random.Random(f"{seed}:{language}").shuffle(found)
        out[language] = found
    return out


def read(f: CorpusFile) -> str | None:
    try:
        return f.path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
