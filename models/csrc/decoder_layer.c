/* One Qwen2/Llama decoder layer over n new tokens, in C, its linear layers through specd's INT8
 * kernel (q8_linear in int_linear.c) or GGUF blocks (a file's own, or specd's INT4 as Q4_0)
 * (gg_linear_parts in gguf_dispatch.c): what models/decoder.py's Python loop does per layer, without
 * the ~40 small torch ops per layer that cost a 28-layer model ~25 ms per step on two cores.
 *
 *   h = rms(x) * in_norm;  q, k, v = split(h @ Wqkv + b);  q, k = rope(q), rope(k)
 *   cache[start + i] = k_i, v_i;  a_i = softmax(q_i . keys / sqrt(hd)) @ values   (per head)
 *   x += a @ Wo;  h = rms(x) * post_norm;  g, u = split(h @ Wgu);  x += (silu(g) * u) @ Wdown
 *
 * Batch invariance (the exactness contract: a position's logits must not depend on how many
 * tokens share the target's forward): every row goes through the same instructions whatever n
 * is. Norms, rotary embeddings and activations are per row; attention runs per (row, head) over
 * exactly the keys that row sees, in position order (the cache, then the new tokens the mask
 * lets it see), with fixed 8-lane accumulation; the linears are batch-invariant by construction
 * (int_linear.c, gguf_kernels.h). A row verified among K others therefore equals the same row decoded alone.
 *
 * Layouts: x [n, H] float32 (updated in place); the layer's KV cache k, v [nkv, cap, hd], float32,
 * or float16 where dims[D_KV16] is 1 (kv_load8 / kv_store below); cos, sin [n, hd]; mask [n, n]
 * uint8 (1 = may attend) or NULL for causal; scratch: floats, as many as q8_layer_scratch() says.
 */
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "avx2.h"
#include "gguf_x86.h" /* GG_T512, gg_simd */
#include "kernel_abi.h" /* q8_linear, gg_linear_parts, the dims[] / weights[] indices (D_*, W_*) */
#include "profile.h"


/* e^x, 8 lanes (Cephes' polynomial, as avx_mathfun): relative error ~1e-7; inputs clamped to
 * [-87, 88] (below -87 the result is ~1e-38, not 0: callers mask lanes that must not count) */
static inline __m256 exp8(__m256 x) {
    x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.0f)), _mm256_set1_ps(88.0f));
    __m256 fx = _mm256_floor_ps(_mm256_fmadd_ps(x, _mm256_set1_ps(1.44269504088896341f),
                                                _mm256_set1_ps(0.5f)));
    x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(0.693359375f), x);
    x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(-2.12194440e-4f), x);
    __m256 y = _mm256_set1_ps(1.9875691500e-4f);
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.3981999507e-3f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(8.3334519073e-3f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(4.1665795894e-2f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.6666665459e-1f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(5.0000001201e-1f));
    y = _mm256_fmadd_ps(y, _mm256_mul_ps(x, x), _mm256_add_ps(x, _mm256_set1_ps(1.0f)));
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvttps_epi32(fx), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(y, _mm256_castsi256_ps(e));
}

/* out = x * rsqrt(mean(x^2) + eps) * w, one row of H (H % 8 == 0) */
static void rms_norm(const float *x, const float *w, int64_t H, float eps, float *out) {
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < H; i += 8) {
        const __m256 v = _mm256_loadu_ps(x + i);
        acc = _mm256_fmadd_ps(v, v, acc);
    }
    const __m256 r = _mm256_set1_ps(1.0f / sqrtf(hsum8(acc) / (float)H + eps));
    for (int64_t i = 0; i < H; i += 8)
        _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i), r), _mm256_loadu_ps(w + i)));
}

