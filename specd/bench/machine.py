"""Where a run happened: CPU, ISA flags, memory, software versions, git commit."""

from __future__ import annotations

import importlib.metadata as md
import os
import platform
import subprocess
from pathlib import Path

import torch

ISA_OF_INTEREST = ("sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512vbmi",
                   "avx512_bf16", "avx512_vnni", "avx_vnni", "amx_bf16", "amx_int8", "neon", "asimd", "sve")


def _cpuinfo() -> dict[str, str]:
    info: dict[str, str] = {}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if ":" in line:
                k, v = (s.strip() for s in line.split(":", 1))
                info.setdefault(k, v)
    except OSError:
        pass
    return info


def _mem_gb() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 1024**2, 1)
    except OSError:
        pass
    return None


def git_commit(repo: Path) -> dict:
    def git(*args: str) -> str:
        try:
            return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True,
                                  timeout=10).stdout
        except (OSError, subprocess.SubprocessError):
            return ""

    commit = git("rev-parse", "HEAD").strip()
    # porcelain lines are "XY PATH": not stripped, or " M a" would lose the path's first letter
    dirty = git("status", "--porcelain", "--untracked-files=no").rstrip("\n")
    return {"commit": commit or None, "subject": git("log", "-1", "--format=%s").strip() or None,
            "dirty_files": [line[3:] for line in dirty.splitlines()] if dirty else []}


def machine_info() -> dict:
    cpu = _cpuinfo()
    flags = set((cpu.get("flags") or cpu.get("Features") or "").split())
    versions = {"python": platform.python_version(), "torch": torch.__version__}
    for name in ("transformers", "llama-cpp-python", "numpy"):
        try:
            versions[name] = md.version(name)
        except md.PackageNotFoundError:
            pass
    return {
        "cpu": cpu.get("model name") or platform.processor() or platform.machine(),
        # the model name alone can hide the generation ("AMD EPYC" on a virtual machine)
        "cpu_id": " ".join([cpu.get("vendor_id", ""), *(f"{k.split()[-1]} {cpu[k]}" for k in ("cpu family", "model")
                                                         if k in cpu)]).strip(),
        "cores": os.cpu_count(),
        "affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "torch_threads": torch.get_num_threads(),
        "isa": [f for f in ISA_OF_INTEREST if f in flags],
        "memory_gb": _mem_gb(),
        "os": platform.platform(),
        "versions": versions,
    }
