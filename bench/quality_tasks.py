#!/usr/bin/env python
"""Build the quality bench's tasks (``specd/bench/data/quality.jsonl.gz``): fill-in-the-middle
sites cut from real code in seven languages, with a dev split (to choose settings on) and a test
split (to report on) that never share a package.

Each task is one site in one file: the cursor at a line start (the rest of the line is the
answer), mid-line (the user typed part of the line), or at the start of a block (the next 2-6
lines at that indentation or deeper are the answer). Around it: up to PREFIX_CHARS before the
cursor (cut at a line start) and SUFFIX_CHARS after the answer (cut at a line end), more than any
window the bench tries, so every system and setting cuts its own windows from the same text.

Sources, all fetched from package registries into ``~/.cache/specd/quality-sources`` (named here and
nowhere else; versions pinned):

    language    dev (choose settings)                          test (report)
    python      stdlib email, json, asyncio, http, logging     site-packages rich, click, jinja2, pygments
    javascript  npm's dependencies (node_modules/ of npm)      npm's own lib/
    typescript  npm @trpc/server, @tanstack/query-core, immer  npm rxjs
    c           PyPI sdist brotli (its c/)                     PyPI sdists zstandard (zstd/), lz4 (lz4libs/),
                                                               psutil, llama-cpp-python (llama.cpp's ggml/src)
    cpp         libstdc++ 12 headers (bits/, g++'s)            PyPI sdist llama-cpp-python (llama.cpp src/, common/)
    go          Debian golang-1.19-src: net, os, runtime       Debian golang-1.19-src: encoding, go, text, strings
    rust        Debian librust-{itertools,anyhow,log}-dev      Debian librust-{regex,hashbrown,indexmap,nom}-dev

A third split, ``fresh``, is never in the shipped file: ``--fresh N --out FILE`` builds only it,
N tasks per language that has fresh sources, to check a gap seen on test on code that neither
chose a setting nor was looked at (session 34: Rust, from crates in neither split):

    rust        Debian librust-{memchr,bytes,smallvec,serde,rayon-core,crossbeam-channel}-dev

Selection is seeded and deterministic for the same fetched files.

    python bench/quality_tasks.py [--dev 18] [--test 30] [--seed 28]
    python bench/quality_tasks.py --fresh 60 --out FILE.jsonl.gz   # then specd bench --tasks-file FILE …
"""

from __future__ import annotations

import argparse
import gzip
import importlib
import json
import random
import re
import subprocess
import sys
import sysconfig
import tarfile
from dataclasses import dataclass
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "specd" / "bench" / "data" / "quality.jsonl.gz"
CACHE = Path.home() / ".cache" / "specd" / "quality-sources"
PREFIX_CHARS, SUFFIX_CHARS = 4000, 1500
MIN_PREFIX_CHARS, MIN_SUFFIX_CHARS = 1000, 200
KINDS = ("line_start", "mid_line", "block")
COMMENT_STARTS = ("#", "//", "/*", "*", "--", '"""', "'''", "<!--", "///", "//!")


@dataclass(frozen=True)
class Source:
    language: str
    split: str
    fetch: str  # stdlib:NAME | site:NAME | path:/abs | deb:PACKAGE | sdist:NAME==VER | npm:NAME@VER
    under: str  # folder inside what was fetched ("" = all of it)
    suffixes: tuple[str, ...]
    exclude: str = r"(^|/)(test|tests|testdata|testing|examples?|vendor|third_party|fuzz|benches)(/|$)"


GO_SRC = "usr/share/go-1.19/src"
RUST_REG = "usr/share/cargo/registry"
SOURCES = (
    *(Source("python", "dev", f"stdlib:{n}", "", (".py",)) for n in ("email", "json", "asyncio", "http", "logging")),
    *(Source("python", "test", f"site:{n}", "", (".py",)) for n in ("rich", "click", "jinja2", "pygments")),
    Source("javascript", "dev", "path:/usr/lib/node_modules/npm", "node_modules", (".js",)),
    Source("javascript", "test", "path:/usr/lib/node_modules/npm", "lib", (".js",)),
    Source("typescript", "dev", "npm:@trpc/server@10.45.2", "package/src", (".ts",)),
    Source("typescript", "dev", "npm:@tanstack/query-core@5.59.0", "package/src", (".ts",)),
    Source("typescript", "dev", "npm:immer@10.1.1", "package/src", (".ts",)),
    Source("typescript", "test", "npm:rxjs@7.8.1", "package/src", (".ts",)),
    Source("c", "dev", "sdist:brotli==1.1.0", "Brotli-1.1.0/c", (".c",)),
    Source("c", "test", "sdist:zstandard==0.23.0", "zstandard-0.23.0/zstd", (".c",)),
    Source("c", "test", "sdist:lz4==4.3.3", "lz4-4.3.3/lz4libs", (".c",)),
    Source("c", "test", "sdist:psutil==6.1.0", "psutil-6.1.0/psutil", (".c",)),
    Source("c", "test", "sdist:llama-cpp-python==0.3.36", "llama_cpp_python-0.3.36/vendor/llama.cpp/ggml/src", (".c",)),
    Source("cpp", "dev", "path:/usr/include/c++/12", "bits", (".h", ".tcc")),
    Source("cpp", "test", "sdist:llama-cpp-python==0.3.36", "llama_cpp_python-0.3.36/vendor/llama.cpp/src", (".cpp",)),
    Source("cpp", "test", "sdist:llama-cpp-python==0.3.36", "llama_cpp_python-0.3.36/vendor/llama.cpp/common", (".cpp",)),
    *(Source("go", "dev", "deb:golang-1.19-src", f"{GO_SRC}/{d}", (".go",)) for d in ("net", "os", "runtime")),
    *(Source("go", "test", "deb:golang-1.19-src", f"{GO_SRC}/{d}", (".go",)) for d in ("encoding", "go", "text", "strings")),
    *(Source("rust", "dev", f"deb:librust-{n}-dev", RUST_REG, (".rs",)) for n in ("itertools", "anyhow", "log")),
    *(Source("rust", "test", f"deb:librust-{n}-dev", RUST_REG, (".rs",)) for n in ("regex", "hashbrown", "indexmap", "nom")),
    *(Source("rust", "fresh", f"deb:librust-{n}-dev", RUST_REG, (".rs",)) for n in ("memchr", "bytes", "smallvec", "serde", "rayon-core", "crossbeam-channel")),
)
LANG_PREFIX = {"python": "py", "javascript": "js", "typescript": "ts", "c": "c", "cpp": "cpp", "go": "go", "rust": "rs"}


