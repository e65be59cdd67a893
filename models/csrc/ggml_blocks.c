/* GGUF-native linears: y[n, N] = x[n, k] · W[N, k]ᵀ with W in one of GGML's block formats exactly
 * as the GGUF file stores it (Q4_0, Q5_0, Q8_0, Q4_K, Q6_K; layouts in ggml_blocks.h), no float
 * or re-quantized copy. llama.cpp's ggml-quants.c (reference dequantization, block_q8_K) and
 * ggml-cpu/arch/x86/quants.c (ggml_vec_dot_*_q8_*: the AVX2 integer tricks) are the models.
 *
 * Per block format, side by side: a scalar reference dequantization (bit-exact to gguf-py's
 * gguf.quants.dequantize, tested), a scalar reference dot product, and an AVX2 dot product.
 *
 * Activations are quantized per row inside every call (gg_quantize), from that row alone: A32
 * blocks of 32 for Q4_0 / Q5_0 / Q8_0, Q8_K super-blocks of 256 for Q4_K / Q6_K.
 *
 * Exactness (batch invariance by construction): the value of y[r, o] is fixed by k alone.
 *   - each block's (or super-block's) integer dot product is exact int32 arithmetic, so it does
 *     not matter how SIMD lanes split it;
 *   - the float accumulation order is fixed and written out in the scalar reference:
 *       32-element formats: eight float lanes, block b goes to lane b % 8:
 *         lane[b % 8] = fma((float) isum_b, d_w[b] * d_x[b], lane[b % 8]),
 *         y = ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7))
 *       K-quants: one float per output, super-blocks in order:
 *         acc = fma((float) isum, d_w * d_x, acc)   [Q4_K also: acc = fma((float) -msum, dmin_w * d_x, acc)]
 *     where isum is the exact integer sum of scale-weighted code products of the block (Q4_K:
 *     sum_j sc_j * sum_i q_ji x_ji; msum = sum_j m_j * sum_i x_ji; Q6_K: sum_j sc_j * sum_i (q_ji - 32) x_ji).
 * The AVX2 and AVX-512 paths perform exactly these float operations (AVX-512 runs the K-quants'
 * per-row steps for several rows at once, one row per float lane, and may pause a row's
 * accumulation between chunks of super-blocks, keeping it in y), so they equal the scalar reference
 * bit for bit, for every row whatever the number of rows in the call, the row's place in a row tile
 * or the thread count (the threads split the output columns).
 *
 * Paths, chosen per call at run time (gg_simd): the scalar reference, AVX2 (the build's baseline
 * on x86-64) and AVX-512 F/BW/VL/DQ + VNNI where the CPU has it (SPECD_GG_SIMD caps the choice).
 *
 * Repacked K-quants (GG_Q4_K_X16, GG_Q6_K_X16; layouts in ggml_blocks.h): gg_repack copies a
 * tensor once (at load) into groups of 16 rows interleaved per super-block, so that int32 lane c of
 * a vector is output column c: one vpdpbusd (AVX-512 VNNI; vpmaddubsw + vpmaddwd on AVX2) per 4
 * elements of 16 columns against the activation's 4 codes broadcast, each sub-block's integer sum
 * scaled per column, and no horizontal reduction. The integer sums are the same exact numbers and
 * the float steps per (row, column) the reference's, so the repacked paths give the GGUF layout's
 * bits too (gg_gemm_ref on a repacked type unpacks and runs the reference).
 * Threads: OpenMP over output columns, sharing torch's pool as the other kernels (q8kernel.c).
 * Without AVX2 at compile time (another architecture) the scalar reference runs.
 *
 * Exported C ABI (prototypes, version, signature text): kernel_abi.h.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define GG_AVX2 1
#include <immintrin.h>
#else
#define GG_AVX2 0
#endif
#ifdef _OPENMP
#include <omp.h>
#else
static int omp_get_num_threads(void) { return 1; }
static int omp_get_thread_num(void) { return 0; }
#endif

#include "ggml_blocks.h"
#include "kernel_abi.h"
#include "profile.h"

/* ---------------------------------------------------------------------------------------- */
/* sizes                                                                                       */

/* bytes of one weight row of k elements in `type`; -1 when the kernels lack the type or k is
 * not a whole number of its blocks */
int64_t gg_row_bytes(int type, int64_t k) {
    if (k <= 0) return -1;
    switch (type) {
    case GG_Q4_0: return k % QK32 ? -1 : k / QK32 * (int64_t)sizeof(block_q4_0);
    case GG_Q5_0: return k % QK32 ? -1 : k / QK32 * (int64_t)sizeof(block_q5_0);
    case GG_Q8_0: return k % QK32 ? -1 : k / QK32 * (int64_t)sizeof(block_q8_0);
    case GG_Q4_K: return k % QK_K ? -1 : k / QK_K * (int64_t)sizeof(block_q4_K);
    case GG_Q6_K: return k % QK_K ? -1 : k / QK_K * (int64_t)sizeof(block_q6_K);
    /* repacked (ggml_blocks.h): a row's share of its group of 16 */
    case GG_Q4_K_X16: return k % QK_K ? -1 : k / QK_K * (X16_Q4_K_BYTES / 16);
    case GG_Q6_K_X16: return k % QK_K ? -1 : k / QK_K * (X16_Q6_K_BYTES / 16);
    default: return -1;
    }
}

static int is_x16(int type) { return (type & GG_X16) != 0; }
static int base_type(int type) { return type & ~GG_X16; }
static int is_k_quant(int type) { return base_type(type) == GG_Q4_K || base_type(type) == GG_Q6_K; }

/* bytes of one activation row of k elements quantized for weights of `type` (A32 or Q8_K);
 * -1 as gg_row_bytes */
int64_t gg_act_bytes(int type, int64_t k) {
    if (gg_row_bytes(type, k) < 0) return -1;
    return is_k_quant(type) ? k / QK_K * (int64_t)sizeof(block_q8_K) : k / QK32 * 8 + k;
}

/* ---------------------------------------------------------------------------------------- */
/* SIMD levels (runtime dispatch)                                                              */

/* The dot products a call runs: GG_LEVEL_SCALAR (the reference), GG_LEVEL_AVX2 (AVX2 + FMA +
 * F16C; the file's baseline on x86-64), GG_LEVEL_AVX512 (AVX-512 F/BW/VL/DQ + VNNI: 512-bit
 * K-quant tiles of up to 8 rows and vpdpbusd for the 32-element formats). Every level computes
 * the same bits (the header's float order; integer sums are exact whatever the SIMD split). */
enum { GG_LEVEL_SCALAR = 0, GG_LEVEL_AVX2 = 2, GG_LEVEL_AVX512 = 3 };

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
/* scalars                                                                                     */

/* fp16 bits -> float (exact: every fp16 value is a float) */
static inline float fp16_to_fp32(uint16_t h) {
#if GG_AVX2
    return _cvtsh_ss(h);
#else
    const uint32_t sign = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 0x1F, m = h & 0x3FF;
    uint32_t bits;
    if (e == 0x1F) bits = sign | 0x7F800000u | (m << 13);
    else if (e) bits = sign | ((e + 112) << 23) | (m << 13);
    else { /* zero or subnormal: m * 2^-24, exact */
        float f = (float)m * 5.9604644775390625e-08f;
        memcpy(&bits, &f, 4);
        bits |= sign;
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
#endif
}

/* the fp16 at p (any alignment) */
static inline float f16_at(const void *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return fp16_to_fp32(h);
}

/* the sum of 8 float lanes in hsum8's order (avx2.h): ((0+4) + (2+6)) + ((1+5) + (3+7)) */
static inline float hsum8_ref(const float *a) {
    return ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]));
}

