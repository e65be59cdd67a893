"""specd's kernels over GGUF's own block formats (models/csrc/gguf_*.c, specd.models.gguf_linear):
per format, the dequantization equals gguf-py's bit for bit (random valid blocks, blocks gguf-py
quantized, and real tensors of the pulled GGUF files); the linear against a float64 reference on
the dequantized weights and the identically quantized activations; the AVX2 path equal to the
scalar reference bit for bit (the float operations are the same by construction); batch
invariance (rows computed together == each row alone, bit for bit) and thread invariance;
layers of several parts of different formats; clear errors for formats the kernels lack."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType as T
from gguf import quants as gquants

from specd.models import kernels
from specd.models.errors import ModelError
from specd.models.gguf_linear import (
    GgufEmbedding,
    GgufLinear,
    GgufPart,
    dequantize,
    dequantize_activations,
    quantize_activations,
    repack_blocks,
    repacks_here,
    simd_level,
    simd_levels,
    unrepack_blocks,
)

pytestmark = pytest.mark.skipif(kernels.unavailable() is not None, reason=str(kernels.unavailable()))

FORMATS = [T.Q4_0, T.Q5_0, T.Q8_0, T.Q4_K, T.Q6_K]
FP16_FIELDS = {T.Q4_0: [0], T.Q5_0: [0], T.Q8_0: [0], T.Q4_K: [0, 2], T.Q6_K: [208]}  # byte offsets in a block
WIDTHS = {T.Q4_0: [96, 288, 512], T.Q5_0: [96, 288, 512], T.Q8_0: [96, 288, 512],  # k/32: 3 (no group of 8), 9, 16
          T.Q4_K: [256, 768, 1536], T.Q6_K: [256, 768, 1536]}


def random_blocks(qtype: T, rows: int, k: int, seed: int = 0, scale: float = 0.02) -> np.ndarray:
    """Valid blocks: random bytes, with every fp16 scale field a finite random value."""
    rng = np.random.default_rng(seed)
    elements, size = GGML_QUANT_SIZES[qtype]
    raw = rng.integers(0, 256, size=(rows, k // elements, size), dtype=np.uint8)
    for off in FP16_FIELDS[qtype]:
        h = ((rng.random((rows, k // elements)) * 2 - 1) * scale).astype(np.float16)
        raw[..., off : off + 2] = h.view(np.uint8).reshape(rows, k // elements, 2)
    return raw.reshape(rows, -1)


def bits(t: torch.Tensor | np.ndarray) -> np.ndarray:
    """The float32 bit patterns (bit-for-bit comparisons that NaN or -0.0 cannot fool)."""
    a = t.numpy() if isinstance(t, torch.Tensor) else t
    return np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)


def layer(qtype: T, rows: int, k: int, seed: int = 0) -> GgufLinear:
    return GgufLinear.from_blocks(f"test.{qtype.name}", int(qtype), torch.from_numpy(random_blocks(qtype, rows, k, seed)), k)


@pytest.mark.parametrize("qtype", FORMATS, ids=lambda t: t.name)
def test_dequantize_equals_gguf_py_on_random_blocks(qtype: T) -> None:
    for k in WIDTHS[qtype]:
        raw = random_blocks(qtype, 23, k, seed=k)
        ours = dequantize(int(qtype), torch.from_numpy(raw), k)  # [23, k]
        theirs = gquants.dequantize(raw, qtype).reshape(23, k)
        assert np.array_equal(bits(ours), bits(theirs)), f"{qtype.name} k={k}"


@pytest.mark.parametrize("qtype", [T.Q4_0, T.Q5_0, T.Q8_0], ids=lambda t: t.name)
def test_dequantize_equals_gguf_py_on_quantized_floats(qtype: T) -> None:
    """Blocks gguf-py quantized from real-looking floats (its quantize covers the 32-element formats)."""
    w = np.random.default_rng(3).standard_normal((17, 512)).astype(np.float32) / 10
    raw = gquants.quantize(w, qtype)  # uint8 [17, row_bytes]
    ours = dequantize(int(qtype), torch.from_numpy(raw), 512)
    assert np.array_equal(bits(ours), bits(gquants.dequantize(raw, qtype).reshape(17, 512)))


@pytest.mark.parametrize("qtype", [T.Q8_0, T.Q4_K], ids=["A32", "Q8_K"])
def test_activation_quantization(qtype: T) -> None:
    """The SIMD quantizer writes the scalar reference's bytes; the codes stand for x within half a
    step of each block's scale (and an all-zero block quantizes to zeros)."""
    x = torch.randn(7, 768, generator=torch.Generator().manual_seed(5))
    x[2, 5] *= 80  # an outlier coarsens only its own block
    x[3, :256] = 0
    act = quantize_activations(int(qtype), x)
    assert torch.equal(act, quantize_activations(int(qtype), x, reference=True))
    back = dequantize_activations(int(qtype), act, 768)  # float64 [7, 768]
    block = 256 if qtype == T.Q4_K else 32
    step = x.double().abs().reshape(7, -1, block).amax(-1, keepdim=True) / 127  # [7, blocks, 1]
    err = (back - x.double()).abs().reshape(7, -1, block)
    assert bool((err <= step / 2 * (1 + 1e-5) + 1e-30).all())
    assert bool((back[3, :256] == 0).all())