/* NeoX rotary embedding of `heads` vectors of hd, in place: t*cos + rotate_half(t)*sin */
static void rope(float *t, int64_t heads, int64_t hd, const float *cos, const float *sin) {
    const int64_t half = hd / 2;
    for (int64_t h = 0; h < heads; h++) {
        float *v = t + h * hd;
        for (int64_t j = 0; j < half; j++) {
            const float a = v[j], b = v[j + half];
            v[j] = a * cos[j] - b * sin[j];
            v[j + half] = b * cos[j + half] + a * sin[j + half];
        }
    }
}

#define GMAX 8 /* query heads an attend call takes at most (those sharing one KV head) */

/* The KV cache's element: float32, or float16 (f16: a compile-time constant wherever it is
 * inlined). Half precision halves the bytes attention streams (llama.cpp keeps its cache so);
 * a new row's keys and values are rounded once, to nearest even, when they are written, and
 * every later read converts them back exactly (F16C), whatever the SIMD level. Every row, the
 * forward's own new rows included, attends over the rounded cache: batch invariance holds. */
static inline __attribute__((always_inline)) __m256 kv_load8(const void *cache, int64_t at, int f16) {
    if (f16) return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)cache + at)));
    return _mm256_loadu_ps((const float *)cache + at);
}

GG_T512 static inline __attribute__((always_inline)) __m512 kv_load16(const void *cache, int64_t at, int f16) {
    if (f16) return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const uint16_t *)cache + at)));
    return _mm512_loadu_ps((const float *)cache + at);
}

/* one row's hd floats (hd % 8 == 0) into the cache at element `at` */
static void kv_store(void *cache, int64_t at, const float *src, int64_t hd, int f16) {
    if (!f16) {
        memcpy((float *)cache + at, src, hd * sizeof(float));
        return;
    }
    uint16_t *out = (uint16_t *)cache + at;
    for (int64_t c = 0; c < hd; c += 8)
        _mm_storeu_si128((__m128i *)(out + c), _mm256_cvtps_ph(_mm256_loadu_ps(src + c), _MM_FROUND_TO_NEAREST_INT));
}

/* Attention streams the layer's cached keys and values (at 600 tokens, 34 MB a token in float32 over the
 * 1.5B's 28 layers) while the scores and the weighted sum compute: without software prefetch the
 * hardware prefetcher left that read at ~11 GB/s over both cores and the arithmetic waited on it.
 * The scores loop prefetches the key and value rows ATT_PREFETCH positions ahead into L2 (the
 * values are read back, chunk by chunk, after the softmax): on a 2-core AMD EPYC the 1.5B's
 * attention at 600 cached tokens went from 2.9-3.3 to 2.0-2.5 ms a token, the 0.5B draft's from
 * 1.54-1.56 to 1.07-1.29 ms (bench/forward_phases.py; 16 and 32 ahead alike, 64 worse) */
#ifndef ATT_PREFETCH
#define ATT_PREFETCH 16
#endif

/* attend_n's weighted sum of values with AVX-512: 16 channels an instruction instead of 8, the
 * same bits (each channel is its own lane, summed in key order from zero, then scaled by the
 * softmax's 1/sum, as in the 8-lane loop). For hd % 16 == 0, where gg_simd() runs AVX-512. The
 * values come back from L2 after the scores (the scores loop prefetched them), so this half of
 * attention is arithmetic: 1.5B at 600 tokens, two threads, ~60 -> ~50 us a layer and KV head. */
/* channels c .. c + 16 C - 1 of the weighted sum (C = 1 or 2 chunks a pass, a compile-time
 * constant): each channel's sum is its own lane's, in key order, whatever C */
GG_T512 static inline __attribute__((always_inline)) void values512_at(
        const int64_t gh, const int C, int64_t c, int64_t hd, const void *vals, const int64_t *pos, int64_t m,
        const float *sc, int64_t m8, const float *inv, float *out, const int f16) {
    __m512 acc[2][GMAX];
    for (int u = 0; u < C; u++)
        for (int64_t h = 0; h < gh; h++) acc[u][h] = _mm512_setzero_ps();
    for (int64_t s = 0; s < m; s++) {
        __m512 vv[2];
        for (int u = 0; u < C; u++) vv[u] = kv_load16(vals, pos[s] * hd + c + 16 * u, f16);
        for (int64_t h = 0; h < gh; h++) {
            const __m512 w = _mm512_set1_ps(sc[h * m8 + s]);
            for (int u = 0; u < C; u++) acc[u][h] = _mm512_fmadd_ps(w, vv[u], acc[u][h]);
        }
    }
    for (int64_t h = 0; h < gh; h++)
        for (int u = 0; u < C; u++)
            _mm512_storeu_ps(out + h * hd + c + 16 * u, _mm512_mul_ps(acc[u][h], _mm512_set1_ps(inv[h])));
}