/* Q4_K's packed 6-bit scale and min of sub-block j (ggml-quants.c get_scale_min_k4) */
static inline void scale_min_k4(int j, const uint8_t *q, uint8_t *sc, uint8_t *m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

/* ---------------------------------------------------------------------------------------- */
/* reference dequantization, one function per format (ggml-quants.c dequantize_row_*; float   */
/* products rounded one at a time, never fused: gguf-py's numbers bit for bit)                */

static void dequantize_q4_0(const block_q4_0 *x, float *y, int64_t k) {
    for (int64_t i = 0; i < k / QK32; i++) {
        const float d = f16_at(&x[i].d);
        for (int j = 0; j < QK32 / 2; j++) {
            y[i * QK32 + j] = ((x[i].qs[j] & 0x0F) - 8) * d;
            y[i * QK32 + j + QK32 / 2] = ((x[i].qs[j] >> 4) - 8) * d;
        }
    }
}

static void dequantize_q5_0(const block_q5_0 *x, float *y, int64_t k) {
    for (int64_t i = 0; i < k / QK32; i++) {
        const float d = f16_at(&x[i].d);
        uint32_t qh;
        memcpy(&qh, x[i].qh, 4);
        for (int j = 0; j < QK32 / 2; j++) {
            const int hi0 = ((qh >> j) << 4) & 0x10, hi1 = (qh >> (j + 12)) & 0x10;
            y[i * QK32 + j] = (((x[i].qs[j] & 0x0F) | hi0) - 16) * d;
            y[i * QK32 + j + QK32 / 2] = (((x[i].qs[j] >> 4) | hi1) - 16) * d;
        }
    }
}

static void dequantize_q8_0(const block_q8_0 *x, float *y, int64_t k) {
    for (int64_t i = 0; i < k / QK32; i++) {
        const float d = f16_at(&x[i].d);
        for (int j = 0; j < QK32; j++) y[i * QK32 + j] = x[i].qs[j] * d;
    }
}

static void dequantize_q4_K(const block_q4_K *x, float *y, int64_t k) {
    for (int64_t i = 0; i < k / QK_K; i++) {
        const float d = f16_at(&x[i].d), dmin = f16_at(&x[i].dmin);
        const uint8_t *q = x[i].qs;
        for (int j = 0; j < 8; j += 2, q += 32) { /* sub-blocks j (low nibbles), j+1 (high) */
            uint8_t sc, m;
            scale_min_k4(j, x[i].scales, &sc, &m);
            const float d1 = d * sc, m1 = dmin * m;
            scale_min_k4(j + 1, x[i].scales, &sc, &m);
            const float d2 = d * sc, m2 = dmin * m;
            for (int l = 0; l < 32; l++) *y++ = d1 * (q[l] & 0xF) - m1;
            for (int l = 0; l < 32; l++) *y++ = d2 * (q[l] >> 4) - m2;
        }
    }
}

/* the 6-bit code (0..63) of element e of a Q6_K block */
static inline int q6_K_code(const block_q6_K *b, int e) {
    const int half = e / 128, quad = (e % 128) / 32, l = e % 32;
    const uint8_t ql = b->ql[64 * half + l + (quad & 1) * 32], qh = b->qh[32 * half + l];
    return ((quad < 2 ? ql & 0xF : ql >> 4) | (((qh >> (2 * quad)) & 3) << 4));
}

static void dequantize_q6_K(const block_q6_K *x, float *y, int64_t k) {
    for (int64_t i = 0; i < k / QK_K; i++) {
        const float d = f16_at(&x[i].d);
        for (int e = 0; e < QK_K; e++) y[i * QK_K + e] = d * x[i].scales[e / 16] * (q6_K_code(&x[i], e) - 32);
    }
}

/* ---------------------------------------------------------------------------------------- */
/* repacked K-quants (layouts: ggml_blocks.h), scalar, both directions                        */

/* the 4-bit code of element e of a Q4_K block (dequantize_q4_K's order) */
static inline int q4_K_code(const block_q4_K *b, int e) {
    const uint8_t q = b->qs[32 * (e / 64) + e % 32];
    return e % 64 < 32 ? q & 0xF : q >> 4;
}

/* super-block i of 16 GGUF rows (rows[c], c < 16) -> its repacked bytes at g */
static void repack_q4_K(const block_q4_K *const *rows, int64_t i, uint8_t *g) {
    uint8_t *sc = g + X16_Q4_K_SC, *mn = g + X16_Q4_K_MIN;
    for (int c = 0; c < 16; c++) {
        const block_q4_K *b = rows[c] + i;
        for (int s = 0; s < 8; s++)
            for (int h = 0; h < 4; h++)
                for (int e = 0; e < 4; e++)
                    g[64 * (4 * s + h) + 4 * c + e] =
                        (uint8_t)(q4_K_code(b, 32 * s + 4 * h + e) | q4_K_code(b, 32 * s + 16 + 4 * h + e) << 4);
        for (int s = 0; s < 8; s++) {
            uint8_t scale, min;
            scale_min_k4(s, b->scales, &scale, &min);
            sc[16 * s + c] = scale;
            mn[32 * (s / 2) + 2 * c + s % 2] = min;
        }
        memcpy(g + X16_Q4_K_D + 2 * c, &b->d, 2);
        memcpy(g + X16_Q4_K_DMIN + 2 * c, &b->dmin, 2);
    }
}

/* the inverse: the repacked super-block at g -> super-block i of the 16 rows */
static void unrepack_q4_K(const uint8_t *g, int64_t i, block_q4_K *const *rows) {
    const uint8_t *sc = g + X16_Q4_K_SC, *mn = g + X16_Q4_K_MIN;
    for (int c = 0; c < 16; c++) {
        block_q4_K *b = rows[c] + i;
        for (int s = 0; s < 8; s++)
            for (int h = 0; h < 4; h++)
                for (int e = 0; e < 4; e++) {
                    const uint8_t v = g[64 * (4 * s + h) + 4 * c + e];
                    for (int half = 0; half < 2; half++) { /* elements 32s + 16 half + 4h + e */
                        const int el = 32 * s + 16 * half + 4 * h + e, code = half ? v >> 4 : v & 0xF;
                        uint8_t *q = &b->qs[32 * (el / 64) + el % 32];
                        *q = el % 64 < 32 ? (uint8_t)((*q & 0xF0) | code) : (uint8_t)((*q & 0x0F) | code << 4);
                    }
                }
        uint8_t scl[8], mns[8];
        for (int s = 0; s < 8; s++) {
            scl[s] = sc[16 * s + c];
            mns[s] = mn[32 * (s / 2) + 2 * c + s % 2];
        }
        /* get_scale_min_k4's packing: bytes 0..3 sc[0..3] | sc[4..7] >> 4 << 6, 4..7 the mins
         * alike, 8..11 the low nibbles of sc[4..7] | those of m[4..7] << 4 */
        for (int j = 0; j < 4; j++) {
            b->scales[j] = (uint8_t)(scl[j] | (scl[j + 4] >> 4) << 6);
            b->scales[j + 4] = (uint8_t)(mns[j] | (mns[j + 4] >> 4) << 6);
            b->scales[j + 8] = (uint8_t)((scl[j + 4] & 0xF) | (mns[j + 4] & 0xF) << 4);
        }
        memcpy(&b->d, g + X16_Q4_K_D + 2 * c, 2);
        memcpy(&b->dmin, g + X16_Q4_K_DMIN + 2 * c, 2);
    }
}

static void repack_q6_K(const block_q6_K *const *rows, int64_t i, uint8_t *g) {
    for (int c = 0; c < 16; c++) {
        const block_q6_K *b = rows[c] + i;
        for (int s = 0; s < 16; s++) {
            for (int h = 0; h < 2; h++)
                for (int e = 0; e < 4; e++)
                    g[64 * (2 * s + h) + 4 * c + e] = (uint8_t)((q6_K_code(b, 16 * s + 4 * h + e) & 0xF) |
                                                                (q6_K_code(b, 16 * s + 8 + 4 * h + e) & 0xF) << 4);
            for (int e = 0; e < 4; e++) {
                uint8_t u = 0;
                for (int q = 0; q < 4; q++) u |= (uint8_t)((q6_K_code(b, 16 * s + 4 * q + e) >> 4) << (2 * q));
                g[X16_Q6_K_HI + 64 * s + 4 * c + e] = u;
            }
            g[X16_Q6_K_SC + 16 * s + c] = (uint8_t)b->scales[s];
        }
        memcpy(g + X16_Q6_K_D + 2 * c, &b->d, 2);
    }
}

static void unrepack_q6_K(const uint8_t *g, int64_t i, block_q6_K *const *rows) {
    for (int c = 0; c < 16; c++) {
        block_q6_K *b = rows[c] + i;
        for (int el = 0; el < QK_K; el++) {
            const int s = el / 16, r = el % 16, q = r / 4, e = r % 4; /* r = 4q + e */
            const uint8_t v = g[64 * (2 * s + (q & 1)) + 4 * c + e];
            const int code = (q < 2 ? v & 0xF : v >> 4) | ((g[X16_Q6_K_HI + 64 * s + 4 * c + e] >> (2 * q)) & 3) << 4;
            /* q6_K_code's bit places, written back */
            const int half = el / 128, quad = (el % 128) / 32, l = el % 32;
            uint8_t *ql = &b->ql[64 * half + l + (quad & 1) * 32], *qh = &b->qh[32 * half + l];
            *ql = quad < 2 ? (uint8_t)((*ql & 0xF0) | (code & 0xF)) : (uint8_t)((*ql & 0x0F) | (code & 0xF) << 4);
            *qh = (uint8_t)((*qh & ~(3 << (2 * quad))) | (code >> 4) << (2 * quad));
        }
        for (int s = 0; s < 16; s++) b->scales[s] = (int8_t)g[X16_Q6_K_SC + 16 * s + c];
        memcpy(&b->d, g + X16_Q6_K_D + 2 * c, 2);
    }
}

/* bytes of one repacked super-block of 16 rows of `type` (a repacked type or its base) */
static int64_t x16_bytes(int type) { return base_type(type) == GG_Q4_K ? X16_Q4_K_BYTES : X16_Q6_K_BYTES; }

/* N rows x k of `type` (GG_Q4_K or GG_Q6_K, as GGUF stores them) at w -> the repacked layout of
 * the same values at out (N * gg_row_bytes(type | GG_X16, k) bytes); -1 unless N is a multiple of
 * 16 and the type a K-quant fitting k */
int gg_repack(int type, const uint8_t *w, int64_t N, int64_t k, uint8_t *out) {
    const int64_t rb = gg_row_bytes(type, k), nsb = k / QK_K;
    if (is_x16(type) || !is_k_quant(type) || rb < 0 || N < 0 || N % 16) return -1;
    const int64_t gb = x16_bytes(type);
#pragma omp parallel for num_threads(specd_team_size()) if (N * k >= (1 << 20))
    for (int64_t g = 0; g < N / 16; g++) {
        const uint8_t *rows[16];
        for (int c = 0; c < 16; c++) rows[c] = w + (16 * g + c) * rb;
        for (int64_t i = 0; i < nsb; i++) {
            uint8_t *o = out + (g * nsb + i) * gb;
            if (type == GG_Q4_K) repack_q4_K((const block_q4_K *const *)rows, i, o);
            else repack_q6_K((const block_q6_K *const *)rows, i, o);
        }
    }
    return 0;
}

/* groups g0 .. g1 - 1 of a repacked `type` at w (rows 16 g0 .. 16 g1 - 1) -> their GGUF rows at out */
static void unrepack_groups(int type, const uint8_t *w, int64_t k, int64_t g0, int64_t g1, uint8_t *out) {
    const int64_t nsb = k / QK_K, gb = x16_bytes(type), rb = gg_row_bytes(base_type(type), k);
    for (int64_t g = g0; g < g1; g++) {
        uint8_t *rows[16];
        for (int c = 0; c < 16; c++) rows[c] = out + ((g - g0) * 16 + c) * rb;
        for (int64_t i = 0; i < nsb; i++) {
            const uint8_t *x = w + (g * nsb + i) * gb;
            if (base_type(type) == GG_Q4_K) unrepack_q4_K(x, i, (block_q4_K *const *)rows);
            else unrepack_q6_K(x, i, (block_q6_K *const *)rows);
        }
    }
}

/* a malloc'd copy of the GGUF blocks N rows of a repacked type came from (the caller frees it);
 * NULL when N is not whole groups of 16 or memory runs out */
static uint8_t *unrepacked(int type, const uint8_t *w, int64_t N, int64_t k) {
    if (N % 16) return NULL;
    uint8_t *out = malloc((size_t)(N * gg_row_bytes(base_type(type), k)) + 1); /* (+1: never malloc(0)) */
    if (out) unrepack_groups(type, w, k, 0, N / 16, out);
    return out;
}

/* N rows x k of a repacked type at w -> the GGUF blocks they came from, byte for byte; -1 as gg_repack */
int gg_unrepack(int type, const uint8_t *w, int64_t N, int64_t k, uint8_t *out) {
    if (!is_x16(type) || gg_row_bytes(type, k) < 0 || N < 0 || N % 16) return -1;
    unrepack_groups(type, w, k, 0, N / 16, out);
    return 0;
}

/* rows x k elements of `type` at w -> float32 out [rows, k]; -1 when the kernels lack the type */
int gg_dequantize(int type, const uint8_t *w, int64_t rows, int64_t k, float *out) {
    const int64_t rb = gg_row_bytes(type, k);
    if (rb < 0 || rows < 0) return -1;
    if (is_x16(type)) { /* through the GGUF blocks */
        uint8_t *tmp = unrepacked(type, w, rows, k);
        if (!tmp) return -1;
        const int rc = gg_dequantize(base_type(type), tmp, rows, k, out);
        free(tmp);
        return rc;
    }
    for (int64_t r = 0; r < rows; r++) {
        const void *row = w + r * rb;
        float *y = out + r * k;
        switch (type) {
        case GG_Q4_0: dequantize_q4_0(row, y, k); break;
        case GG_Q5_0: dequantize_q5_0(row, y, k); break;
        case GG_Q8_0: dequantize_q8_0(row, y, k); break;
        case GG_Q4_K: dequantize_q4_K(row, y, k); break;
        case GG_Q6_K: dequantize_q6_K(row, y, k); break;
        }
    }
    return 0;
}

/* ---------------------------------------------------------------------------------------- */
/* activation quantization: reference                                                       */

/* A32 row of k: per block of 32, d = amax / 127, q = round-half-even(x * (1 / d)), s = sum q */
static void quantize_a32_ref(const float *x, int64_t k, uint8_t *row) {
    const int64_t nb = k / QK32;
    float *d = (float *)row;
    int32_t *s = (int32_t *)(row + 4 * nb);
    int8_t *q = (int8_t *)(row + 8 * nb);
    for (int64_t b = 0; b < nb; b++) {
        float amax = 0.0f;
        for (int i = 0; i < QK32; i++) amax = fmaxf(amax, fabsf(x[b * QK32 + i]));
        const float db = amax / 127.0f, id = db != 0.0f ? 1.0f / db : 0.0f;
        int32_t sum = 0;
        for (int i = 0; i < QK32; i++) {
            const int v = (int)nearbyintf(x[b * QK32 + i] * id);
            q[b * QK32 + i] = (int8_t)v;
            sum += v;
        }
        d[b] = db;
        s[b] = sum;
    }
}

/* Q8_K row of k (ggml-quants.c quantize_row_q8_K_ref, with the scale's sign taken positive:
 * llama.cpp's iscale = -127 / max flips every code and the scale when the element of largest
 * magnitude is positive, which changes no product d * q): iscale = 127 / amax, q =
 * round-half-even(iscale * x) in [-127, 127], d = 1 / iscale, bsums = sums of 16 codes */
static void quantize_q8_K_ref(const float *x, int64_t k, block_q8_K *y) {
    for (int64_t i = 0; i < k / QK_K; i++, x += QK_K) {
        float amax = 0.0f;
        for (int j = 0; j < QK_K; j++) amax = fmaxf(amax, fabsf(x[j]));
        memset(&y[i], 0, sizeof(block_q8_K));
        if (amax == 0.0f) continue;
        const float iscale = 127.0f / amax;
        for (int j = 0; j < QK_K; j++) {
            int v = (int)nearbyintf(iscale * x[j]);
            v = v > 127 ? 127 : v < -127 ? -127 : v;
            y[i].qs[j] = (int8_t)v;
            y[i].bsums[j / 16] += v;
        }
        y[i].d = 1.0f / iscale;
    }
}

/* ---------------------------------------------------------------------------------------- */
/* dot products: reference, one function per format (the accumulation order of the header)    */

/* the A32 row's parts */
#define A32_D(row, nb) ((const float *)(row))
#define A32_S(row, nb) ((const int32_t *)((row) + 4 * (nb)))
#define A32_Q(row, nb) ((const int8_t *)((row) + 8 * (nb)))

static float dot_q4_0_ref(const block_q4_0 *w, const uint8_t *xr, int64_t k) {
    const int64_t nb = k / QK32;
    const float *xd = A32_D(xr, nb);
    const int8_t *xq = A32_Q(xr, nb);
    float lane[8] = {0};
    for (int64_t b = 0; b < nb; b++) {
        int32_t isum = 0;
        for (int j = 0; j < QK32 / 2; j++)
            isum += ((w[b].qs[j] & 0xF) - 8) * xq[b * QK32 + j] + ((w[b].qs[j] >> 4) - 8) * xq[b * QK32 + j + 16];
        lane[b % 8] = fmaf((float)isum, f16_at(&w[b].d) * xd[b], lane[b % 8]);
    }
    return hsum8_ref(lane);
}

static float dot_q5_0_ref(const block_q5_0 *w, const uint8_t *xr, int64_t k) {
    const int64_t nb = k / QK32;
    const float *xd = A32_D(xr, nb);
    const int8_t *xq = A32_Q(xr, nb);
    float lane[8] = {0};
    for (int64_t b = 0; b < nb; b++) {
        uint32_t qh;
        memcpy(&qh, w[b].qh, 4);
        int32_t isum = 0;
        for (int j = 0; j < QK32 / 2; j++) {
            const int q0 = (w[b].qs[j] & 0xF) | (((qh >> j) & 1) << 4);
            const int q1 = (w[b].qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4);
            isum += (q0 - 16) * xq[b * QK32 + j] + (q1 - 16) * xq[b * QK32 + j + 16];
        }
        lane[b % 8] = fmaf((float)isum, f16_at(&w[b].d) * xd[b], lane[b % 8]);
    }
    return hsum8_ref(lane);
}

static float dot_q8_0_ref(const block_q8_0 *w, const uint8_t *xr, int64_t k) {
    const int64_t nb = k / QK32;
    const float *xd = A32_D(xr, nb);
    const int8_t *xq = A32_Q(xr, nb);
    float lane[8] = {0};
    for (int64_t b = 0; b < nb; b++) {
        int32_t isum = 0;
        for (int j = 0; j < QK32; j++) isum += w[b].qs[j] * xq[b * QK32 + j];
        lane[b % 8] = fmaf((float)isum, f16_at(&w[b].d) * xd[b], lane[b % 8]);
    }
    return hsum8_ref(lane);
}

static float dot_q4_K_ref(const block_q4_K *w, const block_q8_K *x, int64_t k) {
    float acc = 0.0f;
    for (int64_t i = 0; i < k / QK_K; i++) {
        int32_t isum = 0, msum = 0;
        for (int j = 0; j < 8; j++) {
            uint8_t sc, m;
            scale_min_k4(j, w[i].scales, &sc, &m);
            const uint8_t *q = w[i].qs + 32 * (j / 2);
            int32_t s = 0, xs = 0;
            for (int l = 0; l < 32; l++) {
                const int xv = x[i].qs[32 * j + l];
                s += (j % 2 ? q[l] >> 4 : q[l] & 0xF) * xv;
                xs += xv;
            }
            isum += sc * s;
            msum += m * xs;
        }
        acc = fmaf((float)isum, f16_at(&w[i].d) * x[i].d, acc);
        acc = fmaf((float)-msum, f16_at(&w[i].dmin) * x[i].d, acc);
    }
    return acc;
}

static float dot_q6_K_ref(const block_q6_K *w, const block_q8_K *x, int64_t k) {
    float acc = 0.0f;
    for (int64_t i = 0; i < k / QK_K; i++) {
        int32_t isum = 0;
        for (int j = 0; j < 16; j++) {
            int32_t s = 0;
            for (int l = 0; l < 16; l++) s += (q6_K_code(&w[i], 16 * j + l) - 32) * x[i].qs[16 * j + l];
            isum += w[i].scales[j] * s;
        }
        acc = fmaf((float)isum, f16_at(&w[i].d) * x[i].d, acc);
    }
    return acc;
}

static float dot_ref(int type, const uint8_t *w, const uint8_t *xr, int64_t k) {
    switch (type) {
    case GG_Q4_0: return dot_q4_0_ref((const block_q4_0 *)w, xr, k);
    case GG_Q5_0: return dot_q5_0_ref((const block_q5_0 *)w, xr, k);
    case GG_Q8_0: return dot_q8_0_ref((const block_q8_0 *)w, xr, k);
    case GG_Q4_K: return dot_q4_K_ref((const block_q4_K *)w, (const block_q8_K *)xr, k);
    default: return dot_q6_K_ref((const block_q6_K *)w, (const block_q8_K *)xr, k);
    }
}

#if GG_AVX2
/* ---------------------------------------------------------------------------------------- */
/* AVX2: activation quantization                                                              */

/* 32 floats * mul, rounded half-even, as 32 int8 in element order (|values| <= 127) */
static inline __m256i round_pack32(const float *x, __m256 mul) {
    const int r = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
    __m256i i0 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(x), mul), r));
    __m256i i1 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(x + 8), mul), r));
    __m256i i2 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(x + 16), mul), r));
    __m256i i3 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(x + 24), mul), r));
    i0 = _mm256_packs_epi32(i0, i1); /* lanes interleaved by 128-bit halves */
    i2 = _mm256_packs_epi32(i2, i3);
    i0 = _mm256_packs_epi16(i0, i2);
    i0 = _mm256_permutevar8x32_epi32(i0, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    const __m256i lim = _mm256_set1_epi8(127);
    return _mm256_max_epi8(_mm256_min_epi8(i0, lim), _mm256_sub_epi8(_mm256_setzero_si256(), lim));
}