def _reference(lin: GgufLinear, x: torch.Tensor) -> torch.Tensor:
    """float64: the dequantized weights times the activations the kernel's quantization stands for."""
    w = lin.dequantize().double()  # [N, K]
    cols, at = [], 0
    for p in lin.parts:
        xq = dequantize_activations(p.qtype, quantize_activations(p.qtype, x), lin.in_features)  # [n, K]
        cols.append(xq @ w[at : at + p.raw.shape[0]].T)
        at += p.raw.shape[0]
    return torch.cat(cols, dim=1)


@pytest.mark.parametrize("qtype", FORMATS, ids=lambda t: t.name)
def test_linear_matches_float64_reference(qtype: T) -> None:
    """Only the float32 rounding of the scale products and sums separates the kernel from the
    exact product of the numbers it multiplies: 1e-5 of the sum of absolute terms."""
    for k in WIDTHS[qtype]:
        lin = layer(qtype, 41, k, seed=k)
        x = torch.randn(6, k, generator=torch.Generator().manual_seed(k))
        x[:, 7] *= 30
        ref = _reference(lin, x)
        scale = (dequantize_activations(int(qtype), quantize_activations(int(qtype), x), k).abs()
                 @ lin.dequantize().double().abs().T)  # [6, 41] sum |w| |x|
        assert bool(((lin(x).double() - ref).abs() <= 1e-5 * scale + 1e-30).all()), f"{qtype.name} k={k}"


@pytest.mark.parametrize("qtype", FORMATS, ids=lambda t: t.name)
def test_simd_equals_scalar_reference_bit_for_bit(qtype: T) -> None:
    """The AVX2 path performs the scalar reference's float operations in the same order (exact
    integer block sums, then the same fused multiply-adds): identical bits, every width."""
    for k in WIDTHS[qtype]:
        lin = layer(qtype, 37, k, seed=k + 1)
        x = torch.randn(11, k, generator=torch.Generator().manual_seed(k + 1))
        assert np.array_equal(bits(lin(x)), bits(lin.reference(x))), f"{qtype.name} k={k}"


@pytest.mark.parametrize("qtype", FORMATS, ids=lambda t: t.name)
def test_batch_invariance(qtype: T) -> None:
    """A row's result is the same bit for bit whether it runs alone or among n rows (n = 1..20,
    64, 150: every row-tile size and position, more rows than one row block), at every SIMD level,
    and the same at every level."""
    k = WIDTHS[qtype][1]
    lin = layer(qtype, 300, k, seed=9)  # enough output columns for the threads to split them
    x = torch.randn(150, k, generator=torch.Generator().manual_seed(9))
    with simd_level(LEVELS[-1]):
        alone = torch.cat([lin(x[i : i + 1]) for i in range(150)])  # [150, 300]
    for level in LEVELS:
        with simd_level(level):
            for n in [*range(1, 21), 64, 150]:
                if level == 0 and n > 20:
                    continue  # (the scalar path is slow; it is the reference the others equal)
                assert np.array_equal(bits(lin(x[:n])), bits(alone[:n])), f"{qtype.name} level={level} n={n}"
            # the middle rows of a call, too (tiles start elsewhere)
            assert np.array_equal(bits(lin(x[3:10])), bits(alone[3:10]))


LEVELS = simd_levels()  # this CPU's: 0 (scalar reference), 2 (AVX2), 3 (AVX-512 VNNI) where present