def _run(cmd: list[str], cwd: Path) -> None:
    r = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({r.returncode}): {r.stderr.strip()[-500:]}")


def fetch(spec: str) -> tuple[Path, str]:
    """Where ``spec``'s files are on this machine (fetching them once), and its version."""
    kind, _, name = spec.partition(":")
    if kind == "stdlib":
        return Path(sysconfig.get_paths()["stdlib"]) / name, f"python {sys.version.split()[0]}"
    if kind == "site":
        import importlib.metadata as md

        mod = importlib.import_module(name)
        return Path(mod.__file__).parent, md.version(name)
    if kind == "path":
        return Path(name), "installed"
    dest = CACHE / re.sub(r"[^A-Za-z0-9._=@-]+", "_", spec)
    CACHE.mkdir(parents=True, exist_ok=True)
    if kind == "deb":
        if not dest.is_dir():
            _run(["apt-get", "download", name], CACHE)
            deb = max(CACHE.glob(f"{name}_*.deb"))
            _run(["dpkg-deb", "-x", str(deb), str(dest)], CACHE)
        deb = max(CACHE.glob(f"{name}_*.deb"))
        return dest, deb.name.split("_")[1]
    if kind == "sdist":
        pkg, _, version = name.partition("==")
        if not dest.is_dir():
            dest.mkdir()
            _run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:", name,
                  "-d", str(dest)], CACHE)
            for tgz in dest.glob("*.tar.gz"):
                with tarfile.open(tgz) as t:
                    t.extractall(dest, filter="data")
        return dest, version
    if kind == "npm":
        version = name.rsplit("@", 1)[1]
        if not dest.is_dir():
            dest.mkdir()
            _run(["npm", "pack", name, "--silent", "--pack-destination", str(dest)], CACHE)
            for tgz in dest.glob("*.tgz"):
                with tarfile.open(tgz) as t:
                    t.extractall(dest, filter="data")
        return dest, version
    raise SystemExit(f"unknown source kind {spec!r}")


def source_files(src: Source) -> list[tuple[Path, Path, str]]:
    """(file, the source's root, version) for each file of ``src``."""
    root, version = fetch(src.fetch)
    base = root / src.under if src.under else root
    if not base.is_dir():
        raise SystemExit(f"{src.fetch}: {base} is not a folder")
    skip = re.compile(src.exclude)
    out = []
    for f in sorted(base.rglob("*")):
        rel = f.relative_to(base).as_posix()
        if f.suffix in src.suffixes and f.is_file() and not skip.search(rel) and not rel.endswith(
                ("_test.go", ".d.ts", ".min.js", ".spec.ts", ".test.ts", ".test.js")):
            out.append((f, base, version))
    return out


def indent_of(line: str) -> int:
    return len(line) - len(line.lstrip(" \t"))


def code_line(line: str) -> bool:
    body = line.strip()
    return 8 <= len(body) <= 100 and not body.startswith(COMMENT_STARTS) and any(c.isalpha() for c in body)


