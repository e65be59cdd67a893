/* The C ABI of specd's kernels, as specd.models.q8 loads it through ctypes: every exported
 * function's prototype, q8_layer's two index tables, and a text describing all of them that
 * specd_kernel_abi_signatures() returns for the loader to compare with its ctypes declarations.
 *
 * Bump rule: change SPECD_KERNEL_ABI_VERSION (and ABI_VERSION in models/q8.py with it) whenever
 * any exported function's signature, q8_layer's dims[] / weights[] tables or the packed weight
 * layout changes, and edit SPECD_KERNEL_SIGNATURES in the same change. The compiler checks the
 * prototypes below against the definitions (every kernel source includes this header); the loader
 * checks the version and the text against models/q8.py.
 *
 * Text format, one entry per ';': name(arg,arg,...)->ret for a function, name[index,...]->type
 * for an index table. Types: p (any pointer), i64 (int64_t), i32 (int), f32 (float), f64 (double),
 * void. */
#ifndef SPECD_KERNEL_ABI_H
#define SPECD_KERNEL_ABI_H
#include <stdint.h>

#define SPECD_KERNEL_ABI_VERSION 6

#define SPECD_KERNEL_SIGNATURES                                                                \
    "q8_linear(p,i64,i64,p,i64,p,p,p)->void;"                                                  \
    "q4_linear(p,i64,i64,p,i64,p,p,p,p)->void;"                                                \
    "q8_quantize(p,i64,i64,p,p)->void;"                                                        \
    "q8_layer(p,p,f32,p,i64,i64,p,p,p,p,p,p)->void;"                                           \
    "q8_layer_scratch(p,i64)->i64;"                                                            \
    "q8_layer_dims[hidden,heads,kv_heads,head_dim,intermediate,capacity,bits]->i64;"           \
    "q8_layer_weights[qkv,o,gate_up,down,in_norm,post_norm,qkv_bias]->p;"                      \
    "specd_kernel_omp_entry()->p;"                                                             \
    "specd_kernel_set_threads(i32)->void;"                                                     \
    "gg_row_bytes(i32,i64)->i64;"                                                              \
    "gg_act_bytes(i32,i64)->i64;"                                                              \
    "gg_simd()->i32;"                                                                          \
    "gg_set_simd(i32)->i32;"                                                                   \
    "gg_dequantize(i32,p,i64,i64,p)->i32;"                                                     \
    "gg_quantize(i32,p,i64,i64,p)->i32;"                                                       \
    "gg_quantize_ref(i32,p,i64,i64,p)->i32;"                                                   \
    "gg_gemm(i32,p,i64,i64,p,i64,p,i64)->i32;"                                                 \
    "gg_gemm_ref(i32,p,i64,i64,p,i64,p,i64)->i32;"                                             \
    "gg_repack(i32,p,i64,i64,p)->i32;"                                                         \
    "gg_unrepack(i32,p,i64,i64,p)->i32;"                                                       \
    "gg_parts_act_bytes(i64,i64)->i64;"                                                        \
    "gg_linear_parts(p,i64,p,i64,p,p)->void;"                                                  \
    "gg_parts[count,type,rows,pointer]->i64;"                                                  \
    "kernel_profile(p)->void;"                                                                 \
    "kernel_profile_slots[matmul,attention,layer_other,team,busy,busy_cpu,regions]->f64"

/* the ABI itself (fixed forever: the loader calls these before anything else) */
int specd_kernel_abi_version(void);
const char *specd_kernel_abi_signatures(void);

/* q8kernel.c */
void q8_linear(const uint8_t *w, int64_t N, int64_t k, const float *x, int64_t n, float *y,
               int8_t *xq, float *xd);
void q4_linear(const uint8_t *w, int64_t N, int64_t k, const float *x, int64_t n, float *y,
               int8_t *xq, float *xd, int32_t *xs);
void q8_quantize(const float *x, int64_t n, int64_t k, int8_t *q, float *d);
void *specd_kernel_omp_entry(void);
void specd_kernel_set_threads(int n);

/* q8layer.c */
/* dims[]: hidden, heads, kv heads, head dim, intermediate, cache capacity, weight bits (8 | 4, or
 * 0: every linear a GGUF part table, gg_parts) */
enum { D_H, D_NH, D_NKV, D_HD, D_I, D_CAP, D_BITS };
/* weights[]: qkv, o, gate_up, down (packed: q8.pack or q8.pack4; with bits 0 their gg_parts
 * tables), in_norm, post_norm, qkv bias (or NULL) */
enum { W_QKV, W_O, W_GU, W_DOWN, W_IN_NORM, W_POST_NORM, W_QKV_BIAS };
int64_t q8_layer_scratch(const int64_t *d, int64_t n);
void q8_layer(const void *const *w, const int64_t *d, float eps, float *x, int64_t n, int64_t start,
              float *kc, float *vc, const float *cos, const float *sin, const uint8_t *mask,
              float *scratch);

/* ggml_blocks.c: GGML block formats as GGUF stores them (type: ggml's type id; see the file) */
int64_t gg_row_bytes(int type, int64_t k);
int64_t gg_act_bytes(int type, int64_t k);
int gg_simd(void);
int gg_set_simd(int level);
int gg_dequantize(int type, const uint8_t *w, int64_t rows, int64_t k, float *out);
int gg_quantize(int type, const float *x, int64_t n, int64_t k, uint8_t *act);
int gg_quantize_ref(int type, const float *x, int64_t n, int64_t k, uint8_t *act);
int gg_gemm(int type, const uint8_t *w, int64_t N, int64_t k, const uint8_t *act, int64_t n, float *y,
            int64_t ldy);
int gg_gemm_ref(int type, const uint8_t *w, int64_t N, int64_t k, const uint8_t *act, int64_t n, float *y,
                int64_t ldy);
/* the K-quants' repacked layouts (ggml_blocks.h: type | GG_X16), both directions */
int gg_repack(int type, const uint8_t *w, int64_t N, int64_t k, uint8_t *out);
int gg_unrepack(int type, const uint8_t *w, int64_t N, int64_t k, uint8_t *out);
/* a linear of several parts; parts[]: count, then per part type, rows, address (all int64) */
int64_t gg_parts_act_bytes(int64_t k, int64_t n);
void gg_linear_parts(const int64_t *parts, int64_t k, const float *x, int64_t n, float *y, uint8_t *act);

/* profiling (profile.h): kernel_profile(acc) makes the kernels add seconds into acc[P_COUNT]
 * (doubles, the slots below) until kernel_profile(NULL); one caller at a time */
enum { P_MATMUL, P_ATTENTION, P_LAYER_OTHER, P_TEAM, P_BUSY, P_BUSY_CPU, P_REGIONS, P_COUNT };
void kernel_profile(double *acc);

/* internal (not exported): the team size of the kernels' parallel regions, see q8kernel.c */
__attribute__((visibility("hidden"))) int specd_team_size(void);

#endif
