/* The GGUF kernels' dispatch (llama.cpp's type traits are the model): one table of per-type traits
 * (sizes, activation format, the scalar references, the quantizer and the gemm per SIMD level),
 * the choice of the SIMD level, and the exported entry points (kernel_abi.h's gg_*): sizes,
 * dequantization, activation quantization, the gemm over OpenMP threads, the reference gemm, and
 * the linear of several parts. Built for every architecture (without AVX2: the references). */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L /* profile.h's clock_gettime clocks under -std=c11 */
#endif
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#else
static int omp_get_num_threads(void) { return 1; }
static int omp_get_thread_num(void) { return 0; }
#endif

#include "gguf_kernels.h"
#include "profile.h"

/* ---------------------------------------------------------------------------------------- */
/* the per-type traits                                                                         */

#if GG_AVX2
#define AVX2_(f) f
#else
#define AVX2_(f) NULL /* (never run: gg_simd is the scalar level) */
#endif
/* the activation quantizers by level: AVX-512 runs AVX2's */
#define QUANTIZE_A32 {gg_quantize_a32_ref, NULL, AVX2_(gg_quantize_a32_avx2), AVX2_(gg_quantize_a32_avx2)}
#define QUANTIZE_Q8_K {gg_quantize_q8_K_ref, NULL, AVX2_(gg_quantize_q8_K_avx2), AVX2_(gg_quantize_q8_K_avx2)}
/* the gemms by level: the 32-element formats; the K-quants in the GGUF layout (only tensors whose
 * rows are not whole groups of 16 stay in it where AVX2 runs: AVX-512 runs AVX2's tiles for them);
 * the repacked K-quants */
#define GEMM_B32 {gg_gemm_cols_ref, NULL, AVX2_(gg_gemm_cols_avx2), AVX2_(gg_gemm_cols_avx512)}
#define GEMM_K {gg_gemm_cols_ref, NULL, AVX2_(gg_gemm_cols_avx2), AVX2_(gg_gemm_cols_avx2)}
#define GEMM_X16 {gg_gemm_cols_x16_unpacked, NULL, AVX2_(gg_gemm_cols_x16_avx2), AVX2_(gg_gemm_cols_x16_avx512)}

static const gg_traits traits[] = {
    {GG_Q4_0, QK32, sizeof(block_q4_0), GG_ACT_A32, gg_dequantize_q4_0, gg_dot_q4_0_ref, QUANTIZE_A32, GEMM_B32},
    {GG_Q5_0, QK32, sizeof(block_q5_0), GG_ACT_A32, gg_dequantize_q5_0, gg_dot_q5_0_ref, QUANTIZE_A32, GEMM_B32},
    {GG_Q8_0, QK32, sizeof(block_q8_0), GG_ACT_A32, gg_dequantize_q8_0, gg_dot_q8_0_ref, QUANTIZE_A32, GEMM_B32},
    {GG_Q4_K, QK_K, sizeof(block_q4_K), GG_ACT_Q8_K, gg_dequantize_q4_K, gg_dot_q4_K_ref, QUANTIZE_Q8_K, GEMM_K},
    {GG_Q6_K, QK_K, sizeof(block_q6_K), GG_ACT_Q8_K, gg_dequantize_q6_K, gg_dot_q6_K_ref, QUANTIZE_Q8_K, GEMM_K},
    /* repacked (ggml_blocks.h): a row's share of its group of 16 */
    {GG_Q4_0_X16, QK32, X16_Q4_0_BYTES / 16, GG_ACT_A32, NULL, NULL, QUANTIZE_A32, GEMM_X16},
    {GG_Q4_K_X16, QK_K, X16_Q4_K_BYTES / 16, GG_ACT_Q8_K, NULL, NULL, QUANTIZE_Q8_K, GEMM_X16},
    {GG_Q6_K_X16, QK_K, X16_Q6_K_BYTES / 16, GG_ACT_Q8_K, NULL, NULL, QUANTIZE_Q8_K, GEMM_X16},
};

const gg_traits *gg_traits_of(int type) {
    for (size_t i = 0; i < sizeof traits / sizeof traits[0]; i++)
        if (traits[i].type == type) return &traits[i];
    return NULL;
}

/* ---------------------------------------------------------------------------------------- */
/* sizes                                                                                       */

/* bytes of one weight row of k elements in `type`; -1 when the kernels lack the type or k is
 * not a whole number of its blocks */
int64_t gg_row_bytes(int type, int64_t k) {
    const gg_traits *t = gg_traits_of(type);
    if (k <= 0 || !t || k % t->block) return -1;
    return k / t->block * t->block_bytes;
}

