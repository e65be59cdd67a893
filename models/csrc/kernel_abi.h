/* The C ABI of specd's kernels, as specd.models.q8 loads it through ctypes: every exported
 * function's prototype, the index tables of its array arguments (q8_layer's dims[] / weights[],
 * gg_linear_parts' part table, kernel_profile's slots), and a text describing all of them that
 * specd_kernel_abi_signatures() returns for the loader to compare with its ctypes declarations.
 *
 * One list, SPECD_KERNEL_ABI below, is the only copy: it generates the prototypes (the compiler
 * checks them against the definitions: every kernel source includes this header), the tables'
 * enums (D_*, W_*, GG_PART_*, P_*) and the text (kernel_abi.c), so the text cannot differ from
 * what the library exports. The loader checks the version and the text against models/kernels.py.
 *
 * Bump rule: change SPECD_KERNEL_ABI_VERSION (and ABI_VERSION in models/kernels.py with it) whenever
 * the text changes (an exported function's signature, a table's entries) or the packed weight
 * layout does, and edit models/kernels.py's declarations to match.
 *
 * Text format, one entry per ';': name(arg,arg,...)->ret for a function, name[index,...]->type
 * for an index table. Types: p (any pointer), i64 (int64_t), i32 (int), f32 (float), f64 (double),
 * void. */
#ifndef SPECD_KERNEL_ABI_H
#define SPECD_KERNEL_ABI_H
#include <stdint.h>

#define SPECD_KERNEL_ABI_VERSION 9

/* SPECD_KERNEL_ABI(FN, TABLE), in the text's order:
 *   FN(ret, name, params): ret one of KR_VOID, KR_I32, KR_I64, KR_P(c type); params a sequence
 *     (no commas) of KA_I32(name), KA_I64(name), KA_F32(name), KA_P(c declaration), or KA_NONE;
 *   TABLE(name, type code, count, entries): entries a sequence of KA_IDX(enum constant, text name),
 *     the constants 0, 1, ... in order, then `count` (the number of entries). */
