"""Quant mode gguf (specd.models.gguf_model, the loader): a tiny Qwen2 GGUF written here with
gguf-py's writer (every block format the kernels run, mixed inside layers as llama.cpp's Q4_K_M
mixes them) loads without any dequantized copy, its logits stay close to the dequantized float
model's, greedy speculative output equals greedy target-only output, and bad files or formats
the kernels lack are clear errors."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType as T, GGUFWriter
from gguf import quants as gquants

from specd.engine.drafters import ModelDrafter
from specd.engine.speculative import Decoding, generate
from specd.models import kernels, subvocab
from specd.models.config import ModelConfig
from specd.models.decoder import Decoder
from specd.models.errors import ModelError
from specd.models.gguf_convert import hf_name
from specd.models.gguf_linear import (
    SIMD_LEVELS,
    GgufEmbedding,
    GgufLinear,
    dequantize_activations,
    quantize_activations,
    simd_level,
    simd_levels,
)
from specd.models.loader import _converted_path, load_model
from tests.tiny import TINY_VOCAB, tiny_tokenizer

pytestmark = pytest.mark.skipif(kernels.unavailable() is not None, reason=str(kernels.unavailable()))

HIDDEN, INTER, HEADS, KV_HEADS, LAYERS = 256, 512, 4, 2, 2
FP16_FIELDS = {T.Q4_K: [0, 2], T.Q6_K: [208]}
# per layer: the format of each linear tensor (q, k, v and gate, up differ inside a layer)
LAYER_TYPES = [
    {"attn_q": T.Q4_K, "attn_k": T.Q4_K, "attn_v": T.Q6_K, "attn_output": T.Q8_0,
     "ffn_gate": T.Q5_0, "ffn_up": T.Q4_0, "ffn_down": T.Q6_K},
    {"attn_q": T.Q8_0, "attn_k": T.Q5_0, "attn_v": T.Q4_0, "attn_output": T.Q4_K,
     "ffn_gate": T.Q4_K, "ffn_up": T.Q6_K, "ffn_down": T.Q4_K},
]


def _blocks(rng: np.random.Generator, qtype: T, rows: int, k: int, std: float) -> np.ndarray:
    """uint8 ``[rows, row_bytes]`` of ``qtype`` whose values have about ``std``: gguf-py quantizes
    Gaussian floats for the 32-element formats; the K-quants (which it cannot quantize) are
    random valid blocks whose fp16 scales are set for that spread."""
    elements, size = GGML_QUANT_SIZES[qtype]
    if qtype in (T.Q4_0, T.Q5_0, T.Q8_0):
        return gquants.quantize((rng.standard_normal((rows, k)) * std).astype(np.float32), qtype)
    if qtype not in FP16_FIELDS:  # a format the kernels lack: its numbers do not matter
        return np.zeros((rows, k // elements * size), dtype=np.uint8)
    raw = rng.integers(0, 256, size=(rows, k // elements, size), dtype=np.uint8)
    u = rng.uniform(0.5, 1.0, size=(len(FP16_FIELDS[qtype]), rows, k // elements))
    for factor in (1.0, None):  # measure the spread at scale 1, then set the scales for `std`
        if factor is None:
            factor = std / float(gquants.dequantize(raw.reshape(rows, -1), qtype).std())
        for i, off in enumerate(FP16_FIELDS[qtype]):
            raw[..., off : off + 2] = (u[i] * factor).astype(np.float16).view(np.uint8).reshape(rows, -1, 2)
    return raw.reshape(rows, -1)


def write_tiny_gguf(path: Path, seed: int, layer_types: list[dict[str, T]] = LAYER_TYPES,
                    embed: T = T.Q5_0, output: T = T.Q6_K) -> Path:
    """A tiny random Qwen2 model as a GGUF file (metadata as llama.cpp writes it)."""
    rng = np.random.default_rng(seed)
    w = GGUFWriter(str(path), "qwen2")
    w.add_block_count(LAYERS)
    w.add_context_length(512)
    w.add_embedding_length(HIDDEN)
    w.add_feed_forward_length(INTER)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV_HEADS)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_token_list([f"t{i}" for i in range(TINY_VOCAB)])
    hd = HIDDEN // HEADS
    out_rows = {"attn_q": HEADS * hd, "attn_k": KV_HEADS * hd, "attn_v": KV_HEADS * hd, "attn_output": HIDDEN,
                "ffn_gate": INTER, "ffn_up": INTER, "ffn_down": HIDDEN}
    w.add_tensor("token_embd.weight", _blocks(rng, embed, TINY_VOCAB, HIDDEN, 1.0), raw_dtype=embed)
    head = _blocks(rng, output, TINY_VOCAB, HIDDEN, 0.5)
    w.add_tensor("output.weight", head, raw_dtype=output)
    w.add_tensor("output_norm.weight", (1 + 0.1 * rng.standard_normal(HIDDEN)).astype(np.float32))
    for i, types in enumerate(layer_types):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", (1 + 0.1 * rng.standard_normal(HIDDEN)).astype(np.float32))
        w.add_tensor(p + "ffn_norm.weight", (1 + 0.1 * rng.standard_normal(HIDDEN)).astype(np.float32))
        for t in ("attn_q", "attn_k", "attn_v"):
            w.add_tensor(p + t + ".bias", (0.1 * rng.standard_normal(out_rows[t])).astype(np.float32))
        for t, qtype in types.items():
            k = INTER if t == "ffn_down" else HIDDEN
            w.add_tensor(p + t + ".weight", _blocks(rng, qtype, out_rows[t], k, 0.5 / np.sqrt(k) * 4), raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("SPECD_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path


def _with_tokenizer(path: Path, ranked: list[int] | None = None) -> Path:
    """Place the tiny byte-level tokenizer where the loader caches a GGUF file's tokenizer (the
    tiny file's vocabulary has no merges to build one from), and a sub-vocabulary ranking."""
    directory = _converted_path(path)
    directory.mkdir(parents=True, exist_ok=True)
    tiny_tokenizer()._tok.save(str(directory / "tokenizer.json"))
    if ranked is not None:
        (directory / subvocab.FILE_NAME).write_text(json.dumps({"ranked": ranked}))
    return path