@pytest.mark.parametrize("level", LEVELS, ids=lambda v: {0: "scalar", 2: "avx2", 3: "avx512"}[v])
@pytest.mark.parametrize("qtype", FORMATS, ids=lambda t: t.name)
def test_every_level_equals_the_reference_for_1_to_20_rows(qtype: T, level: int) -> None:
    """Each SIMD path (the scalar reference run by gg_gemm, AVX2's 4-row tiles, AVX-512's tiles of
    up to 8 rows for the 32-element formats) gives every row the reference's bits, for every row count 1..20 (every tile size
    and split) and odd numbers of output columns, with and without threads splitting them."""
    for k in WIDTHS[qtype][:2]:
        for cols in (13, 301):
            lin = layer(qtype, cols, k, seed=k + cols)
            x = torch.randn(20, k, generator=torch.Generator().manual_seed(cols))
            x[:, 3] *= 40  # one large channel, as Qwen's activations have
            ref = lin.reference(x)  # [20, cols], gg_gemm_ref one output at a time
            with simd_level(level) as got:
                assert got == level
                for n in range(1, 21):
                    assert np.array_equal(bits(lin(x[:n])), bits(ref[:n])), f"{qtype.name} k={k} N={cols} n={n}"
                assert np.array_equal(bits(lin(x[7:20])), bits(ref[7:20]))  # a call's rows start anywhere


@pytest.mark.parametrize("qtype", [T.Q4_K, T.Q6_K], ids=lambda t: t.name)
def test_wide_inputs_in_chunks_equal_the_reference(qtype: T) -> None:
    """A wide input (8960, the 1.5B target's ffn_down: 35 super-blocks) in the GGUF layout (19
    rows: not whole groups of 16, so not repacked): the reference's bits for every row count, at
    every level."""
    k = 8960
    lin = layer(qtype, 19, k, seed=11)
    x = torch.randn(64, k, generator=torch.Generator().manual_seed(11))
    ref = lin.reference(x)
    for level in LEVELS:
        with simd_level(level):
            for n in (1, 2, 3, 5, 8, 9, 12, 13, 20, 24, 64):
                assert np.array_equal(bits(lin(x[:n])), bits(ref[:n])), f"{qtype.name} level={level} n={n}"


def test_level_requests_fall_back_to_what_the_cpu_has() -> None:
    """Asking for a level the CPU lacks runs the best one below it; the scalar request always runs
    the reference; the previous level comes back after the block."""
    before = kernels.kernel().lib.gg_simd()
    with simd_level(99) as best:
        assert best == LEVELS[-1]
    with simd_level(1) as low:
        assert low == 0
    with simd_level(2) as mid:
        assert mid == (2 if 2 in LEVELS else 0)
    assert kernels.kernel().lib.gg_simd() == before


@pytest.mark.parametrize("cap", ["scalar", "avx2"])
def test_environment_caps_the_level_with_the_same_bits(cap: str, tmp_path: Path) -> None:
    """SPECD_GG_SIMD=scalar|avx2 makes a fresh process run that path (gg_simd says which) and its
    outputs are the bits this process's best path computes."""
    import os
    import subprocess
    import sys

    lin = GgufLinear([GgufPart("a", int(T.Q4_K), torch.from_numpy(random_blocks(T.Q4_K, 33, 768, 1))),
                      GgufPart("b", int(T.Q6_K), torch.from_numpy(random_blocks(T.Q6_K, 17, 768, 2))),
                      GgufPart("c", int(T.Q5_0), torch.from_numpy(random_blocks(T.Q5_0, 9, 768, 3)))], 768)
    x = torch.randn(6, 768, generator=torch.Generator().manual_seed(4))
    torch.save({"parts": [(p.name, p.qtype, p.raw) for p in lin.parts], "x": x}, tmp_path / "case.pt")
    script = (
        "import sys, torch\n"
        "from specd.models import kernels\n"
        "from specd.models.gguf_linear import GgufLinear, GgufPart\n"
        "case = torch.load(sys.argv[1])\n"
        "lin = GgufLinear([GgufPart(*p) for p in case['parts']], 768)\n"
        "torch.save({'level': kernels.kernel().lib.gg_simd(), 'y': lin(case['x'])}, sys.argv[2])\n")
    env = {**os.environ, "SPECD_GG_SIMD": cap}
    subprocess.run([sys.executable, "-c", script, str(tmp_path / "case.pt"), str(tmp_path / "out.pt")],
                   env=env, check=True, timeout=120)
    out = torch.load(tmp_path / "out.pt")
    assert out["level"] == {"scalar": 0, "avx2": min(2, LEVELS[-1])}[cap]
    assert np.array_equal(bits(out["y"]), bits(lin(x)))