/* the largest |x| of n floats (n % 8 == 0) */
static inline float absmax(const float *x, int64_t n) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 m = _mm256_setzero_ps();
    for (int64_t i = 0; i < n; i += 8) m = _mm256_max_ps(m, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + i)));
    __m128 m4 = _mm_max_ps(_mm256_extractf128_ps(m, 1), _mm256_castps256_ps128(m));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    return _mm_cvtss_f32(m4);
}

/* the sums of codes 0..15 and 16..31 of a 32-code vector */
static inline void sums16(__m256i q, int32_t *lo, int32_t *hi) {
    const __m256i s = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), q), _mm256_set1_epi16(1));
    __m256i t = _mm256_hadd_epi32(s, s);
    t = _mm256_hadd_epi32(t, t);
    *lo = _mm256_extract_epi32(t, 0);
    *hi = _mm256_extract_epi32(t, 4);
}

static void quantize_a32(const float *x, int64_t k, uint8_t *row) {
    const int64_t nb = k / QK32;
    float *d = (float *)row;
    int32_t *s = (int32_t *)(row + 4 * nb);
    int8_t *q = (int8_t *)(row + 8 * nb);
    for (int64_t b = 0; b < nb; b++) {
        const float db = absmax(x + b * QK32, QK32) / 127.0f, id = db != 0.0f ? 1.0f / db : 0.0f;
        const __m256i v = round_pack32(x + b * QK32, _mm256_set1_ps(id));
        _mm256_storeu_si256((__m256i *)(q + b * QK32), v);
        int32_t lo, hi;
        sums16(v, &lo, &hi);
        d[b] = db;
        s[b] = lo + hi;
    }
}

static void quantize_q8_K(const float *x, int64_t k, block_q8_K *y) {
    for (int64_t i = 0; i < k / QK_K; i++, x += QK_K) {
        const float amax = absmax(x, QK_K);
        memset(&y[i], 0, sizeof(block_q8_K));
        if (amax == 0.0f) continue;
        const float iscale = 127.0f / amax;
        for (int c = 0; c < QK_K / 32; c++) {
            const __m256i v = round_pack32(x + 32 * c, _mm256_set1_ps(iscale));
            _mm256_storeu_si256((__m256i *)(y[i].qs + 32 * c), v);
            int32_t lo, hi;
            sums16(v, &lo, &hi);
            y[i].bsums[2 * c] = (int16_t)lo;
            y[i].bsums[2 * c + 1] = (int16_t)hi;
        }
        y[i].d = 1.0f / iscale;
    }
}

/* ---------------------------------------------------------------------------------------- */
/* AVX2: dot products                                                                          */

/* Software prefetch of the weight bytes GG_PREFETCH ahead of the block being read: the hardware
 * prefetcher alone leaves a streaming thread at about half the bandwidth (as in q8kernel.c) */
#ifndef GG_PREFETCH
#define GG_PREFETCH 2048
#endif
static inline void prefetch_span(const void *p, int bytes) {
    for (int off = 0; off < bytes; off += 64) _mm_prefetch((const char *)p + GG_PREFETCH + off, _MM_HINT_T0);
}

/* the repacked kernels: each super-block prefetches the one GG_PREFETCH_X16 super-blocks ahead
 * (the groups lie back to back, so this runs on into the next group) */
#ifndef GG_PREFETCH_X16
#define GG_PREFETCH_X16 2
#endif
static inline void prefetch_ahead(const uint8_t *w, int bytes) {
    for (int off = 0; off < bytes; off += 64) _mm_prefetch((const char *)w + GG_PREFETCH_X16 * bytes + off, _MM_HINT_T0);
}

/* the sum of 8 int32 lanes (exact) */
static inline int32_t hsum_i32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 1));
    return _mm_cvtsi128_si32(s);
}

/* four blocks' int32 lane vectors -> per 128-bit lane their four partial totals (q8kernel.c) */
static inline __m256i reduce4(__m256i a, __m256i b, __m256i c, __m256i d) {
    const __m256i ab = _mm256_add_epi32(_mm256_unpacklo_epi32(a, b), _mm256_unpackhi_epi32(a, b));
    const __m256i cd = _mm256_add_epi32(_mm256_unpacklo_epi32(c, d), _mm256_unpackhi_epi32(c, d));
    return _mm256_add_epi32(_mm256_unpacklo_epi64(ab, cd), _mm256_unpackhi_epi64(ab, cd));
}

/* the int32 totals of eight blocks' 32-code dots, block t in lane t */
static inline __m256i reduce8(const __m256i *d) {
    const __m256i a = reduce4(d[0], d[1], d[2], d[3]), c = reduce4(d[4], d[5], d[6], d[7]);
    return _mm256_add_epi32(_mm256_permute2x128_si256(a, c, 0x20), _mm256_permute2x128_si256(a, c, 0x31));
}

/* 32 unsigned codes (< 64) x 32 int8 -> 8 int32 partial sums (pairs never saturate int16) */
static inline __m256i dot_u8(__m256i u, const int8_t *x) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, _mm256_loadu_si256((const __m256i *)x)), _mm256_set1_epi16(1));
}

/* 32 int8 codes x 32 int8 -> 8 int32 partial sums: |w| unsigned, x takes w's sign (vpsignb) */
static inline __m256i dot_s8(__m256i w, const int8_t *x) {
    const __m256i xv = _mm256_loadu_si256((const __m256i *)x);
    return _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(xv, w)), _mm256_set1_epi16(1));
}

/* Q4_0's 32 codes 0..15 in element order */
static inline __m256i codes_q4_0(const block_q4_0 *b) {
    const __m128i t = _mm_loadu_si128((const __m128i *)b->qs);
    return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(t, 4), t), _mm256_set1_epi8(0x0F));
}

/* 0xFF in byte j where bit j of the 32 bits at p is set (llama.cpp's bytes_from_bits_32) */
static inline __m256i bytes_from_bits_32(const uint8_t *p) {
    uint32_t x32;
    memcpy(&x32, p, 4);
    const __m256i shuf = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0);
    const __m256i bytes = _mm256_or_si256(_mm256_shuffle_epi8(_mm256_set1_epi32((int)x32), shuf),
                                          _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe));
    return _mm256_cmpeq_epi8(bytes, _mm256_set1_epi64x(-1));
}

/* Q5_0's 32 codes 0..31 in element order */
static inline __m256i codes_q5_0(const block_q5_0 *b) {
    const __m128i t = _mm_loadu_si128((const __m128i *)b->qs);
    const __m256i lo = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(t, 4), t), _mm256_set1_epi8(0x0F));
    return _mm256_or_si256(lo, _mm256_and_si256(bytes_from_bits_32(b->qh), _mm256_set1_epi8(0x10)));
}

/* The 32-element formats, R rows (R a compile-time constant at every call): for one weight row
 * w of nb blocks and the A32 rows xr[0..R-1], out[j] = the row's dot product in the header's
 * order. Blocks go in groups of 8: their codes are decoded once for all R rows, their 8 integer
 * totals reduced to one vector (block t in lane t) and fused into the 8 float lanes at once. */
static inline __attribute__((always_inline)) void tile_b32(const int type, const int R, const uint8_t *w,
                                                           int64_t nb, const uint8_t *const *xr, float *out) {
    const int64_t bsz = type == GG_Q8_0 ? sizeof(block_q8_0) : type == GG_Q5_0 ? sizeof(block_q5_0) : sizeof(block_q4_0);
    const int shift = type == GG_Q8_0 ? 0 : type == GG_Q5_0 ? 4 : 3; /* offset 16 or 8: sum x << shift */
    __m256 acc[4];
    for (int j = 0; j < R; j++) acc[j] = _mm256_setzero_ps();
    int64_t b = 0;
    for (; b + 8 <= nb; b += 8) {
        prefetch_span(w + b * bsz, 8 * (int)bsz);
        __m256i c[8];
        uint16_t dh[8];
        for (int t = 0; t < 8; t++) {
            const uint8_t *blk = w + (b + t) * bsz;
            memcpy(&dh[t], blk, 2);
            c[t] = type == GG_Q8_0 ? _mm256_loadu_si256((const __m256i *)(blk + 2))
                 : type == GG_Q5_0 ? codes_q5_0((const block_q5_0 *)blk) : codes_q4_0((const block_q4_0 *)blk);
        }
        const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)dh));
        for (int j = 0; j < R; j++) {
            const int8_t *xq = A32_Q(xr[j], nb) + b * QK32;
            __m256i p[8];
            for (int t = 0; t < 8; t++) p[t] = type == GG_Q8_0 ? dot_s8(c[t], xq + 32 * t) : dot_u8(c[t], xq + 32 * t);
            __m256i tot = reduce8(p);
            if (shift)
                tot = _mm256_sub_epi32(tot, _mm256_slli_epi32(_mm256_loadu_si256((const __m256i *)(A32_S(xr[j], nb) + b)), shift));
            const __m256 s = _mm256_mul_ps(dw, _mm256_loadu_ps(A32_D(xr[j], nb) + b));
            acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(tot), s, acc[j]);
        }
    }
    float lane[4][8];
    for (int j = 0; j < R; j++) _mm256_storeu_ps(lane[j], acc[j]);
    for (; b < nb; b++) { /* the last nb % 8 blocks, one at a time, each into its lane */
        const uint8_t *blk = w + b * bsz;
        const float dwb = f16_at(blk);
        const __m256i c = type == GG_Q8_0 ? _mm256_loadu_si256((const __m256i *)(blk + 2))
                        : type == GG_Q5_0 ? codes_q5_0((const block_q5_0 *)blk) : codes_q4_0((const block_q4_0 *)blk);
        for (int j = 0; j < R; j++) {
            const int8_t *xq = A32_Q(xr[j], nb) + b * QK32;
            int32_t isum = hsum_i32(type == GG_Q8_0 ? dot_s8(c, xq) : dot_u8(c, xq));
            if (shift) isum -= A32_S(xr[j], nb)[b] << shift;
            lane[j][b % 8] = fmaf((float)isum, dwb * A32_D(xr[j], nb)[b], lane[j][b % 8]);
        }
    }
    for (int j = 0; j < R; j++) out[j] = hsum8_ref(lane[j]);
}

/* ggml's get_scale_shuffle_k4: bytes selecting int16 scale i in every lane */
static inline __m256i scale_shuffle_k4(int i) {
    return _mm256_set1_epi16((short)(((2 * i + 1) << 8) | (2 * i)));
}

/* Q4_K, R rows of Q8_K activations (as tile_b32). Per super-block the 6-bit scales and mins are
 * unpacked once (llama.cpp's kmask trick) and the 4-bit codes once per 64 elements for all rows;
 * per row the exact integer sums isum and msum, then the two fused float steps. */