/* two chunks of 16 channels a pass where they fit: twice the independent chains, for an FMA
 * latency that gh chains alone do not cover */
GG_T512 static inline __attribute__((always_inline)) void values512_n(
        const int64_t gh, int64_t hd, const void *vals, const int64_t *pos, int64_t m, const float *sc,
        int64_t m8, const float *inv, float *out, const int f16) {
    int64_t c = 0;
    for (; c + 32 <= hd; c += 32) values512_at(gh, 2, c, hd, vals, pos, m, sc, m8, inv, out, f16);
    for (; c < hd; c += 16) values512_at(gh, 1, c, hd, vals, pos, m, sc, m8, inv, out, f16);
}

GG_T512 static void weighted_values512(int64_t gh, int64_t hd, const void *vals, const int64_t *pos, int64_t m,
                                       const float *sc, int64_t m8, const float *inv, float *out, int f16) {
#define CASE(G)                                                                                   \
    case G:                                                                                       \
        if (f16) values512_n(G, hd, vals, pos, m, sc, m8, inv, out, 1);                           \
        else values512_n(G, hd, vals, pos, m, sc, m8, inv, out, 0);                               \
        break;
    switch (gh) { CASE(1) CASE(2) CASE(3) CASE(4) CASE(5) CASE(6) CASE(7) default: CASE(8) }
#undef CASE
}
/* channels c .. c + 8 C - 1 of the weighted sum in 8 lanes (values512_at's loop at AVX2) */
static inline __attribute__((always_inline)) void values8_at(
        const int64_t gh, const int C, int64_t c, int64_t hd, const void *vals, const int64_t *pos, int64_t m,
        const float *sc, int64_t m8, const float *inv, float *out, const int f16) {
    __m256 acc[2][GMAX];
    for (int u = 0; u < C; u++)
        for (int64_t h = 0; h < gh; h++) acc[u][h] = _mm256_setzero_ps();
    for (int64_t s = 0; s < m; s++) {
        __m256 vv[2];
        for (int u = 0; u < C; u++) vv[u] = kv_load8(vals, pos[s] * hd + c + 8 * u, f16);
        for (int64_t h = 0; h < gh; h++) {
            const __m256 w = _mm256_set1_ps(sc[h * m8 + s]);
            for (int u = 0; u < C; u++) acc[u][h] = _mm256_fmadd_ps(w, vv[u], acc[u][h]);
        }
    }
    for (int64_t h = 0; h < gh; h++)
        for (int u = 0; u < C; u++)
            _mm256_storeu_ps(out + h * hd + c + 8 * u, _mm256_mul_ps(acc[u][h], _mm256_set1_ps(inv[h])));
}

/* the largest of m scores (NaN ignored), as `mx = row[s] > mx ? row[s] : mx` over them in order
 * gives it, 8 lanes at a time: one scalar max a key and head was a chain of 4-cycle steps, ~7 ns
 * of a key's ~65 at 6 heads (any -0 / +0 it returns instead subtracts to the same differences) */
static inline float max_score(const float *row, int64_t m) {
    __m256 v = _mm256_set1_ps(-INFINITY);
    int64_t s = 0;
    for (; s + 8 <= m; s += 8) v = _mm256_max_ps(_mm256_loadu_ps(row + s), v); /* (a NaN score: v kept) */
    float lane[8], mx = -INFINITY;
    _mm256_storeu_ps(lane, v);
    for (int i = 0; i < 8; i++) mx = lane[i] > mx ? lane[i] : mx;
    for (; s < m; s++) mx = row[s] > mx ? row[s] : mx;
    return mx;
}