def _dense_reference(path: Path, config: ModelConfig) -> Decoder:
    """The same model with every tensor dequantized by gguf-py to float32 (MKL's fp32 linears)."""
    from gguf import GGUFReader

    weights = {}
    for t in GGUFReader(str(path)).tensors:
        shape = tuple(int(x) for x in reversed(t.shape.tolist()))
        weights[hf_name(t.name)] = torch.from_numpy(np.array(gquants.dequantize(t.data, t.tensor_type),
                                                             dtype=np.float32).reshape(shape))
    return Decoder(config, weights, compute_dtype=torch.float32, max_len=256)


def test_loads_the_files_own_blocks(cache: Path) -> None:
    path = _with_tokenizer(write_tiny_gguf(cache / "tiny.gguf", seed=0))
    m = load_model(str(path), quant="gguf", max_len=256)
    dec = m.model
    assert isinstance(dec, Decoder) and dec.describe() == "Decoder:GgufLinear:fused"  # each layer one C call
    assert isinstance(dec.embed, GgufEmbedding) and isinstance(dec.lm_head, GgufLinear)
    assert dec.layers[0]["qkv"].types() == ["Q4_K", "Q4_K", "Q6_K"]
    assert dec.layers[1]["gate_up"].types() == ["Q4_K", "Q6_K"]
    assert dec.lm_head.types() == ["Q6_K"]
    # the linears' and the embedding's bytes are the file's blocks, not copies: they lie in its memory map
    mapped = []
    for line in Path("/proc/self/maps").read_text().splitlines():
        fields = line.split(maxsplit=5)
        if len(fields) == 6 and fields[5] == str(path.resolve()):
            lo, hi = (int(a, 16) for a in fields[0].split("-"))
            mapped.append((lo, hi))
    for raw in (dec.layers[0]["o"].parts[0].raw, dec.layers[1]["qkv"].parts[2].raw, dec.embed.raw):
        assert any(lo <= raw.data_ptr() and raw.data_ptr() + raw.nbytes <= hi for lo, hi in mapped)
    assert 0 < dec.weight_bytes()["linear"] < path.stat().st_size
    assert not list((cache / "cache").rglob("*.safetensors"))  # nothing converted on disk


