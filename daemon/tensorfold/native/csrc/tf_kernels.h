/* TensorFold's CPU kernels: every output element is computed by one routine
 * whose reduction order is fixed in software, so a row's bits never depend on
 * the rows beside it, the batch size, the thread count or the instruction set.
 *
 * The definitions (what every ISA path must reproduce bit for bit):
 *   lanes8     an fp32 reduction over n (a multiple of 8) is acc[i % 8] += term,
 *              sequentially, then tree8: ((a0+a1)+(a2+a3))+((a4+a5)+(a6+a7)).
 *   act quant  per row, per block of 32: d = amax/127, q = rne(x * (1/d)) (0 if
 *              amax is 0), sum = sum of q.
 *   int8 dot   per block b: p[l] = sum of the 4 products of elements 4l..4l+3
 *              (exact int32); acc[l] = fma(p[l], xs_b * wd_b(l), acc[l]);
 *              with a min term mac[b % 8] = fma(sum_b, xs_b * wm_b, mac[b % 8]);
 *              result = tree8(acc) + tree8(mac) (+ bias).
 */
#ifndef TF_KERNELS_H
#define TF_KERNELS_H

#include <stdint.h>

enum { TF_Q4A = 1, TF_Q8 = 2, TF_BF16 = 3 };
/* flags.  Values: TF_HIGH (Q4A only) adds a fifth bit to each nibble.  Scale
 * encodings (at most one; none: fp32 planes): TF_HALF stores the planes as
 * fp16; TF_SUPER stores int8 codes and one fp32 super-scale per 8 blocks, the
 * scale being super * (float)code.  Both decode to exactly the fp32 scales the
 * definitions above use (the packer only chooses them where they are exact). */
enum { TF_TWO_SCALES = 1, TF_HAS_MIN = 2, TF_HIGH = 4, TF_HALF = 8, TF_SUPER = 16 };

/* A quantized weight: n outputs of k inputs, in blocks of 32 inputs (nb = k/32).
 * The scales are planar per output, S planes of nb: Q4A: d, m (S = 2); Q8: d0[, d1][, m]
 * (S = 1 + TWO_SCALES + HAS_MIN).  Element e (0..31) of a block has the value
 * q * (e < 16 ? d0 : d1) (+ m), one fp32 multiply then one fp32 add. */
typedef struct {
    int32_t fmt;          /* TF_Q4A, TF_Q8, TF_BF16 */
    int32_t flags;        /* TF_TWO_SCALES (Q8: one scale per 16), TF_HAS_MIN (Q8), TF_HIGH (Q4A), TF_HALF | TF_SUPER */
    int32_t n;            /* outputs */
    int32_t k;            /* inputs (a multiple of 32) */
    const uint8_t *q;     /* Q4A: n*nb blocks of 16 bytes, byte i = element i (low nibble), i + 16 (high);
                             Q8: n*k int8; BF16: n*k uint16 */
    const void *s;        /* [n][S][nb]: fp32, or fp16 (TF_HALF), or int8 codes (TF_SUPER); fp16 and
                             int8 planes need 16 readable bytes past their end (a last partial group
                             of eight is loaded whole, then masked) */
    const float *bias;    /* n floats or NULL */
    const uint8_t *qh;    /* TF_HIGH: n*nb blocks of 4 bytes, bit e%8 of byte e/8 = bit 4 of element e
                             (q = nibble | bit << 4, 0..31); else NULL */
    const float *sup;     /* TF_SUPER: [n][S][ceil(nb/8)] fp32: blocks 8j..8j+7's scale = sup[j] * code */
} tf_weight;

/* q, k, v (and gate, up) run as one call: their outputs side by side, each
 * part in its own format (a Q4_K_M file mixes Q4_K and Q6_K in one layer). */
typedef struct {
    tf_weight q, k, v, o, gate, up, down;
    const float *attn_norm, *mlp_norm;
    const float *q_norm, *k_norm;       /* per-head norms (Qwen3) or NULL */
} tf_layer;

typedef struct {
    int32_t layers, hidden, heads, kv_heads, head_dim, ffn, vocab, max_pos, block_size;
    int32_t threads;                    /* the pool's threads this model's forwards use (0: all) */
    float eps;
    const tf_layer *layer;
    tf_weight embed, head;
    const float *norm;
    const float *cos, *sin;             /* [max_pos, head_dim], rotate-half layout */
    uint16_t *kv;                       /* fp16; block b, layer l: k then v, [kv_heads, B, head_dim] */
    int64_t block_stride;               /* uint16 elements per block (all layers, k and v) */
} tf_model;

#endif
