/* The scalar references of GGML's block formats (llama.cpp's ggml-quants.c is the model): per
 * format the dequantization (bit-exact to gguf-py's), the activation quantization (A32, Q8_K) and
 * the dot product, whose float steps and order every SIMD path performs too (gguf_kernels.h);
 * and the reference gemm, one output at a time. Built for every architecture. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "gguf_kernels.h"

/* ---------------------------------------------------------------------------------------- */
/* reference dequantization, one function per format (ggml-quants.c dequantize_row_*; float   */
/* products rounded one at a time, never fused: gguf-py's numbers bit for bit)                */

void gg_dequantize_q4_0(const void *w, float *y, int64_t k) {
    const block_q4_0 *x = w;
    for (int64_t i = 0; i < k / QK32; i++) {
        const float d = f16_at(&x[i].d);
        for (int j = 0; j < QK32 / 2; j++) {
            y[i * QK32 + j] = ((x[i].qs[j] & 0x0F) - 8) * d;
            y[i * QK32 + j + QK32 / 2] = ((x[i].qs[j] >> 4) - 8) * d;
        }
    }
}

void gg_dequantize_q5_0(const void *w, float *y, int64_t k) {
    const block_q5_0 *x = w;
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

void gg_dequantize_q8_0(const void *w, float *y, int64_t k) {
    const block_q8_0 *x = w;
    for (int64_t i = 0; i < k / QK32; i++) {
        const float d = f16_at(&x[i].d);
        for (int j = 0; j < QK32; j++) y[i * QK32 + j] = x[i].qs[j] * d;
    }
}

void gg_dequantize_q4_K(const void *w, float *y, int64_t k) {
    const block_q4_K *x = w;
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

void gg_dequantize_q6_K(const void *w, float *y, int64_t k) {
    const block_q6_K *x = w;
    for (int64_t i = 0; i < k / QK_K; i++) {
        const float d = f16_at(&x[i].d);
        for (int e = 0; e < QK_K; e++) y[i * QK_K + e] = d * x[i].scales[e / 16] * (q6_K_code(&x[i], e) - 32);
    }
}

/* ---------------------------------------------------------------------------------------- */
/* activation quantization: reference                                                       */

/* A32 row of k: per block of 32, d = amax / 127, q = round-half-even(x * (1 / d)), s = sum q */
void gg_quantize_a32_ref(const float *x, int64_t k, void *out) {
    uint8_t *row = out;
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
void gg_quantize_q8_K_ref(const float *x, int64_t k, void *out) {
    block_q8_K *y = out;
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

float gg_dot_q4_0_ref(const void *wv, const uint8_t *xr, int64_t k) {
    const block_q4_0 *w = wv;
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

float gg_dot_q5_0_ref(const void *wv, const uint8_t *xr, int64_t k) {
    const block_q5_0 *w = wv;
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

float gg_dot_q8_0_ref(const void *wv, const uint8_t *xr, int64_t k) {
    const block_q8_0 *w = wv;
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

float gg_dot_q4_K_ref(const void *wv, const uint8_t *xr, int64_t k) {
    const block_q4_K *w = wv;
    const block_q8_K *x = (const block_q8_K *)xr;
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

float gg_dot_q6_K_ref(const void *wv, const uint8_t *xr, int64_t k) {
    const block_q6_K *w = wv;
    const block_q8_K *x = (const block_q8_K *)xr;
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

/* output columns o0 .. o1 - 1 of all n rows by the scalar reference dot products (gg_gemm's
 * scalar level) */
void gg_gemm_cols_ref(int type, const uint8_t *w, int64_t k, const uint8_t *act, int64_t n, float *y,
                      int64_t ldy, int64_t o0, int64_t o1) {
    const gg_traits *t = gg_traits_of(type);
    const int64_t wrb = gg_row_bytes(type, k), arb = gg_act_bytes(type, k);
    for (int64_t r = 0; r < n; r++)
        for (int64_t o = o0; o < o1; o++) y[r * ldy + o] = t->dot(w + o * wrb, act + r * arb, k);
}