class _SameQuantization:
    """float64 reference for a ``GgufLinear``: its dequantized weights times the values its
    kernels' activation quantization stands for (``Linear`` interface)."""

    def __init__(self, lin: GgufLinear) -> None:
        self.lin, self.w = lin, lin.dequantize().double()  # [N, K]
        self.in_features, self.out_features = lin.in_features, lin.out_features

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        cols, at = [], 0
        for p in self.lin.parts:
            xq = dequantize_activations(p.qtype, quantize_activations(p.qtype, x), self.in_features)  # [n, K]
            cols.append(xq @ self.w[at : at + p.raw.shape[0]].T)
            at += p.raw.shape[0]
        return torch.cat(cols, dim=1).float()

    def nbytes(self) -> int:
        return self.lin.nbytes()


def test_logits_match_references(cache: Path) -> None:
    """The Python loop over GgufLinear agrees with float64 linears on the same quantized
    activations to float32 rounding (the kernels compute exactly those products); the fused C
    layers agree with the Python loop to float rounding (as tests/test_fused_layers.py holds for INT8:
    another order of sums in norms and attention, a polynomial exp); against the dequantized float
    model only the activations' int8 quantization (per row, blocks of 32 / 256, as llama.cpp)
    separates them: a few percent on this random model, whose random K-quant blocks make
    outlier-heavy activations."""
    path = _with_tokenizer(write_tiny_gguf(cache / "tiny.gguf", seed=0))
    tokens = torch.tensor([5, 80, 13, 200, 7, 7, 99, 31, 250, 2, 64, 128])
    fused = load_model(str(path), quant="gguf", max_len=256).model
    loop = load_model(str(path), quant="gguf", max_len=256).model
    loop.fused = None
    same = load_model(str(path), quant="gguf", max_len=256).model
    same.fused = None
    for layer in same.layers:
        for name in ("qkv", "o", "gate_up", "down"):
            layer[name] = _SameQuantization(layer[name])
    same.lm_head = _SameQuantization(same.lm_head)
    a, b, exact = fused.forward(tokens), loop.forward(tokens), same.forward(tokens)  # [12, V]
    spread = float(exact.std())
    assert float((b - exact).abs().max()) < 1e-4 * spread

    scale = float(b.abs().max())
    assert float((a - b).abs().max()) <= 5e-2 * scale and float((a - b).abs().mean()) <= 5e-3 * scale

    dense = _dense_reference(path, fused.config).forward(tokens)
    assert float((b - dense).norm() / dense.norm()) < 0.1
    assert float((b.argmax(-1) == dense.argmax(-1)).float().mean()) >= 0.75


@pytest.mark.parametrize("level", simd_levels(), ids=lambda v: SIMD_LEVELS[v])
@pytest.mark.parametrize("fused", [True, False], ids=["fused", "loop"])
def test_rows_do_not_depend_on_the_batch(cache: Path, fused: bool, level: int) -> None:
    """A row verified among others (5 or 12 rows: one tile, or several) is bit for bit the row
    decoded alone, in the fused C layers and in the Python loop, at every SIMD level the CPU has,
    and the KV cache rows too (the exactness contract)."""
    path = _with_tokenizer(write_tiny_gguf(cache / "tiny.gguf", seed=2))
    dec = load_model(str(path), quant="gguf", max_len=64).model
    if not fused:
        dec.fused = None
    tokens = torch.randint(0, TINY_VOCAB, (32,), generator=torch.Generator().manual_seed(3))
    with simd_level(level):
        dec.forward(tokens[:20])
        for rows in (5, 12):
            batched = dec.forward(tokens[20 : 20 + rows])  # [rows, V]
            k_batched = dec.cache.k[:, :, 20 : 20 + rows].clone()
            dec.rollback(20)
            alone = torch.cat([dec.forward(tokens[i : i + 1]) for i in range(20, 20 + rows)])
            assert torch.equal(batched, alone), rows
            assert torch.equal(dec.cache.k[:, :, 20 : 20 + rows], k_batched), rows
            dec.rollback(20)