#define SPECD_KERNEL_ABI(FN, TABLE)                                                              \
    /* int_linear.c: the INT8 linear; threads.c: the kernels' threads */                       \
    FN(KR_VOID, q8_linear, KA_P(const uint8_t *w) KA_I64(N) KA_I64(k) KA_P(const float *x) KA_I64(n) \
       KA_P(float *y) KA_P(int8_t *xq) KA_P(float *xd))                                          \
    FN(KR_VOID, q8_quantize, KA_P(const float *x) KA_I64(n) KA_I64(k) KA_P(int8_t *q) KA_P(float *d)) \
    /* decoder_layer.c: one decoder layer */                                                     \
    FN(KR_VOID, q8_layer, KA_P(const void *const *w) KA_P(const int64_t *d) KA_F32(eps) KA_P(float *x) \
       KA_I64(n) KA_I64(start) KA_P(void *kc) KA_P(void *vc) KA_P(const float *cos)            \
       KA_P(const float *sin) KA_P(const uint8_t *mask) KA_P(float *scratch))                    \
    FN(KR_I64, q8_layer_scratch, KA_P(const int64_t *d) KA_I64(n))                               \
    /* dims[]: hidden, heads, kv heads, head dim, intermediate, cache capacity, weight bits (8: \
     * specd's INT8, or 0: every linear a GGUF part table, gg_parts), KV cache element (0:       \
     * float32, 1: float16) */                                                                   \
    TABLE(q8_layer_dims, i64, D_COUNT, KA_IDX(D_H, hidden) KA_IDX(D_NH, heads) KA_IDX(D_NKV, kv_heads) \
          KA_IDX(D_HD, head_dim) KA_IDX(D_I, intermediate) KA_IDX(D_CAP, capacity)              \
          KA_IDX(D_BITS, bits) KA_IDX(D_KV16, kv_f16))                                                                  \
    /* weights[]: qkv, o, gate_up, down (packed: int_linear.pack; with bits 0 their gg_parts      \
     * tables), in_norm, post_norm, qkv bias (or NULL) */                                        \
    TABLE(q8_layer_weights, p, W_COUNT, KA_IDX(W_QKV, qkv) KA_IDX(W_O, o) KA_IDX(W_GU, gate_up)   \
          KA_IDX(W_DOWN, down) KA_IDX(W_IN_NORM, in_norm) KA_IDX(W_POST_NORM, post_norm)          \
          KA_IDX(W_QKV_BIAS, qkv_bias))                                                          \
    FN(KR_P(void *), specd_kernel_omp_entry, KA_NONE)                                            \
    FN(KR_VOID, specd_kernel_set_threads, KA_I32(n))                                             \
    /* gguf_*.c: the GGML block formats as GGUF stores them (type: ggml's type id, ggml_blocks.h) */ \
    FN(KR_I64, gg_row_bytes, KA_I32(type) KA_I64(k))                                             \
    FN(KR_I64, gg_act_bytes, KA_I32(type) KA_I64(k))                                             \
    FN(KR_I32, gg_simd, KA_NONE)                                                                 \
    FN(KR_I32, gg_set_simd, KA_I32(level))                                                       \
    FN(KR_I32, gg_dequantize, KA_I32(type) KA_P(const uint8_t *w) KA_I64(rows) KA_I64(k) KA_P(float *out)) \
    FN(KR_I32, gg_quantize, KA_I32(type) KA_P(const float *x) KA_I64(n) KA_I64(k) KA_P(uint8_t *act)) \
    FN(KR_I32, gg_quantize_ref, KA_I32(type) KA_P(const float *x) KA_I64(n) KA_I64(k) KA_P(uint8_t *act)) \
    FN(KR_I32, gg_gemm, KA_I32(type) KA_P(const uint8_t *w) KA_I64(N) KA_I64(k) KA_P(const uint8_t *act) \
       KA_I64(n) KA_P(float *y) KA_I64(ldy))                                                     \
    FN(KR_I32, gg_gemm_ref, KA_I32(type) KA_P(const uint8_t *w) KA_I64(N) KA_I64(k)              \
       KA_P(const uint8_t *act) KA_I64(n) KA_P(float *y) KA_I64(ldy))                            \
    /* the K-quants' repacked layouts (ggml_blocks.h: type | GG_X16), both directions */         \
    FN(KR_I32, gg_repack, KA_I32(type) KA_P(const uint8_t *w) KA_I64(N) KA_I64(k) KA_P(uint8_t *out)) \
    FN(KR_I32, gg_unrepack, KA_I32(type) KA_P(const uint8_t *w) KA_I64(N) KA_I64(k) KA_P(uint8_t *out)) \
    /* a linear of several parts; parts[]: count, then per part type, rows, address (int64) */   \
    FN(KR_I64, gg_parts_act_bytes, KA_I64(k) KA_I64(n))                                          \
    FN(KR_VOID, gg_linear_parts, KA_P(const int64_t *parts) KA_I64(k) KA_P(const float *x) KA_I64(n) \
       KA_P(float *y) KA_P(uint8_t *act))                                                        \
    TABLE(gg_parts, i64, GG_PARTS_FIELDS, KA_IDX(GG_PARTS_COUNT, count) KA_IDX(GG_PARTS_TYPE, type) \
          KA_IDX(GG_PARTS_ROWS, rows) KA_IDX(GG_PARTS_POINTER, pointer))                         \
    /* profiling (profile.h): kernel_profile(acc) makes the kernels add seconds into acc[P_COUNT] \
     * (doubles, the slots below) until kernel_profile(NULL); one caller at a time */            \
    FN(KR_VOID, kernel_profile, KA_P(double *acc))                                               \
    TABLE(kernel_profile_slots, f64, P_COUNT, KA_IDX(P_MATMUL, matmul) KA_IDX(P_ATTENTION, attention) \
          KA_IDX(P_LAYER_OTHER, layer_other) KA_IDX(P_TEAM, team) KA_IDX(P_BUSY, busy)           \
          KA_IDX(P_BUSY_CPU, busy_cpu) KA_IDX(P_REGIONS, regions))

/* the type codes: each a KA_ARG / KA_RET of its text code and its C type, which the user of the
 * list defines (below: C prototypes and enums; kernel_abi.c: the text) */
#define KR_VOID KA_RET(void, void)
#define KR_I32 KA_RET(i32, int)
#define KR_I64 KA_RET(i64, int64_t)
#define KR_P(type) KA_RET(p, type)
#define KA_I32(name) KA_ARG(i32, int name)
#define KA_I64(name) KA_ARG(i64, int64_t name)
#define KA_F32(name) KA_ARG(f32, float name)
#define KA_P(decl) KA_ARG(p, decl)
#define KA_NONE KA_ARG(, void)

/* the prototypes (ret name(params), each parameter ", decl" with the first comma dropped) and
 * the tables' enums */
#define KA_RET(code, type) type
#define KA_ARG(code, decl) , decl
#define KA_IDX(constant, text) constant,
#define KA_APPLY_(m, ...) m(__VA_ARGS__)
#define KA_TAIL_(first, ...) __VA_ARGS__
#define KA_PROTOTYPE_(ret, name, params) ret name(KA_APPLY_(KA_TAIL_, 0 params));
#define KA_ENUM_(name, code, count, entries) enum { entries count };
SPECD_KERNEL_ABI(KA_PROTOTYPE_, KA_ENUM_)
#undef KA_RET
#undef KA_ARG
#undef KA_IDX

/* the ABI itself (fixed forever: the loader calls these before anything else; kernel_abi.c) */
int specd_kernel_abi_version(void);
const char *specd_kernel_abi_signatures(void);

/* internal (not exported): the team size of the kernels' parallel regions, see threads.c */
__attribute__((visibility("hidden"))) int specd_team_size(void);

#endif
