"""llama.cpp's own binaries as the bench's anchor: found in specd's cache, run as subprocesses.

``python -m specd.bench.llamacpp_build`` compiles ``llama-server`` and ``llama-bench`` once from the
llama.cpp sources vendored in llama-cpp-python's PyPI sdist and keeps them under
``<cache root>/anchors/llama.cpp-<sdist version>-<cpu flags hash>/bin/``. This module finds them
(:func:`find_binaries`), runs ``llama-bench -o json`` (:func:`run_llama_bench`, parsed by
:func:`parse_llama_bench_json`) and drives a loopback ``llama-server`` through ``/infill``
(:class:`LlamaServer`, :func:`infill_body`). It imports nothing heavy: the bench, the tests and the
build command all use it.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

# The llama-cpp-python sdist whose vendor/llama.cpp tree is built.
SDIST_VERSION = "0.3.36"
BUILD_COMMAND = "python -m specd.bench.llamacpp_build"
BINARIES = ("llama-server", "llama-bench")
OPTIONAL_BINARIES = ("llama-cli",)


def cpu_flags_hash() -> str:
    """8 hex digits naming the machine's instruction set: a ``-DGGML_NATIVE=ON`` build is only valid
    on a CPU with the same flags (``/proc/cpuinfo``), so the cache keeps one build per flag set."""
    flags = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("flags", "Features")):
                flags = " ".join(sorted(line.split(":", 1)[1].split()))
                break
    except OSError:
        pass
    return hashlib.sha256(f"{platform.machine()} {flags}".encode()).hexdigest()[:8]


def anchors_root() -> Path:
    from specd.models.registry import cache_root  # the one definition of specd's cache root

    return cache_root() / "anchors"


# instruction-set caps a build can take below the machine's own (``llamacpp_build --isa-cap``), to
# stand in for a smaller machine beside specd capped alike (``SPECD_GG_SIMD``): per cap, the CPU
# flags such a build may use (of those the CPU has); AVX2 is a Haswell-class machine
ISA_CAPS = {"avx2": frozenset({"avx", "avx2", "fma", "f16c", "bmi2"})}


def anchor_dir(version: str = SDIST_VERSION, isa_cap: str | None = None) -> Path:
    """The build for this CPU's flags, or, with ``isa_cap``, the one limited to that instruction set."""
    if isa_cap is not None and isa_cap not in ISA_CAPS:
        raise ValueError(f"isa_cap: {isa_cap!r} is not one of {', '.join(ISA_CAPS)}")
    return anchors_root() / f"llama.cpp-{version}-{cpu_flags_hash()}{'-' + isa_cap if isa_cap else ''}"