static inline __attribute__((always_inline)) void tile_q4_K(const int R, const block_q4_K *w, int64_t nsb,
                                                            const uint8_t *const *xr, float *out) {
    const uint32_t km1 = 0x3f3f3f3f, km2 = 0x0f0f0f0f, km3 = 0x03030303;
    const __m256i m4 = _mm256_set1_epi8(0xF);
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int64_t i = 0; i < nsb; i++) {
        const block_q4_K *b = w + i;
        prefetch_span(b, sizeof(block_q4_K));
        uint32_t u[4];
        memcpy(u, b->scales, 12);
        u[3] = ((u[2] >> 4) & km2) | (((u[1] >> 6) & km3) << 4);
        const uint32_t aux = u[1] & km1;
        u[1] = (u[2] & km2) | (((u[0] >> 6) & km3) << 4);
        u[2] = aux;
        u[0] &= km1;
        /* int16 lanes: scales 0..7, then mins 0..7 */
        const __m256i sm = _mm256_cvtepu8_epi16(_mm_set_epi32((int)u[3], (int)u[2], (int)u[1], (int)u[0]));
        const __m128i mins = _mm256_extracti128_si256(sm, 1);
        const __m256i scales = _mm256_permute2x128_si256(sm, sm, 0x00);
        __m256i sumi[4];
        for (int j = 0; j < R; j++) sumi[j] = _mm256_setzero_si256();
        for (int c = 0; c < 4; c++) {
            const __m256i bits = _mm256_loadu_si256((const __m256i *)(b->qs + 32 * c));
            const __m256i lo = _mm256_and_si256(bits, m4), hi = _mm256_and_si256(_mm256_srli_epi16(bits, 4), m4);
            const __m256i sl = _mm256_shuffle_epi8(scales, scale_shuffle_k4(2 * c));
            const __m256i sh = _mm256_shuffle_epi8(scales, scale_shuffle_k4(2 * c + 1));
            for (int j = 0; j < R; j++) {
                const int8_t *q = ((const block_q8_K *)xr[j])[i].qs + 64 * c;
                const __m256i pl = _mm256_madd_epi16(sl, _mm256_maddubs_epi16(lo, _mm256_loadu_si256((const __m256i *)q)));
                const __m256i ph = _mm256_madd_epi16(sh, _mm256_maddubs_epi16(hi, _mm256_loadu_si256((const __m256i *)(q + 32))));
                sumi[j] = _mm256_add_epi32(sumi[j], _mm256_add_epi32(pl, ph));
            }
        }
        const float dw = f16_at(&b->d), mw = f16_at(&b->dmin);
        for (int j = 0; j < R; j++) {
            const block_q8_K *x = &((const block_q8_K *)xr[j])[i];
            const __m256i bs = _mm256_loadu_si256((const __m256i *)x->bsums);
            const __m128i s32 = _mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1));
            __m128i ms = _mm_madd_epi16(mins, s32);
            ms = _mm_add_epi32(ms, _mm_unpackhi_epi64(ms, ms));
            ms = _mm_add_epi32(ms, _mm_shuffle_epi32(ms, 1));
            const int32_t msum = _mm_cvtsi128_si32(ms), isum = hsum_i32(sumi[j]);
            acc[j] = fmaf((float)isum, dw * x->d, acc[j]);
            acc[j] = fmaf((float)-msum, mw * x->d, acc[j]);
        }
    }
    for (int j = 0; j < R; j++) out[j] = acc[j];
}

/* ggml's get_scale_shuffle: bytes [2i x 8, 2i+1 x 8] of a 16-byte vector */
static inline __m128i scale_shuffle(int i) {
    return _mm_set_epi64x(0x0101010101010101LL * (2 * i + 1), 0x0101010101010101LL * (2 * i));
}

/* Q6_K, R rows of Q8_K activations (as tile_b32): the 6-bit codes of each 128 elements once for
 * all rows (llama.cpp's layout), unsigned; the -32 offset through the row's 16-element sums. */
static inline __attribute__((always_inline)) void tile_q6_K(const int R, const block_q6_K *w, int64_t nsb,
                                                            const uint8_t *const *xr, float *out) {
    const __m256i m3 = _mm256_set1_epi8(3), m15 = _mm256_set1_epi8(15);
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int64_t i = 0; i < nsb; i++) {
        const block_q6_K *b = w + i;
        prefetch_span(b, sizeof(block_q6_K));
        const __m128i sc = _mm_loadu_si128((const __m128i *)b->scales);
        __m256i sumi[4];
        for (int j = 0; j < R; j++) sumi[j] = _mm256_setzero_si256();
        for (int h = 0; h < 2; h++) {
            const __m256i b1 = _mm256_loadu_si256((const __m256i *)(b->ql + 64 * h));
            const __m256i b2 = _mm256_loadu_si256((const __m256i *)(b->ql + 64 * h + 32));
            const __m256i bh = _mm256_loadu_si256((const __m256i *)(b->qh + 32 * h));
            __m256i q[4], s[4];
            q[0] = _mm256_or_si256(_mm256_and_si256(b1, m15), _mm256_slli_epi16(_mm256_and_si256(bh, m3), 4));
            q[1] = _mm256_or_si256(_mm256_and_si256(b2, m15), _mm256_slli_epi16(_mm256_and_si256(bh, _mm256_set1_epi8(12)), 2));
            q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(b1, 4), m15), _mm256_and_si256(bh, _mm256_set1_epi8(48)));
            q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(b2, 4), m15),
                                   _mm256_srli_epi16(_mm256_and_si256(bh, _mm256_set1_epi8((char)0xC0)), 2));
            for (int t = 0; t < 4; t++) s[t] = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(sc, scale_shuffle(4 * h + t)));
            for (int j = 0; j < R; j++) {
                const int8_t *x = ((const block_q8_K *)xr[j])[i].qs + 128 * h;
                for (int t = 0; t < 4; t++)
                    sumi[j] = _mm256_add_epi32(sumi[j], _mm256_madd_epi16(s[t], _mm256_maddubs_epi16(q[t],
                                               _mm256_loadu_si256((const __m256i *)(x + 32 * t)))));
            }
        }
        const float dw = f16_at(&b->d);
        const __m256i sc16 = _mm256_cvtepi8_epi16(sc);
        for (int j = 0; j < R; j++) {
            const block_q8_K *x = &((const block_q8_K *)xr[j])[i];
            const int32_t off = hsum_i32(_mm256_madd_epi16(sc16, _mm256_loadu_si256((const __m256i *)x->bsums)));
            const int32_t isum = hsum_i32(sumi[j]) - 32 * off;
            acc[j] = fmaf((float)isum, dw * x->d, acc[j]);
        }
    }
    for (int j = 0; j < R; j++) out[j] = acc[j];
}

/* one weight row against R activation rows, dispatched to the format's tile */
static inline __attribute__((always_inline)) void tile(int type, const int R, const uint8_t *w, int64_t k,
                                                       const uint8_t *const *xr, float *out) {
    switch (type) {
    case GG_Q4_0: tile_b32(GG_Q4_0, R, w, k / QK32, xr, out); break;
    case GG_Q5_0: tile_b32(GG_Q5_0, R, w, k / QK32, xr, out); break;
    case GG_Q8_0: tile_b32(GG_Q8_0, R, w, k / QK32, xr, out); break;
    case GG_Q4_K: tile_q4_K(R, (const block_q4_K *)w, k / QK_K, xr, out); break;
    default: tile_q6_K(R, (const block_q6_K *)w, k / QK_K, xr, out); break;
    }
}

/* ---------------------------------------------------------------------------------------- */
/* AVX-512 (F, BW, VL, DQ, VNNI): compiled for that target function by function, run only when  */
/* the CPU has it (gg_simd). Tiles of up to 8 activation rows (a K-quant call of 9..12 rows: one  */
/* tile) share each decoded weight block;                                                         */
/* the K-quants' float steps run for the 8 rows at once, row j in float lane j, each lane the    */
/* reference's scalar fused multiply-adds in the reference's order (lanes never mix).            */

#define GG_T512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")))
#define ROW_TILE512 12 /* K-quants: the most activation rows per tile (two groups of float lanes) */
#define ROW_TILE512_B32 8 /* 32-element formats: rows per tile (8 float lanes per row) */

/* the low and high 256-bit halves of 16 int32 lanes added (exact) */
GG_T512 static inline __m256i fold512(__m512i v) {
    return _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1));
}

/* the eight rows' lane vectors -> their totals, row j in lane j (rows >= R are zero) */
GG_T512 static inline __attribute__((always_inline)) __m256i rows8(const int R, const __m256i *v) {
    __m256i p[8];
    for (int j = 0; j < 8; j++) p[j] = j < R ? v[j] : _mm256_setzero_si256();
    return reduce8(p);
}

/* Q4_K, R rows (R <= ROW_TILE512) of Q8_K activations, super-blocks i0 .. i1 - 1 of weight row w, each row's
 * accumulator carried in and out through out[j] (0 before super-block 0: the float steps and their
 * order are those of one pass over all super-blocks); xd[16 i + j] = row j's scale of super-block i.
 * Rows 0..7 and 8.. take the float lanes of two vectors.
 * Per 64 elements the codes [sub-block 2c | 2c+1] fill one 512-bit vector; per row one
 * vpmaddubsw (exact: codes < 16) and one vpdpwssd with the two sub-blocks' scales. */
GG_T512 static inline __attribute__((always_inline)) void tile512_q4_K(const int R, const block_q4_K *w, int64_t i0,
                                                                       int64_t i1, const uint8_t *const *xr,
                                                                       const float *xd, float *out) {
    const uint32_t km1 = 0x3f3f3f3f, km2 = 0x0f0f0f0f, km3 = 0x03030303;
    const __m512i m4 = _mm512_set1_epi8(0xF);
    /* bytes 8..15 of the unpacked scales (the mins), each twice: int16 lanes m0 m0 m1 m1 .. m7 m7 */
    const __m128i dup_mins = _mm_setr_epi8(8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15);
    float acc1 = out[0], init[16] = {0.0f}; /* (lanes 8..15: rows 8..11, the rest unused) */
    for (int j = 0; j < R; j++) init[j] = out[j];
    __m256 acc[2] = {_mm256_loadu_ps(init), _mm256_loadu_ps(init + 8)}; /* rows 0..7, 8..15 */
    for (int64_t i = i0; i < i1; i++) {
        const block_q4_K *b = w + i;
        prefetch_span(b, sizeof(block_q4_K));
        uint32_t u[4];
        memcpy(u, b->scales, 12);
        u[3] = ((u[2] >> 4) & km2) | (((u[1] >> 6) & km3) << 4);
        const uint32_t aux = u[1] & km1;
        u[1] = (u[2] & km2) | (((u[0] >> 6) & km3) << 4);
        u[2] = aux;
        u[0] &= km1;
        const __m128i sm8 = _mm_set_epi32((int)u[3], (int)u[2], (int)u[1], (int)u[0]); /* scales 0..7, mins 0..7 */
        const __m512i sc16 = _mm512_zextsi128_si512(_mm_cvtepu8_epi16(sm8));            /* int16 scales 0..7 */
        const __m256i mins = _mm256_cvtepu8_epi16(_mm_shuffle_epi8(sm8, dup_mins));
        __m512i sumi[ROW_TILE512];
        for (int j = 0; j < R; j++) sumi[j] = _mm512_setzero_si512();
        for (int c = 0; c < 4; c += 2) { /* elements 64c .. 64c + 127: sub-blocks 2c .. 2c + 3 */
            __m512i codes[2];
            for (int u = 0; u < 2; u++) {
                const __m256i bits = _mm256_loadu_si256((const __m256i *)(b->qs + 32 * (c + u)));
                codes[u] = _mm512_and_si512(
                    _mm512_inserti64x4(_mm512_castsi256_si512(bits), _mm256_srli_epi16(bits, 4), 1), m4);
            }
            /* vpdpbusd's int32 lanes (sums of 4 products, |.| <= 4 * 15 * 127) of the two vectors
             * packed to int16 (exact) per 128-bit lane q: 4 of codes[0] (sub-block 2c + q / 2), then
             * 4 of codes[1] (sub-block 2c + 2 + q / 2); vpdpwssd weighs each pair by its scale */
            int16_t ix[32];
            for (int e = 0; e < 32; e++) ix[e] = (int16_t)(2 * c + (e >= 16) + 2 * ((e / 4) & 1));
            const __m512i idx = _mm512_loadu_si512((const void *)ix);
            const __m512i sc = _mm512_permutexvar_epi16(idx, sc16);
            for (int j = 0; j < R; j++) {
                const int8_t *q = ((const block_q8_K *)xr[j])[i].qs + 64 * c;
                const __m512i p0 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), codes[0], _mm512_loadu_si512((const void *)q));
                const __m512i p1 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), codes[1], _mm512_loadu_si512((const void *)(q + 64)));
                sumi[j] = _mm512_dpwssd_epi32(sumi[j], _mm512_packs_epi32(p0, p1), sc);
            }
        }
        const float dw = f16_at(&b->d), mw = f16_at(&b->dmin);
        __m256i is[ROW_TILE512], ms[ROW_TILE512];
        for (int j = 0; j < R; j++) {
            const __m256i bs = _mm256_loadu_si256((const __m256i *)((const block_q8_K *)xr[j])[i].bsums);
            is[j] = fold512(sumi[j]);
            ms[j] = _mm256_madd_epi16(mins, bs);
        }
        if (R == 1) {
            const float xd0 = xd[16 * i];
            acc1 = fmaf((float)hsum_i32(is[0]), dw * xd0, acc1);
            acc1 = fmaf((float)-hsum_i32(ms[0]), mw * xd0, acc1);
        } else {
            for (int g = 0; g < 2 && 8 * g < R; g++) {
                const int Rg = R - 8 * g < 8 ? R - 8 * g : 8;
                const __m256 x8 = _mm256_loadu_ps(xd + 16 * i + 8 * g);
                const __m256i isum = rows8(Rg, is + 8 * g), msum = rows8(Rg, ms + 8 * g);
                acc[g] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(_mm256_set1_ps(dw), x8), acc[g]);
                acc[g] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_setzero_si256(), msum)),
                                         _mm256_mul_ps(_mm256_set1_ps(mw), x8), acc[g]);
            }
        }
    }
    if (R == 1) {
        out[0] = acc1;
    } else {
        float lane[16];
        _mm256_storeu_ps(lane, acc[0]);
        _mm256_storeu_ps(lane + 8, acc[1]);
        for (int j = 0; j < R; j++) out[j] = lane[j];
    }
}

