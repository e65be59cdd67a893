/* AVX-512 (F, BW, VL, DQ, VNNI) over GGML's block formats as GGUF stores them: per format the
 * dot-product tiles and their gemm, compiled for that target function by function (GG_T512) and
 * run only where the CPU has it (gg_simd). The same bits as the scalar references (gguf_ref.c). */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "gguf_x86.h"

#if GG_AVX2
/* ---------------------------------------------------------------------------------------- */
/* AVX-512 (F, BW, VL, DQ, VNNI): compiled for that target function by function, run only when  */
/* the CPU has it (gg_simd). Tiles of up to 8 activation rows (a K-quant call of 9..12 rows: one  */
/* tile) share each decoded weight block;                                                         */
/* the K-quants' float steps run for the 8 rows at once, row j in float lane j, each lane the    */
/* reference's scalar fused multiply-adds in the reference's order (lanes never mix).            */

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
GG_T512 void gg_gemm_cols_avx512(int type, const uint8_t *w, int64_t k, const uint8_t *act, int64_t n, float *y,
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
#endif /* GG_AVX2 */