/* bytes of one activation row of k elements quantized for weights of `type` (A32 or Q8_K);
 * -1 as gg_row_bytes */
int64_t gg_act_bytes(int type, int64_t k) {
    if (gg_row_bytes(type, k) < 0) return -1;
    return gg_traits_of(type)->act == GG_ACT_Q8_K ? k / QK_K * (int64_t)sizeof(block_q8_K) : k / QK32 * 8 + k;
}

/* ---------------------------------------------------------------------------------------- */
/* SIMD levels (runtime dispatch)                                                              */

/* the best level this build and this CPU run, capped by the environment variable SPECD_GG_SIMD
 * (scalar | avx2 | avx512: a debugging and testing override; unset or unknown: no cap) */
static int best_level(void) {
    int level = GG_LEVEL_SCALAR;
#if GG_AVX2
    level = GG_LEVEL_AVX2; /* the build's baseline (compiled with -mavx2 -mfma -mf16c) */
#if defined(__GNUC__) && defined(__x86_64__)
    __builtin_cpu_init(); /* cpuid, and the OS's saved register state (XCR0) for AVX-512 */
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
        __builtin_cpu_supports("avx512vnni"))
        level = GG_LEVEL_AVX512;
#endif
#endif
    const char *cap = getenv("SPECD_GG_SIMD");
    if (cap && !strcmp(cap, "scalar")) level = GG_LEVEL_SCALAR;
    else if (cap && !strcmp(cap, "avx2") && level > GG_LEVEL_AVX2) level = GG_LEVEL_AVX2;
    return level;
}

/* the level calls run now: the best one until gg_set_simd lowers it (-1: not chosen yet) */
static int simd_level = -1;

/* which dot products gg_gemm runs: 0 = the scalar reference, 2 = AVX2, 3 = AVX-512 VNNI */
int gg_simd(void) {
    if (simd_level < 0) simd_level = best_level();
    return simd_level;
}

/* run `level` from now on, or the best level below it the CPU has (any level below 2: the
 * scalar reference; a negative one: the best); returns the level now run. For tests and
 * benchmarks comparing the paths in one process; not meant to change under running calls. */
int gg_set_simd(int level) {
    const int best = best_level();
    simd_level = level < 0 || level > best ? best : level < GG_LEVEL_AVX2 ? GG_LEVEL_SCALAR
               : level < GG_LEVEL_AVX512 ? GG_LEVEL_AVX2 : GG_LEVEL_AVX512;
    return simd_level;
}

/* ---------------------------------------------------------------------------------------- */
/* entry points                                                                                */

/* rows x k elements of `type` at w -> float32 out [rows, k]; -1 when the kernels lack the type */
int gg_dequantize(int type, const uint8_t *w, int64_t rows, int64_t k, float *out) {
    const int64_t rb = gg_row_bytes(type, k);
    if (rb < 0 || rows < 0) return -1;
    if (is_x16(type)) { /* through the GGUF blocks */
        uint8_t *tmp = gg_unrepacked(type, w, rows, k);
        if (!tmp) return -1;
        const int rc = gg_dequantize(base_type(type), tmp, rows, k, out);
        free(tmp);
        return rc;
    }
    const gg_traits *t = gg_traits_of(type);
    for (int64_t r = 0; r < rows; r++) t->dequantize(w + r * rb, out + r * k, k);
    return 0;
}

/* the first output column of part i of `parts` over total columns, aligned to `align` */
static int64_t split(int64_t total, int parts, int i, int64_t align) {
    const int64_t units = (total + align - 1) / align, at = units * i / parts * align;
    return at < total ? at : total;
}

/* x [n, k] float32 -> act: n rows of gg_act_bytes(type, k) bytes (A32 or Q8_K); -1 when the
 * kernels lack the type or k does not fit its blocks */
int gg_quantize(int type, const float *x, int64_t n, int64_t k, uint8_t *act) {
    const int64_t arb = gg_act_bytes(type, k);
    if (arb < 0 || n < 0) return -1;
    const gg_quantize_fn quantize = gg_traits_of(type)->quantize[gg_simd()];
    for (int64_t r = 0; r < n; r++) quantize(x + r * k, k, act + r * arb);
    return 0;
}

/* gg_quantize by the scalar reference (tests: the AVX2 quantization equals it byte for byte) */
int gg_quantize_ref(int type, const float *x, int64_t n, int64_t k, uint8_t *act) {
    const int64_t arb = gg_act_bytes(type, k);
    if (arb < 0 || n < 0) return -1;
    const gg_quantize_fn quantize = gg_traits_of(type)->quantize[GG_LEVEL_SCALAR];
    for (int64_t r = 0; r < n; r++) quantize(x + r * k, k, act + r * arb);
    return 0;
}

