/* specd's repacked layouts (ggml_blocks.h: GG_Q4_0_X16, GG_Q4_K_X16, GG_Q6_K_X16; llama.cpp's
 * ggml-cpu/repack.cpp is the model): repacking and unpacking (scalar, exact both ways), and the
 * AVX2 and AVX-512 VNNI tiles over them with their gemm; below AVX2 a repacked weight is unpacked
 * group by group and run by the reference. The same bits as the GGUF layout. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gguf_x86.h"

/* ---------------------------------------------------------------------------------------- */
/* repacked layouts (ggml_blocks.h), scalar, both directions                                  */

/* block i of 16 GGUF Q4_0 rows (rows[c], c < 16) -> its repacked bytes at g */
static void repack_q4_0(const block_q4_0 *const *rows, int64_t i, uint8_t *g) {
    for (int c = 0; c < 16; c++) {
        const block_q4_0 *b = rows[c] + i;
        for (int h = 0; h < 4; h++) memcpy(g + 64 * h + 4 * c, b->qs + 4 * h, 4);
        memcpy(g + X16_Q4_0_D + 2 * c, &b->d, 2);
    }
}

static void unrepack_q4_0(const uint8_t *g, int64_t i, block_q4_0 *const *rows) {
    for (int c = 0; c < 16; c++) {
        block_q4_0 *b = rows[c] + i;
        for (int h = 0; h < 4; h++) memcpy(b->qs + 4 * h, g + 64 * h + 4 * c, 4);
        memcpy(&b->d, g + X16_Q4_0_D + 2 * c, 2);
    }
}

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

/* Q6_K_X16's three bytes for elements 16s + 4q + e, q < 4 (ggml_blocks.h): the codes of q = 0
 * and q = 2 whole in the low 6 bits of x and y, the low 4 bits of q = 1 and q = 3 in z's nibbles,
 * their high 2 bits at bits 6-7 of x and y. Decoding the four code vectors takes 9 operations
 * at AVX-512 (11 at AVX2), where splitting every code into a nibble and 2 high bits took 13 (17):
 * the one-row kernel is short of vector ports while it streams, and streams faster with fewer
 * operations a byte (bench/RESULTS.md, session 39) */