/* Q6_K, R rows (R <= ROW_TILE512) of Q8_K activations (i0, i1, out and xd as tile512_q4_K). Per 128 elements the 6-bit
 * codes of [elements 0..63 | 64..127] fill two 512-bit vectors (llama.cpp's bit layout, unsigned
 * 0..63); per row one vpmaddubsw and one vpdpwssd with the four 16-element sub-blocks' scales
 * each; the -32 offset through the row's 16-element sums, once per super-block. */
GG_T512 static inline __attribute__((always_inline)) void tile512_q6_K(const int R, const block_q6_K *w, int64_t i0,
                                                                       int64_t i1, const uint8_t *const *xr,
                                                                       const float *xd, float *out) {
    const __m512i m15 = _mm512_set1_epi8(15);
    /* per 256-bit half: the high bits' masks and shifts into bits 4..5 of each code */
    const __m512i mlo = _mm512_inserti64x4(_mm512_set1_epi8(3), _mm256_set1_epi8(12), 1);
    const __m512i mhi = _mm512_inserti64x4(_mm512_set1_epi8(48), _mm256_set1_epi8((char)0xC0), 1);
    const __m512i shl = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(2), 1);
    const __m512i shr = _mm512_inserti64x4(_mm512_set1_epi16(0), _mm256_set1_epi16(2), 1);
    float acc1 = out[0], init[16] = {0.0f}; /* (lanes 8..15: rows 8..11, the rest unused) */
    for (int j = 0; j < R; j++) init[j] = out[j];
    __m256 acc[2] = {_mm256_loadu_ps(init), _mm256_loadu_ps(init + 8)}; /* rows 0..7, 8..15 */
    for (int64_t i = i0; i < i1; i++) {
        const block_q6_K *b = w + i;
        prefetch_span(b, sizeof(block_q6_K));
        const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)b->scales));
        const __m512i sc512 = _mm512_zextsi256_si512(sc16);
        __m512i sumi[ROW_TILE512];
        for (int j = 0; j < R; j++) sumi[j] = _mm512_setzero_si512();
        for (int h = 0; h < 2; h++) {
            const __m512i B = _mm512_loadu_si512((const void *)(b->ql + 64 * h));
            const __m512i BH = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(b->qh + 32 * h)));
            __m512i q[2], sc[1];
            q[0] = _mm512_or_si512(_mm512_and_si512(B, m15), _mm512_sllv_epi16(_mm512_and_si512(BH, mlo), shl));
            q[1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(B, 4), m15),
                                   _mm512_srlv_epi16(_mm512_and_si512(BH, mhi), shr));
            /* vpdpbusd's int32 lanes (sums of 4 products, |.| <= 4 * 63 * 127 < 2^15) of q[0] and
             * q[1] packed to int16 (exact) per 128-bit lane u: 4 of q[0] (sub-block 8h + u), then 4
             * of q[1] (sub-block 8h + 4 + u); vpdpwssd weighs each pair by its scale */
            const int s0 = 8 * h;
            int16_t ix[32];
            for (int e = 0; e < 32; e++) ix[e] = (int16_t)(s0 + e / 8 + 4 * ((e / 4) & 1));
            const __m512i idx = _mm512_loadu_si512((const void *)ix);
            sc[0] = _mm512_permutexvar_epi16(idx, sc512);
            for (int j = 0; j < R; j++) {
                const int8_t *x = ((const block_q8_K *)xr[j])[i].qs + 128 * h;
                const __m512i p0 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q[0], _mm512_loadu_si512((const void *)x));
                const __m512i p1 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q[1], _mm512_loadu_si512((const void *)(x + 64)));
                sumi[j] = _mm512_dpwssd_epi32(sumi[j], _mm512_packs_epi32(p0, p1), sc[0]);
            }
        }
        const float dw = f16_at(&b->d);
        __m256i is[ROW_TILE512];
        for (int j = 0; j < R; j++) {
            const __m256i bs = _mm256_loadu_si256((const __m256i *)((const block_q8_K *)xr[j])[i].bsums);
            is[j] = _mm256_sub_epi32(fold512(sumi[j]), _mm256_slli_epi32(_mm256_madd_epi16(sc16, bs), 5));
        }
        if (R == 1) {
            acc1 = fmaf((float)hsum_i32(is[0]), dw * xd[16 * i], acc1);
        } else {
            for (int g = 0; g < 2 && 8 * g < R; g++) {
                const int Rg = R - 8 * g < 8 ? R - 8 * g : 8;
                const __m256 x8 = _mm256_loadu_ps(xd + 16 * i + 8 * g);
                acc[g] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(rows8(Rg, is + 8 * g)), _mm256_mul_ps(_mm256_set1_ps(dw), x8), acc[g]);
            }
        }
    }
    if (R == 1) {
        out[0] = acc1;
    } else {
        float lane[16];
        _mm256_storeu_ps(lane, acc[0]);
        _mm256_storeu_ps(lane + 8, acc[1]);
        for (int j = 0; j < R; j++) out[j] = lane[j];
    }
}

/* The 32-element formats with vpdpbusd (256-bit, AVX512-VL VNNI): tile_b32's blocks, lanes and
 * float steps for up to 8 rows, each block's 32-code dot one instruction instead of two (the
 * same exact int32 totals: vpmaddubsw's pairs never saturate here, |w| <= 128, |x| <= 127). */
GG_T512 static inline __attribute__((always_inline)) void tile512_b32(const int type, const int R, const uint8_t *w,
                                                                      int64_t nb, const uint8_t *const *xr, float *out) {
    const int64_t bsz = type == GG_Q8_0 ? sizeof(block_q8_0) : type == GG_Q5_0 ? sizeof(block_q5_0) : sizeof(block_q4_0);
    const int shift = type == GG_Q8_0 ? 0 : type == GG_Q5_0 ? 4 : 3;
    __m256 acc[ROW_TILE512_B32];
    for (int j = 0; j < R; j++) acc[j] = _mm256_setzero_ps();
    int64_t b = 0;
    for (; b + 8 <= nb; b += 8) {
        prefetch_span(w + b * bsz, 8 * (int)bsz);
        __m256i c[8];
        uint16_t dh[8];
        for (int t = 0; t < 8; t++) {
            const uint8_t *blk = w + (b + t) * bsz;
            memcpy(&dh[t], blk, 2);
            c[t] = type == GG_Q8_0 ? _mm256_loadu_si256((const __m256i *)(blk + 2))
                 : type == GG_Q5_0 ? codes_q5_0((const block_q5_0 *)blk) : codes_q4_0((const block_q4_0 *)blk);
        }
        __m256i cabs[8];
        if (type == GG_Q8_0)
            for (int t = 0; t < 8; t++) cabs[t] = _mm256_sign_epi8(c[t], c[t]);
        const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)dh));
        for (int j = 0; j < R; j++) {
            const int8_t *xq = A32_Q(xr[j], nb) + b * QK32;
            __m256i p[8];
            for (int t = 0; t < 8; t++) {
                const __m256i xv = _mm256_loadu_si256((const __m256i *)(xq + 32 * t));
                p[t] = type == GG_Q8_0 ? _mm256_dpbusd_epi32(_mm256_setzero_si256(), cabs[t], _mm256_sign_epi8(xv, c[t]))
                                       : _mm256_dpbusd_epi32(_mm256_setzero_si256(), c[t], xv);
            }
            __m256i tot = reduce8(p);
            if (shift)
                tot = _mm256_sub_epi32(tot, _mm256_slli_epi32(_mm256_loadu_si256((const __m256i *)(A32_S(xr[j], nb) + b)), shift));
            const __m256 s = _mm256_mul_ps(dw, _mm256_loadu_ps(A32_D(xr[j], nb) + b));
            acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(tot), s, acc[j]);
        }
    }
    float lane[ROW_TILE512_B32][8];
    for (int j = 0; j < R; j++) _mm256_storeu_ps(lane[j], acc[j]);
    for (; b < nb; b++) { /* the last nb % 8 blocks, one at a time, each into its lane */
        const uint8_t *blk = w + b * bsz;
        const float dwb = f16_at(blk);
        const __m256i c = type == GG_Q8_0 ? _mm256_loadu_si256((const __m256i *)(blk + 2))
                        : type == GG_Q5_0 ? codes_q5_0((const block_q5_0 *)blk) : codes_q4_0((const block_q4_0 *)blk);
        for (int j = 0; j < R; j++) {
            const int8_t *xq = A32_Q(xr[j], nb) + b * QK32;
            int32_t isum = hsum_i32(type == GG_Q8_0 ? dot_s8(c, xq) : dot_u8(c, xq));
            if (shift) isum -= A32_S(xr[j], nb)[b] << shift;
            lane[j][b % 8] = fmaf((float)isum, dwb * A32_D(xr[j], nb)[b], lane[j][b % 8]);
        }
    }
    for (int j = 0; j < R; j++) out[j] = hsum8_ref(lane[j]);
}

/* one weight row against R activation rows (R <= 8) at AVX-512: the 32-element formats over the
 * whole row (out written), the K-quants over super-blocks i0 .. i1 - 1 (out carried in and out) */
GG_T512 static inline __attribute__((always_inline)) void tile512(int type, const int R, const uint8_t *w, int64_t k,
                                                                  int64_t i0, int64_t i1, const uint8_t *const *xr,
                                                                  const float *xd, float *out) {
    if (R > ROW_TILE512_B32 && !is_k_quant(type)) return; /* (never: their tiles hold at most 8 rows) */
    switch (type) {
    case GG_Q4_0: tile512_b32(GG_Q4_0, R <= 8 ? R : 8, w, k / QK32, xr, out); break;
    case GG_Q5_0: tile512_b32(GG_Q5_0, R <= 8 ? R : 8, w, k / QK32, xr, out); break;
    case GG_Q8_0: tile512_b32(GG_Q8_0, R <= 8 ? R : 8, w, k / QK32, xr, out); break;
    case GG_Q4_K: tile512_q4_K(R, (const block_q4_K *)w, i0, i1, xr, xd, out); break;
    default: tile512_q6_K(R, (const block_q6_K *)w, i0, i1, xr, xd, out); break;
    }
}
#endif /* GG_AVX2 */

/* ---------------------------------------------------------------------------------------- */
/* the linear                                                                                  */

#define ROW_TILE 4   /* activation rows that share each decoded weight block */
#define OCHUNK 8     /* weight rows kept in L1 while the row tiles pass over them */
#define ROW_BLOCK 64 /* activation rows kept in L2 while the weights stream past */

/* output columns o0..o1-1 of all n rows, AVX2 tiles (4 rows) or the scalar reference */
static void gemm_part(int type, const uint8_t *w, int64_t k, const uint8_t *act, int64_t n, float *y,
                      int64_t ldy, int64_t o0, int64_t o1, int level) {
    const int64_t wrb = gg_row_bytes(type, k), arb = gg_act_bytes(type, k);
    (void)level; /* (always the reference without AVX2 at compile time) */
    for (int64_t b0 = 0; b0 < n; b0 += ROW_BLOCK) {
        const int64_t b1 = b0 + ROW_BLOCK < n ? b0 + ROW_BLOCK : n;
        for (int64_t c0 = o0; c0 < o1; c0 += OCHUNK) {
            const int64_t c1 = c0 + OCHUNK < o1 ? c0 + OCHUNK : o1;
            for (int64_t r0 = b0; r0 < b1; r0 += ROW_TILE) {
                const int R = b1 - r0 >= ROW_TILE ? ROW_TILE : (int)(b1 - r0);
                const uint8_t *xr[ROW_TILE];
                for (int j = 0; j < R; j++) xr[j] = act + (r0 + j) * arb;
                for (int64_t o = c0; o < c1; o++) {
                    float out[ROW_TILE];
                    const uint8_t *wr = w + o * wrb;
#if GG_AVX2
                    if (level >= GG_LEVEL_AVX2) {
                        switch (R) {
                        case 4: tile(type, 4, wr, k, xr, out); break;
                        case 3: tile(type, 3, wr, k, xr, out); break;
                        case 2: tile(type, 2, wr, k, xr, out); break;
                        default: tile(type, 1, wr, k, xr, out); break;
                        }
                    } else
#endif
                        for (int j = 0; j < R; j++) out[j] = dot_ref(type, wr, xr[j], k);
                    for (int j = 0; j < R; j++) y[(r0 + j) * ldy + o] = out[j];
                }
            }
        }
    }
}

#if GG_AVX2
/* the row counts of the tiles over n rows at most `max` each, as even as possible (9 rows: 5 + 4,
 * never 8 + 1): tile t of T starts at row n * t / T */
static inline int64_t tile_start(int64_t n, int64_t tiles, int64_t t) { return n * t / tiles; }

/* ---------------------------------------------------------------------------------------- */
/* AVX-512, many rows (a prefill): each K-quant super-block of a weight row decoded once into  */
/* vectors (codes, scale vectors, mins, fp16 scales as floats) that every row tile of the row  */
/* block then reads, instead of decoding it again per tile. Same integer sums, same float      */
/* steps in the same order as tile512_q4_K / tile512_q6_K.                                      */

