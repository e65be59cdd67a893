/* x86 SIMD helpers the GGUF kernels share (gguf_avx2.c, gguf_avx512.c, gguf_repack.c): prefetch,
 * exact int32 reductions, the 32-element formats' code vectors, the AVX-512 target attribute.
 * Only with AVX2 at compile time (gguf_kernels.h's GG_AVX2). */
#ifndef SPECD_GGUF_X86_H
#define SPECD_GGUF_X86_H
#include "gguf_kernels.h"
#if GG_AVX2
#include <immintrin.h>

/* AVX-512 (F, BW, VL, DQ, VNNI): compiled for that target function by function (the build's
 * baseline is AVX2), run only when the CPU has it (gg_simd) */
#define GG_T512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")))

/* Software prefetch of the weight bytes GG_PREFETCH ahead of the block being read: the hardware
 * prefetcher alone leaves a streaming thread at about half the bandwidth (as in q8kernel.c) */
#ifndef GG_PREFETCH
#define GG_PREFETCH 2048
#endif
static inline void prefetch_span(const void *p, int bytes) {
    for (int off = 0; off < bytes; off += 64) _mm_prefetch((const char *)p + GG_PREFETCH + off, _MM_HINT_T0);
}

/* The repacked kernels prefetch the super-block GG_PREFETCH_X16 ahead of the one they compute
 * (the groups lie back to back, so this runs on into the next group) into L2, not L1. Into L1
 * (two ahead, as before session 16) the weight stream and the tile's arithmetic took the sum of
 * their times instead of the larger: on a 2-core AMD EPYC, 28 Q4_K gate/up linears of the 1.5B
 * took 13.2 / 27.2 / 47.6 ms at 1 / 4 / 8 rows with L1 prefetch and 13.1 / 14.5 / 25.4 into L2,
 * six ahead, in the same run (Q6_K alike); bench/RESULTS.md session 16.
 * The prefetches come a slice at a time: the tile's sub-block loop calls prefetch_ahead_part for
 * slice `part` of `parts` of that super-block's cache lines, so they interleave with the
 * arithmetic. All of a super-block's prefetches at once (up to session 39) stalled a tile computing
 * several rows: a software prefetch that finds no free fill buffer waits, and the instructions
 * behind it cannot retire while it does. On the 2-core Ice Lake server of session 40, Q4_K at
 * the target's gate/up shape over 5 rows then streamed at 306-346 ns a group's super-block
 * against 246-263 ns sliced, where one row takes 229-250; Q6_K alike (bench/RESULTS.md). */
#ifndef GG_PREFETCH_X16
#define GG_PREFETCH_X16 6
#endif
static inline __attribute__((always_inline)) void prefetch_ahead_part(const uint8_t *w, const int bytes, int part,
                                                                      const int parts) {
    /* slice p: lines p * per .. p * per + per - 1, and one of the remaining lines while p < extra
     * (a fixed count per call: the tile's loops stay unrolled and its accumulators in registers,
     * which a loop bound computed per slice broke, at twice the time) */
    const int lines = (bytes + 63) / 64, per = lines / parts, extra = lines - per * parts;
    const char *a = (const char *)w + GG_PREFETCH_X16 * bytes;
    for (int l = 0; l < per; l++) _mm_prefetch(a + 64 * (part * per + l), _MM_HINT_T1);
    if (part < extra) _mm_prefetch(a + 64 * (parts * per + part), _MM_HINT_T1);
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

/* the row counts of the tiles over n rows at most `max` each, as even as possible (9 rows: 5 + 4,
 * never 8 + 1): tile t of T starts at row n * t / T */
static inline int64_t tile_start(int64_t n, int64_t tiles, int64_t t) { return n * t / tiles; }

#endif /* GG_AVX2 */
#endif