/* Attention of `gh` query heads (q: gh * hd floats, contiguous) that share one KV head, over the
 * m keys/values at cache rows pos[0..m-1]; out: gh * hd floats. Each head's numbers are the same
 * whatever the other heads, rows or threads: per (head, key) one 8-lane dot over hd then a
 * horizontal sum; softmax in 8-lane chunks (padding masked to 0); the weighted sum of values in
 * key order, one accumulator per 8 channels. The heads share each key and value load. */
static inline __attribute__((always_inline)) void attend_n(
                   const float *q, const int64_t gh, int64_t hd, const void *keys, const void *vals,
                   const int64_t *pos, int64_t m, float scale, float *sc, float *out, int wide, const int f16) {
    const int64_t m8 = (m + 7) / 8 * 8, esize = f16 ? 2 : 4;
    __m256 acc[GMAX];
    for (int64_t s = 0; s < m; s++) {
        const int64_t k = pos[s] * hd;
        if (s + ATT_PREFETCH < m) { /* this key's and value's bytes, ATT_PREFETCH positions on, into L2 */
            const char *kp = (const char *)keys + pos[s + ATT_PREFETCH] * hd * esize;
            const char *vp = (const char *)vals + pos[s + ATT_PREFETCH] * hd * esize;
            for (int64_t b = 0; b < hd * esize; b += 64) {
                _mm_prefetch(kp + b, _MM_HINT_T1);
                _mm_prefetch(vp + b, _MM_HINT_T1);
            }
        }
        for (int64_t h = 0; h < gh; h++) acc[h] = _mm256_setzero_ps();
        for (int64_t c = 0; c < hd; c += 8) {
            const __m256 kv = kv_load8(keys, k + c, f16);
            for (int64_t h = 0; h < gh; h++) acc[h] = _mm256_fmadd_ps(_mm256_loadu_ps(q + h * hd + c), kv, acc[h]);
        }
        for (int64_t h = 0; h < gh; h++) sc[h * m8 + s] = hsum8(acc[h]) * scale;
    }
    float inv[GMAX];
    const __m256 vm = _mm256_set1_ps((float)m), lanes = _mm256_setr_ps(0, 1, 2, 3, 4, 5, 6, 7);
    for (int64_t h = 0; h < gh; h++) {
        float *row = sc + h * m8;
        const float mx = max_score(row, m);
        for (int64_t s = m; s < m8; s++) row[s] = mx; /* padding, masked to 0 below */
        const __m256 vmx = _mm256_set1_ps(mx);
        __m256 sum = _mm256_setzero_ps();
        for (int64_t s = 0; s < m8; s += 8) {
            const __m256 valid = _mm256_cmp_ps(_mm256_add_ps(lanes, _mm256_set1_ps((float)s)), vm, _CMP_LT_OQ);
            const __m256 e = _mm256_and_ps(valid, exp8(_mm256_sub_ps(_mm256_loadu_ps(row + s), vmx)));
            _mm256_storeu_ps(row + s, e);
            sum = _mm256_add_ps(sum, e);
        }
        inv[h] = 1.0f / hsum8(sum);
    }
    if (wide && hd % 16 == 0) {
        weighted_values512(gh, hd, vals, pos, m, sc, m8, inv, out, f16);
        return;
    }
    int64_t c = 0;
    if (gh <= 6) /* two chunks a pass, as values512_n (2 gh accumulators and 3 more within 16 registers) */
        for (; c + 16 <= hd; c += 16) values8_at(gh, 2, c, hd, vals, pos, m, sc, m8, inv, out, f16);
    for (; c < hd; c += 8) values8_at(gh, 1, c, hd, vals, pos, m, sc, m8, inv, out, f16);
}

