"""Builds the bench's llama.cpp anchor once: ``python -m specd.bench.llamacpp_build``.

Downloads llama-cpp-python's sdist with pip (its ``vendor/llama.cpp`` tree is llama.cpp's source),
compiles ``llama-server``, ``llama-bench`` and ``llama-cli`` with cmake (Release, ``-DGGML_NATIVE=ON`` but without
AMX (see :func:`isa_flags`), static, no
curl/OpenSSL/web UI download), and copies them into ``<cache root>/anchors/llama.cpp-<version>-<cpu
flags hash>/bin/`` with a ``build.json``. Idempotent: when the binaries are there it says so and
exits. ~12 min on 2 cores; run it niced (``nice -n 10 python -m specd.bench.llamacpp_build``).
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

from specd.bench.llamacpp_bin import (BINARIES, ISA_CAPS, SDIST_VERSION, anchor_dir, anchors_root, cpu_flags_hash,
                                      find_binaries)

CMAKE_FLAGS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DLLAMA_CURL=OFF",            # deprecated (a warning) in this tree; kept for older trees
    "-DLLAMA_OPENSSL=OFF",         # no HTTPS: the anchor serves and loads local files only
    "-DBUILD_SHARED_LIBS=OFF",     # standalone binaries
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_TOOLS=ON",
    "-DLLAMA_BUILD_SERVER=ON",
    "-DLLAMA_BUILD_UI=OFF",        # no npm
    "-DLLAMA_USE_PREBUILT_UI=OFF", # no download from Hugging Face at build time
)


def log(msg: str) -> None:
    print(f"[anchor-build] {msg}", flush=True)


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def download_sdist(version: str, dest: Path) -> Path:
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
           f"llama-cpp-python=={version}", "-d", str(dest)]
    log(" ".join(cmd))
    subprocess.run(cmd, check=True)
    found = sorted(dest.glob(f"llama_cpp_python-{version}.tar.gz")) + sorted(dest.glob("llama*cpp*python*.tar.gz"))
    if not found:
        raise FileNotFoundError(f"pip left no llama-cpp-python sdist in {dest}")
    return found[0]


def unpack_llama_cpp(sdist: Path, dest: Path) -> Path:
    with tarfile.open(sdist) as tar:
        members = [m for m in tar.getmembers() if "/vendor/llama.cpp/" in m.name + "/"]
        try:
            tar.extractall(dest, members=members, filter="data")
        except TypeError:  # Python < 3.11.4: no extraction filters
            tar.extractall(dest, members=members)
    src = next(dest.glob("*/vendor/llama.cpp"), None)
    if src is None or not (src / "CMakeLists.txt").is_file():
        raise FileNotFoundError(f"no vendor/llama.cpp/CMakeLists.txt in {sdist.name}")
    return src


# x86 instruction sets ggml builds for, by the /proc/cpuinfo flag that says the CPU has them
_GGML_ISA = (("avx", "GGML_AVX"), ("avx2", "GGML_AVX2"), ("fma", "GGML_FMA"), ("f16c", "GGML_F16C"),
             ("bmi2", "GGML_BMI2"), ("avx_vnni", "GGML_AVX_VNNI"), ("avx512f", "GGML_AVX512"),
             ("avx512vbmi", "GGML_AVX512_VBMI"), ("avx512_vnni", "GGML_AVX512_VNNI"),
             ("avx512_bf16", "GGML_AVX512_BF16"))


def isa_flags(cpu_flags: set[str], isa_cap: str | None = None) -> list[str]:
    """``-DGGML_NATIVE=ON``, except on a CPU with AMX: there the build names every instruction set
    the CPU has but AMX, because ggml's AMX matmul segfaults while loading a model on such a machine
    (seen 2026-12-01 on an Intel Xeon VM: ``ggml_backend_amx_mul_mat``, llama.cpp of
    llama-cpp-python 0.3.36); ``-march=native`` would turn it on whatever the AMX options say.
    With ``isa_cap`` (``avx2``) it names only the sets of that level the CPU has: a build that runs
    as it would on a smaller machine, beside specd capped alike (``SPECD_GG_SIMD=avx2``)."""
    if isa_cap is not None:
        cpu_flags = cpu_flags & ISA_CAPS[isa_cap]
    elif "amx_tile" not in cpu_flags:
        return ["-DGGML_NATIVE=ON"]
    flags = ["-DGGML_NATIVE=OFF"]
    flags += [f"-D{opt}={'ON' if flag in cpu_flags else 'OFF'}" for flag, opt in _GGML_ISA]
    flags += ["-DGGML_AMX_TILE=OFF", "-DGGML_AMX_INT8=OFF", "-DGGML_AMX_BF16=OFF"]
    return flags


def cpu_flags() -> set[str]:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("flags", "Features")):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def supported_flags(src: Path, flags: tuple[str, ...]) -> list[str]:
    """Drops ``-DLLAMA_*`` options the tree does not mention (older or newer llama.cpp)."""
    text = "\n".join(p.read_text(errors="replace") for p in [src / "CMakeLists.txt", *src.glob("tools/*/CMakeLists.txt")]
                     if p.is_file())
    keep = []
    for flag in flags:
        name = flag[2:].split("=", 1)[0]
        if name.startswith("LLAMA_") and name not in text:
            log(f"tree has no {name}: dropping {flag}")
            continue
        keep.append(flag)
    return keep


def shared_libs(binary: Path, build_dir: Path) -> list[Path]:
    """Libraries from the build tree that ``binary`` links (none for a static build)."""
    try:
        out = subprocess.run(["ldd", str(binary)], capture_output=True, text=True, check=False).stdout
    except FileNotFoundError:
        return []
    libs = []
    for line in out.splitlines():
        parts = line.split("=>")
        if len(parts) == 2:
            name, where = parts[0].strip(), parts[1].split("(")[0].strip()
            if where == "not found" or where.startswith(str(build_dir)):
                hits = list(build_dir.rglob(name))
                if hits:
                    libs.append(hits[0])
    return libs


def server_version(binary: Path) -> str:
    out = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=60, check=False)
    return (out.stdout + out.stderr).strip()


def build(version: str = SDIST_VERSION, jobs: int = 2, with_cli: bool = True, sdist: Path | None = None,
          keep_tmp: bool = False, force: bool = False, isa_cap: str | None = None) -> Path:
    target = anchor_dir(version, isa_cap)
    if not force and find_binaries(version, isa_cap=isa_cap) is not None:
        log(f"already built: {target}/bin (delete it or pass --force to rebuild)")
        return target
    anchors_root().mkdir(parents=True, exist_ok=True)
    lock = open(anchors_root() / ".build.lock", "w")
    fcntl.flock(lock, fcntl.LOCK_EX)  # one build at a time; a second waits, then finds the first's
    try:
        if not force and find_binaries(version, isa_cap=isa_cap) is not None:
            log(f"already built: {target}/bin")
            return target
        tmp = Path(tempfile.mkdtemp(prefix="specd-llamacpp-"))
        try:
            return _build(version, jobs, with_cli, sdist, tmp, target, isa_cap)
        finally:
            if keep_tmp:
                log(f"kept {tmp}")
            else:
                shutil.rmtree(tmp, ignore_errors=True)
    finally:
        lock.close()


def _build(version: str, jobs: int, with_cli: bool, sdist: Path | None, tmp: Path, target: Path,
           isa_cap: str | None) -> Path:
    t0 = time.time()
    sdist = Path(sdist) if sdist else download_sdist(version, tmp)
    digest = sha256(sdist)
    log(f"sdist {sdist.name} sha256 {digest}")
    src = unpack_llama_cpp(sdist, tmp / "src")
    build_dir = tmp / "build"
    flags = supported_flags(src, CMAKE_FLAGS) + isa_flags(cpu_flags(), isa_cap)
    generator = ["-G", "Ninja"] if shutil.which("ninja") else []
    configure = ["cmake", "-S", str(src), "-B", str(build_dir), *generator, *flags]
    log(" ".join(configure))
    subprocess.run(configure, check=True)
    targets = list(BINARIES) + (["llama-cli"] if with_cli else [])
    compile_cmd = ["cmake", "--build", str(build_dir), "--config", "Release", "-j", str(jobs), "--target", *targets]
    log(" ".join(compile_cmd))
    t_compile = time.time()
    subprocess.run(compile_cmd, check=True)
    compile_s = time.time() - t_compile

    staging = target.with_name(target.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    (staging / "bin").mkdir(parents=True)
    copied = []
    for name in targets:
        built = next((p for p in [build_dir / "bin" / name, *build_dir.rglob(name)] if p.is_file()), None)
        if built is None:
            raise FileNotFoundError(f"cmake built no {name} under {build_dir}")
        shutil.copy2(built, staging / "bin" / name)
        copied.append(name)
        for lib in shared_libs(built, build_dir):
            if not (staging / "bin" / lib.name).exists():
                shutil.copy2(lib, staging / "bin" / lib.name)
                copied.append(lib.name)
    info = {
        "sdist": f"llama-cpp-python=={version}",
        "sdist_version": version,
        "sdist_file": sdist.name,
        "sdist_sha256": digest,
        "cmake_flags": flags,
        "generator": generator[1] if generator else "default",
        "targets": targets,
        "jobs": jobs,
        "files": copied,
        "cpu_flags_hash": cpu_flags_hash(),
        "isa_cap": isa_cap,
        "machine": platform.machine(),
        "built_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "compile_s": round(compile_s, 1),
        "build_s": round(time.time() - t0, 1),
        "llama_server_version": server_version(staging / "bin" / "llama-server"),
    }
    (staging / "build.json").write_text(json.dumps(info, indent=2) + "\n")
    if target.exists():
        shutil.rmtree(target)
    os.replace(staging, target)
    log(f"built {', '.join(copied)} in {info['build_s']:.0f} s -> {target}/bin")
    log(info["llama_server_version"])
    return target


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m specd.bench.llamacpp_build", description=__doc__.split("\n\n")[0])
    p.add_argument("--version", default=SDIST_VERSION, help="llama-cpp-python sdist version (default %(default)s)")
    p.add_argument("-j", "--jobs", type=int, default=min(2, os.cpu_count() or 1))
    p.add_argument("--no-cli", dest="with_cli", action="store_false",
                   help="skip llama-cli (built by default: ~15 s more once the server's libraries are built)")
    p.add_argument("--sdist", type=Path, help="use this sdist file instead of downloading it")
    p.add_argument("--force", action="store_true", help="rebuild even when the binaries are present")
    p.add_argument("--keep-tmp", action="store_true", help="keep the unpacked tree and build folder")
    p.add_argument("--print-dir", action="store_true", help="print where the binaries go and exit")
    p.add_argument("--isa-cap", choices=ISA_CAPS, default=None,
                   help="build for this instruction set only (of what the CPU has), into a folder of its own: "
                        "a stand-in for a smaller machine, raced against specd under SPECD_GG_SIMD=avx2")
    args = p.parse_args(argv)
    if args.print_dir:
        print(anchor_dir(args.version, args.isa_cap) / "bin")
        return 0
    build(args.version, args.jobs, args.with_cli, args.sdist, args.keep_tmp, args.force, args.isa_cap)
    return 0


if __name__ == "__main__":
    sys.exit(main())
