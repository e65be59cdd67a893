/* specd's INT8 x INT8 linear for x86-64 AVX2 (no VNNI needed): weights int8 in blocks of 32
 * input channels with one fp16 scale per block (llama.cpp's Q8_0 numbers: 34 bytes per block),
 * activations quantized per row and per block of 32 to int8 at call time. (specd's INT4 weights
 * are ggml's Q4_0 numbers and run on the GGUF kernels, gguf_repack.c.)
 *
 *   y[r, o] = sum_b  d_w[o, b] * d_x[r, b] * sum_{i<32} q_w[o, b, i] * q_x[r, b, i]
 *
 * Batch invariance, by construction: a row's activation scales come from that row alone, and the
 * instructions that produce y[r, o] (block order, accumulation lanes, the final horizontal sum)
 * are the same whatever the number of rows in the call and wherever the row sits in a row tile.
 * A position's logits therefore do not depend on how many tokens share the target's forward.
 *
 * Cost: the weights are read once per call for all rows (rows are processed in tiles of 4 while
 * a weight row sits in L1), so verifying K+1 tokens costs little more than one token as long as
 * the int8 dot products are cheaper than streaming the weights from memory.
 *
 * int8 x int8 on AVX2: vpmaddubsw multiplies unsigned by signed bytes; as in llama.cpp, |w| is
 * the unsigned operand and x takes w's sign (vpsignb). |q| <= 127 on both sides, so a pair sum
 * is at most 2 * 127 * 127 = 32258 and never saturates int16.
 *
 * Threads: OpenMP, sharing torch's pool (threads.c); the output channels are split.
 *
 * Exported C ABI (prototypes, version, the signature text the loader checks): kernel_abi.h.
 */
#include <immintrin.h>
#ifdef _OPENMP
#include <omp.h>
#else
static int omp_get_num_threads(void) { return 1; }
static int omp_get_thread_num(void) { return 0; }
static int omp_get_max_threads(void) { return 1; }
#endif
#include <stdint.h>

#include "avx2.h"
#include "kernel_abi.h"
#include "profile.h"

#define QK 32
#ifndef OCHUNK
#define OCHUNK 8
#endif
#ifndef ROW_TILE
#define ROW_TILE 4
#endif
#ifndef PF_HINT
#define PF_HINT _MM_HINT_T0
#endif
#ifndef PREFETCH
#define PREFETCH 2048
#endif

/* ---------------------------------------------------------------------------------------- */
/* activations: x [n, k] float32 -> q [n, k] int8, d [n, k/32] float32                        */