/* attend_n with the head count and the cache's element a compile-time constant, so the
 * accumulators stay in registers; wide: the weighted sum of values in 16 lanes (AVX-512,
 * weighted_values512); f16: the cache holds float16 */
static void attend(const float *q, int64_t gh, int64_t hd, const void *keys, const void *vals,
                   const int64_t *pos, int64_t m, float scale, float *sc, float *out, int wide, int f16) {
#define CASE(G)                                                                                   \
    case G:                                                                                       \
        if (f16) attend_n(q, G, hd, keys, vals, pos, m, scale, sc, out, wide, 1);                 \
        else attend_n(q, G, hd, keys, vals, pos, m, scale, sc, out, wide, 0);                     \
        break;
    switch (gh) { CASE(1) CASE(2) CASE(3) CASE(4) CASE(5) CASE(6) CASE(7) default: CASE(8) }
#undef CASE
}

/* the widest input of the layer's linears (their activation scratch is sized for it) */
static int64_t widest_input(const int64_t *d) {
    const int64_t H = d[D_H], qd = d[D_NH] * d[D_HD], I = d[D_I];
    return H > I ? (H > qd ? H : qd) : (I > qd ? I : qd);
}

/* floats of scratch for n rows: h, qkv, attn, gate_up, act, y, then the linears' activations
 * (INT8: int8 values and a float scale per block; GGUF part tables: gg_linear_parts' bytes at
 * the widest input, which cover every narrower one) */
int64_t q8_layer_scratch(const int64_t *d, int64_t n) {
    const int64_t H = d[D_H], qd = d[D_NH] * d[D_HD], kvd = d[D_NKV] * d[D_HD], I = d[D_I];
    const int64_t kmax = widest_input(d), blocks = n * kmax / 32;
    const int64_t acts = d[D_BITS] == 0 ? (gg_parts_act_bytes(kmax / 256 * 256 + 256, n) + 3) / 4
                                        : n * kmax / 4 + blocks;
    return n * (H + (qd + 2 * kvd) + qd + 2 * I + I + H) + acts + 64;
}

static void linear(int64_t bits, const void *w, int64_t N, int64_t k, const float *x, int64_t n,
                   float *y, int8_t *xq, float *xd) {
    if (bits == 0)
        gg_linear_parts((const int64_t *)w, k, x, n, y, (uint8_t *)xq);
    else
        q8_linear((const uint8_t *)w, N, k, x, n, y, xq, xd);
}