static void repack_q6_K(const block_q6_K *const *rows, int64_t i, uint8_t *g) {
    for (int c = 0; c < 16; c++) {
        const block_q6_K *b = rows[c] + i;
        for (int s = 0; s < 16; s++) {
            for (int e = 0; e < 4; e++) {
                int code[4];
                for (int q = 0; q < 4; q++) code[q] = q6_K_code(b, 16 * s + 4 * q + e);
                g[64 * (2 * s) + 4 * c + e] = (uint8_t)(code[0] | (code[1] >> 4) << 6);
                g[64 * (2 * s + 1) + 4 * c + e] = (uint8_t)(code[2] | (code[3] >> 4) << 6);
                g[X16_Q6_K_HI + 64 * s + 4 * c + e] = (uint8_t)((code[1] & 0xF) | (code[3] & 0xF) << 4);
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
            const uint8_t x = g[64 * (2 * s) + 4 * c + e], y = g[64 * (2 * s + 1) + 4 * c + e];
            const uint8_t z = g[X16_Q6_K_HI + 64 * s + 4 * c + e];
            const int code = q == 0 ? x & 0x3F : q == 2 ? y & 0x3F : q == 1 ? (z & 0xF) | (x >> 6) << 4 : (z >> 4) | (y >> 6) << 4;
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

/* bytes of one repacked block of 16 rows of `type` (a repacked type or its base) */
static int64_t x16_bytes(int type) {
    return base_type(type) == GG_Q4_0 ? X16_Q4_0_BYTES : base_type(type) == GG_Q4_K ? X16_Q4_K_BYTES : X16_Q6_K_BYTES;
}

/* block i of the 16 rows -> the repacked bytes at g, by format */
static void repack_block(int type, const uint8_t *const *rows, int64_t i, uint8_t *g) {
    switch (base_type(type)) {
    case GG_Q4_0: repack_q4_0((const block_q4_0 *const *)rows, i, g); break;
    case GG_Q4_K: repack_q4_K((const block_q4_K *const *)rows, i, g); break;
    default: repack_q6_K((const block_q6_K *const *)rows, i, g); break;
    }
}

static void unrepack_block(int type, const uint8_t *g, int64_t i, uint8_t *const *rows) {
    switch (base_type(type)) {
    case GG_Q4_0: unrepack_q4_0(g, i, (block_q4_0 *const *)rows); break;
    case GG_Q4_K: unrepack_q4_K(g, i, (block_q4_K *const *)rows); break;
    default: unrepack_q6_K(g, i, (block_q6_K *const *)rows); break;
    }
}

/* N rows x k of `type` (GG_Q4_0, GG_Q4_K or GG_Q6_K, as GGUF stores them) at w -> the repacked
 * layout of the same values at out (N * gg_row_bytes(type | GG_X16, k) bytes); -1 unless N is a
 * multiple of 16 and the type one with a repacked layout fitting k */
int gg_repack(int type, const uint8_t *w, int64_t N, int64_t k, uint8_t *out) {
    if (is_x16(type) || !has_x16(type)) return -1;
    const int64_t rb = gg_row_bytes(type, k), nsb = k / x16_unit(type);
    if (rb < 0 || N < 0 || N % 16) return -1;
    const int64_t gb = x16_bytes(type);
#pragma omp parallel for num_threads(specd_team_size()) if (N * k >= (1 << 20))
    for (int64_t g = 0; g < N / 16; g++) {
        const uint8_t *rows[16];
        for (int c = 0; c < 16; c++) rows[c] = w + (16 * g + c) * rb;
        for (int64_t i = 0; i < nsb; i++) repack_block(type, rows, i, out + (g * nsb + i) * gb);
    }
    return 0;
}

/* groups g0 .. g1 - 1 of a repacked `type` at w (rows 16 g0 .. 16 g1 - 1) -> their GGUF rows at out */
static void unrepack_groups(int type, const uint8_t *w, int64_t k, int64_t g0, int64_t g1, uint8_t *out) {
    const int64_t nsb = k / x16_unit(type), gb = x16_bytes(type), rb = gg_row_bytes(base_type(type), k);
    for (int64_t g = g0; g < g1; g++) {
        uint8_t *rows[16];
        for (int c = 0; c < 16; c++) rows[c] = out + ((g - g0) * 16 + c) * rb;
        for (int64_t i = 0; i < nsb; i++) unrepack_block(type, w + (g * nsb + i) * gb, i, rows);
    }
}

/* a malloc'd copy of the GGUF blocks N rows of a repacked type came from (the caller frees it);
 * NULL when N is not whole groups of 16 or memory runs out */
uint8_t *gg_unrepacked(int type, const uint8_t *w, int64_t N, int64_t k) {
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

#if GG_AVX2

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

/* acc += the dot of w's 16 int32 lanes' 4 u8 codes with the 4 int8 codes at q (vpdpbusd with q
 * broadcast from memory in the instruction itself, {1to16}: no separate broadcast uop; compilers
 * do not fold _mm512_set1_epi32 from memory into it). GG_NO_EMBEDDED_BCAST: the intrinsic form. */
typedef int32_t __attribute__((may_alias)) gg_i32_alias;
GG_T512 static inline __m512i dpbusd_b4(__m512i acc, __m512i w, const int8_t *q) {
#ifdef GG_NO_EMBEDDED_BCAST
    return _mm512_dpbusd_epi32(acc, w, bcast4(q));
#else
    __asm__("vpdpbusd %[q]%{1to16%}, %[w], %[acc]" : [acc] "+v"(acc) : [w] "v"(w), [q] "m"(*(const gg_i32_alias *)q));
    return acc;
#endif
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
        __m512i isum[8], sub[8];
        for (int j = 0; j < R; j++) isum[j] = _mm512_setzero_si512();
        for (int s = 0; s < 8; s++) {
            prefetch_ahead_part(w, X16_Q4_K_BYTES, s, 8);
            /* two accumulation chains per row (low and high nibbles): vpdpbusd's latency */
            __m512i sub2[8];
            for (int j = 0; j < R; j++) sub[j] = sub2[j] = _mm512_setzero_si512();
            for (int h = 0; h < 4; h++) {
                const __m512i v = _mm512_loadu_si512((const void *)(w + 64 * (4 * s + h)));
                /* hi16: the high nibble in place, 16 x its code (no shift: the one-row step is
                 * short of vector ports, not of bytes); sub2 is 16 x the high codes' sum, exactly
                 * (|sub2| <= 16 * 15 * 128 * 16 < 2^31), divided back below */
                const __m512i lo = _mm512_and_si512(v, m4), hi16 = _mm512_andnot_si512(m4, v);
                for (int j = 0; j < R; j++) {
                    const int8_t *q = xr[j][i].qs + 32 * s + 4 * h;
                    sub[j] = dpbusd_b4(sub[j], lo, q);
                    sub2[j] = dpbusd_b4(sub2[j], hi16, q + 16);
                }
            }
            const __m512i sc = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(w + X16_Q4_K_SC + 16 * s)));
            for (int j = 0; j < R; j++)
                isum[j] = _mm512_add_epi32(isum[j], _mm512_mullo_epi32(_mm512_add_epi32(sub[j], _mm512_srai_epi32(sub2[j], 4)), sc));
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
    const __m512i m4 = _mm512_set1_epi8(0xF), m3f = _mm512_set1_epi8(0x3F), m30 = _mm512_set1_epi8(0x30);
    __m512 acc[8];
    for (int j = 0; j < R; j++) acc[j] = _mm512_setzero_ps();
    for (int64_t i = 0; i < nsb; i++, w += X16_Q6_K_BYTES) {
        __m512i isum[8], sub[8];
        for (int j = 0; j < R; j++) isum[j] = _mm512_setzero_si512();
        for (int s = 0; s < 16; s++) {
            prefetch_ahead_part(w, X16_Q6_K_BYTES, s, 16);
            const __m512i v0 = _mm512_loadu_si512((const void *)(w + 128 * s));
            const __m512i v1 = _mm512_loadu_si512((const void *)(w + 128 * s + 64));
            const __m512i u = _mm512_loadu_si512((const void *)(w + X16_Q6_K_HI + 64 * s));
            /* the codes 0..63 of elements 16s + 4q + e, q < 4 (repack_q6_K's bytes; vpternlogd
             * 0xF8: a | (b & c)) */
            const __m512i q0 = _mm512_and_si512(v0, m3f), q2 = _mm512_and_si512(v1, m3f);
            const __m512i q1 = _mm512_ternarylogic_epi32(_mm512_and_si512(u, m4), _mm512_srli_epi16(v0, 2), m30, 0xF8);
            const __m512i q3 = _mm512_ternarylogic_epi32(_mm512_and_si512(_mm512_srli_epi16(u, 4), m4),
                                                         _mm512_srli_epi16(v1, 2), m30, 0xF8);
            for (int j = 0; j < R; j++) {
                const int8_t *q = xr[j][i].qs + 16 * s;
                const __m512i a = dpbusd_b4(_mm512_setzero_si512(), q0, q);
                const __m512i b = dpbusd_b4(_mm512_setzero_si512(), q2, q + 8);
                sub[j] = _mm512_add_epi32(dpbusd_b4(a, q1, q + 4), dpbusd_b4(b, q3, q + 12));
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

/* Q4_0_X16: group (nb repacked blocks at w) against R rows (R <= 8) of A32 activations xr[j]
 * (gguf_kernels.h A32_*); the reference's eight float lanes per column, block b into lane b % 8,
 * one vector per (row, lane): lane[j][t] column c is row j's lane t of column c. Per block and row
 * eight vpdpbusd (low and high nibbles, two chains), minus 8 * the row's code sum (the codes' -8
 * offset), then the reference's fma. out[16 j + c] = row j's output of column c. */
GG_T512 static inline __attribute__((always_inline)) void x16_q4_0(const int R, const uint8_t *w, int64_t nb,
                                                                   const uint8_t *const *xr, float *out) {
    const __m512i m4 = _mm512_set1_epi8(0xF);
    __m512 lane[8][8];
    for (int j = 0; j < R; j++)
        for (int t = 0; t < 8; t++) lane[j][t] = _mm512_setzero_ps();
    for (int64_t b0 = 0; b0 < nb; b0 += 8) {
#pragma GCC unroll 8
        for (int t = 0; t < 8; t++) {
            const int64_t b = b0 + t;
            if (b >= nb) break;
            const uint8_t *g = w + b * X16_Q4_0_BYTES;
            prefetch_span(g, X16_Q4_0_BYTES);
            __m512i lo[4], hi[4];
            for (int h = 0; h < 4; h++) {
                const __m512i v = _mm512_loadu_si512((const void *)(g + 64 * h));
                lo[h] = _mm512_and_si512(v, m4);
                hi[h] = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
            }
            const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(g + X16_Q4_0_D)));
            for (int j = 0; j < R; j++) {
                const int8_t *q = A32_Q(xr[j], nb) + b * QK32;
                __m512i s = _mm512_setzero_si512(), s2 = _mm512_setzero_si512();
                for (int h = 0; h < 4; h++) {
                    s = dpbusd_b4(s, lo[h], q + 4 * h);
                    s2 = dpbusd_b4(s2, hi[h], q + 16 + 4 * h);
                }
                const __m512i isum = _mm512_sub_epi32(_mm512_add_epi32(s, s2), _mm512_set1_epi32(A32_S(xr[j], nb)[b] << 3));
                lane[j][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(dw, _mm512_set1_ps(A32_D(xr[j], nb)[b])),
                                             lane[j][t]);
            }
        }
    }
    for (int j = 0; j < R; j++) { /* hsum8_ref's order: ((0 + 4) + (2 + 6)) + ((1 + 5) + (3 + 7)) */
        const __m512 *l = lane[j];
        _mm512_storeu_ps(out + 16 * j, _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(l[0], l[4]), _mm512_add_ps(l[2], l[6])),
                                                     _mm512_add_ps(_mm512_add_ps(l[1], l[5]), _mm512_add_ps(l[3], l[7]))));
    }
}

/* one tile of R rows (R <= 8) of A32 activations against one group of 16 Q4_0_X16 columns */
GG_T512 static void x16_q4_0_run512(int R, const uint8_t *wg, int64_t nb, const uint8_t *const *x, float *out) {
    switch (R) {
    case 8: x16_q4_0(8, wg, nb, x, out); break;
    case 7: x16_q4_0(7, wg, nb, x, out); break;
    case 6: x16_q4_0(6, wg, nb, x, out); break;
    case 5: x16_q4_0(5, wg, nb, x, out); break;
    case 4: x16_q4_0(4, wg, nb, x, out); break;
    case 3: x16_q4_0(3, wg, nb, x, out); break;
    case 2: x16_q4_0(2, wg, nb, x, out); break;
    default: x16_q4_0(1, wg, nb, x, out); break;
    }
}

/* ---------------------------------------------------------------------------------------- */
/* AVX2 over the repacked K-quants: each group of 16 columns as two halves of 8 (int32 lane c of  */
/* a 256-bit vector is column 8 hf + c), tiles of up to 5 rows. Without VNNI the products go     */
/* through vpmaddubsw's int16 pairs, summed in int16 while they cannot overflow (Q4_K: a         */
/* sub-block's 8 groups, |.| <= 8 * 2 * 15 * 127; Q6_K: two groups, <= 2 * 2 * 63 * 127), then   */
/* vpmaddwd by the column's scale twice ((sc, sc) per int32 lane): exact integers, so the same   */
/* bits as the reference.                                                                       */

/* rows in an AVX2 K-quant tile: 2 accumulators a row and the unpacked weights fill the 16 vector
 * registers, and five verified rows run as one tile, their weights unpacked once (not 3 + 2) */
#define X16_AVX2_ROWS 5

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

/* Q4_K_X16, the group at w, R rows (R <= X16_AVX2_ROWS); out[16 j + c] as x16_q4_K. Each super-block
 * as two halves of 8 columns (hf), one after the other: the group's bytes stream once, in order */
static inline __attribute__((always_inline)) void x16_q4_K_avx2(const int R, const uint8_t *w, int64_t nsb,
                                                                const block_q8_K *const *xr,
                                                                const int16_t *const *bs, float *out) {
    const __m256i m4 = _mm256_set1_epi8(0xF);
    for (int j = 0; j < 2 * R; j++) _mm256_storeu_ps(out + 8 * j, _mm256_setzero_ps()); /* both halves of R rows */
    for (int64_t i = 0; i < nsb; i++, w += X16_Q4_K_BYTES)
    for (int hf = 0; hf < 2; hf++) {
        __m256i isum[X16_AVX2_ROWS];
        for (int j = 0; j < R; j++) isum[j] = _mm256_setzero_si256();
        for (int s = 0; s < 8; s++) {
            if (hf == 0) prefetch_ahead_part(w, X16_Q4_K_BYTES, s, 8);
            __m256i s16[X16_AVX2_ROWS];
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
static inline __attribute__((always_inline)) void x16_q6_K_avx2(const int R, const uint8_t *w, int64_t nsb,
                                                                const block_q8_K *const *xr, float *out) {
    const __m256i m4 = _mm256_set1_epi8(0xF), m3f = _mm256_set1_epi8(0x3F), m30 = _mm256_set1_epi8(0x30);
    for (int j = 0; j < 2 * R; j++) _mm256_storeu_ps(out + 8 * j, _mm256_setzero_ps()); /* both halves of R rows */
    for (int64_t i = 0; i < nsb; i++, w += X16_Q6_K_BYTES)
    for (int hf = 0; hf < 2; hf++) {
        __m256i isum[X16_AVX2_ROWS];
        for (int j = 0; j < R; j++) isum[j] = _mm256_setzero_si256();
        for (int s = 0; s < 16; s++) {
            if (hf == 0) prefetch_ahead_part(w, X16_Q6_K_BYTES, s, 16);
            const __m256i v0 = _mm256_loadu_si256((const __m256i *)(w + 128 * s + 32 * hf));
            const __m256i v1 = _mm256_loadu_si256((const __m256i *)(w + 128 * s + 64 + 32 * hf));
            const __m256i u = _mm256_loadu_si256((const __m256i *)(w + X16_Q6_K_HI + 64 * s + 32 * hf));
            /* the codes of elements 16s + 4q + e (repack_q6_K's bytes) */
            const __m256i q0 = _mm256_and_si256(v0, m3f), q2 = _mm256_and_si256(v1, m3f);
            const __m256i q1 = _mm256_or_si256(_mm256_and_si256(u, m4), _mm256_and_si256(_mm256_srli_epi16(v0, 2), m30));
            const __m256i q3 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(u, 4), m4),
                                               _mm256_and_si256(_mm256_srli_epi16(v1, 2), m30));
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
        __m256i off[X16_AVX2_ROWS];
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
    if (base_type(type) == GG_Q4_K) x16_q4_K_avx2(R, w, nsb, xr, bs, out);
    else x16_q6_K_avx2(R, w, nsb, xr, out);
}

/* one tile of R rows (R <= X16_AVX2_ROWS) against one group of 16 columns, AVX2 */
static void x16_run_avx2(int type, int R, const uint8_t *wg, int64_t nsb, const block_q8_K *const *x,
                         const int16_t *const *b, float *out) {
    switch (R) {
    case 5: x16_tile_avx2(type, 5, wg, nsb, x, b, out); break;
    case 4: x16_tile_avx2(type, 4, wg, nsb, x, b, out); break;
    case 3: x16_tile_avx2(type, 3, wg, nsb, x, b, out); break;
    case 2: x16_tile_avx2(type, 2, wg, nsb, x, b, out); break;
    default: x16_tile_avx2(type, 1, wg, nsb, x, b, out); break;
    }
}

/* Q4_0_X16 at AVX2, columns 8 hf .. 8 hf + 7 of the group at w, R rows (R <= 4); out[16 j + c] as
 * x16_q4_0. A block's eight vpmaddubsw products add in int16 (|.| <= 8 * 2 * 15 * 127 = 30480),
 * then one vpmaddwd by ones gives each column's exact int32 sum. */
static inline __attribute__((always_inline)) void x16_q4_0_avx2(const int R, const uint8_t *w, int64_t nb, int hf,
                                                                const uint8_t *const *xr, float *out) {
    const __m256i m4 = _mm256_set1_epi8(0xF), ones = _mm256_set1_epi16(1);
    __m256 lane[4][8];
    for (int j = 0; j < R; j++)
        for (int t = 0; t < 8; t++) lane[j][t] = _mm256_setzero_ps();
    for (int64_t b0 = 0; b0 < nb; b0 += 8) {
#pragma GCC unroll 8
        for (int t = 0; t < 8; t++) {
            const int64_t b = b0 + t;
            if (b >= nb) break;
            const uint8_t *g = w + b * X16_Q4_0_BYTES;
            if (hf == 0) prefetch_span(g, X16_Q4_0_BYTES);
            __m256i lo[4], hi[4];
            for (int h = 0; h < 4; h++) {
                const __m256i v = _mm256_loadu_si256((const __m256i *)(g + 64 * h + 32 * hf));
                lo[h] = _mm256_and_si256(v, m4);
                hi[h] = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
            }
            const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(g + X16_Q4_0_D + 16 * hf)));
            for (int j = 0; j < R; j++) {
                const int8_t *q = A32_Q(xr[j], nb) + b * QK32;
                __m256i p = _mm256_setzero_si256();
                for (int h = 0; h < 4; h++) {
                    p = _mm256_add_epi16(p, _mm256_maddubs_epi16(lo[h], bcast4_256(q + 4 * h)));
                    p = _mm256_add_epi16(p, _mm256_maddubs_epi16(hi[h], bcast4_256(q + 16 + 4 * h)));
                }
                const __m256i isum = _mm256_sub_epi32(_mm256_madd_epi16(p, ones), _mm256_set1_epi32(A32_S(xr[j], nb)[b] << 3));
                lane[j][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(dw, _mm256_set1_ps(A32_D(xr[j], nb)[b])),
                                             lane[j][t]);
            }
        }
    }
    for (int j = 0; j < R; j++) {
        const __m256 *l = lane[j];
        _mm256_storeu_ps(out + 16 * j + 8 * hf,
                         _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(l[0], l[4]), _mm256_add_ps(l[2], l[6])),
                                       _mm256_add_ps(_mm256_add_ps(l[1], l[5]), _mm256_add_ps(l[3], l[7]))));
    }
}

static void x16_q4_0_run_avx2(int R, const uint8_t *wg, int64_t nb, const uint8_t *const *x, float *out) {
    for (int hf = 0; hf < 2; hf++) switch (R) {
        case 4: x16_q4_0_avx2(4, wg, nb, hf, x, out); break;
        case 3: x16_q4_0_avx2(3, wg, nb, hf, x, out); break;
        case 2: x16_q4_0_avx2(2, wg, nb, hf, x, out); break;
        default: x16_q4_0_avx2(1, wg, nb, hf, x, out); break;
        }
}

/* the gemm of Q4_0_X16 (A32 activations), as gemm_x16 below */
static void gemm_x16_q4_0(const uint8_t *w, int64_t k, const uint8_t *act, int64_t n, float *y, int64_t ldy,
                          int64_t o0, int64_t o1, int level) {
    const int64_t nb = k / QK32, gbytes = nb * X16_Q4_0_BYTES, arb = nb * 8 + k, most = level >= GG_LEVEL_AVX512 ? 8 : 4;
    for (int64_t b0 = 0; b0 < n; b0 += ROW_BLOCK) {
        const int64_t b1 = b0 + ROW_BLOCK < n ? b0 + ROW_BLOCK : n, rows = b1 - b0;
        const uint8_t *xr[ROW_BLOCK];
        for (int64_t r = 0; r < rows; r++) xr[r] = act + (b0 + r) * arb;
        const int64_t tiles = (rows + most - 1) / most;
        for (int64_t o = o0; o < o1; o += 16) {
            const uint8_t *wg = w + o / 16 * gbytes;
            for (int64_t t = 0; t < tiles; t++) {
                const int64_t r0 = tile_start(rows, tiles, t);
                const int R = (int)(tile_start(rows, tiles, t + 1) - r0);
                float out[8 * 16];
                if (level >= GG_LEVEL_AVX512) x16_q4_0_run512(R, wg, nb, xr + r0, out);
                else x16_q4_0_run_avx2(R, wg, nb, xr + r0, out);
                for (int j = 0; j < R; j++) memcpy(y + (b0 + r0 + j) * ldy + o, out + 16 * j, 16 * sizeof(float));
            }
        }
    }
}

/* output columns o0 .. o1 - 1 (multiples of 16) of all n rows over a repacked type: per block of
 * up to ROW_BLOCK rows, each group of 16 columns against tiles of up to 8 rows (AVX-512) or 5
 * (AVX2), as even as possible, while the group's weights stay in cache */
static void gemm_x16(int type, const uint8_t *w, int64_t k, const uint8_t *act, int64_t n, float *y, int64_t ldy,
                     int64_t o0, int64_t o1, int level) {
    if (base_type(type) == GG_Q4_0) {
        gemm_x16_q4_0(w, k, act, n, y, ldy, o0, o1, level);
        return;
    }
    const int64_t nsb = k / QK_K, gbytes = nsb * x16_bytes(type), most = level >= GG_LEVEL_AVX512 ? 8 : X16_AVX2_ROWS;
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

void gg_gemm_cols_x16_avx2(int type, const uint8_t *w, int64_t k, const uint8_t *act, int64_t n, float *y,
                           int64_t ldy, int64_t o0, int64_t o1) {
    gemm_x16(type, w, k, act, n, y, ldy, o0, o1, GG_LEVEL_AVX2);
}

void gg_gemm_cols_x16_avx512(int type, const uint8_t *w, int64_t k, const uint8_t *act, int64_t n, float *y,
                             int64_t ldy, int64_t o0, int64_t o1) {
    gemm_x16(type, w, k, act, n, y, ldy, o0, o1, GG_LEVEL_AVX512);
}
#endif /* GG_AVX2 */

/* a repacked type at the scalar level (tests, or SPECD_GG_SIMD=scalar after load): each group of
 * 16 rows back to its GGUF blocks, then the reference */
void gg_gemm_cols_x16_unpacked(int type, const uint8_t *w, int64_t k, const uint8_t *act, int64_t n, float *y,
                               int64_t ldy, int64_t o0, int64_t o1) {
    const int64_t brb = gg_row_bytes(base_type(type), k);
    uint8_t *tmp = malloc((size_t)(16 * brb));
    if (!tmp) abort();
    for (int64_t o = o0; o < o1; o += 16) {
        unrepack_groups(type, w, k, o / 16, o / 16 + 1, tmp);
        gg_gemm_cols_ref(base_type(type), tmp, k, act, n, y + o, ldy, 0, 16);
    }
    free(tmp);
}