@pytest.mark.parametrize("level", simd_levels(), ids=lambda v: SIMD_LEVELS[v])
@pytest.mark.parametrize("fused", [True, False], ids=["fused", "loop"])
def test_greedy_speculative_equals_greedy_target_only(cache: Path, fused: bool, level: int) -> None:
    """The exactness contract over GGUF-native weights: a GGUF target and a GGUF draft (another
    random model), greedy speculative == greedy target-only for several K (verification tiles of
    2..7 rows), at every SIMD level the CPU has."""
    target = load_model(str(_with_tokenizer(write_tiny_gguf(cache / "t.gguf", seed=0))), quant="gguf",
                        max_len=256).model
    if not fused:
        target.fused = None
    draft = load_model(str(_with_tokenizer(write_tiny_gguf(cache / "d.gguf", seed=1))), quant="gguf",
                       max_len=256).model
    prompt = [5, 80, 13, 200, 7]
    with simd_level(level):
        plain, _ = generate(target, prompt, Decoding(40))
        for k in (1, 3, 6):
            out, stats = generate(target, prompt, Decoding(40), ModelDrafter(draft), k=k)
            assert out == plain and stats.drafted > 0


def test_sub_vocabulary_head_copies_only_its_rows(cache: Path) -> None:
    ranked = list(range(TINY_VOCAB))[::-1]
    path = _with_tokenizer(write_tiny_gguf(cache / "tiny.gguf", seed=0), ranked=ranked)
    full = load_model(str(path), quant="gguf", max_len=64).model
    sub = load_model(str(path), quant="gguf", max_len=64, head_vocab=100).model
    assert sub.lm_head.out_features == 100
    tokens = torch.tensor([1, 2, 3])
    a, b = full.forward(tokens), sub.forward(tokens)
    kept = sorted(ranked[:100])
    assert torch.equal(a[:, kept], b[:, kept])
    assert bool(torch.isinf(b[:, [i for i in range(TINY_VOCAB) if i not in kept]]).all())


def test_a_format_the_kernels_lack_names_the_tensor(cache: Path) -> None:
    types = [dict(LAYER_TYPES[0]), dict(LAYER_TYPES[1])]
    types[1]["ffn_down"] = T.Q5_K  # llama.cpp's Q5_K_M files hold these
    path = _with_tokenizer(write_tiny_gguf(cache / "q5k.gguf", seed=0, layer_types=types))
    with pytest.raises(ModelError, match=r"'blk\.1\.ffn_down\.weight'.*Q5_K.*Q4_0, Q5_0, Q8_0, Q4_K, Q6_K.*int8"):
        load_model(str(path), quant="gguf", max_len=64)


def test_truncated_or_foreign_files_name_the_file(cache: Path) -> None:
    path = write_tiny_gguf(cache / "tiny.gguf", seed=0)
    cut = cache / "cut.gguf"
    cut.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(ModelError, match=r"cannot read GGUF file .*cut\.gguf: truncated.*past the file's end"):
        load_model(str(cut), quant="gguf")
    junk = cache / "junk.gguf"
    junk.write_bytes(b"not a model at all" * 10)
    with pytest.raises(ModelError, match=r"cannot read GGUF file .*junk\.gguf.*no GGUF magic"):
        load_model(str(junk), quant="gguf")
    directory = cache / "hf"
    directory.mkdir()
    (directory / "config.json").write_text("{}")
    with pytest.raises(ModelError, match=r"quant mode gguf runs a GGUF file's own weight blocks.*not a \.gguf file"):
        load_model(str(directory), quant="gguf")
    with pytest.raises(ModelError, match=r"gguf runs on the CPU"):
        load_model(str(path), quant="gguf", device="cuda")


def test_auto_runs_a_gguf_file_on_its_own_blocks(cache: Path) -> None:
    """The default target mode (auto) loads a GGUF source as quant mode gguf on the CPU."""
    path = _with_tokenizer(write_tiny_gguf(cache / "tiny.gguf", seed=0))
    auto = load_model(str(path), quant="auto", max_len=64).model
    gguf = load_model(str(path), quant="gguf", max_len=64).model
    assert auto.describe() == gguf.describe()
    tokens = torch.tensor([5, 80, 13, 200, 7])
    assert torch.equal(auto.forward(tokens), gguf.forward(tokens))
