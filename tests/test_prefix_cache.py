"""The prefix cache and chunked prefill on tiny models, in every runtime that runs on the CPU:
a request served from cached blocks equals a cold one (text, KV rows, logits), files edited in
turn stay warm, the budget evicts least recently used blocks, and a prefill stops between chunks
(cancelled or preempted) keeping what it computed."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from specd.engine.config import PromptWindows
from specd.engine.engine import Engine, EngineConfig
from specd.models import int_linear, kernels
from specd.models.decoder import Decoder
from specd.requests import Cancelled, CompletionRequest, Preempted
from specd.schema import ConfigError
from tests.tiny import TINY_VOCAB, tiny_config, tiny_decoder, tiny_engine, tiny_tokenizer, tiny_weights

BLOCK, CHUNK = 16, 32
SMALL = dict(prefix_block_tokens=BLOCK, prefill_chunk_tokens=CHUNK)


def source_file(i: int, lines: int = 14) -> str:
    """A distinct Python-looking file (the byte-level tokenizer: one token per byte)."""
    return "".join(f"def f{i}_{j}(x{j}):\n    return x{j} * {i + j}\n" for j in range(lines))


def _quantized(linear: type, seed: int) -> Decoder:
    c = tiny_config(vocab=TINY_VOCAB, hidden=64, layers=2)
    w = tiny_weights(c, seed)
    w["lm_head.weight"][256:TINY_VOCAB] *= 0.01  # rarely emit stop tokens: longer texts
    # the draft (seed 1) as specd.app.build_engine loads it: drafts need not be batch-invariant
    return Decoder(c, w, compute_dtype=torch.float32, max_len=512, row_attention=seed == 0,
                   linear_factory=lambda name, weight: linear.from_float(weight()))


def _ort(mode: str, seed: int):
    pytest.importorskip("onnxruntime")
    from specd.models.onnx_graph import build_model
    from specd.models.ort_runtime import OrtDecoder

    c = tiny_config(vocab=TINY_VOCAB, hidden=64, layers=2)
    w = tiny_weights(c, seed)
    w["lm_head.weight"][256:TINY_VOCAB] *= 0.01
    proto = build_model(c, w, mode, head_rows=None, accuracy_level=4)
    return OrtDecoder(c, proto.SerializeToString(), max_len=512, threads=1, mode=mode)


def _gguf(tmp: Path, seed: int, monkeypatch: pytest.MonkeyPatch):
    from specd.models.loader import load_model
    from tests.test_gguf_model import _with_tokenizer, write_tiny_gguf

    monkeypatch.setenv("SPECD_CACHE_DIR", str(tmp / "cache"))
    return load_model(str(_with_tokenizer(write_tiny_gguf(tmp / f"m{seed}.gguf", seed=seed))), quant="gguf",
                      max_len=512, row_attention=seed == 0).model


# not torch fp32: MKL's float32 GEMM is not batch-invariant (rows computed in other chunks differ in the last bits)
RUNTIMES = ["torch-bf16", "torch-int8", "torch-int4", "gguf", "ort-int8", "ort-int4", "ort-fp32"]


def build(runtime: str, tmp: Path, monkeypatch: pytest.MonkeyPatch, **config) -> Engine:
    config = {**SMALL, "max_len": 512, **config}
    if runtime == "torch-bf16":
        return tiny_engine(k=3, **config)
    if runtime.startswith("torch-") or runtime == "gguf":
        if kernels.unavailable() is not None:
            pytest.skip(str(kernels.unavailable()))
    if runtime == "torch-int8":
        target, draft = _quantized(int_linear.Q8Linear, 0), _quantized(int_linear.Q4Linear, 1)
    elif runtime == "torch-int4":
        target, draft = _quantized(int_linear.Q4Linear, 0), _quantized(int_linear.Q4Linear, 1)
    elif runtime == "gguf":
        target, draft = _gguf(tmp, 0, monkeypatch), _gguf(tmp, 1, monkeypatch)
    else:
        target, draft = _ort(runtime.split("-")[1], 0), _ort("int4", 1)
    tok = tiny_tokenizer()
    return Engine(target, tok, draft, tok, EngineConfig(k=3, **config))


def _context_rows(engine: Engine, n: int):
    rows = engine.target.kv_rows(0, n)
    return torch.as_tensor(rows.k), torch.as_tensor(rows.v)


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_a_request_served_from_the_cache_equals_a_cold_one(runtime: str, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    engine = build(runtime, tmp_path, monkeypatch)
    files = [source_file(i) for i in range(3)]
    request = CompletionRequest(files[0], "\n\nprint(1)\n", max_tokens=24)
    engine.complete(request)
    for text in files[1:]:  # other files take the live caches
        engine.complete(CompletionRequest(text, max_tokens=8))
    again = engine.complete(request)
    prompt_len = again.stats.prompt_tokens
    assert again.stats.prefill_reused >= (prompt_len - 1) // BLOCK * BLOCK > 0  # restored whole blocks
    assert engine.prefix_cache is not None and engine.prefix_cache.stats.hit_tokens > 0
    cold = build(runtime, tmp_path, monkeypatch, prefill_chunk_tokens=512)  # one forward, not chunks of 32
    expected = cold.complete(request)
    assert again.text == expected.text and again.tokens == expected.tokens
    # the KV rows of the prompt, and the logits after it, bit for bit
    for e in (engine, cold):
        assert e.warm(request) == prompt_len - 1
    for a, b in zip(_context_rows(engine, prompt_len - 1), _context_rows(cold, prompt_len - 1)):
        assert torch.equal(a, b)
    last = torch.tensor([cold.prompts.build(request.prefix, request.suffix)[-1]])
    assert torch.equal(engine.target.forward(last), cold.target.forward(last))


def test_seeded_sampling_from_the_cache_equals_a_cold_one() -> None:
    engine = tiny_engine(k=3, **SMALL)
    request = CompletionRequest(source_file(0), max_tokens=32, temperature=0.9, top_p=0.95, seed=11)
    engine.complete(request)
    engine.complete(CompletionRequest(source_file(1), max_tokens=4))
    again = engine.complete(request)
    assert again.stats.prefill_reused > BLOCK
    assert again.tokens == tiny_engine(k=3, **SMALL).complete(request).tokens


def test_files_edited_in_turn_each_stay_warm() -> None:
    engine = tiny_engine(k=3, **SMALL)
    files = [source_file(i, lines=8) for i in range(4)]
    for text in files:
        first = engine.complete(CompletionRequest(text + "x = ", max_tokens=4))
        assert first.stats.prefill_reused < BLOCK  # nothing of another file's prompt helps
    for round_ in range(2):
        for text in files:  # an edit at the end of each file in turn
            typed = text + "x = " + "y" * (round_ + 1)
            done = engine.complete(CompletionRequest(typed, max_tokens=4))
            unchanged = 1 + len(text) + len("x = ")  # <|fim_prefix|> + the tokens before the edit
            assert done.stats.prefill_reused >= unchanged // BLOCK * BLOCK


def _kv_bytes(engine: Engine) -> int:
    return engine.target.kv_bytes_per_token() + engine.draft.kv_bytes_per_token()


def test_the_least_recently_used_file_is_evicted_first() -> None:
    # bigger tiny models so that a budget of a few MB holds about three files
    def engine_with(mb: int) -> Engine:
        target = tiny_decoder(seed=0, dtype=torch.bfloat16, vocab=TINY_VOCAB, hidden=256, heads=4, layers=4,
                              max_len=512)
        draft = tiny_decoder(seed=1, dtype=torch.bfloat16, vocab=TINY_VOCAB, hidden=256, heads=4, layers=4,
                             max_len=512)
        tok = tiny_tokenizer()
        # the budget below counts each file's blocks in both models: both read the whole file
        whole = dict(windows=PromptWindows(max_prefix_tokens=1024))
        return Engine(target, tok, draft, tok, EngineConfig(k=2, max_len=512, prefix_cache_mb=mb, **whole, **SMALL))

    probe = engine_with(64)
    per_file = (1 + len(source_file(0))) // BLOCK * BLOCK * _kv_bytes(probe)
    mb = -(-int(3.5 * per_file) // (1 << 20))
    assert mb * (1 << 20) < 4 * per_file, "the budget must not hold four files"
    engine = engine_with(mb)

    def visit(i: int) -> int:
        return engine.complete(CompletionRequest(source_file(i), max_tokens=2)).stats.prefill_reused

    for i in (0, 1, 2):
        visit(i)
    assert visit(0) > 0  # file 0 used again: file 1 is now the least recently used
    visit(3)  # needs room: file 1's blocks go
    cache = engine.prefix_cache
    assert cache is not None and cache.used_bytes <= cache.budget_bytes
    assert cache.stats.evicted_blocks > 0
    kept_2, kept_0 = visit(2), visit(0)
    lost_1 = visit(1)
    assert kept_0 >= (len(source_file(0))) // BLOCK * BLOCK and kept_2 >= len(source_file(2)) // BLOCK * BLOCK
    assert lost_1 < len(source_file(1)) // BLOCK * BLOCK  # its chain was cut (from its end)


def test_a_budget_below_one_prompt_is_a_config_error_naming_the_minimum() -> None:
    target = tiny_decoder(seed=0, dtype=torch.bfloat16, vocab=TINY_VOCAB, hidden=256, heads=4, layers=4, max_len=512)
    tok = tiny_tokenizer()
    per_token = target.kv_bytes_per_token()  # 4 layers x 2 kv heads x 64 x (K, V) x 4 bytes
    need_mb = -(-(512 * per_token) // (1 << 20))
    assert need_mb >= 2
    with pytest.raises(ConfigError, match=rf"engine\.prefix_cache_mb: 1 MB .* at least {need_mb}\b"):
        Engine(target, tok, None, None, EngineConfig(k=0, max_len=512, prefix_cache_mb=1))
    Engine(target, tok, None, None, EngineConfig(k=0, max_len=512, prefix_cache_mb=need_mb))  # enough
    Engine(target, tok, None, None, EngineConfig(k=0, max_len=512, prefix_cache_mb=0))  # off


def _long_request() -> CompletionRequest:
    return CompletionRequest(source_file(5, lines=12), max_tokens=8)  # ~370 prompt tokens


def test_a_cancelled_prefill_stops_within_one_chunk_and_keeps_its_blocks() -> None:
    engine = tiny_engine(k=3, **SMALL)
    polls = []

    def cancelled() -> bool:  # the request is cancelled while the third chunk is computed
        polls.append(engine.target.cache_len)
        return len(polls) >= 3

    with pytest.raises(Cancelled):
        engine.complete(_long_request(), cancelled=cancelled)
    assert polls == [CHUNK, 2 * CHUNK, 3 * CHUNK]  # polled after each chunk; stopped at the third poll
    assert engine.target.cache_len == 3 * CHUNK
    assert engine.prefix_cache.stats.computed_tokens == 3 * CHUNK
    assert len(engine.prefix_cache) == 3 * CHUNK // BLOCK  # the computed blocks are cached
    engine.complete(CompletionRequest(source_file(7), max_tokens=2))  # another file takes the live cache
    done = engine.complete(_long_request())
    assert done.stats.prefill_reused >= 3 * CHUNK
    assert done.tokens == tiny_engine(k=3, **SMALL).complete(_long_request()).tokens


def test_a_preempted_prefill_resumes_from_its_cached_blocks() -> None:
    engine = tiny_engine(k=3, **SMALL)
    ask = iter([False, True])
    with pytest.raises(Preempted):
        engine.complete(_long_request(), preempted=lambda: next(ask, True))
    assert engine.target.cache_len == 2 * CHUNK
    engine.complete(CompletionRequest(source_file(8), max_tokens=2))  # the preempting request
    done = engine.complete(_long_request())
    assert done.stats.prefill_reused >= 2 * CHUNK
    assert done.tokens == tiny_engine(k=3, **SMALL).complete(_long_request()).tokens


def test_preemption_is_not_polled_after_the_prefill() -> None:
    engine = tiny_engine(k=3, **SMALL)
    phases = []
    short = CompletionRequest("def f():\n    ", max_tokens=12)  # a one-chunk prompt: no poll at all
    done = engine.complete(short, preempted=lambda: phases.append(1) or True)
    assert phases == [] and done.stats.new_tokens > 0


def test_warm_caches_the_prompt_a_completion_then_reuses() -> None:
    engine = tiny_engine(k=3, **SMALL)
    request = CompletionRequest(source_file(3), "\nrest\n", max_tokens=8)
    tokens = engine.warm(request)
    assert tokens == len(engine.prompts.build(request.prefix, request.suffix)) - 1
    engine.warm(CompletionRequest(source_file(4)))  # another file in between
    done = engine.complete(request)
    assert done.stats.prefill_reused >= tokens // BLOCK * BLOCK
    assert done.tokens == tiny_engine(k=3, **SMALL).complete(request).tokens
    memory = engine.memory()
    assert memory["prefix_cache_blocks"] > 0 and 0 < memory["prefix_cache_bytes"] <= memory["prefix_cache_budget_bytes"]
    assert memory["prefix_cache_hit_tokens"] > 0 and memory["prefix_cache_computed_tokens"] > 0


def test_a_cancelled_warm_keeps_what_it_computed() -> None:
    engine = tiny_engine(k=3, **SMALL)
    polls = []
    with pytest.raises(Cancelled):
        engine.warm(_long_request(), cancelled=lambda: polls.append(1) or len(polls) >= 3)  # at start, then per chunk
    assert engine.target.cache_len == 2 * CHUNK  # the target stopped within a chunk of the cancel
    assert engine.draft.cache_len == 0  # the draft's prefill never started
    assert engine.warm(_long_request()) > 2 * CHUNK


def test_reset_forgets_the_prefix_cache() -> None:
    engine = tiny_engine(k=3, **SMALL)
    engine.warm(_long_request())
    engine.reset()
    assert len(engine.prefix_cache) == 0
    assert engine.complete(_long_request()).stats.prefill_reused == 0


def test_a_warm_longer_than_the_context_is_refused_naming_the_field() -> None:
    from specd.requests import RequestError

    from specd.engine.prompt import PromptWindows

    # max_len 512 and a prefix window wider than it (the default window, 384, would cut the prompt)
    engine = tiny_engine(k=3, windows=PromptWindows(max_prefix_tokens=1024), **SMALL)
    with pytest.raises(RequestError, match="exceeds the context of 512") as e:
        engine.warm(CompletionRequest(source_file(0, 40)))
    assert e.value.field == "prefix"
    assert engine.warm(CompletionRequest(source_file(0, 4))) > 0  # and serves on


def test_eviction_cuts_a_chain_from_its_end() -> None:
    """Under a budget of ten blocks, a second prompt of six blocks evicts the first prompt's
    deepest blocks: what is left of it is still a usable prefix."""
    from specd.engine.prefill import prefill
    from specd.engine.prefix_cache import PrefixCache

    model = tiny_decoder(seed=0, dtype=torch.bfloat16, vocab=TINY_VOCAB, hidden=64, max_len=512)
    block_bytes = BLOCK * model.kv_bytes_per_token()
    cache = PrefixCache(10 * block_bytes, BLOCK)
    first = torch.arange(6 * BLOCK) % 250
    second = (torch.arange(6 * BLOCK) * 7 + 3) % 250
    prefill(model, "m", first, cache, CHUNK)
    prefill(model, "m", second, cache, CHUNK)
    assert len(cache) == 10 and cache.used_bytes == 10 * block_bytes and cache.stats.evicted_blocks == 2
    assert len(cache.lookup("m", cache.keys(first), first)) == 4  # its first four blocks
    assert len(cache.lookup("m", cache.keys(second), second)) == 6
    model.rollback(0)
    done = prefill(model, "m", first, cache, CHUNK)
    assert (done.restored, done.computed) == (4 * BLOCK, 2 * BLOCK)