typedef struct { __m512i codes[4], sc[2]; __m256i mins; float dw, mw; } dec_q4_K; /* 448 bytes */
typedef struct { __m512i q[4], sc[2]; __m256i sc16; float dw; } dec_q6_K;          /* 448 bytes */
_Static_assert(sizeof(dec_q4_K) == 448 && sizeof(dec_q6_K) == 448, "decoded super-blocks: 448 bytes");

/* the decoded super-block i of a Q4_K row (the vectors tile512_q4_K builds) */
GG_T512 static inline void decode512_q4_K(const block_q4_K *b, dec_q4_K *d) {
    const uint32_t km1 = 0x3f3f3f3f, km2 = 0x0f0f0f0f, km3 = 0x03030303;
    const __m512i m4 = _mm512_set1_epi8(0xF);
    const __m128i dup_mins = _mm_setr_epi8(8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15);
    prefetch_span(b, sizeof(block_q4_K));
    uint32_t u[4];
    memcpy(u, b->scales, 12);
    u[3] = ((u[2] >> 4) & km2) | (((u[1] >> 6) & km3) << 4);
    const uint32_t aux = u[1] & km1;
    u[1] = (u[2] & km2) | (((u[0] >> 6) & km3) << 4);
    u[2] = aux;
    u[0] &= km1;
    const __m128i sm8 = _mm_set_epi32((int)u[3], (int)u[2], (int)u[1], (int)u[0]);
    const __m512i sc16 = _mm512_zextsi128_si512(_mm_cvtepu8_epi16(sm8));
    d->mins = _mm256_cvtepu8_epi16(_mm_shuffle_epi8(sm8, dup_mins));
    for (int c = 0; c < 4; c++) {
        const __m256i bits = _mm256_loadu_si256((const __m256i *)(b->qs + 32 * c));
        d->codes[c] = _mm512_and_si512(_mm512_inserti64x4(_mm512_castsi256_si512(bits), _mm256_srli_epi16(bits, 4), 1), m4);
    }
    for (int c = 0; c < 4; c += 2) {
        int16_t ix[32];
        for (int e = 0; e < 32; e++) ix[e] = (int16_t)(2 * c + (e >= 16) + 2 * ((e / 4) & 1));
        d->sc[c / 2] = _mm512_permutexvar_epi16(_mm512_loadu_si512((const void *)ix), sc16);
    }
    d->dw = f16_at(&b->d);
    d->mw = f16_at(&b->dmin);
}

/* the decoded super-block of a Q6_K row (the vectors tile512_q6_K builds) */
GG_T512 static inline void decode512_q6_K(const block_q6_K *b, dec_q6_K *d) {
    const __m512i m15 = _mm512_set1_epi8(15);
    const __m512i mlo = _mm512_inserti64x4(_mm512_set1_epi8(3), _mm256_set1_epi8(12), 1);
    const __m512i mhi = _mm512_inserti64x4(_mm512_set1_epi8(48), _mm256_set1_epi8((char)0xC0), 1);
    const __m512i shl = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(2), 1);
    const __m512i shr = _mm512_inserti64x4(_mm512_set1_epi16(0), _mm256_set1_epi16(2), 1);
    prefetch_span(b, sizeof(block_q6_K));
    d->sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)b->scales));
    const __m512i sc512 = _mm512_zextsi256_si512(d->sc16);
    for (int h = 0; h < 2; h++) {
        const __m512i B = _mm512_loadu_si512((const void *)(b->ql + 64 * h));
        const __m512i BH = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(b->qh + 32 * h)));
        d->q[2 * h] = _mm512_or_si512(_mm512_and_si512(B, m15), _mm512_sllv_epi16(_mm512_and_si512(BH, mlo), shl));
        d->q[2 * h + 1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(B, 4), m15),
                                          _mm512_srlv_epi16(_mm512_and_si512(BH, mhi), shr));
        int16_t ix[32];
        for (int e = 0; e < 32; e++) ix[e] = (int16_t)(8 * h + e / 8 + 4 * ((e / 4) & 1));
        d->sc[h] = _mm512_permutexvar_epi16(_mm512_loadu_si512((const void *)ix), sc512);
    }
    d->dw = f16_at(&b->d);
}

/* tile512_q4_K over decoded super-blocks d[0 .. i1 - i0 - 1] (super-blocks i0 .. i1 - 1) */
GG_T512 static inline __attribute__((always_inline)) void tile512d_q4_K(const int R, const dec_q4_K *d, int64_t i0,
                                                                        int64_t i1, const uint8_t *const *xr,
                                                                        const float *xd, float *out) {
    float init[16] = {0.0f};
    for (int j = 0; j < R; j++) init[j] = out[j];
    __m256 acc[2] = {_mm256_loadu_ps(init), _mm256_loadu_ps(init + 8)};
    for (int64_t i = i0; i < i1; i++, d++) {
        __m512i sumi[ROW_TILE512_B32];
        for (int j = 0; j < R; j++) sumi[j] = _mm512_setzero_si512();
        for (int c = 0; c < 4; c += 2)
            for (int j = 0; j < R; j++) {
                const int8_t *q = ((const block_q8_K *)xr[j])[i].qs + 64 * c;
                const __m512i p0 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), d->codes[c], _mm512_loadu_si512((const void *)q));
                const __m512i p1 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), d->codes[c + 1], _mm512_loadu_si512((const void *)(q + 64)));
                sumi[j] = _mm512_dpwssd_epi32(sumi[j], _mm512_packs_epi32(p0, p1), d->sc[c / 2]);
            }
        __m256i is[ROW_TILE512_B32], ms[ROW_TILE512_B32];
        for (int j = 0; j < R; j++) {
            is[j] = fold512(sumi[j]);
            ms[j] = _mm256_madd_epi16(d->mins, _mm256_loadu_si256((const __m256i *)((const block_q8_K *)xr[j])[i].bsums));
        }
        const __m256 x8 = _mm256_loadu_ps(xd + 16 * i);
        acc[0] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(rows8(R, is)), _mm256_mul_ps(_mm256_set1_ps(d->dw), x8), acc[0]);
        acc[0] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_setzero_si256(), rows8(R, ms))),
                                 _mm256_mul_ps(_mm256_set1_ps(d->mw), x8), acc[0]);
    }
    float lane[8];
    _mm256_storeu_ps(lane, acc[0]);
    for (int j = 0; j < R; j++) out[j] = lane[j];
}

/* tile512_q6_K over decoded super-blocks (as tile512d_q4_K) */
GG_T512 static inline __attribute__((always_inline)) void tile512d_q6_K(const int R, const dec_q6_K *d, int64_t i0,
                                                                        int64_t i1, const uint8_t *const *xr,
                                                                        const float *xd, float *out) {
    float init[16] = {0.0f};
    for (int j = 0; j < R; j++) init[j] = out[j];
    __m256 acc = _mm256_loadu_ps(init);
    for (int64_t i = i0; i < i1; i++, d++) {
        __m512i sumi[ROW_TILE512_B32];
        for (int j = 0; j < R; j++) sumi[j] = _mm512_setzero_si512();
        for (int h = 0; h < 2; h++)
            for (int j = 0; j < R; j++) {
                const int8_t *x = ((const block_q8_K *)xr[j])[i].qs + 128 * h;
                const __m512i p0 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), d->q[2 * h], _mm512_loadu_si512((const void *)x));
                const __m512i p1 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), d->q[2 * h + 1], _mm512_loadu_si512((const void *)(x + 64)));
                sumi[j] = _mm512_dpwssd_epi32(sumi[j], _mm512_packs_epi32(p0, p1), d->sc[h]);
            }
        __m256i is[ROW_TILE512_B32];
        for (int j = 0; j < R; j++) {
            const __m256i bs = _mm256_loadu_si256((const __m256i *)((const block_q8_K *)xr[j])[i].bsums);
            is[j] = _mm256_sub_epi32(fold512(sumi[j]), _mm256_slli_epi32(_mm256_madd_epi16(d->sc16, bs), 5));
        }
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(rows8(R, is)), _mm256_mul_ps(_mm256_set1_ps(d->dw), _mm256_loadu_ps(xd + 16 * i)), acc);
    }
    float lane[8];
    _mm256_storeu_ps(lane, acc);
    for (int j = 0; j < R; j++) out[j] = lane[j];
}

GG_T512 static inline __attribute__((always_inline)) void tile512d(int type, const int R, const void *d, int64_t i0,
                                                                   int64_t i1, const uint8_t *const *xr,
                                                                   const float *xd, float *out) {
    if (type == GG_Q4_K) tile512d_q4_K(R, (const dec_q4_K *)d, i0, i1, xr, xd, out);
    else tile512d_q6_K(R, (const dec_q6_K *)d, i0, i1, xr, xd, out);
}

/* super-blocks per chunk when decoded once for the row block: OCHUNK rows' decoded chunk
 * (448 bytes a super-block) and a tile's activations (292 bytes a row) within ~40 KB of L1 */
#define DEC_BYTES 448
#define PRE_L1_BYTES (40 * 1024)
#define PRE_KC_MAX 8

/* activation bytes of one row tile kept in L1 while a chunk of weight rows passes over it: the
 * K-quants' super-blocks go in chunks of this many bytes of the tile's Q8_K rows (a wide input,
 * the 1.5B's ffn_down at 8960, is 82 KB for 8 rows); each output's accumulator waits in y between
 * chunks, so its float steps and their order stay those of one pass */
#define TILE_L1_BYTES (24 * 1024)

/* gemm_part at AVX-512: tiles of up to 8 rows, or one of up to 12 (K-quants) */
GG_T512 static void gemm_part512(int type, const uint8_t *w, int64_t k, const uint8_t *act, int64_t n, float *y,
                                 int64_t ldy, int64_t o0, int64_t o1) {
    const int64_t wrb = gg_row_bytes(type, k), arb = gg_act_bytes(type, k), nsb = k / QK_K;
    const int kq = is_k_quant(type);
    for (int64_t b0 = 0; b0 < n; b0 += ROW_BLOCK) {
        /* tiles of at most 8 rows (more spill registers), but a K-quant call of 9..ROW_TILE512 rows
         * (a verification) in one tile: its weights decoded once */
        const int64_t b1 = b0 + ROW_BLOCK < n ? b0 + ROW_BLOCK : n;
        const int64_t tiles = kq && b1 - b0 <= ROW_TILE512 ? 1 : (b1 - b0 + ROW_TILE512_B32 - 1) / ROW_TILE512_B32;
        const int64_t rmax = (b1 - b0 + tiles - 1) / tiles; /* the largest tile's rows */
        int64_t kc = kq ? TILE_L1_BYTES / (rmax * (int64_t)sizeof(block_q8_K)) : 1;
        if (kc < 1) kc = 1;
        if (!kq || kc > nsb) kc = kq ? nsb : 1;
        /* per tile: its first row, rows, activation rows and (K-quants) scales, xd[16 i + j] */
        int64_t r0s[ROW_BLOCK / ROW_TILE512_B32];
        int Rs[ROW_BLOCK / ROW_TILE512_B32];
        const uint8_t *xrs[ROW_BLOCK / ROW_TILE512_B32][ROW_TILE512];
        float xds[ROW_BLOCK / ROW_TILE512_B32][kq ? 16 * nsb : 1];
        for (int64_t t = 0; t < tiles; t++) {
            r0s[t] = b0 + tile_start(b1 - b0, tiles, t);
            Rs[t] = (int)(b0 + tile_start(b1 - b0, tiles, t + 1) - r0s[t]);
            for (int j = 0; j < Rs[t]; j++) xrs[t][j] = act + (r0s[t] + j) * arb;
            if (kq)
                for (int64_t i = 0; i < nsb; i++)
                    for (int j = 0; j < 16; j++) xds[t][16 * i + j] = j < Rs[t] ? ((const block_q8_K *)xrs[t][j])[i].d : 0.0f;
        }
        /* three tiles or more (a prefill): each super-block decoded once for all of them (with two,
         * the smaller chunks cost about what the second decoding saves) */
        const int pre = kq && tiles >= 3;
        if (pre) {
            kc = PRE_L1_BYTES / (OCHUNK * DEC_BYTES + rmax * (int64_t)sizeof(block_q8_K));
            kc = kc < 1 ? 1 : kc > PRE_KC_MAX ? PRE_KC_MAX : kc > nsb ? nsb : kc;
        }
        for (int64_t c0 = o0; c0 < o1; c0 += OCHUNK) {
            const int64_t c1 = c0 + OCHUNK < o1 ? c0 + OCHUNK : o1;
            for (int64_t s0 = 0; s0 < (kq ? nsb : 1); s0 += kc) {
                const int64_t s1 = kq && s0 + kc < nsb ? s0 + kc : nsb;
                _Alignas(64) uint8_t dec[pre ? OCHUNK * PRE_KC_MAX * DEC_BYTES : 64];
                if (pre)
                    for (int64_t o = c0; o < c1; o++)
                        for (int64_t i = s0; i < s1; i++) {
                            uint8_t *d = dec + ((o - c0) * kc + (i - s0)) * DEC_BYTES;
                            if (type == GG_Q4_K) decode512_q4_K((const block_q4_K *)(w + o * wrb) + i, (dec_q4_K *)d);
                            else decode512_q6_K((const block_q6_K *)(w + o * wrb) + i, (dec_q6_K *)d);
                        }
                for (int64_t t = 0; t < tiles; t++) {
                    const int R = Rs[t];
                    const int64_t r0 = r0s[t];
                    for (int64_t o = c0; o < c1; o++) {
                        float out[ROW_TILE512];
                        for (int j = 0; j < R; j++) out[j] = s0 ? y[(r0 + j) * ldy + o] : 0.0f;
                        const uint8_t *wr = w + o * wrb;
                        const uint8_t *const *xr = xrs[t];
                        const float *xd = xds[t];
                        if (pre) {
                            const uint8_t *d = dec + (o - c0) * kc * DEC_BYTES;
                            switch (R) {
                            case 8: tile512d(type, 8, d, s0, s1, xr, xd, out); break;
                            case 7: tile512d(type, 7, d, s0, s1, xr, xd, out); break;
                            case 6: tile512d(type, 6, d, s0, s1, xr, xd, out); break;
                            case 5: tile512d(type, 5, d, s0, s1, xr, xd, out); break;
                            case 4: tile512d(type, 4, d, s0, s1, xr, xd, out); break;
                            case 3: tile512d(type, 3, d, s0, s1, xr, xd, out); break;
                            case 2: tile512d(type, 2, d, s0, s1, xr, xd, out); break;
                            default: tile512d(type, 1, d, s0, s1, xr, xd, out); break;
                            }
                            for (int j = 0; j < R; j++) y[(r0 + j) * ldy + o] = out[j];
                            continue;
                        }
                        switch (R) {
                        case 12: tile512(type, 12, wr, k, s0, s1, xr, xd, out); break;
                        case 11: tile512(type, 11, wr, k, s0, s1, xr, xd, out); break;
                        case 10: tile512(type, 10, wr, k, s0, s1, xr, xd, out); break;
                        case 9: tile512(type, 9, wr, k, s0, s1, xr, xd, out); break;
                        case 8: tile512(type, 8, wr, k, s0, s1, xr, xd, out); break;
                        case 7: tile512(type, 7, wr, k, s0, s1, xr, xd, out); break;
                        case 6: tile512(type, 6, wr, k, s0, s1, xr, xd, out); break;
                        case 5: tile512(type, 5, wr, k, s0, s1, xr, xd, out); break;
                        case 4: tile512(type, 4, wr, k, s0, s1, xr, xd, out); break;
                        case 3: tile512(type, 3, wr, k, s0, s1, xr, xd, out); break;
                        case 2: tile512(type, 2, wr, k, s0, s1, xr, xd, out); break;
                        default: tile512(type, 1, wr, k, s0, s1, xr, xd, out); break;
                        }
                        for (int j = 0; j < R; j++) y[(r0 + j) * ldy + o] = out[j];
                    }
                }
            }
        }
    }
}