static void quantize_row(const float *x, int64_t k, int8_t *q, float *d) {
    const __m256 sign_bit = _mm256_set1_ps(-0.0f);
    for (int64_t b = 0; b < k / QK; b++) {
        const float *xb = x + b * QK;
        __m256 v0 = _mm256_loadu_ps(xb), v1 = _mm256_loadu_ps(xb + 8);
        __m256 v2 = _mm256_loadu_ps(xb + 16), v3 = _mm256_loadu_ps(xb + 24);
        __m256 m = _mm256_andnot_ps(sign_bit, v0);
        m = _mm256_max_ps(m, _mm256_andnot_ps(sign_bit, v1));
        m = _mm256_max_ps(m, _mm256_andnot_ps(sign_bit, v2));
        m = _mm256_max_ps(m, _mm256_andnot_ps(sign_bit, v3));
        __m128 m4 = _mm_max_ps(_mm256_extractf128_ps(m, 1), _mm256_castps256_ps128(m));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
        const float amax = _mm_cvtss_f32(m4);
        const float dd = amax / 127.0f;
        const float id = dd != 0.0f ? 1.0f / dd : 0.0f;
        d[b] = dd;
        const __m256 mul = _mm256_set1_ps(id);
        v0 = _mm256_round_ps(_mm256_mul_ps(v0, mul), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        v1 = _mm256_round_ps(_mm256_mul_ps(v1, mul), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        v2 = _mm256_round_ps(_mm256_mul_ps(v2, mul), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        v3 = _mm256_round_ps(_mm256_mul_ps(v3, mul), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        __m256i i0 = _mm256_cvtps_epi32(v0), i1 = _mm256_cvtps_epi32(v1);
        __m256i i2 = _mm256_cvtps_epi32(v2), i3 = _mm256_cvtps_epi32(v3);
        i0 = _mm256_packs_epi32(i0, i1); /* lanes interleaved by 128-bit halves */
        i2 = _mm256_packs_epi32(i2, i3);
        i0 = _mm256_packs_epi16(i0, i2);
        const __m256i perm = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
        i0 = _mm256_permutevar8x32_epi32(i0, perm);
        _mm256_storeu_si256((__m256i *)(q + b * QK), i0);
    }
}

/* ---------------------------------------------------------------------------------------- */
/* the dot kernel                                                                             */

/* Weight row layout (one output channel, k input channels, nb = k/32 blocks): nb fp16 scales,
 * padded to a multiple of 4 (8 bytes), then nb blocks of 32 int8 (unaligned loads throughout). */
static inline int64_t scale_bytes(int64_t nb) { return (nb + 3) / 4 * 8; }
static inline int64_t row_bytes(int64_t k) { return scale_bytes(k / QK) + k; }

/* four blocks' int32 lane vectors -> per 128-bit lane their four partial totals [a b c d]:
 * unpacks and adds (vphaddd is microcoded on AMD Zen: several times the cost) */
static inline __m256i reduce4(__m256i a, __m256i b, __m256i c, __m256i d) {
    const __m256i ab = _mm256_add_epi32(_mm256_unpacklo_epi32(a, b), _mm256_unpackhi_epi32(a, b));
    const __m256i cd = _mm256_add_epi32(_mm256_unpacklo_epi32(c, d), _mm256_unpackhi_epi32(c, d));
    return _mm256_add_epi32(_mm256_unpacklo_epi64(ab, cd), _mm256_unpackhi_epi64(ab, cd));
}

/* eight blocks' int32 lane vectors -> one vector of their eight totals (block i in lane i) */
static inline __m256i reduce8(__m256i d0, __m256i d1, __m256i d2, __m256i d3, __m256i d4,
                              __m256i d5, __m256i d6, __m256i d7) {
    const __m256i a = reduce4(d0, d1, d2, d3), c = reduce4(d4, d5, d6, d7);
    const __m256i lo = _mm256_permute2x128_si256(a, c, 0x20);
    const __m256i hi = _mm256_permute2x128_si256(a, c, 0x31);
    return _mm256_add_epi32(lo, hi);
}

static inline __m256i dot_i32(const int8_t *wq, const int8_t *xq) {
    const __m256i w = _mm256_loadu_si256((const __m256i *)wq);
    const __m256i x = _mm256_loadu_si256((const __m256i *)xq);
    const __m256i p16 = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w));
    return _mm256_madd_epi16(p16, _mm256_set1_epi16(1));
}

static inline float f16_at(const uint16_t *p) { return _cvtsh_ss(*p); }

/* Output channels o0..o1-1 for rows r0..r0+R-1. R is a compile-time constant per case; every
 * row's arithmetic is the same for every R and every tile position (batch invariance). Blocks
 * go in groups of 8: their int32 dot products are reduced to one vector, converted once and
 * scaled by the 8 (weight scale x activation scale) products; leftover blocks one at a time. */
#define TILE(R)                                                                                \
    for (int64_t o = o0; o < o1; o++) {                                                        \
        const uint8_t *wr = w + o * rb;                                                        \
        const uint16_t *ws = (const uint16_t *)wr;                                             \
        const int8_t *wq = (const int8_t *)(wr + sb);                                          \
        __m256 acc[R];                                                                         \
        for (int j = 0; j < R; j++) acc[j] = _mm256_setzero_ps();                              \
        int64_t b = 0;                                                                         \
        for (; b + 8 <= nb; b += 8) {                                                          \
            _mm_prefetch((const char *)(wq + b * QK + PREFETCH), PF_HINT);                 \
            _mm_prefetch((const char *)(wq + b * QK + PREFETCH + 64), PF_HINT);            \
            _mm_prefetch((const char *)(wq + b * QK + PREFETCH + 128), PF_HINT);           \
            _mm_prefetch((const char *)(wq + b * QK + PREFETCH + 192), PF_HINT);           \
            const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(ws + b)));     \
            const int8_t *wb = wq + b * QK;                                                    \
            for (int j = 0; j < R; j++) {                                                      \
                const int8_t *xb = xq + (r0 + j) * k + b * QK;                                 \
                const __m256i t = reduce8(dot_i32(wb, xb), dot_i32(wb + 32, xb + 32),          \
                                          dot_i32(wb + 64, xb + 64), dot_i32(wb + 96, xb + 96),\
                                          dot_i32(wb + 128, xb + 128),                         \
                                          dot_i32(wb + 160, xb + 160),                         \
                                          dot_i32(wb + 192, xb + 192),                         \
                                          dot_i32(wb + 224, xb + 224));                        \
                const __m256 s = _mm256_mul_ps(dw, _mm256_loadu_ps(xd + (r0 + j) * nb + b));   \
                acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(t), s, acc[j]);                    \
            }                                                                                  \
        }                                                                                      \
        for (; b < nb; b++) {                                                                  \
            const float dwb = f16_at(ws + b);                                                  \
            for (int j = 0; j < R; j++) {                                                      \
                const int64_t r = r0 + j;                                                      \
                const __m256 s = _mm256_set1_ps(dwb * xd[r * nb + b]);                         \
                acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot_i32(wq + b * QK,               \
                                                                    xq + r * k + b * QK)),     \
                                         s, acc[j]);                                           \
            }                                                                                  \
        }                                                                                      \
        for (int j = 0; j < R; j++) y[(r0 + j) * ldy + o] = hsum8(acc[j]);                     \
    }

