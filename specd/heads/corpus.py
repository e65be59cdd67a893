"""The code the draft heads are trained on, named here and nowhere else.

Every source is on this machine or fetched from Debian's archive, and none is an installed
third-party Python package: installed packages are where specd's figures are checked on code it
has not seen. Sources, by the name ``specd heads data --sources`` takes:

    stdlib          python      the standard library of the interpreter that runs specd
                                (``sysconfig``'s stdlib), without its test suites and without the
                                packages the quality bench draws its dev tasks from (email, json,
                                asyncio, http, logging)
    c-headers       c           that interpreter's C headers (``sysconfig``'s include) and glibc's
                                headers in /usr/include (the top level only: /usr/include/c++
                                holds the quality bench's C++ tasks)
    node            javascript  Debian's node-acorn and node-underscore
    debian-python   python      third-party Python libraries as Debian packages them
                                (``DEBIAN_PYTHON``); a top-level module that is also installed in
                                this interpreter's site-packages is left out
    go              go          Debian's golang-1.19-src, without the directories the quality
                                bench draws its Go tasks from (``GO_QUALITY_DIRS``)
    rust            rust        Rust crates as Debian packages them (``RUST_CRATES``), none of the
                                quality bench's

``CLASSIC`` (the first three) is what the shipped head was first trained on and what a data run
makes unless told otherwise. Debian packages are downloaded (``apt-get download``) and unpacked
once into ``CACHE``.

Files are split by a hash of their name: ``VALIDATION_PERCENT`` of them are held out for the
held-out acceptance figures and never trained on. The order is a seeded shuffle per language, so a
short run sees every language in the proportions of ``WEIGHTS``.
"""

from __future__ import annotations

import hashlib
import random
import re
import site
import subprocess
import sysconfig
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

CACHE = Path.home() / ".cache" / "specd" / "heads-sources"
VALIDATION_PERCENT = 5
# share of the tokens each language gets in a run, relative to the languages its sources have
# (a short run keeps these proportions)
WEIGHTS = {"python": 0.7, "c": 0.15, "javascript": 0.15, "go": 0.15, "rust": 0.15}
# the quality bench's dev tasks come from these standard-library packages: not trained on
QUALITY_DEV_STDLIB = ("email", "json", "asyncio", "http", "logging")
_TESTS = re.compile(r"(^|/)(test|tests|testing|idle_test|unittest/test|lib2to3/tests|testdata|benches)(/|$)")
MAX_FILE_BYTES = 400_000

DEBIAN_PYTHON = (
    "python3-sqlalchemy", "python3-tornado", "python3-twisted", "python3-paramiko", "python3-babel",
    "python3-mako", "python3-markdown", "python3-bs4", "python3-django", "python3-sphinx",
    "python3-aiohttp", "python3-boltons", "python3-toolz", "python3-invoke", "python3-alembic",
    "python3-wtforms", "python3-bottle", "python3-gunicorn", "python3-falcon", "python3-kombu",
    "python3-arrow", "python3-tabulate", "python3-isort", "python3-astroid", "python3-coverage",
    "python3-pyflakes", "python3-html5lib", "python3-redis", "python3-dnspython", "python3-peewee",
    "python3-marshmallow", "python3-celery", "python3-pandas", "python3-nltk",
)
GO_PACKAGE = "golang-1.19-src"
GO_SRC = "usr/share/go-1.19/src"
GO_QUALITY_DIRS = ("net", "os", "runtime", "encoding", "go", "text", "strings")  # bench/quality_tasks.py's
RUST_CRATES = ("serde", "rand", "syn", "bytes", "memchr", "clap", "tokio", "serde-json", "futures-util")
RUST_REGISTRY = "usr/share/cargo/registry"


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


def _tree(language: str, root: Path, pattern: str, name: str,
          keep: Callable[[str], bool] = lambda rel: True) -> list[CorpusFile]:
    """``root``'s files matching ``pattern``, named ``name/RELATIVE``, without test suites and
    minified files, and only those ``keep`` takes (by their relative path)."""
    out = []
    for f in sorted(root.rglob(pattern)):
        rel = f.relative_to(root).as_posix()
        if ".min." in f.name or _TESTS.search(rel) or not keep(rel):
            continue
        out.append(CorpusFile(language, f, f"{name}/{rel}"))
    return out


