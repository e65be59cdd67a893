/* GGML's block formats as GGUF files store them (llama.cpp's ggml-common.h layouts), the
 * activation blocks specd's GGUF-native linears quantize their inputs to, and the type ids.
 *
 * Weights (one row of k input channels = k / block elements blocks, back to back, as stored):
 *   Q4_0  32 elements, 18 bytes:  w = d * (q - 8),   q 4 bits; byte j holds q[j] (low) and q[j+16]
 *   Q5_0  32 elements, 22 bytes:  w = d * (q - 16),  q 5 bits; 4 low bits as Q4_0, bit j of qh is
 *                                 q[j]'s fifth bit
 *   Q8_0  32 elements, 34 bytes:  w = d * q,         q int8
 *   Q4_K 256 elements, 144 bytes: 8 sub-blocks of 32, w = d * sc[j] * q - dmin * m[j], q 4 bits,
 *                                 sc / m 6 bits packed in 12 bytes; bytes 32c..32c+31 of qs hold
 *                                 sub-block 2c (low nibbles) and 2c+1 (high nibbles)
 *   Q6_K 256 elements, 210 bytes: 16 sub-blocks of 16, w = d * sc[j] * (q - 32), q 6 bits (4 in
 *                                 ql, 2 in qh), sc int8
 * d, dmin are fp16. Every struct is made of bytes and uint16s: 2-byte aligned, no padding.
 *
 * Activations (quantized per row inside every call, from that row alone):
 *   A32   for Q4_0 / Q5_0 / Q8_0 weights; one row of k: float d[k/32] (d = amax / 127 of each
 *         block of 32: llama.cpp's Q8_0 numbers with the scale kept in float32, not fp16), int32
 *         s[k/32] (each block's sum of codes, for the -8 / -16 offsets), int8 q[k]
 *   Q8_K  for Q4_K / Q6_K weights (llama.cpp's block_q8_K): per 256 elements a float scale d, 256
 *         int8 codes in [-127, 127] and the sums of each 16 codes (int16).
 */
#ifndef SPECD_GGML_BLOCKS_H
#define SPECD_GGML_BLOCKS_H
#include <stdint.h>

/* ggml.h's enum ggml_type (gguf-py: GGMLQuantizationType) for the formats the kernels run */
enum { GG_Q4_0 = 2, GG_Q5_0 = 6, GG_Q8_0 = 8, GG_Q4_K = 12, GG_Q6_K = 14 };

#define QK32 32  /* elements per block of Q4_0, Q5_0, Q8_0 and A32 */
#define QK_K 256 /* elements per super-block of Q4_K, Q6_K and Q8_K */

typedef struct { uint16_t d; uint8_t qs[QK32 / 2]; } block_q4_0;
typedef struct { uint16_t d; uint8_t qh[4]; uint8_t qs[QK32 / 2]; } block_q5_0;
typedef struct { uint16_t d; int8_t qs[QK32]; } block_q8_0;
typedef struct { uint16_t d, dmin; uint8_t scales[12]; uint8_t qs[QK_K / 2]; } block_q4_K;
typedef struct { uint8_t ql[QK_K / 2]; uint8_t qh[QK_K / 4]; int8_t scales[QK_K / 16]; uint16_t d; } block_q6_K;
typedef struct { float d; int8_t qs[QK_K]; int16_t bsums[QK_K / 16]; } block_q8_K;

_Static_assert(sizeof(block_q4_0) == 18, "Q4_0 block: 18 bytes");
_Static_assert(sizeof(block_q5_0) == 22, "Q5_0 block: 22 bytes");
_Static_assert(sizeof(block_q8_0) == 34, "Q8_0 block: 34 bytes");
_Static_assert(sizeof(block_q4_K) == 144, "Q4_K block: 144 bytes");
_Static_assert(sizeof(block_q6_K) == 210, "Q6_K block: 210 bytes");
_Static_assert(sizeof(block_q8_K) == 292, "Q8_K block: 292 bytes");

/* specd's own repacked layouts of Q4_0 and the K-quants (not GGUF's; built once at load by
 * gg_repack for the AVX2 and AVX-512 VNNI kernels, where the CPU has them): the rows of a tensor in
 * groups of 16, each group's blocks (Q4_0: of 32 elements; K-quants: super-blocks of 256) one after
 * another, block i of group g at (g * nsb + i) * bytes. In one such block, "col c" is row 16 g + c
 * of the tensor and a "vector" is 64 bytes, byte 4 c + e of it belonging to col c (so int32 lane c
 * of a 512-bit register is col c):
 *   Q4_0_X16 (288 bytes): vectors v[h] (h < 4): byte 4c+e = qs[4h + e] of col c's block (the code of
 *            element 4h + e in the low nibble, of element 16 + 4h + e in the high one); then d[c]
 *            (fp16, 32 bytes)
 *   Q4_K_X16 (2368 bytes): vectors v[s][h] (s < 8 sub-blocks, h < 4): byte 4c+e = code of element
 *            32s + 4h + e (low nibble) | code of element 32s + 16 + 4h + e (high nibble); then
 *            sc[s][c] (uint8, 128 bytes), m[p][c][2] = (m[2p][c], m[2p+1][c]) (uint8, 128 bytes),
 *            d[c], dmin[c] (fp16, 32 bytes each)
 *   Q6_K_X16 (3360 bytes): with a_q the 6-bit code of element 16s + 4q + e (s < 16 sub-blocks of
 *            16, q < 4): vectors v[s][0]: byte 4c+e = a_0 | (a_1 >> 4) << 6; v[s][1]: a_2 |
 *            (a_3 >> 4) << 6; then vectors u[s]: (a_1 & 15) | (a_3 & 15) << 4 (so a_0 and a_2 are
 *            one AND away); then sc[s][c] (int8, 256 bytes), d[c] (fp16, 32 bytes)
 * The same values as the GGUF blocks, byte for byte recoverable (gg_unrepack). */
#define GG_X16 0x100
enum { GG_Q4_0_X16 = GG_X16 | GG_Q4_0, GG_Q4_K_X16 = GG_X16 | GG_Q4_K, GG_Q6_K_X16 = GG_X16 | GG_Q6_K };
#define X16_Q4_0_BYTES 288
#define X16_Q4_K_BYTES 2368
#define X16_Q6_K_BYTES 3360
/* byte offsets inside one repacked block (the code vectors start at 0) */
enum { X16_Q4_0_D = 256 };
enum { X16_Q4_K_SC = 2048, X16_Q4_K_MIN = 2176, X16_Q4_K_D = 2304, X16_Q4_K_DMIN = 2336 };
enum { X16_Q6_K_HI = 2048, X16_Q6_K_SC = 3072, X16_Q6_K_D = 3328 };

#endif
