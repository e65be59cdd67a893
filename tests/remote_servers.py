"""Real inference servers for the remote-backend tests, on the draft model's GGUF
(Qwen2.5-Coder-0.5B, which has FIM tokens): llama.cpp's ``llama-server`` (where its binary is
built: ``python -m specd.bench.llamacpp_build``) and llama-cpp-python's OpenAI-compatible server
(``pip install 'llama-cpp-python[server]'``, in the ``test`` extra). Each runs as a subprocess on a
free loopback port and is stopped at teardown; ``specd serve --backend ...`` daemons run in front
of them over a real Unix socket.

A server that cannot run here skips its tests, saying why; with ``CI`` set a missing server fails
instead, as a missing editor fails ``tests/test_lsp_neovim.py``: the ``test`` extra installs
llama-cpp-python, and the README's test command (``.ci/run``) builds llama-server.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from specd.bench.llamacpp_bin import LlamaServer, find_binaries, free_port, unavailable_note
from specd.models.registry import model_dir
from specd.engine.config import DEFAULT_DRAFT
from tests.daemon_harness import ServeProcess, stop_process

SERVER_START_TIMEOUT_S = 300  # loading a 0.5B model on a busy 2-core machine; a bound, not a timing
THREADS = "2"
CTX = 4096


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def draft_gguf() -> Path:
    path = model_dir(DEFAULT_DRAFT) / "model.gguf"
    if not path.is_file():
        pytest.skip(f"the draft GGUF is not pulled ({path}): specd models pull")
    return path


def llama_server(log: Path, model: Path | None = None, extra: tuple[str, ...] = ()) -> LlamaServer:
    bins = find_binaries()
    if bins is None:
        if in_ci():
            pytest.fail(f"{unavailable_note()}; CI is set, so the llama-server tests must run")
        pytest.skip(unavailable_note())
    # --no-repack: see tests/llama_cpp_server.py (ggml's AMX repacking crashes on this machine class)
    return LlamaServer(bins, model or draft_gguf(), threads=int(THREADS), ctx=CTX, extra_args=("--no-repack", *extra),
                       log_path=log).start(
        SERVER_START_TIMEOUT_S)


class LlamaCppPythonServer:
    """``python -m llama_cpp.server`` on a free port; ``url`` is its OpenAI base (``.../v1``)."""

    def __init__(self, model: Path, log: Path, extra: tuple[str, ...] = (), port: int | None = None) -> None:
        self.port = port or free_port()  # a port of its own, or a stopped server's (a restart)
        self.log = open(log, "ab")
        self.proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).with_name("llama_cpp_server.py")), "--model", str(model), "--host", "127.0.0.1",
             "--port", str(self.port), "--n_ctx", str(CTX), "--n_threads", THREADS, "--n_threads_batch", THREADS, *extra],
            stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        self.log_path = log

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def wait_ready(self) -> "LlamaCppPythonServer":
        deadline = time.monotonic() + SERVER_START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"llama_cpp.server exited with {self.proc.returncode}: "
                                   f"{self.log_path.read_text(errors='replace')[-3000:]}")
            try:
                with urllib.request.urlopen(self.url + "/models", timeout=2) as r:
                    if r.status == 200:
                        return self
            except urllib.error.HTTPError as e:
                if e.code == 401:  # up, and asking for its API key
                    return self
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.2)
        self.stop()
        raise TimeoutError(f"llama_cpp.server not ready after {SERVER_START_TIMEOUT_S} s")

    def stop(self) -> None:
        stop_process(self.proc, 30)
        self.log.close()


def llama_cpp_python_server(log: Path, model: Path | None = None, extra: tuple[str, ...] = (),
                            port: int | None = None) -> LlamaCppPythonServer:
    if importlib.util.find_spec("llama_cpp") is None or importlib.util.find_spec("sse_starlette") is None:
        why = "llama-cpp-python[server] is not installed: pip install -e '.[test]'"
        if in_ci():
            pytest.fail(f"{why}; CI is set, so the remote-backend tests must run")
        pytest.skip(why)
    return LlamaCppPythonServer(model or draft_gguf(), log, extra, port).wait_ready()


def post(url: str, body: dict, timeout: float = 120) -> dict:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"},
                                 method="POST")
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def get(url: str, timeout: float = 30) -> dict:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return json.loads(r.read())


class RemoteDaemon(ServeProcess):
    """``specd serve --backend BACKEND`` over a real Unix socket (no models loaded here); ready
    once it answers ``health``, whatever the server behind it says."""

    client_timeout_s = 300
    health_timeout_s = 30
    needs_ok = False

    def __init__(self, socket: Path, backend: str, *extra: str, env: dict[str, str] | None = None) -> None:
        super().__init__(socket, ["--backend", backend, *extra], env)


def _byte_tokens() -> list[str]:
    """GPT-2's byte-level alphabet: one printable character per byte."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    chars = printable[:]
    n = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + n)
            n += 1
    return [chr(c) for _, c in sorted(zip(printable, chars))]


def write_no_fim_gguf(path: Path) -> Path:
    """A tiny random llama model with a byte-level vocabulary and no FIM tokens: what a server
    serving a plain (non-FIM) model looks like to specd."""
    import numpy as np
    from gguf import GGUFWriter, TokenType

    hidden, heads, ff, layers = 64, 4, 128, 1
    tokens = _byte_tokens() + ["ĠĠ", "<|endoftext|>"]
    vocab = len(tokens)
    rng = np.random.default_rng(0)
    w = GGUFWriter(str(path), "llama")
    w.add_name("tiny-no-fim")
    w.add_context_length(4096)
    w.add_embedding_length(hidden)
    w.add_block_count(layers)
    w.add_feed_forward_length(ff)
    w.add_rope_dimension_count(hidden // heads)
    w.add_head_count(heads)
    w.add_head_count_kv(heads)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_file_type(0)  # all F32
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types([TokenType.NORMAL] * (vocab - 1) + [TokenType.CONTROL])
    w.add_token_merges(["Ġ Ġ"])
    w.add_bos_token_id(vocab - 1)
    w.add_eos_token_id(vocab - 1)
    w.add_add_bos_token(False)

    def mat(rows: int, cols: int) -> "np.ndarray":
        return (rng.standard_normal((rows, cols)) / np.sqrt(cols)).astype(np.float32)

    w.add_tensor("token_embd.weight", mat(vocab, hidden))
    w.add_tensor("output_norm.weight", np.ones(hidden, dtype=np.float32))
    w.add_tensor("output.weight", mat(vocab, hidden))
    for i in range(layers):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", np.ones(hidden, dtype=np.float32))
        w.add_tensor(p + "ffn_norm.weight", np.ones(hidden, dtype=np.float32))
        for name in ("attn_q", "attn_k", "attn_v", "attn_output"):
            w.add_tensor(p + name + ".weight", mat(hidden, hidden))
        w.add_tensor(p + "ffn_gate.weight", mat(ff, hidden))
        w.add_tensor(p + "ffn_up.weight", mat(ff, hidden))
        w.add_tensor(p + "ffn_down.weight", mat(hidden, ff))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def openai_compatible_server(log: Path):
    """An OpenAI-compatible server and its ``/v1`` URL: llama-cpp-python's (required in CI), else
    llama-server's, where built; skips when neither runs here."""
    try:
        server = llama_cpp_python_server(log)
        return server, server.url
    except pytest.skip.Exception:
        if in_ci():
            raise
        server = llama_server(log)  # the other real server
        return server, server.url + "/v1"