def installed_modules() -> set[str]:
    """Top-level module names installed in this interpreter's site-packages (third-party code
    the benches may draw tasks from)."""
    dirs = [*site.getsitepackages(), site.getusersitepackages()]
    out = set()
    for d in map(Path, dirs):
        if d.is_dir():
            for entry in d.iterdir():
                if entry.suffix in ("", ".py") or entry.name.endswith(".so"):
                    out.add(entry.name.split(".")[0])
    return out


def _stdlib() -> list[CorpusFile]:
    root = Path(sysconfig.get_paths()["stdlib"])
    return _tree("python", root, "*.py", "stdlib",
                 lambda rel: not rel.startswith(("site-packages/", "dist-packages/"))
                 and rel.split("/")[0] not in QUALITY_DEV_STDLIB)


def _c_headers() -> list[CorpusFile]:
    include = Path(sysconfig.get_paths()["include"])
    out = [CorpusFile("c", f, f"cpython-include/{f.relative_to(include).as_posix()}")
           for f in sorted(include.rglob("*.h"))]
    glibc = Path("/usr/include")
    out += [CorpusFile("c", f, f"usr-include/{f.name}") for f in sorted(glibc.glob("*.h"))]
    return out


def _node() -> list[CorpusFile]:
    return [f for package in ("node-acorn", "node-underscore")
            for f in _tree("javascript", _deb(package), "*.js", f"deb:{package}")]


def _debian_python() -> list[CorpusFile]:
    installed = installed_modules()
    out = []
    for package in DEBIAN_PYTHON:
        root = _deb(package) / "usr/lib/python3/dist-packages"
        out += _tree("python", root, "*.py", f"deb:{package}",
                     lambda rel: rel.split("/")[0].split(".")[0] not in installed)
    return out


def _go() -> list[CorpusFile]:
    return _tree("go", _deb(GO_PACKAGE) / GO_SRC, "*.go", f"deb:{GO_PACKAGE}",
                 lambda rel: rel.split("/")[0] not in GO_QUALITY_DIRS and not rel.endswith("_test.go"))


def _rust() -> list[CorpusFile]:
    return [f for crate in RUST_CRATES
            for f in _tree("rust", _deb(f"librust-{crate}-dev") / RUST_REGISTRY, "*.rs", f"deb:librust-{crate}-dev",
                           lambda rel: "/examples/" not in rel and "/build.rs" not in rel)]


# each source's files (their language is each file's own)
SOURCES: dict[str, Callable[[], list[CorpusFile]]] = {
    "stdlib": _stdlib,
    "c-headers": _c_headers,
    "node": _node,
    "debian-python": _debian_python,
    "go": _go,
    "rust": _rust,
}
CLASSIC = ("stdlib", "c-headers", "node")


def check_sources(sources: tuple[str, ...]) -> tuple[str, ...]:
    """``sources`` when each names one of ``SOURCES`` (and there is one at least); else ValueError."""
    unknown = [s for s in sources if s not in SOURCES]
    if unknown or not sources:
        raise ValueError(f"unknown corpus sources {', '.join(unknown) or '(none named)'}: "
                         f"name sources from {', '.join(SOURCES)}")
    return sources


def files(seed: int = 0, sources: tuple[str, ...] = CLASSIC) -> dict[str, list[CorpusFile]]:
    """Every file of ``sources`` by language, each list in a seeded shuffled order; files that are
    too large, empty or not UTF-8 left out."""
    out: dict[str, list[CorpusFile]] = {}
    for name in check_sources(sources):
        for f in SOURCES[name]():
            try:
                size = f.path.stat().st_size
            except OSError:
                continue
            if 0 < size <= MAX_FILE_BYTES:
                out.setdefault(f.language, []).append(f)
    for language, found in out.items():
        random.Random(f"{seed}:{language}").shuffle(found)
    return out


def read(f: CorpusFile) -> str | None:
    try:
        return f.path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
