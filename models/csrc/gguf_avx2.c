/* AVX2 (+ FMA, F16C: the build's baseline on x86-64) over GGML's block formats as GGUF stores them
 * (llama.cpp's ggml-cpu/arch/x86/quants.c is the model): the activation quantizers, per format
 * the dot-product tiles of up to 4 activation rows, and their gemm. The same bytes and bits as
 * the scalar references (gguf_ref.c). */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "gguf_x86.h"

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

void gg_quantize_a32_avx2(const float *x, int64_t k, void *out) {
    uint8_t *row = out;
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

void gg_quantize_q8_K_avx2(const float *x, int64_t k, void *out) {
    block_q8_K *y = out;
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

/* output columns o0 .. o1 - 1 of all n rows, tiles of up to 4 rows */
void gg_gemm_cols_avx2(int type, const uint8_t *w, int64_t k, const uint8_t *act, int64_t n, float *y,
                       int64_t ldy, int64_t o0, int64_t o1) {
    const int64_t wrb = gg_row_bytes(type, k), arb = gg_act_bytes(type, k);
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
                    switch (R) {
                    case 4: tile(type, 4, wr, k, xr, out); break;
                    case 3: tile(type, 3, wr, k, xr, out); break;
                    case 2: tile(type, 2, wr, k, xr, out); break;
                    default: tile(type, 1, wr, k, xr, out); break;
                    }
                    for (int j = 0; j < R; j++) y[(r0 + j) * ldy + o] = out[j];
                }
            }
        }
    }
}
#endif /* GG_AVX2 */
