/* AVX2 helpers shared by specd's kernels (int_linear.c, decoder_layer.c). */
#ifndef SPECD_AVX2_H
#define SPECD_AVX2_H
#include <immintrin.h>

/* the sum of 8 float lanes, always in the same order (batch invariance depends on it) */
static inline float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_extractf128_ps(v, 1), _mm256_castps256_ps128(v));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

#endif
