/* specd's GGUF-native linears, the kernels' internal interface.
 *
 * GGUF-native linears: y[n, N] = x[n, k] · W[N, k]ᵀ with W in one of GGML's block formats exactly
 * as the GGUF file stores it (Q4_0, Q5_0, Q8_0, Q4_K, Q6_K; layouts in ggml_blocks.h), no float
 * or re-quantized copy. llama.cpp's ggml-quants.c (reference dequantization, block_q8_K) and
 * ggml-cpu/arch/x86/quants.c (ggml_vec_dot_*_q8_*: the AVX2 integer tricks) are the models.
 *
 * Per block format: a scalar reference dequantization (bit-exact to gguf-py's
 * gguf.quants.dequantize, tested), a scalar reference dot product, an AVX2 and an AVX-512 one.
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
 * The AVX2 and AVX-512 paths perform exactly these float operations (the repacked K-quants' for 8
 * or 16 output columns at once, one column per float lane), so they equal the scalar reference
 * bit for bit, for every row whatever the number of rows in the call, the row's place in a row tile
 * or the thread count (the threads split the output columns).
 *
 * Paths, chosen per call at run time (gg_simd): the scalar reference, AVX2 (the build's baseline
 * on x86-64) and AVX-512 F/BW/VL/DQ + VNNI where the CPU has it (SPECD_GG_SIMD caps the choice).
 *
 * Repacked Q4_0 and K-quants (GG_Q4_0_X16, GG_Q4_K_X16, GG_Q6_K_X16; layouts in ggml_blocks.h):
 * gg_repack copies a tensor once (at load) into groups of 16 rows interleaved per block, so that
 * int32 lane c of a vector is output column c: one vpdpbusd (AVX-512 VNNI; vpmaddubsw + vpmaddwd on
 * AVX2) per 4 elements of 16 columns against the activation's 4 codes broadcast, each (sub-)block's
 * integer sum scaled per column, and no horizontal reduction. The integer sums are the same exact
 * numbers and the float steps per (row, column) the reference's (Q4_0: its eight float lanes, one
 * vector per lane per row), so the repacked paths give the GGUF layout's bits too (gg_gemm_ref on
 * a repacked type unpacks and runs the reference).
 * Threads: OpenMP over output columns, sharing torch's pool as the other kernels (threads.c).
 * Without AVX2 at compile time (another architecture) the scalar reference runs.
 *
 * The files, as llama.cpp lays out its own (ggml-quants.c, ggml-cpu/arch/x86/quants.c,
 * ggml-cpu/repack.cpp, the type traits):
 *   ggml_blocks.h    the block formats, type ids and the repacked layouts
 *   gguf_kernels.h   this header: SIMD levels, the per-type traits, scalar helpers, the files'
 *                    entry points
 *   gguf_ref.c       per format the scalar references: dequantization, activation quantization,
 *                    dot products, the reference gemm
 *   gguf_x86.h       x86 SIMD helpers the AVX2, AVX-512 and repacked kernels share
 *   gguf_avx2.c      AVX2: activation quantization, per format the dot-product tiles, their gemm
 *   gguf_avx512.c    AVX-512 VNNI: per format the dot-product tiles, their gemm
 *   gguf_repack.c    the repacked layouts (Q4_0, K-quants): repack / unrepack, their AVX2 and AVX-512
 *                    tiles, their gemm
 *   gguf_dispatch.c  the traits table, SIMD level choice and the exported entry points (gg_*)
 *
 * Exported C ABI (prototypes, version, signature text): kernel_abi.h.
 */
#ifndef SPECD_GGUF_KERNELS_H
#define SPECD_GGUF_KERNELS_H
#include <stdint.h>
#include <string.h>

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define GG_AVX2 1
#include <immintrin.h>
#else
#define GG_AVX2 0
#endif

#include "ggml_blocks.h"
#include "kernel_abi.h"

/* SIMD levels (runtime dispatch: gguf_dispatch.c) */
/* The dot products a call runs: GG_LEVEL_SCALAR (the reference), GG_LEVEL_AVX2 (AVX2 + FMA +
 * F16C; the build's baseline on x86-64), GG_LEVEL_AVX512 (AVX-512 F/BW/VL/DQ + VNNI: the repacked
 * K-quants' 16-column tiles of up to 8 rows and vpdpbusd for the 32-element formats). Every level computes
 * the same bits (the header's float order; integer sums are exact whatever the SIMD split). */
enum { GG_LEVEL_SCALAR = 0, GG_LEVEL_AVX2 = 2, GG_LEVEL_AVX512 = 3 };
#define GG_LEVELS 4 /* (level 1 unused) */

static inline int is_x16(int type) { return (type & GG_X16) != 0; }
static inline int base_type(int type) { return type & ~GG_X16; }
static inline int is_k_quant(int type) { return base_type(type) == GG_Q4_K || base_type(type) == GG_Q6_K; }
/* the formats with a repacked layout (ggml_blocks.h), and the elements of one of its blocks */
static inline int has_x16(int type) { return is_k_quant(type) || base_type(type) == GG_Q4_0; }
static inline int64_t x16_unit(int type) { return base_type(type) == GG_Q4_0 ? QK32 : QK_K; }