/* y[r * ldy + o] = the dot of weight row o (N rows of k in `type` at w) with activation row r
 * (n rows quantized by gg_quantize for `type`), o < N, r < n. OpenMP over output columns (none
 * for small calls); every y value is the same whatever n, the thread count or the split. -1 when
 * the kernels lack the type or k does not fit its blocks. */
int gg_gemm(int type, const uint8_t *w, int64_t N, int64_t k, const uint8_t *act, int64_t n, float *y,
            int64_t ldy) {
    if (gg_row_bytes(type, k) < 0 || N < 0 || n < 0 || ldy < N || (is_x16(type) && N % 16)) return -1;
    /* small calls stay on one thread: waking the pool costs more than it saves */
    const int parallel = N * k * (n < 4 ? n : 4) >= (1 << 18);
    const gg_gemm_fn gemm = gg_traits_of(type)->gemm[gg_simd()];
    const int team = parallel ? specd_team_size() : 1;
    const double t0 = specd_prof ? prof_wall() : 0.0;
#pragma omp parallel if (parallel) num_threads(team)
    {
        const prof_mark m = prof_begin();
        const int t = omp_get_num_threads(), tid = omp_get_thread_num();
        const int64_t o0 = split(N, t, tid, 16), o1 = split(N, t, tid + 1, 16);
        gemm(type, w, k, act, n, y, ldy, o0, o1);
        prof_end(m);
    }
    prof_region(t0, team);
    return 0;
}

/* gg_gemm by the scalar reference dot products, one output at a time, one thread */
int gg_gemm_ref(int type, const uint8_t *w, int64_t N, int64_t k, const uint8_t *act, int64_t n, float *y,
                int64_t ldy) {
    const int64_t wrb = gg_row_bytes(type, k), arb = gg_act_bytes(type, k);
    if (wrb < 0 || N < 0 || n < 0 || ldy < N) return -1;
    if (is_x16(type)) { /* the GGUF rows back, then their reference */
        uint8_t *tmp = gg_unrepacked(type, w, N, k);
        if (!tmp) return -1;
        const int rc = gg_gemm_ref(base_type(type), tmp, N, k, act, n, y, ldy);
        free(tmp);
        return rc;
    }
    const gg_traits *t = gg_traits_of(type);
    for (int64_t r = 0; r < n; r++)
        for (int64_t o = 0; o < N; o++) y[r * ldy + o] = t->dot(w + o * wrb, act + r * arb, k);
    return 0;
}

/* ---------------------------------------------------------------------------------------- */
/* a linear of several parts (q, k, v or gate, up, each in its own format)                     */

/* bytes of one A32 row and one Q8_K row of k (0 when k is not whole super-blocks) */
static int64_t a32_bytes(int64_t k) { return k / QK32 * 8 + k; }
static int64_t q8k_bytes(int64_t k) { return k % QK_K ? 0 : k / QK_K * (int64_t)sizeof(block_q8_K); }

/* scratch bytes gg_linear_parts needs for n rows of k, whatever the parts' formats */
int64_t gg_parts_act_bytes(int64_t k, int64_t n) { return n * (a32_bytes(k) + q8k_bytes(k)); }

/* y [n, N] = x [n, k] times the weights of the part table `parts` (kernel_abi.h's gg_parts:
 * count, then per part its type, rows and address; N = the sum of the rows, each part's columns
 * after the previous part's). The activations are quantized once per activation format (A32,
 * Q8_K) into act (gg_parts_act_bytes(k, n) bytes), then each part's gg_gemm writes its columns:
 * every y value is the one gg_quantize + gg_gemm give for that part alone. The caller checked
 * the types and k (specd.models.gguf_linear). */
void gg_linear_parts(const int64_t *parts, int64_t k, const float *x, int64_t n, float *y, uint8_t *act) {
    const int64_t count = parts[0];
    int64_t N = 0, col = 0;
    for (int64_t i = 0; i < count; i++) N += parts[2 + 3 * i];
    uint8_t *a32 = act, *a8k = act + n * a32_bytes(k);
    int have32 = 0, have8k = 0;
    for (int64_t i = 0; i < count; i++) {
        const int type = (int)parts[1 + 3 * i];
        const int64_t rows = parts[2 + 3 * i];
        const uint8_t *w = (const uint8_t *)(intptr_t)parts[3 + 3 * i];
        uint8_t *a = is_k_quant(type) ? a8k : a32;
        int *have = is_k_quant(type) ? &have8k : &have32;
        if (!*have) {
            gg_quantize(type, x, n, k, a);
            *have = 1;
        }
        gg_gemm(type, w, rows, k, a, n, y + col, N);
        col += rows;
    }
}