void q8_layer(const void *const *w, const int64_t *d, float eps, float *x, int64_t n, int64_t start,
              void *kc, void *vc, const float *cos, const float *sin, const uint8_t *mask,
              float *scratch) {
    const int64_t H = d[D_H], nh = d[D_NH], nkv = d[D_NKV], hd = d[D_HD], I = d[D_I], cap = d[D_CAP];
    const int64_t qd = nh * hd, kvd = nkv * hd, qkvd = qd + 2 * kvd, group = nh / nkv;
    const int64_t kmax = widest_input(d);
    float *h = scratch, *qkv = h + n * H, *attn = qkv + n * qkvd, *gu = attn + n * qd;
    float *act = gu + n * 2 * I, *y = act + n * I;
    int8_t *xq = (int8_t *)(y + n * H);
    float *xd = (float *)(xq + n * kmax);
    const int64_t bits = d[D_BITS];
    const int f16 = d[D_KV16] != 0;
    const float *bias = (const float *)w[W_QKV_BIAS];
    /* profiling: each lap adds the time since the previous one to a phase (profile.h) */
    double lap = specd_prof ? prof_wall() : 0.0;
#define LAP(slot)                                                                                 \
    do {                                                                                          \
        if (specd_prof) {                                                                         \
            const double now = prof_wall();                                                       \
            specd_prof[slot] += now - lap;                                                        \
            lap = now;                                                                            \
        }                                                                                         \
    } while (0)

    for (int64_t i = 0; i < n; i++) rms_norm(x + i * H, (const float *)w[W_IN_NORM], H, eps, h + i * H);
    LAP(P_LAYER_OTHER);
    linear(bits, w[W_QKV], qkvd, H, h, n, qkv, xq, xd);
    LAP(P_MATMUL);
    for (int64_t i = 0; i < n; i++) {
        float *r = qkv + i * qkvd;
        if (bias)
            for (int64_t j = 0; j < qkvd; j++) r[j] += bias[j];
        rope(r, nh + nkv, hd, cos + i * hd, sin + i * hd); /* q heads then k heads: contiguous */
        for (int64_t g = 0; g < nkv; g++) {
            kv_store(kc, (g * cap + start + i) * hd, r + qd + g * hd, hd, f16);
            kv_store(vc, (g * cap + start + i) * hd, r + qd + kvd + g * hd, hd, f16);
        }
    }

    const float scale = 1.0f / sqrtf((float)hd);
    const int wide = gg_simd() >= GG_LEVEL_AVX512; /* (a level capped to AVX2 gives the same bits) */
    LAP(P_LAYER_OTHER);
#pragma omp parallel num_threads(specd_team_size())
    {
        /* per thread: the visible positions of one row, and GMAX heads' scores */
        const int64_t m8max = (start + n + 7) / 8 * 8;
        int64_t *pos = malloc((start + n) * sizeof(int64_t));
        float *sc = malloc(GMAX * m8max * sizeof(float));
        /* (kv head, row) pairs, kv head major: a thread's static share takes one kv head's rows in
         * turn while its keys and values are still in cache (a verification's rows read the same
         * cache). Each pair's arithmetic is the same whatever the order. */
#pragma omp for schedule(static)
        for (int64_t t = 0; t < n * nkv; t++) {
            const int64_t g = t / n, i = t % n;
            int64_t m = 0;
            for (int64_t p = 0; p < start; p++) pos[m++] = p;
            for (int64_t j = 0; j < n; j++)
                if (mask ? mask[i * n + j] != 0 : j <= i) pos[m++] = start + j;
            for (int64_t h0 = 0; h0 < group; h0 += GMAX) {
                const int64_t gh = group - h0 < GMAX ? group - h0 : GMAX;
                const int64_t head = g * group + h0; /* first query head of this pass */
                const int64_t at = g * cap * hd * (f16 ? 2 : 4); /* this kv head's first byte */
                attend(qkv + i * qkvd + head * hd, gh, hd, (char *)kc + at, (char *)vc + at, pos, m,
                       scale, sc, attn + i * qd + head * hd, wide, f16);
            }
        }
        free(sc);
        free(pos);
    }
    LAP(P_ATTENTION);

    linear(bits, w[W_O], H, qd, attn, n, y, xq, xd);
    LAP(P_MATMUL);
    for (int64_t j = 0; j < n * H; j++) x[j] += y[j];
    for (int64_t i = 0; i < n; i++) rms_norm(x + i * H, (const float *)w[W_POST_NORM], H, eps, h + i * H);
    LAP(P_LAYER_OTHER);
    linear(bits, w[W_GU], 2 * I, H, h, n, gu, xq, xd);
    LAP(P_MATMUL);
    for (int64_t i = 0; i < n; i++) {
        const float *gate = gu + i * 2 * I, *up = gate + I;
        float *a = act + i * I;
        for (int64_t j = 0; j < I; j += 8) { /* silu(g) * u = g / (1 + e^-g) * u */
            const __m256 g = _mm256_loadu_ps(gate + j);
            const __m256 e = exp8(_mm256_sub_ps(_mm256_setzero_ps(), g));
            const __m256 s = _mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.0f), e));
            _mm256_storeu_ps(a + j, _mm256_mul_ps(s, _mm256_loadu_ps(up + j)));
        }
    }
    LAP(P_LAYER_OTHER);
    linear(bits, w[W_DOWN], H, I, act, n, y, xq, xd);
    LAP(P_MATMUL);
    for (int64_t j = 0; j < n * H; j++) x[j] += y[j];
    LAP(P_LAYER_OTHER);
#undef LAP
}