/* ---------------------------------------------------------------------------------------- */
/* AVX-512 VNNI over the repacked K-quants (ggml_blocks.h): int32 lane c of every vector is     */
/* output column c of a group of 16, so a block's integer sums need no horizontal reduction:    */
/* per 4 elements one vpdpbusd of the 16 columns' codes against the activation row's 4 codes    */
/* broadcast; per sub-block its int32 sums times the 16 columns' scales (vpmulld, exact); the   */
/* float steps are the reference's per (row, column), 16 columns at once. Integer sums are      */
/* exact, so each output equals the scalar reference's bit for bit, whatever R.                 */

/* the 4 int8 codes at q as one int32, broadcast to 16 lanes */
GG_T512 static inline __m512i bcast4(const int8_t *q) {
    int32_t v;
    memcpy(&v, q, 4);
    return _mm512_set1_epi32(v);
}

/* Q4_K_X16: group g (nsb repacked super-blocks at w) against R rows (R <= 8) of Q8_K activations
 * xr[j]; bs[j][8 i + s] = row j's sum of the codes of sub-block s of super-block i (int16);
 * out[16 j + c] = row j's output of column c */
GG_T512 static inline __attribute__((always_inline)) void x16_q4_K(const int R, const uint8_t *w, int64_t nsb,
                                                                   const block_q8_K *const *xr,
                                                                   const int16_t *const *bs, float *out) {
    const __m512i m4 = _mm512_set1_epi8(0xF);
    __m512 acc[8];
    for (int j = 0; j < R; j++) acc[j] = _mm512_setzero_ps();
    for (int64_t i = 0; i < nsb; i++, w += X16_Q4_K_BYTES) {
        prefetch_ahead(w, X16_Q4_K_BYTES);
        __m512i isum[8], sub[8];
        for (int j = 0; j < R; j++) isum[j] = _mm512_setzero_si512();
        for (int s = 0; s < 8; s++) {
            /* two accumulation chains per row (low and high nibbles): vpdpbusd's latency */
            __m512i sub2[8];
            for (int j = 0; j < R; j++) sub[j] = sub2[j] = _mm512_setzero_si512();
            for (int h = 0; h < 4; h++) {
                const __m512i v = _mm512_loadu_si512((const void *)(w + 64 * (4 * s + h)));
                const __m512i lo = _mm512_and_si512(v, m4), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
                for (int j = 0; j < R; j++) {
                    const int8_t *q = xr[j][i].qs + 32 * s + 4 * h;
                    sub[j] = _mm512_dpbusd_epi32(sub[j], lo, bcast4(q));
                    sub2[j] = _mm512_dpbusd_epi32(sub2[j], hi, bcast4(q + 16));
                }
            }
            const __m512i sc = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(w + X16_Q4_K_SC + 16 * s)));
            for (int j = 0; j < R; j++)
                isum[j] = _mm512_add_epi32(isum[j], _mm512_mullo_epi32(_mm512_add_epi32(sub[j], sub2[j]), sc));
        }
        /* msum = sum_s m_s * (row's sum of sub-block s), by pairs of sub-blocks (vpdpwssd, exact) */
        __m512i mp[4];
        for (int p = 0; p < 4; p++) mp[p] = _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i *)(w + X16_Q4_K_MIN + 32 * p)));
        const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(w + X16_Q4_K_D)));
        const __m512 mw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(w + X16_Q4_K_DMIN)));
        for (int j = 0; j < R; j++) {
            __m512i ms = _mm512_setzero_si512();
            for (int p = 0; p < 4; p++) {
                int32_t pair;
                memcpy(&pair, bs[j] + 8 * i + 2 * p, 4);
                ms = _mm512_dpwssd_epi32(ms, mp[p], _mm512_set1_epi32(pair));
            }
            const __m512 xd = _mm512_set1_ps(xr[j][i].d);
            acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[j]), _mm512_mul_ps(dw, xd), acc[j]);
            acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_setzero_si512(), ms)),
                                     _mm512_mul_ps(mw, xd), acc[j]);
        }
    }
    for (int j = 0; j < R; j++) _mm512_storeu_ps(out + 16 * j, acc[j]);
}

/* Q6_K_X16: as x16_q4_K (bs unused: Q8_K's own 16-element sums serve the -32 offset) */
GG_T512 static inline __attribute__((always_inline)) void x16_q6_K(const int R, const uint8_t *w, int64_t nsb,
                                                                   const block_q8_K *const *xr, float *out) {
    const __m512i m4 = _mm512_set1_epi8(0xF), m3 = _mm512_set1_epi8(3), m30 = _mm512_set1_epi8(0x30);
    __m512 acc[8];
    for (int j = 0; j < R; j++) acc[j] = _mm512_setzero_ps();
    for (int64_t i = 0; i < nsb; i++, w += X16_Q6_K_BYTES) {
        prefetch_ahead(w, X16_Q6_K_BYTES);
        __m512i isum[8], sub[8];
        for (int j = 0; j < R; j++) isum[j] = _mm512_setzero_si512();
        for (int s = 0; s < 16; s++) {
            const __m512i v0 = _mm512_loadu_si512((const void *)(w + 128 * s));
            const __m512i v1 = _mm512_loadu_si512((const void *)(w + 128 * s + 64));
            const __m512i u = _mm512_loadu_si512((const void *)(w + X16_Q6_K_HI + 64 * s));
            /* the codes 0..63 of elements 16s + 4q + e, q < 4 */
            const __m512i q0 = _mm512_or_si512(_mm512_and_si512(v0, m4), _mm512_slli_epi16(_mm512_and_si512(u, m3), 4));
            const __m512i q1 = _mm512_or_si512(_mm512_and_si512(v1, m4),
                                               _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(u, 2), m3), 4));
            const __m512i q2 = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(v0, 4), m4), _mm512_and_si512(u, m30));
            const __m512i q3 = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(v1, 4), m4),
                                               _mm512_and_si512(_mm512_srli_epi16(u, 2), m30));
            for (int j = 0; j < R; j++) {
                const int8_t *q = xr[j][i].qs + 16 * s;
                const __m512i a = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q0, bcast4(q));
                const __m512i b = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q2, bcast4(q + 8));
                sub[j] = _mm512_add_epi32(_mm512_dpbusd_epi32(a, q1, bcast4(q + 4)), _mm512_dpbusd_epi32(b, q3, bcast4(q + 12)));
            }
            const __m512i sc = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(w + X16_Q6_K_SC + 16 * s)));
            for (int j = 0; j < R; j++) isum[j] = _mm512_add_epi32(isum[j], _mm512_mullo_epi32(sub[j], sc));
        }
        /* isum -= 32 * sum_s sc_s * (row's sum of sub-block s), by pairs of sub-blocks */
        for (int j = 0; j < R; j++) sub[j] = _mm512_setzero_si512();
        for (int p = 0; p < 8; p++) {
            const __m128i a = _mm_loadu_si128((const __m128i *)(w + X16_Q6_K_SC + 32 * p));
            const __m128i b = _mm_loadu_si128((const __m128i *)(w + X16_Q6_K_SC + 32 * p + 16));
            const __m512i scp = _mm512_cvtepi8_epi16(
                _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_unpacklo_epi8(a, b)), _mm_unpackhi_epi8(a, b), 1));
            for (int j = 0; j < R; j++) {
                int32_t pair;
                memcpy(&pair, xr[j][i].bsums + 2 * p, 4);
                sub[j] = _mm512_dpwssd_epi32(sub[j], scp, _mm512_set1_epi32(pair));
            }
        }
        const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(w + X16_Q6_K_D)));
        for (int j = 0; j < R; j++) {
            const __m512i is = _mm512_sub_epi32(isum[j], _mm512_slli_epi32(sub[j], 5));
            acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(is), _mm512_mul_ps(dw, _mm512_set1_ps(xr[j][i].d)), acc[j]);
        }
    }
    for (int j = 0; j < R; j++) _mm512_storeu_ps(out + 16 * j, acc[j]);
}

GG_T512 static inline __attribute__((always_inline)) void x16_tile(int type, const int R, const uint8_t *w, int64_t nsb,
                                                                   const block_q8_K *const *xr,
                                                                   const int16_t *const *bs, float *out) {
    if (base_type(type) == GG_Q4_K) x16_q4_K(R, w, nsb, xr, bs, out);
    else x16_q6_K(R, w, nsb, xr, out);
}

/* Q4_K: each row's sums of the codes per sub-block of 32 (Q8_K keeps them per 16), bs[r][8 i + s] */
static void x16_sums32(const block_q8_K *const *xr, int64_t rows, int64_t nsb, int16_t *bsv, const int16_t **bs) {
    for (int64_t r = 0; r < rows; r++) {
        bs[r] = bsv + r * nsb * 8;
        for (int64_t i = 0; i < nsb; i++)
            for (int s = 0; s < 8; s++)
                bsv[(r * nsb + i) * 8 + s] = (int16_t)(xr[r][i].bsums[2 * s] + xr[r][i].bsums[2 * s + 1]);
    }
}

/* one tile of R rows (R <= 8) against one group of 16 columns, AVX-512 */
GG_T512 static void x16_run512(int type, int R, const uint8_t *wg, int64_t nsb, const block_q8_K *const *x,
                               const int16_t *const *b, float *out) {
    switch (R) {
    case 8: x16_tile(type, 8, wg, nsb, x, b, out); break;
    case 7: x16_tile(type, 7, wg, nsb, x, b, out); break;
    case 6: x16_tile(type, 6, wg, nsb, x, b, out); break;
    case 5: x16_tile(type, 5, wg, nsb, x, b, out); break;
    case 4: x16_tile(type, 4, wg, nsb, x, b, out); break;
    case 3: x16_tile(type, 3, wg, nsb, x, b, out); break;
    case 2: x16_tile(type, 2, wg, nsb, x, b, out); break;
    default: x16_tile(type, 1, wg, nsb, x, b, out); break;
    }
}

/* ---------------------------------------------------------------------------------------- */
/* AVX2 over the repacked K-quants: each group of 16 columns as two halves of 8 (int32 lane c of  */
/* a 256-bit vector is column 8 hf + c), tiles of up to 4 rows. Without VNNI the products go     */
/* through vpmaddubsw's int16 pairs, summed in int16 while they cannot overflow (Q4_K: a         */
/* sub-block's 8 groups, |.| <= 8 * 2 * 15 * 127; Q6_K: two groups, <= 2 * 2 * 63 * 127), then   */
/* vpmaddwd by the column's scale twice ((sc, sc) per int32 lane): exact integers, so the same   */
/* bits as the reference.                                                                       */

/* the 4 int8 codes at q as one int32, broadcast to 8 lanes */
static inline __m256i bcast4_256(const int8_t *q) {
    int32_t v;
    memcpy(&v, q, 4);
    return _mm256_set1_epi32(v);
}

/* 8 scales at p (uint8 / int8) -> int32 lanes holding the int16 pair (sc, sc) */
static inline __m256i scale_pairs_u8(const uint8_t *p) {
    const __m256i v = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)p));
    return _mm256_or_si256(v, _mm256_slli_epi32(v, 16));
}
static inline __m256i scale_pairs_s8(const uint8_t *p) {
    const __m256i v = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)p));
    return _mm256_or_si256(_mm256_and_si256(v, _mm256_set1_epi32(0xFFFF)), _mm256_slli_epi32(v, 16));
}