def test_thread_count_changes_nothing() -> None:
    lin = GgufLinear([GgufPart("a", int(T.Q4_K), torch.from_numpy(random_blocks(T.Q4_K, 700, 1536, 1))),
                      GgufPart("b", int(T.Q6_K), torch.from_numpy(random_blocks(T.Q6_K, 300, 1536, 2)))], 1536)
    x = torch.randn(5, 1536, generator=torch.Generator().manual_seed(2))
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = lin(x)
        torch.set_num_threads(max(2, threads))
        many = lin(x)
    finally:
        torch.set_num_threads(threads)
    assert np.array_equal(bits(one), bits(many))


def test_parts_of_different_formats() -> None:
    """q, k, v (or gate, up) may each keep their own format: the layer's output is the parts'
    outputs side by side, each exactly what the part computes alone."""
    k = 512
    parts = [GgufPart("q", int(T.Q4_K), torch.from_numpy(random_blocks(T.Q4_K, 40, k, 1))),
             GgufPart("k", int(T.Q8_0), torch.from_numpy(random_blocks(T.Q8_0, 16, k, 2))),
             GgufPart("v", int(T.Q6_K), torch.from_numpy(random_blocks(T.Q6_K, 16, k, 3))),
             GgufPart("w", int(T.Q5_0), torch.from_numpy(random_blocks(T.Q5_0, 8, k, 4)))]
    lin = GgufLinear(parts, k)
    x = torch.randn(3, k, generator=torch.Generator().manual_seed(4))
    alone = torch.cat([GgufLinear([p], k)(x) for p in parts], dim=1)
    assert lin.out_features == 80 and lin.types() == ["Q4_K", "Q8_0", "Q6_K", "Q5_0"]
    assert np.array_equal(bits(lin(x)), bits(alone))
    assert np.array_equal(bits(lin(x)), bits(lin.reference(x)))  # one C call == part by part, scalar
    assert lin.nbytes() == sum(p.raw.nbytes for p in parts)
    assert torch.equal(lin.dequantize(), torch.cat([dequantize(p.qtype, p.raw, k) for p in parts]))


def test_embedding_rows_dequantize_on_lookup() -> None:
    raw = torch.from_numpy(random_blocks(T.Q5_0, 50, 96, 6))
    emb = GgufEmbedding("token_embd.weight", int(T.Q5_0), raw, 96)
    tokens = torch.tensor([3, 49, 3, 0])
    assert emb.shape == (50, 96) and emb.nbytes == raw.nbytes
    assert torch.equal(emb[tokens], dequantize(int(T.Q5_0), raw, 96)[tokens])


def test_unsupported_format_is_a_clear_error() -> None:
    raw = torch.zeros(4, 176, dtype=torch.uint8)  # one Q5_K block of 256 per row
    with pytest.raises(ModelError, match=r"'blk\.3\.ffn_down\.weight'.*Q5_K.*Q4_0, Q5_0, Q8_0, Q4_K, Q6_K.*int8"):
        GgufLinear.from_blocks("blk.3.ffn_down.weight", int(T.Q5_K), raw, 256)
    with pytest.raises(ModelError, match=r"'x'.*896 input channels.*Q4_K blocks of 256"):
        GgufLinear.from_blocks("x", int(T.Q4_K), torch.zeros(2, 504, dtype=torch.uint8), 896)
    with pytest.raises(ModelError, match=r"'y'.*expected contiguous uint8 blocks \[rows, 34\]"):
        GgufLinear.from_blocks("y", int(T.Q8_0), torch.zeros(2, 33, dtype=torch.uint8), 32)
    lin = layer(T.Q8_0, 4, 64)
    with pytest.raises(ValueError, match="expected 64 input features"):
        lin(torch.zeros(2, 32))


PULLED = Path.home() / ".cache" / "specd" / "models"


