"""The llama.cpp binary anchor: finding the cached build, llama-bench's JSON, llama-server's /infill
(through a fake server here, the real one when built), and the bench's ``llamacpp-server`` mode.

The samples below were recorded once from the binaries that ``python -m specd.bench.llamacpp_build``
built from llama-cpp-python 0.3.36's sdist (llama.cpp 0.5.0, ggml 0.25.3)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from specd.bench import anchor_llamacpp_server, llamacpp_bin, llamacpp_build
from specd.bench.llamacpp_bin import (BUILD_COMMAND, LlamaCppBinaries, LlamaServer, find_binaries, forward_curve,
                                      infill_body, llama_bench_command, parse_infill_response,
                                      parse_llama_bench_json)
from specd.bench.modes import ALL_MODES, Mode, parse_modes
from specd.bench.tasks import Task
from tests.remote_servers import in_ci

# `llama-bench -m qwen2.5-coder-0.5b/model.gguf -t 2 -o json -r 1 -p 1,2 -n 4`, trimmed to the fields
# the parser reads plus a few for context (the real rows carry ~40 keys).
LLAMA_BENCH_JSON = """\
[
 {
  "build_commit": "0c1e570",
  "model_type": "qwen2 1B Q4_K - Medium",
  "n_batch": 2048,
  "n_ubatch": 512,
  "n_threads": 2,
  "n_prompt": 1,
  "n_gen": 0,
  "avg_ns": 32534423,
  "stddev_ns": 0,
  "avg_ts": 30.736675,
  "stddev_ts": 0.0
 },
 {
  "build_commit": "0c1e570",
  "model_type": "qwen2 1B Q4_K - Medium",
  "n_batch": 2048,
  "n_ubatch": 512,
  "n_threads": 2,
  "n_prompt": 2,
  "n_gen": 0,
  "avg_ns": 42615829,
  "stddev_ns": 0,
  "avg_ts": 46.930919,
  "stddev_ts": 0.0
 },
 {
  "build_commit": "0c1e570",
  "model_type": "qwen2 1B Q4_K - Medium",
  "n_batch": 2048,
  "n_ubatch": 512,
  "n_threads": 2,
  "n_prompt": 0,
  "n_gen": 4,
  "avg_ns": 137724895,
  "stddev_ns": 0,
  "avg_ts": 29.043406,
  "stddev_ts": 0.0
 }
]
"""

# A /infill response from the real llama-server (draft GGUF, n_predict 4; prefix "def add(a, b):\n    return ",
# suffix "\n\nprint(add(1, 2))\n"; the server's first request, hence the slow timings), trimmed.
INFILL_RESPONSE = r"""{"content": "a + b\n\n", "tokens": [64, 488, 293, 271], "stop_type": "limit", "stopping_word": "", "tokens_predicted": 4, "tokens_evaluated": 23, "truncated": false, "timings": {"cache_n": 0, "prompt_n": 23, "prompt_ms": 2694.615, "prompt_per_token_ms": 117.15717391304347, "prompt_per_second": 8.535542183206136, "predicted_n": 4, "predicted_ms": 6719.772, "predicted_per_token_ms": 2239.924, "predicted_per_second": 0.4464437186261677}}"""


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    """An empty specd cache root."""
    monkeypatch.setenv("SPECD_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("SPECD_LLAMACPP_BIN", raising=False)
    return tmp_path / "cache"


def _executable(path: Path, text: str = "#!/bin/sh\nexit 0\n") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)
    return path


def test_finder_absent_names_the_build_command(cache) -> None:
    assert find_binaries() is None
    note = llamacpp_bin.unavailable_note()
    assert BUILD_COMMAND in note and str(cache / "anchors") in note
    why = anchor_llamacpp_server.unavailable(Path("/nonexistent.gguf"), Mode("llamacpp-server"))
    assert why.startswith("llamacpp-server: skipped") and "python -m specd.bench.llamacpp_build" in why


def test_finder_on_a_fake_cache_layout(cache) -> None:
    root = llamacpp_bin.anchor_dir()
    assert root.parent == cache / "anchors"
    assert root.name == f"llama.cpp-{llamacpp_bin.SDIST_VERSION}-{llamacpp_bin.cpu_flags_hash()}"
    _executable(root / "bin" / "llama-server")
    assert find_binaries() is None  # llama-bench missing: incomplete
    (root / "bin" / "llama-bench").write_text("not executable")
    assert find_binaries() is None
    _executable(root / "bin" / "llama-bench")
    (root / "build.json").write_text(json.dumps({"sdist_version": "0.3.36", "llama_server_version": "version: 0 (x)"}))
    bins = find_binaries()
    assert bins == LlamaCppBinaries(root=root, server=root / "bin" / "llama-server", bench=root / "bin" / "llama-bench")
    assert bins.cli is None and bins.version == "version: 0 (x)"
    assert bins.env()["LD_LIBRARY_PATH"].split(os.pathsep)[0] == str(root / "bin")
    # the build is per CPU flag set: another version's folder is not this one
    assert find_binaries(version="0.0.1") is None


def test_finder_env_override(cache, tmp_path, monkeypatch) -> None:
    other = tmp_path / "elsewhere" / "bin"
    _executable(other / "llama-server")
    _executable(other / "llama-bench")
    monkeypatch.setenv("SPECD_LLAMACPP_BIN", str(other))
    bins = find_binaries()
    assert bins is not None and bins.server == other / "llama-server" and bins.info == {}


def test_build_is_idempotent(cache, monkeypatch, capsys) -> None:
    root = llamacpp_bin.anchor_dir()
    _executable(root / "bin" / "llama-server")
    _executable(root / "bin" / "llama-bench")

    def no_download(*a, **k):
        raise AssertionError("a present build must not download or compile anything")

    monkeypatch.setattr(llamacpp_build, "download_sdist", no_download)
    monkeypatch.setattr(llamacpp_build, "_build", no_download)
    assert llamacpp_build.main([]) == 0
    assert "already built" in capsys.readouterr().out
    assert llamacpp_build.main(["--print-dir"]) == 0
    assert capsys.readouterr().out.strip() == str(root / "bin")


def test_build_drops_options_the_tree_lacks(tmp_path) -> None:
    (tmp_path / "CMakeLists.txt").write_text('option(LLAMA_BUILD_TESTS "t" ON)\noption(LLAMA_BUILD_SERVER "s" ON)\n')
    flags = llamacpp_build.supported_flags(tmp_path, ("-DGGML_NATIVE=ON", "-DLLAMA_BUILD_TESTS=OFF",
                                                      "-DLLAMA_USE_PREBUILT_UI=OFF", "-DBUILD_SHARED_LIBS=OFF"))
    assert flags == ["-DGGML_NATIVE=ON", "-DLLAMA_BUILD_TESTS=OFF", "-DBUILD_SHARED_LIBS=OFF"]


def test_infill_request_body() -> None:
    assert infill_body("def f(", "\n", 16) == {
        "input_prefix": "def f(", "input_suffix": "\n", "n_predict": 16, "cache_prompt": False,
        "temperature": 0.0, "top_k": 1, "stream": False, "return_tokens": True}
    body = infill_body("a", "b", 4, cache_prompt=True, t_max_predict_ms=500)
    assert body["cache_prompt"] is True and body["t_max_predict_ms"] == 500


def test_infill_response_parser() -> None:
    r = parse_infill_response(json.loads(INFILL_RESPONSE), wall_ms=123.0)
    data = json.loads(INFILL_RESPONSE)
    t = data["timings"]
    assert r.text == data["content"] == "a + b\n\n" and r.wall_ms == 123.0 and r.stop_type == "limit"
    assert (r.prompt_n, r.prompt_ms, r.predicted_n, r.predicted_ms) == (
        t["prompt_n"], t["prompt_ms"], t["predicted_n"], t["predicted_ms"])
    assert r.decode_ms_per_token == pytest.approx(t["predicted_ms"] / t["predicted_n"])
    assert r.tokens == tuple(data.get("tokens") or ())
    empty = parse_infill_response({"content": ""}, wall_ms=1.0)
    assert empty.predicted_n == 0 and empty.decode_ms_per_token is None


def test_llama_bench_json_parser() -> None:
    figures = parse_llama_bench_json("load_backend: loaded CPU backend\n" + LLAMA_BENCH_JSON)
    assert [f.test for f in figures] == ["pp1", "pp2", "tg4"]
    rows = json.loads(LLAMA_BENCH_JSON)
    for f, row in zip(figures, rows):
        assert f.tokens_per_s == row["avg_ts"] and f.n_threads == 2
        assert f.avg_ms == pytest.approx(row["avg_ns"] / 1e6)
    curve = forward_curve(figures)
    assert set(curve) == {1, 2}
    assert curve[2] == pytest.approx(2000.0 / rows[1]["avg_ts"])
    with pytest.raises(ValueError):
        parse_llama_bench_json("error: failed to load model\n")


def test_llama_bench_command(tmp_path) -> None:
    bins = LlamaCppBinaries(root=tmp_path, server=tmp_path / "llama-server", bench=tmp_path / "llama-bench")
    assert llama_bench_command(bins, Path("m.gguf"), 2, range(1, 4), ()) == [
        str(tmp_path / "llama-bench"), "-m", "m.gguf", "-t", "2", "-o", "json", "-r", "3", "-p", "1,2,3", "-n", "0"]
    assert llama_bench_command(bins, Path("m.gguf"), 2, (512,), (32,), 5)[-6:] == ["-r", "5", "-p", "512", "-n", "32"]


def test_mode_is_an_anchor_in_all() -> None:
    assert "llamacpp-server" in ALL_MODES.split(",")
    assert Mode("llamacpp-server").is_anchor
    modes = parse_modes("llamacpp-server", 4)
    assert [m.name for m in modes] == ["target", "llamacpp-server"]


FAKE_SERVER = r'''#!{python}
"""A stand-in for llama-server: /health, /slots/0?action=erase and /infill, logging each request."""
import json, os, signal, sys
from http.server import BaseHTTPRequestHandler, HTTPServer

args = sys.argv[1:]
port = int(args[args.index("--port") + 1])
log = os.environ["FAKE_LLAMA_LOG"]
with open(log, "a") as f:
    f.write(json.dumps({{"argv": args}}) + "\n")

class H(BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass
    def _send(self, obj):
        data = json.dumps(obj).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
    def do_GET(self):
        self._send({{"status": "ok"}})
    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])) or b"{{}}")
        with open(log, "a") as f:
            f.write(json.dumps({{"path": self.path, "body": body}}) + "\n")
        if self.path.startswith("/infill"):
            self._send({{"content": " x)", "tokens": [1, 2], "stop_type": "limit",
                        "timings": {{"prompt_n": 7, "prompt_ms": 70.0, "predicted_n": 2, "predicted_ms": 50.0,
                                    "cache_n": 0}}}})
        else:
            self._send({{}})

signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))
HTTPServer(("127.0.0.1", port), H).serve_forever()
'''


def _task(prefix: str = "def f(", suffix: str = "\n") -> Task:
    return Task(id="t1", language="python", category="logic", kind="expression", cursor="mid_line", package="p",
                version="1", file="f.py", line=1, column=6, prefix=prefix, suffix=suffix, expected="x)")


def test_server_runner_against_a_fake_server(cache, tmp_path, monkeypatch) -> None:
    root = llamacpp_bin.anchor_dir()
    _executable(root / "bin" / "llama-server", FAKE_SERVER.format(python=sys.executable))
    _executable(root / "bin" / "llama-bench")
    log = tmp_path / "requests.jsonl"
    monkeypatch.setenv("FAKE_LLAMA_LOG", str(log))
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    assert anchor_llamacpp_server.unavailable(gguf, Mode("llamacpp-server")) is None
    runner = anchor_llamacpp_server.LlamaServerRunner(Mode("llamacpp-server"), gguf, threads=2, n_ctx=300)
    try:
        m = runner.run(_task(), [1, 2, 3], max_tokens=2, rep=0, order=5)
    finally:
        runner.close()
    assert runner.server.proc is None
    lines = [json.loads(x) for x in log.read_text().splitlines()]
    argv = lines[0]["argv"]
    for flag, value in (("-t", "2"), ("-c", "1024"), ("-b", "512"), ("-ub", "512"), ("--cache-reuse", "256"),
                        ("-np", "1"), ("--host", "127.0.0.1"), ("-m", str(gguf))):
        assert argv[argv.index(flag) + 1] == value, flag
    assert [x["path"] for x in lines[1:]] == ["/slots/0?action=erase", "/infill"]  # cold: slot erased first
    assert lines[2]["body"] == infill_body("def f(", "\n", 2)
    assert (m.mode, m.order, m.prompt_tokens, m.new_tokens, m.prefill_ms, m.ttft_ms) == ("llamacpp-server", 5, 7, 2,
                                                                                        70.0, 70.0)
    assert m.decode_ms_per_token == 25.0 and m.total_ms > 0 and m.stop_reason == "max_tokens"
    assert m.text == " x)" and m.tokens == (1, 2) and m.prefill_reused == 0
    assert "llamacpp-server" in runner.settings and "-ub 512" in runner.settings and "m.gguf" in runner.settings


def test_server_that_dies_while_loading(cache, tmp_path) -> None:
    root = tmp_path / "a"
    bins = LlamaCppBinaries(root=root, server=_executable(root / "bin" / "llama-server", "#!/bin/sh\nexit 3\n"),
                            bench=_executable(root / "bin" / "llama-bench"))
    with pytest.raises(RuntimeError, match="exited with 3"):
        LlamaServer(bins, tmp_path / "m.gguf", threads=1).start(timeout=30)


def _draft_gguf() -> Path | None:
    from specd.models.pull import gguf_path
    from specd.models.registry import PUBLISHED
    from specd.engine.config import DEFAULT_DRAFT

    path = gguf_path(PUBLISHED[DEFAULT_DRAFT])
    return path if path.is_file() else None


@pytest.mark.real_models
def test_real_llama_server_infill(tmp_path) -> None:
    """The real llama-server on the real draft GGUF (0.5B): health, one greedy /infill, a clean stop."""
    bins = find_binaries()
    if bins is None:
        if in_ci():
            pytest.fail(f"llama.cpp binaries not built: {BUILD_COMMAND}; CI is set, so this test must run")
        pytest.skip(f"llama.cpp binaries not built: {BUILD_COMMAND}")
    gguf = _draft_gguf()
    if gguf is None:
        pytest.skip("the draft GGUF is not pulled: specd models pull")
    server = LlamaServer(bins, gguf, threads=2, ctx=512, log_path=tmp_path / "server.log",
                         extra_args=("--slot-save-path", str(tmp_path)))
    with server:
        assert server.erase_slot(0)
        r = server.infill("def add(a, b):\n    return ", "\n\nprint(add(1, 2))\n", 4)
        again = server.infill("def add(a, b):\n    return ", "\n\nprint(add(1, 2))\n", 4)
        proc = server.proc
    assert proc.poll() is not None and server.proc is None  # stopped
    assert 1 <= r.predicted_n <= 4 and r.prompt_n > 5 and r.prompt_ms > 0 and r.predicted_ms > 0
    assert r.wall_ms >= r.prompt_ms and r.text
    assert again.text == r.text and again.cache_n == 0  # greedy, and cold: cache_prompt false


def test_bench_session_uses_the_binaries_when_present(cache, tmp_path, monkeypatch) -> None:
    """session._anchor: a note naming the build command without the binaries, a runner with them."""
    from types import SimpleNamespace

    from specd.bench import session

    gguf = tmp_path / "target.gguf"
    gguf.write_bytes(b"GGUF")
    config = SimpleNamespace(engine=SimpleNamespace(target=str(gguf), draft=None, threads=2), tasks=(_task(),),
                             max_tokens=4)
    engine = SimpleNamespace(prompts=SimpleNamespace(stop_ids=frozenset({0}), build=lambda p, s: [1] * 50))
    runner, why = session._anchor(Mode("llamacpp-server"), config, engine)
    assert runner is None and BUILD_COMMAND in why
    root = llamacpp_bin.anchor_dir()
    _executable(root / "bin" / "llama-server", FAKE_SERVER.format(python=sys.executable))
    _executable(root / "bin" / "llama-bench")
    monkeypatch.setenv("FAKE_LLAMA_LOG", str(tmp_path / "requests.jsonl"))
    runner, why = session._anchor(Mode("llamacpp-server"), config, engine)
    try:
        assert why is None and isinstance(runner, anchor_llamacpp_server.LlamaServerRunner)
        assert runner.run(_task(), [1] * 50, 4, rep=0, order=0).new_tokens == 2
    finally:
        runner.close()


def test_an_amx_cpu_gets_every_instruction_set_but_amx() -> None:
    """ggml's AMX matmul segfaults at model load on an AMX VM: the build names the ISA instead of
    -march=native there, and keeps the native build elsewhere."""
    assert llamacpp_build.isa_flags({"avx", "avx2", "fma"}) == ["-DGGML_NATIVE=ON"]
    flags = llamacpp_build.isa_flags({"avx", "avx2", "fma", "f16c", "avx512f", "avx512_vnni", "amx_tile", "amx_int8"})
    assert "-DGGML_NATIVE=OFF" in flags and "-DGGML_AVX512=ON" in flags and "-DGGML_AVX512_VNNI=ON" in flags
    assert "-DGGML_AVX512_BF16=OFF" in flags and "-DGGML_AVX_VNNI=OFF" in flags
    assert {"-DGGML_AMX_TILE=OFF", "-DGGML_AMX_INT8=OFF", "-DGGML_AMX_BF16=OFF"} <= set(flags)


def test_an_isa_capped_build_names_only_that_level_and_has_a_folder_of_its_own(cache) -> None:
    """--isa-cap avx2 stands in for an AVX2-only machine: no AVX-512 (nor AMX, nor AVX-VNNI) in the
    build whatever the CPU has, and the build lives beside the native one, not over it."""
    cpu = {"avx", "avx2", "fma", "f16c", "bmi2", "avx512f", "avx512vbmi", "avx512_vnni", "avx_vnni", "amx_tile"}
    flags = llamacpp_build.isa_flags(cpu, "avx2")
    assert "-DGGML_NATIVE=OFF" in flags
    assert {"-DGGML_AVX=ON", "-DGGML_AVX2=ON", "-DGGML_FMA=ON", "-DGGML_F16C=ON", "-DGGML_BMI2=ON"} <= set(flags)
    assert {"-DGGML_AVX512=OFF", "-DGGML_AVX512_VBMI=OFF", "-DGGML_AVX512_VNNI=OFF", "-DGGML_AVX_VNNI=OFF",
            "-DGGML_AMX_TILE=OFF"} <= set(flags)
    assert llamacpp_build.isa_flags({"avx", "fma"}, "avx2").count("-DGGML_AVX2=OFF") == 1  # never more than the CPU has
    native, capped = llamacpp_bin.anchor_dir(), llamacpp_bin.anchor_dir(isa_cap="avx2")
    assert capped != native and capped.parent == native.parent and capped.name.startswith(native.name)
    for name in llamacpp_bin.BINARIES:
        _executable(capped / "bin" / name)
    assert find_binaries() is None and find_binaries(isa_cap="avx2").root == capped
    with pytest.raises(ValueError):
        llamacpp_bin.anchor_dir(isa_cap="sse2")