/* Q4_K_X16, columns 8 hf .. 8 hf + 7 of the group at w, R rows (R <= 4); out[16 j + c] as x16_q4_K */
static inline __attribute__((always_inline)) void x16_q4_K_avx2(const int R, const uint8_t *w, int64_t nsb, int hf,
                                                                const block_q8_K *const *xr,
                                                                const int16_t *const *bs, float *out) {
    const __m256i m4 = _mm256_set1_epi8(0xF);
    for (int j = 0; j < R; j++) _mm256_storeu_ps(out + 16 * j + 8 * hf, _mm256_setzero_ps());
    for (int64_t i = 0; i < nsb; i++, w += X16_Q4_K_BYTES) {
        if (hf == 0) prefetch_ahead(w, X16_Q4_K_BYTES);
        __m256i isum[4];
        for (int j = 0; j < R; j++) isum[j] = _mm256_setzero_si256();
        for (int s = 0; s < 8; s++) {
            __m256i s16[4];
            for (int j = 0; j < R; j++) s16[j] = _mm256_setzero_si256();
            for (int h = 0; h < 4; h++) {
                const __m256i v = _mm256_loadu_si256((const __m256i *)(w + 64 * (4 * s + h) + 32 * hf));
                const __m256i lo = _mm256_and_si256(v, m4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
                for (int j = 0; j < R; j++) {
                    const int8_t *q = xr[j][i].qs + 32 * s + 4 * h;
                    s16[j] = _mm256_add_epi16(s16[j], _mm256_maddubs_epi16(lo, bcast4_256(q)));
                    s16[j] = _mm256_add_epi16(s16[j], _mm256_maddubs_epi16(hi, bcast4_256(q + 16)));
                }
            }
            const __m256i sc = scale_pairs_u8(w + X16_Q4_K_SC + 16 * s + 8 * hf);
            for (int j = 0; j < R; j++) isum[j] = _mm256_add_epi32(isum[j], _mm256_madd_epi16(s16[j], sc));
        }
        __m256i mp[4];
        for (int p = 0; p < 4; p++)
            mp[p] = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(w + X16_Q4_K_MIN + 32 * p + 16 * hf)));
        const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(w + X16_Q4_K_D + 16 * hf)));
        const __m256 mw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(w + X16_Q4_K_DMIN + 16 * hf)));
        for (int j = 0; j < R; j++) {
            __m256i ms = _mm256_setzero_si256();
            for (int p = 0; p < 4; p++) {
                int32_t pair;
                memcpy(&pair, bs[j] + 8 * i + 2 * p, 4);
                ms = _mm256_add_epi32(ms, _mm256_madd_epi16(mp[p], _mm256_set1_epi32(pair)));
            }
            const __m256 xd = _mm256_set1_ps(xr[j][i].d);
            float *o = out + 16 * j + 8 * hf;
            __m256 a = _mm256_loadu_ps(o);
            a = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[j]), _mm256_mul_ps(dw, xd), a);
            a = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_setzero_si256(), ms)), _mm256_mul_ps(mw, xd), a);
            _mm256_storeu_ps(o, a);
        }
    }
}

/* Q6_K_X16 at AVX2 (as x16_q4_K_avx2) */
static inline __attribute__((always_inline)) void x16_q6_K_avx2(const int R, const uint8_t *w, int64_t nsb, int hf,
                                                                const block_q8_K *const *xr, float *out) {
    const __m256i m4 = _mm256_set1_epi8(0xF), m3 = _mm256_set1_epi8(3), m30 = _mm256_set1_epi8(0x30);
    for (int j = 0; j < R; j++) _mm256_storeu_ps(out + 16 * j + 8 * hf, _mm256_setzero_ps());
    for (int64_t i = 0; i < nsb; i++, w += X16_Q6_K_BYTES) {
        if (hf == 0) prefetch_ahead(w, X16_Q6_K_BYTES);
        __m256i isum[4];
        for (int j = 0; j < R; j++) isum[j] = _mm256_setzero_si256();
        for (int s = 0; s < 16; s++) {
            const __m256i v0 = _mm256_loadu_si256((const __m256i *)(w + 128 * s + 32 * hf));
            const __m256i v1 = _mm256_loadu_si256((const __m256i *)(w + 128 * s + 64 + 32 * hf));
            const __m256i u = _mm256_loadu_si256((const __m256i *)(w + X16_Q6_K_HI + 64 * s + 32 * hf));
            const __m256i q0 = _mm256_or_si256(_mm256_and_si256(v0, m4), _mm256_slli_epi16(_mm256_and_si256(u, m3), 4));
            const __m256i q1 = _mm256_or_si256(_mm256_and_si256(v1, m4),
                                               _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(u, 2), m3), 4));
            const __m256i q2 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(v0, 4), m4), _mm256_and_si256(u, m30));
            const __m256i q3 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(v1, 4), m4),
                                               _mm256_and_si256(_mm256_srli_epi16(u, 2), m30));
            const __m256i sc = scale_pairs_s8(w + X16_Q6_K_SC + 16 * s + 8 * hf);
            for (int j = 0; j < R; j++) {
                const int8_t *q = xr[j][i].qs + 16 * s;
                const __m256i a = _mm256_add_epi16(_mm256_maddubs_epi16(q0, bcast4_256(q)),
                                                   _mm256_maddubs_epi16(q1, bcast4_256(q + 4)));
                const __m256i b = _mm256_add_epi16(_mm256_maddubs_epi16(q2, bcast4_256(q + 8)),
                                                   _mm256_maddubs_epi16(q3, bcast4_256(q + 12)));
                isum[j] = _mm256_add_epi32(isum[j], _mm256_add_epi32(_mm256_madd_epi16(a, sc), _mm256_madd_epi16(b, sc)));
            }
        }
        __m256i off[4];
        for (int j = 0; j < R; j++) off[j] = _mm256_setzero_si256();
        for (int p = 0; p < 8; p++) {
            const __m128i a = _mm_loadl_epi64((const __m128i *)(w + X16_Q6_K_SC + 32 * p + 8 * hf));
            const __m128i b = _mm_loadl_epi64((const __m128i *)(w + X16_Q6_K_SC + 32 * p + 16 + 8 * hf));
            const __m256i scp = _mm256_cvtepi8_epi16(_mm_unpacklo_epi8(a, b));
            for (int j = 0; j < R; j++) {
                int32_t pair;
                memcpy(&pair, xr[j][i].bsums + 2 * p, 4);
                off[j] = _mm256_add_epi32(off[j], _mm256_madd_epi16(scp, _mm256_set1_epi32(pair)));
            }
        }
        const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(w + X16_Q6_K_D + 16 * hf)));
        for (int j = 0; j < R; j++) {
            const __m256i is = _mm256_sub_epi32(isum[j], _mm256_slli_epi32(off[j], 5));
            float *o = out + 16 * j + 8 * hf;
            _mm256_storeu_ps(o, _mm256_fmadd_ps(_mm256_cvtepi32_ps(is), _mm256_mul_ps(dw, _mm256_set1_ps(xr[j][i].d)),
                                                _mm256_loadu_ps(o)));
        }
    }
}

static inline __attribute__((always_inline)) void x16_tile_avx2(int type, const int R, const uint8_t *w, int64_t nsb,
                                                                const block_q8_K *const *xr,
                                                                const int16_t *const *bs, float *out) {
    for (int hf = 0; hf < 2; hf++) {
        if (base_type(type) == GG_Q4_K) x16_q4_K_avx2(R, w, nsb, hf, xr, bs, out);
        else x16_q6_K_avx2(R, w, nsb, hf, xr, out);
    }
}

/* one tile of R rows (R <= 4) against one group of 16 columns, AVX2 */
static void x16_run_avx2(int type, int R, const uint8_t *wg, int64_t nsb, const block_q8_K *const *x,
                         const int16_t *const *b, float *out) {
    switch (R) {
    case 4: x16_tile_avx2(type, 4, wg, nsb, x, b, out); break;
    case 3: x16_tile_avx2(type, 3, wg, nsb, x, b, out); break;
    case 2: x16_tile_avx2(type, 2, wg, nsb, x, b, out); break;
    default: x16_tile_avx2(type, 1, wg, nsb, x, b, out); break;
    }
}

/* output columns o0 .. o1 - 1 (multiples of 16) of all n rows over a repacked type: per block of
 * up to ROW_BLOCK rows, each group of 16 columns against tiles of up to 8 rows (AVX-512) or 4
 * (AVX2), as even as possible, while the group's weights stay in cache */
static void gemm_x16(int type, const uint8_t *w, int64_t k, const uint8_t *act, int64_t n, float *y, int64_t ldy,
                     int64_t o0, int64_t o1, int level) {
    const int64_t nsb = k / QK_K, gbytes = nsb * x16_bytes(type), most = level >= GG_LEVEL_AVX512 ? 8 : 4;
    const int q4k = base_type(type) == GG_Q4_K;
    for (int64_t b0 = 0; b0 < n; b0 += ROW_BLOCK) {
        const int64_t b1 = b0 + ROW_BLOCK < n ? b0 + ROW_BLOCK : n, rows = b1 - b0;
        const block_q8_K *xr[ROW_BLOCK];
        for (int64_t r = 0; r < rows; r++) xr[r] = (const block_q8_K *)(act + (b0 + r) * nsb * (int64_t)sizeof(block_q8_K));
        int16_t bsv[q4k ? ROW_BLOCK * nsb * 8 : 1];
        const int16_t *bs[ROW_BLOCK];
        if (q4k) x16_sums32(xr, rows, nsb, bsv, bs);
        const int64_t tiles = (rows + most - 1) / most;
        for (int64_t o = o0; o < o1; o += 16) {
            const uint8_t *wg = w + o / 16 * gbytes;
            for (int64_t t = 0; t < tiles; t++) {
                const int64_t r0 = tile_start(rows, tiles, t);
                const int R = (int)(tile_start(rows, tiles, t + 1) - r0);
                float out[8 * 16];
                if (level >= GG_LEVEL_AVX512) x16_run512(type, R, wg, nsb, xr + r0, bs + r0, out);
                else x16_run_avx2(type, R, wg, nsb, xr + r0, bs + r0, out);
                for (int j = 0; j < R; j++) memcpy(y + (b0 + r0 + j) * ldy + o, out + 16 * j, 16 * sizeof(float));
            }
        }
    }
}
#endif

/* a repacked type at the scalar level (tests, or SPECD_GG_SIMD=scalar after load): each group of
 * 16 rows back to its GGUF blocks, then the reference */
static void gemm_x16_unpacked(int type, const uint8_t *w, int64_t k, const uint8_t *act, int64_t n, float *y,
                              int64_t ldy, int64_t o0, int64_t o1, int level) {
    const int64_t brb = gg_row_bytes(base_type(type), k);
    uint8_t *tmp = malloc((size_t)(16 * brb));
    if (!tmp) abort();
    for (int64_t o = o0; o < o1; o += 16) {
        unrepack_groups(type, w, k, o / 16, o / 16 + 1, tmp);
        gemm_part(base_type(type), tmp, k, act, n, y + o, ldy, 0, 16, level);
    }
    free(tmp);
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
    const int level = gg_simd();
    (void)level;
    for (int64_t r = 0; r < n; r++) {
#if GG_AVX2
        if (level >= GG_LEVEL_AVX2) {
            if (is_k_quant(type)) quantize_q8_K(x + r * k, k, (block_q8_K *)(act + r * arb));
            else quantize_a32(x + r * k, k, act + r * arb);
            continue;
        }
#endif
        if (is_k_quant(type)) quantize_q8_K_ref(x + r * k, k, (block_q8_K *)(act + r * arb));
        else quantize_a32_ref(x + r * k, k, act + r * arb);
    }
    return 0;
}

/* gg_quantize by the scalar reference (tests: the AVX2 quantization equals it byte for byte) */
int gg_quantize_ref(int type, const float *x, int64_t n, int64_t k, uint8_t *act) {
    const int64_t arb = gg_act_bytes(type, k);
    if (arb < 0 || n < 0) return -1;
    for (int64_t r = 0; r < n; r++) {
        if (is_k_quant(type)) quantize_q8_K_ref(x + r * k, k, (block_q8_K *)(act + r * arb));
        else quantize_a32_ref(x + r * k, k, act + r * arb);
    }
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
    const int parallel = N * k * (n < 4 ? n : 4) >= (1 << 18), level = gg_simd();
    const int team = parallel ? specd_team_size() : 1;
    const double t0 = specd_prof ? prof_wall() : 0.0;
#pragma omp parallel if (parallel) num_threads(team)
    {
        const prof_mark m = prof_begin();
        const int t = omp_get_num_threads(), tid = omp_get_thread_num();
        const int64_t o0 = split(N, t, tid, 16), o1 = split(N, t, tid + 1, 16);
        if (is_x16(type)) {
#if GG_AVX2
            if (level >= GG_LEVEL_AVX2) gemm_x16(type, w, k, act, n, y, ldy, o0, o1, level);
            else
#endif
                gemm_x16_unpacked(type, w, k, act, n, y, ldy, o0, o1, level);
        } else {
#if GG_AVX2
            if (level >= GG_LEVEL_AVX512) gemm_part512(type, w, k, act, n, y, ldy, o0, o1);
            else
#endif
                gemm_part(type, w, k, act, n, y, ldy, o0, o1, level);
        }
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
        uint8_t *tmp = unrepacked(type, w, N, k);
        if (!tmp) return -1;
        const int rc = gg_gemm_ref(base_type(type), tmp, N, k, act, n, y, ldy);
        free(tmp);
        return rc;
    }
    for (int64_t r = 0; r < n; r++)
        for (int64_t o = 0; o < N; o++) y[r * ldy + o] = dot_ref(type, w + o * wrb, act + r * arb, k);
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