@pytest.mark.parametrize("model", ["qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b"])
def test_real_tensors_dequantize_like_gguf_py(model: str) -> None:
    """One tensor of each block format in the pulled GGUF files (64 rows of each), read from the
    file's memory map, dequantized by specd and by gguf-py: the same bits."""
    path = PULLED / model / "model.gguf"
    if not path.exists():
        pytest.skip(f"{path} is not pulled")
    from gguf import GGUFReader

    seen: set[int] = set()
    for t in GGUFReader(str(path)).tensors:
        if int(t.tensor_type) not in {int(f) for f in FORMATS} or int(t.tensor_type) in seen:
            continue
        seen.add(int(t.tensor_type))
        k = int(t.shape[0])
        raw = np.array(t.data[:64])  # [64, row_bytes]: a copy of the mmap's rows
        ours = dequantize(int(t.tensor_type), torch.from_numpy(raw), k)
        theirs = gquants.dequantize(raw, t.tensor_type).reshape(64, k)
        assert np.array_equal(bits(ours), bits(theirs)), f"{model} {t.name} {t.tensor_type.name}"
        x = torch.randn(70, k, generator=torch.Generator().manual_seed(0))  # a prefill chunk and more
        lin = GgufLinear.from_blocks(t.name, int(t.tensor_type), torch.from_numpy(raw), k)  # repacked where it runs
        ref = lin.reference(x)
        for n in (1, 3, 5, 70):
            assert np.array_equal(bits(lin(x[:n])), bits(ref[:n])), f"{model} {t.name} n={n} repacked={lin.repacked}"
    assert seen, f"{path}: no tensor in a format the kernels run"


def test_portable_build_without_simd_gives_the_same_bits(tmp_path: Path) -> None:
    """The GGUF kernels (gguf_*.c, with threads.c) built with no x86 SIMD flags (as for another architecture: the scalar
    reference only, gg_simd() == 0) computes the bits this library's best path does."""
    import ctypes
    import shutil
    import subprocess

    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        pytest.skip("no C compiler")
    src = Path(__file__).resolve().parent.parent / "models" / "csrc"
    sources = [str(p) for p in sorted(src.glob("gguf_*.c"))] + [str(src / "threads.c")]
    lib_path = tmp_path / "libggportable.so"
    subprocess.run([cc, "-O2", "-std=c11", "-ffp-contract=off", "-fPIC", "-shared", "-I", str(src),
                    *sources, "-o", str(lib_path), "-lm"], check=True, timeout=120)
    lib = ctypes.CDLL(str(lib_path))
    P, I64, I32 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int
    lib.gg_gemm.argtypes = [I32, P, I64, I64, P, I64, P, I64]
    lib.gg_quantize.argtypes = [I32, P, I64, I64, P]
    assert lib.gg_simd() == 0
    for qtype in FORMATS:
        k = WIDTHS[qtype][1]
        lin = layer(qtype, 29, k, seed=5)
        x = torch.randn(9, k, generator=torch.Generator().manual_seed(5))
        act = torch.empty(9, int(kernels.kernel().lib.gg_act_bytes(int(qtype), k)), dtype=torch.uint8)
        y = torch.empty(9, 29)
        assert lib.gg_quantize(int(qtype), x.data_ptr(), 9, k, act.data_ptr()) == 0
        assert lib.gg_gemm(int(qtype), lin.parts[0].raw.data_ptr(), 29, k, act.data_ptr(), 9, y.data_ptr(), 29) == 0
        assert np.array_equal(bits(y), bits(lin(x))), qtype.name


# ---------------------------------------------------------------------------------------------
# specd's repacked layouts of Q4_0 and the K-quants (16 rows interleaved per block, the AVX2 and
# AVX-512 VNNI kernels)

REPACKED = [T.Q4_0, T.Q4_K, T.Q6_K]


@pytest.mark.parametrize("qtype", REPACKED, ids=lambda t: t.name)
def test_repacking_keeps_every_byte(qtype: T) -> None:
    """The repacked layout holds the same values: unrepacking gives the GGUF bytes back exactly,
    and its dequantization is gguf-py's."""
    for k in (256, 1536) if qtype != T.Q4_0 else (32, 896, 1536):
        raw = torch.from_numpy(random_blocks(qtype, 48, k, seed=k))
        kind, packed = repack_blocks(int(qtype), raw, k)
        assert kind != int(qtype) and packed.shape[0] == 48 and not torch.equal(packed, raw)
        assert torch.equal(unrepack_blocks(int(qtype), packed, k), raw)
        want = gquants.dequantize(raw.numpy(), qtype).reshape(48, k)
        got = torch.empty(48, k)
        assert kernels.kernel().lib.gg_dequantize(kind, packed.data_ptr(), 48, k, got.data_ptr()) == 0
        assert np.array_equal(bits(got), bits(want))