static void gemm_rows(const uint8_t *w, int64_t k, const int8_t *xq, const float *xd, int64_t rows0,
                      int64_t rows1, float *y, int64_t ldy, int64_t o0, int64_t o1) {
    const int64_t nb = k / QK, sb = scale_bytes(nb), rb = row_bytes(k);
    /* register/L1 blocking: OCHUNK weight rows stay in L1 while every row tile of activations
     * (4 rows) passes over them, so activations are read from L2 once per chunk, not per row */
    for (int64_t c0 = o0; c0 < o1; c0 += OCHUNK) {
        const int64_t c1 = c0 + OCHUNK < o1 ? c0 + OCHUNK : o1;
        for (int64_t r0 = rows0; r0 < rows1; r0 += ROW_TILE) {
            const int64_t left = rows1 - r0;
            const int64_t o0 = c0, o1 = c1;
            switch (left >= ROW_TILE ? ROW_TILE : left) {
            case 4: TILE(4) break;
            case 3: TILE(3) break;
            case 2: TILE(2) break;
            default: TILE(1) break;
            }
        }
    }
}

/* Many rows (a prefill): rows in blocks of ROW_BLOCK so a block's activations stay in L2 while
 * the weights stream past; the weights are then read once per row block. The tiling of a row
 * (which tile, which block) never changes its arithmetic. */
#define ROW_BLOCK 64
static void gemm_part(const uint8_t *w, int64_t k, const int8_t *xq, const float *xd, int64_t n,
                      float *y, int64_t ldy, int64_t o0, int64_t o1) {
    for (int64_t b0 = 0; b0 < n; b0 += ROW_BLOCK)
        gemm_rows(w, k, xq, xd, b0, b0 + ROW_BLOCK < n ? b0 + ROW_BLOCK : n, y, ldy, o0, o1);
}

static int64_t split(int64_t total, int parts, int i, int64_t align) {
    int64_t units = (total + align - 1) / align;
    int64_t at = units * i / parts * align;
    return at < total ? at : total;
}

/* y [n, N] = linear(x [n, k], w: N packed rows). xq [n, k] int8 and xd [n, k/32] float32 are
 * scratch. k must be a multiple of 32. */
void q8_linear(const uint8_t *w, int64_t N, int64_t k, const float *x, int64_t n, float *y,
               int8_t *xq, float *xd) {
    const int64_t nb = k / QK;
    /* small calls stay on one thread: waking the pool costs more than it saves */
    const int parallel = N * k * (n < 4 ? n : 4) >= (1 << 18), team = parallel ? specd_team_size() : 1;
    const double t0 = specd_prof ? prof_wall() : 0.0;
#pragma omp parallel if (parallel) num_threads(team)
    {
        const prof_mark m = prof_begin();
        const int t = omp_get_num_threads(), tid = omp_get_thread_num();
        const int64_t r0 = split(n, t, tid, 1), r1 = split(n, t, tid + 1, 1);
        for (int64_t r = r0; r < r1; r++) quantize_row(x + r * k, k, xq + r * k, xd + r * nb);
#pragma omp barrier
        gemm_part(w, k, xq, xd, n, y, N, split(N, t, tid, 16), split(N, t, tid + 1, 16));
        prof_end(m);
    }
    prof_region(t0, team);
}

/* exposed for tests: the activation quantization alone */
void q8_quantize(const float *x, int64_t n, int64_t k, int8_t *q, float *d) {
    for (int64_t r = 0; r < n; r++) quantize_row(x + r * k, k, q + r * k, d + r * (k / QK));
}