@dataclass(frozen=True)
class LlamaCppBinaries:
    root: Path                    # the anchor directory (holds bin/ and build.json)
    server: Path
    bench: Path
    cli: Path | None = None
    info: dict = field(default_factory=dict, compare=False)  # build.json

    @property
    def version(self) -> str:
        return str(self.info.get("llama_server_version") or self.info.get("sdist_version") or "?")

    def env(self) -> dict[str, str]:
        """The environment to run the binaries in: bin/ on the library path (for a shared build)."""
        env = dict(os.environ)
        lib = str(self.server.parent)
        env["LD_LIBRARY_PATH"] = lib + (os.pathsep + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
        return env


def find_binaries(version: str = SDIST_VERSION, root: Path | None = None,
                  isa_cap: str | None = None) -> LlamaCppBinaries | None:
    """The cached build for this machine's CPU flags (limited to ``isa_cap`` where given), or None when
    it is absent or incomplete.

    ``$SPECD_LLAMACPP_BIN`` (a folder holding llama-server and llama-bench) overrides the cache."""
    if root is None and os.environ.get("SPECD_LLAMACPP_BIN"):
        bin_dir = Path(os.environ["SPECD_LLAMACPP_BIN"])
        root = bin_dir.parent
    else:
        root = Path(root) if root is not None else anchor_dir(version, isa_cap)
        bin_dir = root / "bin"
    paths = {name: bin_dir / name for name in BINARIES + OPTIONAL_BINARIES}
    if not all(paths[n].is_file() and os.access(paths[n], os.X_OK) for n in BINARIES):
        return None
    info: dict = {}
    try:
        info = json.loads((root / "build.json").read_text())
    except (OSError, ValueError):
        pass
    cli = paths["llama-cli"] if paths["llama-cli"].is_file() else None
    return LlamaCppBinaries(root=root, server=paths["llama-server"], bench=paths["llama-bench"], cli=cli, info=info)


def unavailable_note() -> str:
    return (f"llama.cpp binaries not built for this CPU (looked in {anchor_dir()}/bin): "
            f"run `{BUILD_COMMAND}` once (~8–12 min on 2 cores)")


# --------------------------------------------------------------------------------------------------
# llama-bench


@dataclass(frozen=True)
class BenchFigure:
    n_prompt: int
    n_gen: int
    tokens_per_s: float
    stddev_ts: float
    avg_ms: float                 # per test run (avg_ns / 1e6): the whole n_prompt or n_gen batch
    n_threads: int
    model_type: str = ""

    @property
    def test(self) -> str:
        return f"pp{self.n_prompt}" if self.n_gen == 0 else f"tg{self.n_gen}" if self.n_prompt == 0 else \
            f"pp{self.n_prompt}+tg{self.n_gen}"


def parse_llama_bench_json(text: str) -> list[BenchFigure]:
    """The rows of ``llama-bench -o json`` (a JSON array; llama-bench may print log lines before it)."""
    start = text.find("[")
    if start < 0:
        raise ValueError("no JSON array in llama-bench output")
    rows = json.loads(text[start:text.rindex("]") + 1])
    return [BenchFigure(n_prompt=int(r["n_prompt"]), n_gen=int(r["n_gen"]), tokens_per_s=float(r["avg_ts"]),
                        stddev_ts=float(r.get("stddev_ts", 0.0)), avg_ms=float(r["avg_ns"]) / 1e6,
                        n_threads=int(r["n_threads"]), model_type=str(r.get("model_type", "")))
            for r in rows]


def llama_bench_command(bins: LlamaCppBinaries, model: Path, threads: int, prompts=(512,), gens=(32,),
                        repetitions: int = 3, depth: int = 0) -> list[str]:
    cmd = [str(bins.bench), "-m", str(model), "-t", str(threads), "-o", "json", "-r", str(repetitions)]
    cmd += ["-p", ",".join(str(p) for p in prompts) if prompts else "0"]
    cmd += ["-n", ",".join(str(g) for g in gens) if gens else "0"]
    if depth:
        cmd += ["-d", str(depth)]
    return cmd


def run_llama_bench(bins: LlamaCppBinaries, model: Path, threads: int, prompts=(512,), gens=(32,),
                    repetitions: int = 3, timeout: float = 1800, depth: int = 0) -> list[BenchFigure]:
    """Runs llama-bench on ``model`` with ``threads`` threads; ``prompts=range(1, 10), gens=()`` gives
    the T(n) curve (the cost of one forward over n tokens is n / tokens_per_s); ``depth``: tokens
    already in the context before each test (llama-bench's ``-d``, not timed)."""
    out = subprocess.run(llama_bench_command(bins, model, threads, prompts, gens, repetitions, depth),
                         capture_output=True, text=True, timeout=timeout, env=bins.env(), check=False)
    if out.returncode != 0:
        raise RuntimeError(f"llama-bench failed ({out.returncode}): {out.stderr[-2000:]}")
    return parse_llama_bench_json(out.stdout)


def forward_curve(figures: list[BenchFigure]) -> dict[int, float]:
    """ms per forward over n prompt tokens, from the ppN rows."""
    return {f.n_prompt: 1000.0 * f.n_prompt / f.tokens_per_s for f in figures if f.n_gen == 0 and f.n_prompt}


# --------------------------------------------------------------------------------------------------
# llama-server

# llama.vscode's CPU settings.
SERVER_ARGS = ("-b", "512", "-ub", "512", "--cache-reuse", "256", "-np", "1")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def infill_body(prefix: str, suffix: str, n_predict: int, cache_prompt: bool = False,
                t_max_predict_ms: int | None = None, extra: dict | None = None) -> dict:
    """The ``/infill`` request: greedy (temperature 0, top_k 1), no sampling randomness."""
    body = {"input_prefix": prefix, "input_suffix": suffix, "n_predict": int(n_predict),
            "cache_prompt": bool(cache_prompt), "temperature": 0.0, "top_k": 1, "stream": False,
            "return_tokens": True}
    if t_max_predict_ms is not None:
        body["t_max_predict_ms"] = int(t_max_predict_ms)
    if extra:
        body.update(extra)
    return body


@dataclass(frozen=True)
class InfillResult:
    text: str
    prompt_n: int
    prompt_ms: float
    predicted_n: int
    predicted_ms: float
    wall_ms: float
    cache_n: int = 0
    stop_type: str = ""
    tokens: tuple[int, ...] = ()

    @property
    def decode_ms_per_token(self) -> float | None:
        return self.predicted_ms / self.predicted_n if self.predicted_n else None


def parse_infill_response(data: dict, wall_ms: float) -> InfillResult:
    t = data.get("timings") or {}
    return InfillResult(text=str(data.get("content", "")), prompt_n=int(t.get("prompt_n", 0)),
                        prompt_ms=float(t.get("prompt_ms", 0.0)), predicted_n=int(t.get("predicted_n", 0)),
                        predicted_ms=float(t.get("predicted_ms", 0.0)), wall_ms=wall_ms,
                        cache_n=int(t.get("cache_n", 0)), stop_type=str(data.get("stop_type", "")),
                        tokens=tuple(int(x) for x in data.get("tokens") or () if isinstance(x, int)))


def die_with_parent() -> None:
    """In the child before exec: SIGTERM when the process that started it dies (Linux), so a
    crashed bench leaves no server behind."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except Exception:
        pass


class LlamaServer:
    """``llama-server`` on a free loopback port; a context manager that waits for ``/health`` and
    stops the process (SIGTERM, then SIGKILL) on exit."""

    def __init__(self, bins: LlamaCppBinaries, model: Path, threads: int, ctx: int = 4096,
                 extra_args: tuple[str, ...] = (), log_path: Path | None = None):
        self.bins, self.model, self.threads, self.ctx = bins, Path(model), threads, ctx
        self.extra_args = tuple(extra_args)
        self.log_path = log_path
        self.port = 0
        self.proc: subprocess.Popen | None = None
        self._log = None

    def command(self) -> list[str]:
        return [str(self.bins.server), "-m", str(self.model), "--host", "127.0.0.1", "--port", str(self.port),
                "-t", str(self.threads), "-c", str(self.ctx), *SERVER_ARGS, *self.extra_args]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 300.0) -> "LlamaServer":
        self.port = free_port()
        self._log = open(self.log_path, "wb") if self.log_path else subprocess.DEVNULL
        self.proc = subprocess.Popen(self.command(), stdout=self._log, stderr=subprocess.STDOUT,
                                     env=self.bins.env(), start_new_session=True, preexec_fn=die_with_parent)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"llama-server exited with {self.proc.returncode} while loading "
                                   f"{self.model}" + (f" (log: {self.log_path})" if self.log_path else ""))
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=2) as r:
                    if r.status == 200 and json.loads(r.read() or b"{}").get("status", "ok") == "ok":
                        return self
            except (urllib.error.URLError, OSError, ValueError):
                pass
            time.sleep(0.2)
        self.stop()
        raise TimeoutError(f"llama-server not healthy after {timeout:.0f} s")

    def post(self, path: str, body: dict, timeout: float) -> dict:
        """POST ``body`` as JSON to ``path`` (``/completion``, ``/infill``, ...); the JSON answer."""
        req = urllib.request.Request(self.url + path, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"}, method="POST")
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return json.loads(r.read())

    def erase_slot(self, slot: int = 0) -> bool:
        """Empties the slot's KV cache (``/slots/{id}?action=erase``); False where the server lacks it."""
        try:
            self.post(f"/slots/{slot}?action=erase", {}, timeout=30)
            return True
        except (urllib.error.URLError, OSError, ValueError):
            return False

    def infill(self, prefix: str, suffix: str, n_predict: int, cache_prompt: bool = False,
               t_max_predict_ms: int | None = None, timeout: float = 600.0,
               extra: dict | None = None) -> InfillResult:
        body = infill_body(prefix, suffix, n_predict, cache_prompt, t_max_predict_ms, extra)
        t0 = time.perf_counter()
        data = self.post("/infill", body, timeout)
        return parse_infill_response(data, (time.perf_counter() - t0) * 1000.0)

    def stop(self, timeout: float = 10.0) -> None:
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if self._log not in (None, subprocess.DEVNULL):
            self._log.close()
        self._log = None

    def __enter__(self) -> "LlamaServer":
        return self.start() if self.proc is None else self

    def __exit__(self, *exc) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    """``python -m specd.bench.llamacpp_bin``: where the binaries are; with ``--model``, llama-bench's
    pp512 / tg figures (and ``--curve``: ppN for n = 1..9) as JSON."""
    import argparse
    import sys

    p = argparse.ArgumentParser(prog="python -m specd.bench.llamacpp_bin", description=main.__doc__)
    p.add_argument("--model", type=Path, help="a GGUF file to run llama-bench on")
    p.add_argument("-t", "--threads", type=int, default=min(2, os.cpu_count() or 1))
    p.add_argument("-n", "--gen", type=int, default=32, help="tokens generated for the tg figure")
    p.add_argument("-r", "--repetitions", type=int, default=3)
    p.add_argument("--curve", action="store_true", help="also ppN for n = 1..9 (the T(n) curve)")
    args = p.parse_args(argv)
    bins = find_binaries()
    if bins is None:
        print(unavailable_note(), file=sys.stderr)
        return 1
    print(f"llama.cpp binaries: {bins.server.parent} ({bins.version.splitlines()[0] if bins.version else '?'})",
          file=sys.stderr)
    if args.model is None:
        return 0
    load_start = os.getloadavg()[0]
    cmd = llama_bench_command(bins, args.model, args.threads, (512,), (args.gen,), args.repetitions)
    print("$ " + " ".join(cmd), file=sys.stderr)
    figures = run_llama_bench(bins, args.model, args.threads, (512,), (args.gen,), args.repetitions)
    out: dict = {"command": cmd, "threads": args.threads,
                 "figures": {f.test: {"tokens_per_s": round(f.tokens_per_s, 2), "stddev": round(f.stddev_ts, 2)}
                             for f in figures}}
    if args.curve:
        curve = run_llama_bench(bins, args.model, args.threads, tuple(range(1, 10)), (), args.repetitions)
        out["curve_ms"] = {n: round(ms, 2) for n, ms in forward_curve(curve).items()}
        t1 = out["curve_ms"].get(1)
        out["curve_ratio"] = {n: round(ms / t1, 2) for n, ms in out["curve_ms"].items()} if t1 else {}
    # llama.cpp's threads wait by spinning: on a busy machine its figures collapse, so say how busy it was
    out["load_avg_1min"] = {"start": round(load_start, 2), "end": round(os.getloadavg()[0], 2),
                            "cores": os.cpu_count()}
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
