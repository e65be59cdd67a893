/* bench/tile_loop.c: the repacked K-quant tiles timed from C, one build at a time, without
 * Python between calls: gg_gemm of Q4_K_X16 (the 1.5B target's gate/up shape, 17920x1536, 28
 * copies) or Q6_K_X16 (down, 1536x8960, 14 copies) over R activation rows, weights streamed from
 * memory ("stream") or a slice that stays in L2 called 400 times ("resident": the arithmetic's
 * own rate). Prints ns per group super-block (16 columns x 256 elements) per thread, the best of
 * 7 rounds, row counts alternating. Scratch builds with other -D settings (prefetch distance,
 * hint) compare by running this against each in turn (session 40, bench/RESULTS.md). Random
 * blocks with finite fp16 scales; timing only, no output is checked (tests/test_gguf_blocks.py
 * checks the bits).
 *
 *   PL=$(python -c "import sysconfig;print(sysconfig.get_config_var('LIBDIR'))")
 *   gcc -O2 -o /tmp/tile_loop bench/tile_loop.c -ldl -lm -L$PL -Wl,-rpath,$PL -Wl,--no-as-needed -lpython3.11 -lgomp
 *   /tmp/tile_loop models/_kernels*.so q4k stream 1,3,5 2      # LIB FORMAT MODE ROWS [THREADS]
 */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
typedef int (*gemm_t)(int, const uint8_t *, int64_t, int64_t, const uint8_t *, int64_t, float *, int64_t);
typedef int (*quant_t)(int, const float *, int64_t, int64_t, uint8_t *);
typedef int (*repack_t)(int, const uint8_t *, int64_t, int64_t, uint8_t *);
typedef int64_t (*rb_t)(int, int64_t);
typedef void (*thr_t)(int);
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
static uint64_t rs=88172645463325252ull; static uint32_t rnd(void){rs^=rs<<13;rs^=rs>>7;rs^=rs<<17;return (uint32_t)rs;}
int main(int argc, char **argv) {
    if (argc < 5) { fprintf(stderr, "tile_loop LIB.so q4k|q6k resident|stream ROWS[,ROWS..] [threads]\n"); return 2; }
    void *h = dlopen(argv[1], RTLD_NOW); if (!h) { puts(dlerror()); return 1; }
    gemm_t gemm = (gemm_t)dlsym(h, "gg_gemm"); quant_t quant = (quant_t)dlsym(h, "gg_quantize");
    repack_t repack = (repack_t)dlsym(h, "gg_repack"); rb_t rowb = (rb_t)dlsym(h, "gg_row_bytes"), actb = (rb_t)dlsym(h, "gg_act_bytes");
    thr_t thr = (thr_t)dlsym(h, "specd_kernel_set_threads");
    const int q4 = !strcmp(argv[2], "q4k"), res = !strcmp(argv[3], "resident");
    const int threads = argc > 5 ? atoi(argv[5]) : 1; thr(threads);
    const int base = q4 ? 12 : 14, type = 0x100 | base;
    const int64_t k = q4 ? 1536 : 8960, N = res ? (q4 ? 256 : 64) * threads : (q4 ? 17920 : 1536);
    const int copies = res ? 1 : (q4 ? 28 : 14);
    const int64_t rb = rowb(base, k), xb = rowb(type, k);
    uint8_t *g = malloc(N * rb);
    for (int64_t i = 0; i < N * rb; i++) g[i] = (uint8_t)rnd();
    const int bsz = q4 ? 144 : 210;
    for (int64_t b = 0; b < N * rb / bsz; b++) { /* finite small fp16 scales */
        uint16_t d = 0x2000 | (rnd() & 0x3ff);
        if (q4) { memcpy(g + b * bsz, &d, 2); memcpy(g + b * bsz + 2, &d, 2); }
        else memcpy(g + b * bsz + 208, &d, 2);
    }
    uint8_t *w = aligned_alloc(1 << 21, ((size_t)(N * xb * copies) + (1 << 21)) & ~(size_t)((1 << 21) - 1));
    for (int c = 0; c < copies; c++) repack(base, g, N, k, w + c * N * xb);
    float x[8 * 8960]; for (int i = 0; i < 8 * k; i++) x[i] = (float)((int)(rnd() % 2001) - 1000) / 1000.f;
    uint8_t *act = malloc(8 * actb(type, k)); float *y = malloc(sizeof(float) * 8 * N);
    int Rs[16], nR = 0; for (char *p = strtok(argv[4], ","); p; p = strtok(NULL, ",")) Rs[nR++] = atoi(p);
    const int calls = res ? 400 : 1; const double sbs = (double)N * k / 256 / 16; /* super-block groups per call */
    double best[16]; for (int i = 0; i < nR; i++) best[i] = 1e9;
    for (int round = 0; round < 7; round++)
        for (int ii = 0; ii < nR; ii++) {
            const int i = round % 2 ? ii : nR - 1 - ii, R = Rs[i];
            quant(type, x, R, k, act);
            double t = now();
            for (int c = 0; c < calls; c++) for (int cp = 0; cp < copies; cp++) gemm(type, w + cp * N * xb, N, k, act, R, y, N);
            t = now() - t;
            const double per = t / (calls * copies * sbs) * 1e9 * threads; /* ns per super-block group per thread */
            if (per < best[i]) best[i] = per;
        }
    for (int i = 0; i < nR; i++) printf("%s %s R=%d: %.1f ns per group super-block (thread), %.2f GB/s/thread, %.1f ns per extra row\n",
        argv[2], argv[3], Rs[i], best[i], (q4 ? 2368.0 : 3360.0) / best[i], i ? (best[i] - best[0]) / (Rs[i] - Rs[0]) : 0.0);
    return 0;
}
