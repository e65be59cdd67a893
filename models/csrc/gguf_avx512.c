/* AVX-512 (F, BW, VL, DQ, VNNI) over the 32-element formats as GGUF stores them (Q4_0, Q5_0,
 * Q8_0): the dot-product tiles of up to 8 activation rows and their gemm, compiled for that target
 * function by function (GG_T512) and run only where the CPU has it (gg_simd). The same bits as the
 * scalar references (gguf_ref.c). (The K-quants run repacked at this level, gguf_repack.c; a
 * K-quant tensor whose rows are not whole groups of 16 stays in the GGUF layout and runs AVX2's
 * tiles, gguf_avx2.c.) */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "gguf_x86.h"

#if GG_AVX2
#define ROW_TILE512 8 /* rows per tile (8 float lanes per row) */

/* The 32-element formats with vpdpbusd (256-bit, AVX512-VL VNNI): tile_b32's blocks, lanes and
 * float steps for up to 8 rows, each block's 32-code dot one instruction instead of two (the
 * same exact int32 totals: vpmaddubsw's pairs never saturate here, |w| <= 128, |x| <= 127). */
GG_T512 static inline __attribute__((always_inline)) void tile512_b32(const int type, const int R, const uint8_t *w,
                                                                      int64_t nb, const uint8_t *const *xr, float *out) {
    const int64_t bsz = type == GG_Q8_0 ? sizeof(block_q8_0) : type == GG_Q5_0 ? sizeof(block_q5_0) : sizeof(block_q4_0);
    const int shift = type == GG_Q8_0 ? 0 : type == GG_Q5_0 ? 4 : 3;
    __m256 acc[ROW_TILE512];
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
    float lane[ROW_TILE512][8];
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


/* one weight row against R activation rows (R <= 8), dispatched to the format's tile */
GG_T512 static inline __attribute__((always_inline)) void tile512(int type, const int R, const uint8_t *w, int64_t nb,
                                                                  const uint8_t *const *xr, float *out) {
    switch (type) {
    case GG_Q4_0: tile512_b32(GG_Q4_0, R, w, nb, xr, out); break;
    case GG_Q5_0: tile512_b32(GG_Q5_0, R, w, nb, xr, out); break;
    default: tile512_b32(GG_Q8_0, R, w, nb, xr, out); break;
    }
}

/* output columns o0 .. o1 - 1 of all n rows of a 32-element format, tiles of up to 8 rows */
GG_T512 void gg_gemm_cols_avx512(int type, const uint8_t *w, int64_t k, const uint8_t *act, int64_t n, float *y,
                                 int64_t ldy, int64_t o0, int64_t o1) {
    const int64_t wrb = gg_row_bytes(type, k), arb = gg_act_bytes(type, k), nb = k / QK32;
    for (int64_t b0 = 0; b0 < n; b0 += ROW_BLOCK) {
        const int64_t b1 = b0 + ROW_BLOCK < n ? b0 + ROW_BLOCK : n;
        const int64_t tiles = (b1 - b0 + ROW_TILE512 - 1) / ROW_TILE512;
        for (int64_t c0 = o0; c0 < o1; c0 += OCHUNK) {
            const int64_t c1 = c0 + OCHUNK < o1 ? c0 + OCHUNK : o1;
            for (int64_t t = 0; t < tiles; t++) {
                const int64_t r0 = b0 + tile_start(b1 - b0, tiles, t);
                const int R = (int)(b0 + tile_start(b1 - b0, tiles, t + 1) - r0);
                const uint8_t *xr[ROW_TILE512];
                for (int j = 0; j < R; j++) xr[j] = act + (r0 + j) * arb;
                for (int64_t o = c0; o < c1; o++) {
                    float out[ROW_TILE512];
                    const uint8_t *wr = w + o * wrb;
                    switch (R) {
                    case 8: tile512(type, 8, wr, nb, xr, out); break;
                    case 7: tile512(type, 7, wr, nb, xr, out); break;
                    case 6: tile512(type, 6, wr, nb, xr, out); break;
                    case 5: tile512(type, 5, wr, nb, xr, out); break;
                    case 4: tile512(type, 4, wr, nb, xr, out); break;
                    case 3: tile512(type, 3, wr, nb, xr, out); break;
                    case 2: tile512(type, 2, wr, nb, xr, out); break;
                    default: tile512(type, 1, wr, nb, xr, out); break;
                    }
                    for (int j = 0; j < R; j++) y[(r0 + j) * ldy + o] = out[j];
                }
            }
        }
    }
}
#endif /* GG_AVX2 */