def test_only_whole_groups_of_16_rows_of_repackable_formats_are_repacked() -> None:
    for qtype, rows, repacked in ((T.Q4_K, 32, True), (T.Q6_K, 16, True), (T.Q4_0, 48, True), (T.Q4_K, 40, False),
                                  (T.Q4_0, 40, False), (T.Q8_0, 32, False), (T.Q5_0, 32, False)):
        raw = torch.from_numpy(random_blocks(qtype, rows, 512, seed=rows))
        lin = GgufLinear.from_blocks("w", int(qtype), raw, 512, repack=True)
        assert lin.repacked is repacked
        assert GgufLinear.from_blocks("w", int(qtype), raw, 512, repack=False).repacked is False
    assert repacks_here() is (3 in LEVELS)


@pytest.mark.parametrize("level", LEVELS, ids=lambda v: {0: "scalar", 2: "avx2", 3: "avx512"}[v])
@pytest.mark.parametrize("qtype", REPACKED, ids=lambda t: t.name)
def test_repacked_layout_equals_the_reference_for_every_row_count(qtype: T, level: int) -> None:
    """The repacked kernels (AVX-512 VNNI: 16 output columns per vector, tiles of up to 8 rows;
    AVX2: two halves of 8 columns, tiles of up to 4; below it, each group unpacked to the GGUF
    path) give every row the scalar reference's bits on the GGUF blocks, for 1..20 rows, a prefill
    chunk and more than one row block, narrow and wide (8960: the target's ffn_down) inputs, and
    the same bits as the GGUF layout. Q4_0 also at 896 (the 0.5B draft's width: 28 blocks, not a
    whole number of its 8 float lanes' rounds)."""
    shapes = ((768, 48), (8960, 32)) + (((896, 64), (4864, 16)) if qtype == T.Q4_0 else ())
    for k, cols in shapes:
        raw = torch.from_numpy(random_blocks(qtype, cols, k, seed=k + cols))
        packed = GgufLinear.from_blocks("w", int(qtype), raw, k, repack=True)
        plain = GgufLinear.from_blocks("w", int(qtype), raw, k, repack=False)
        assert packed.repacked
        x = torch.randn(150, k, generator=torch.Generator().manual_seed(cols))
        x[:, 5] *= 40  # one large channel, as Qwen's activations have
        ref = plain.reference(x)  # [150, cols], gg_gemm_ref on the GGUF blocks
        assert np.array_equal(bits(packed.reference(x[:9])), bits(ref[:9]))
        with simd_level(level):
            counts = [*range(1, 21), 64, 70, 150] if level else [1, 5, 9]
            for n in counts:
                assert np.array_equal(bits(packed(x[:n])), bits(ref[:n])), f"{qtype.name} k={k} n={n} level={level}"
            assert np.array_equal(bits(packed(x[7:20])), bits(ref[7:20]))


def test_repacked_layout_is_batch_and_thread_invariant() -> None:
    """A row's result is the same alone, among many rows, with one thread or two, and in a part
    table mixing repacked and GGUF-layout parts."""
    k = 1536
    parts = [GgufPart("gate", int(T.Q4_K), torch.from_numpy(random_blocks(T.Q4_K, 208, k, 1))),
             GgufPart("up", int(T.Q6_K), torch.from_numpy(random_blocks(T.Q6_K, 96, k, 2))),
             GgufPart("odd", int(T.Q4_K), torch.from_numpy(random_blocks(T.Q4_K, 24, k, 3))),
             GgufPart("q4_0", int(T.Q4_0), torch.from_numpy(random_blocks(T.Q4_0, 32, k, 4)))]
    lin = GgufLinear(parts, k, repack=True)
    assert [t & 0x100 != 0 for t, _ in lin.run] == [True, True, False, True]
    x = torch.randn(40, k, generator=torch.Generator().manual_seed(5))
    alone = torch.cat([lin(x[i : i + 1]) for i in range(40)])
    assert np.array_equal(bits(lin(x)), bits(alone))
    assert np.array_equal(bits(lin(x)), bits(lin.reference(x)))
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = lin(x)
    finally:
        torch.set_num_threads(threads)
    assert np.array_equal(bits(one), bits(alone))
    assert lin.nbytes() == sum(w.nbytes for _, w in lin.run)