def candidates(lines: list[str], starts: list[int], text: str, kind: str) -> list[tuple[int, int, int]]:
    """(cursor offset, answer end offset, line index) for each fair site of ``kind``."""
    out = []
    for i, line in enumerate(lines):
        at = starts[i]
        if not code_line(line) or at < MIN_PREFIX_CHARS:
            continue
        ind = indent_of(line)
        end = at + len(line.rstrip("\n"))
        if kind == "line_start":
            out.append((at + ind, end, i))
        elif kind == "mid_line":
            body = line.rstrip("\n")
            # after a character a user pauses on ('(', '.', ' ', '=', ...), 3+ characters into the
            # line's text and 4+ before its end
            cuts = [c for c in range(ind + 3, len(body) - 4) if not body[c - 1].isalnum() and body[c - 1] != "_"
                    and body[c] != " "]
            if cuts:
                out.append((at + cuts[len(cuts) // 2], end, i))
        elif kind == "block":
            j = i + 1
            while j < len(lines) and j - i < 6 and lines[j].strip() and indent_of(lines[j]) >= ind:
                j += 1
            if j - i >= 2 and ind > 0:
                out.append((at + ind, starts[j - 1] + len(lines[j - 1].rstrip("\n")), i))
    return [(c, e, i) for c, e, i in out if len(text) - e >= MIN_SUFFIX_CHARS]


def cut_task(text: str, cursor: int, end: int) -> tuple[str, str, str]:
    """(prefix, expected, suffix) windows around a site: whole lines outside the cursor line."""
    lo = max(0, cursor - PREFIX_CHARS)
    if lo > 0:
        lo = text.index("\n", lo) + 1
    hi = min(len(text), end + SUFFIX_CHARS)
    if hi < len(text):
        hi = text.rindex("\n", end, hi) if "\n" in text[end:hi] else hi
    return text[lo:cursor], text[cursor:end], text[end:hi]


def build(per_split: dict[str, int], seed: int) -> list[dict]:
    tasks: list[dict] = []
    langs = sorted({s.language for s in SOURCES}, key=list(LANG_PREFIX).index)
    for lang in langs:
        for split in per_split:
            if not any(s.language == lang and s.split == split for s in SOURCES):
                continue
            rng = random.Random(f"{seed}-{lang}-{split}")
            files = [(f, base, v, s) for s in SOURCES if s.language == lang and s.split == split
                     for f, base, v in source_files(s)]
            rng.shuffle(files)
            want = per_split[split]
            quota = {k: want // len(KINDS) + (1 if n < want % len(KINDS) else 0) for n, k in enumerate(KINDS)}
            made = {k: 0 for k in KINDS}
            for f, base, version, src in files:
                kind = next((k for k in KINDS if made[k] < quota[k]), None)
                if kind is None:
                    break
                text = f.read_text(encoding="utf-8", errors="replace").replace("\r\n", "\n")
                lines = text.splitlines(keepends=True)
                if not lines or max(len(x) for x in lines) > 200:  # generated or minified
                    continue
                starts, at = [], 0
                for x in lines:
                    starts.append(at)
                    at += len(x)
                # the kind this file serves best: the first kind short of its quota with a site here
                for k in [k for k in KINDS if made[k] < quota[k]]:
                    sites = candidates(lines, starts, text, k)
                    if sites:
                        kind = k
                        break
                else:
                    continue
                cursor, end, i = rng.choice(sites)
                prefix, expected, suffix = cut_task(text, cursor, end)
                made[kind] += 1
                n = sum(1 for t in tasks if t["language"] == lang and t["split"] == split)
                tasks.append({
                    "id": f"{LANG_PREFIX[lang]}-{split}-{kind}-{n + 1}", "split": split, "language": lang,
                    "category": "block" if kind == "block" else "line", "kind": kind,
                    "cursor": "mid_line" if kind == "mid_line" else ("block_start" if kind == "block" else "line_start"),
                    "package": src.fetch, "version": version, "file": f.relative_to(base).as_posix(),
                    "line": i + 1, "column": cursor - starts[i] + 1,
                    "prefix": prefix, "suffix": suffix, "expected": expected, "seed": seed,
                })
            short = {k: quota[k] - made[k] for k in KINDS if made[k] < quota[k]}
            if short:
                raise SystemExit(f"{lang} {split}: too few sites in its sources, short by {short}")
    return tasks


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dev", type=int, default=18, help="tasks per language in the dev split")
    ap.add_argument("--test", type=int, default=30, help="tasks per language in the test split")
    ap.add_argument("--seed", type=int, default=28)
    ap.add_argument("--fresh", type=int, default=0,
                    help="build only the fresh split, this many tasks per language that has one (needs --out)")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    if args.fresh and args.out == OUT:
        ap.error("--fresh writes a file of its own: pass --out (the shipped file holds dev and test only)")
    tasks = build({"fresh": args.fresh} if args.fresh else {"dev": args.dev, "test": args.test}, args.seed)
    data = "".join(json.dumps(t, ensure_ascii=False) + "\n" for t in tasks).encode()
    with gzip.GzipFile(args.out, "wb", mtime=0) as f:  # mtime 0: the same tasks give the same bytes
        f.write(data)
    by = {}
    for t in tasks:
        by.setdefault((t["language"], t["split"]), 0)
        by[(t["language"], t["split"])] += 1
    print(f"{len(tasks)} tasks -> {args.out} ({args.out.stat().st_size // 1024} KiB)")
    for (lang, split), n in by.items():
        print(f"  {lang:<11} {split:<5} {n}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