/* tiling of the gemms: rows of activations per tile, weight rows per chunk, rows per block */
#define ROW_TILE 4   /* activation rows that share each decoded weight block */
#define OCHUNK 8     /* weight rows kept in L1 while the row tiles pass over them */
#define ROW_BLOCK 64 /* activation rows kept in L2 while the weights stream past */

/* scalars */

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

/* the 6-bit code (0..63) of element e of a Q6_K block */
static inline int q6_K_code(const block_q6_K *b, int e) {
    const int half = e / 128, quad = (e % 128) / 32, l = e % 32;
    const uint8_t ql = b->ql[64 * half + l + (quad & 1) * 32], qh = b->qh[32 * half + l];
    return ((quad < 2 ? ql & 0xF : ql >> 4) | (((qh >> (2 * quad)) & 3) << 4));
}

/* the A32 row's parts */
#define A32_D(row, nb) ((const float *)(row))
#define A32_S(row, nb) ((const int32_t *)((row) + 4 * (nb)))
#define A32_Q(row, nb) ((const int8_t *)((row) + 8 * (nb)))

/* ---------------------------------------------------------------------------------------- */
/* per-type traits: one entry per type the kernels run (GGUF's and the repacked ones)          */

/* the activation formats (ggml_blocks.h) */
enum { GG_ACT_A32, GG_ACT_Q8_K };

/* one activation row of k floats -> its quantized bytes */
typedef void (*gg_quantize_fn)(const float *x, int64_t k, void *row);
/* output columns o0 .. o1 - 1 of all n rows of y = act . w^T (a thread's share of gg_gemm) */
typedef void (*gg_gemm_fn)(int type, const uint8_t *w, int64_t k, const uint8_t *act, int64_t n, float *y,
                           int64_t ldy, int64_t o0, int64_t o1);

typedef struct {
    int type;            /* GG_* */
    int64_t block;       /* elements per block (QK32 or QK_K) */
    int64_t block_bytes; /* a row's bytes per block (repacked: its share of a group's super-block) */
    int act;             /* GG_ACT_A32 or GG_ACT_Q8_K */
    /* the scalar references (gguf_ref.c); repacked types: NULL (their GGUF blocks are unpacked) */
    void (*dequantize)(const void *w, float *y, int64_t k);
    float (*dot)(const void *w, const uint8_t *act_row, int64_t k);
    /* the activation quantizer per level (equal bytes at every level) */
    gg_quantize_fn quantize[GG_LEVELS];
    /* the gemm per level (equal bits at every level) */
    gg_gemm_fn gemm[GG_LEVELS];
} gg_traits;

#pragma GCC visibility push(hidden)

/* the traits of `type`, NULL when the kernels lack it (gguf_dispatch.c) */
const gg_traits *gg_traits_of(int type);

/* gguf_ref.c */
void gg_dequantize_q4_0(const void *w, float *y, int64_t k);
void gg_dequantize_q5_0(const void *w, float *y, int64_t k);
void gg_dequantize_q8_0(const void *w, float *y, int64_t k);
void gg_dequantize_q4_K(const void *w, float *y, int64_t k);
void gg_dequantize_q6_K(const void *w, float *y, int64_t k);
void gg_quantize_a32_ref(const float *x, int64_t k, void *row);
void gg_quantize_q8_K_ref(const float *x, int64_t k, void *row);
float gg_dot_q4_0_ref(const void *w, const uint8_t *xr, int64_t k);
float gg_dot_q5_0_ref(const void *w, const uint8_t *xr, int64_t k);
float gg_dot_q8_0_ref(const void *w, const uint8_t *xr, int64_t k);
float gg_dot_q4_K_ref(const void *w, const uint8_t *xr, int64_t k);
float gg_dot_q6_K_ref(const void *w, const uint8_t *xr, int64_t k);
void gg_gemm_cols_ref(int type, const uint8_t *w, int64_t k, const uint8_t *act, int64_t n, float *y,
                      int64_t ldy, int64_t o0, int64_t o1);

/* gguf_repack.c */
void gg_gemm_cols_x16_unpacked(int type, const uint8_t *w, int64_t k, const uint8_t *act, int64_t n, float *y,
                               int64_t ldy, int64_t o0, int64_t o1);
uint8_t *gg_unrepacked(int type, const uint8_t *w, int64_t N, int64_t k);

#if GG_AVX2
/* gguf_avx2.c */
void gg_quantize_a32_avx2(const float *x, int64_t k, void *row);
void gg_quantize_q8_K_avx2(const float *x, int64_t k, void *row);
void gg_gemm_cols_avx2(int type, const uint8_t *w, int64_t k, const uint8_t *act, int64_t n, float *y,
                       int64_t ldy, int64_t o0, int64_t o1);
/* gguf_avx512.c (run only where the CPU has AVX-512 VNNI) */
void gg_gemm_cols_avx512(int type, const uint8_t *w, int64_t k, const uint8_t *act, int64_t n, float *y,
                         int64_t ldy, int64_t o0, int64_t o1);
/* gguf_repack.c */
void gg_gemm_cols_x16_avx2(int type, const uint8_t *w, int64_t k, const uint8_t *act, int64_t n, float *y,
                           int64_t ldy, int64_t o0, int64_t o1);
void gg_gemm_cols_x16_avx512(int type, const uint8_t *w, int64_t k, const uint8_t *act, int64_t n, float *y,
                             int64_t ldy, int64_t o0, int64_t o1);
#endif

#pragma GCC visibility pop

#endif
