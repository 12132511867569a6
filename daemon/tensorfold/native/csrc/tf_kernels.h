/* TensorFold's CPU kernels: every output element is computed by one routine
 * whose reduction order is fixed in software, so a row's bits never depend on
 * the rows beside it, the batch size, the thread count or the instruction set.
 *
 * The definitions (what every ISA path must reproduce bit for bit):
 *   lanes8     an fp32 reduction over n (a multiple of 8) is acc[i % 8] += term,
 *              sequentially, then tree8: ((a0+a1)+(a2+a3))+((a4+a5)+(a6+a7))
 *              (16-bit weights).
 *   act quant  per row, per block of 32: d = amax/127 (a NaN skipped), q = rne(x * (1/d))
 *              clipped to +-127 (0 if amax is 0, and 0 where it is a NaN), sum = sum of q,
 *              xsum = d * sum (one fp32 rounding).
 *   block dot  per block b in order: P_b = the exact integer sum of the 32 products
 *              q_e * x_e (q_e the weight's integer value, x_e the activation's q);
 *              acc = fma((float)P_b, xs_b * d_b, acc), and with a min plane
 *              acc = fma(xsum_b, m_b, acc); result = acc (+ bias).
 *
 * The K formats (GGUF's Q4_K, Q5_K, Q6_K) work on super-blocks of 256 inputs:
 *   act quant  per row, per super-block j of 256: d_j = amax/127, q = rne(x * (1/d_j)),
 *              and bs = the sum of q over each 16 inputs (exact).
 *   K dot      I_j = the exact integer sum over the super-block of c_e * q_e * x_e
 *              (c_e the integer scale code of element e's 32 (Q6_K: 16) inputs, q_e
 *              its integer value, x_e the activation's q); for Q4_K/Q5_K also
 *              M_j = sum over its 8 blocks of mcode_b * bsum_b (exact).  Then, over
 *              j in order, acc = fma((float)I_j, d_j * D_j, acc) and (with mins)
 *              acc = fma((float)M_j, d_j * Dm_j, acc), D and Dm the fp32 super-scales;
 *              result = acc (+ bias).  Any integer order gives the same I_j.
 */
#ifndef TF_KERNELS_H
#define TF_KERNELS_H

#include <stdint.h>

#define TF_MAX_RANKS 8

enum { TF_Q4A = 1, TF_Q8 = 2, TF_BF16 = 3, TF_K4 = 4, TF_K5 = 5, TF_K6 = 6 };
/* flags.  TF_HIGH (Q4A) adds a fifth bit to each nibble; TF_HAS_MIN (Q4A, Q8) adds a
 * min plane (a Q4A without one has the fixed offset of GGUF's Q4_0 and Q5_0); TF_HALF
 * stores the scales as fp16 (exactly the fp32 values the packer found them to be; else
 * fp32). */
enum { TF_HAS_MIN = 2, TF_HIGH = 4, TF_HALF = 8 };

/* A quantized weight: n outputs of k inputs, in blocks of 32 inputs (nb = k/32).
 *
 * Q4A, Q8: in groups of sixteen outputs (G = ceil(n/16) groups; outputs past n are
 * zero).  Group g's block b is one record in q (Q4A 256 bytes, with TF_HIGH 320; Q8
 * 512) and one in s, at (g * nb + b) * size.  Output t's element e = 4j + i sits in
 * byte 4t + i of 64-byte vectors (so each dword holds four of one output's inputs):
 *   Q8        vector j, int8;
 *   Q4A       vector j % 4, the low nibble for e < 16, the high for e >= 16 (each
 *             dword of a GGUF Q4 block as it is); TF_HIGH: bit 4 of the value at bit
 *             j of byte 256 + 4t + i.
 * Scales: S planes (d[, m] with TF_HAS_MIN) of sixteen values each, fp32 or fp16
 * (TF_HALF); element e's value = q * d (+ m), one fp32 multiply then one fp32 add,
 * where a Q4A's q is the stored value less 8 (16 with TF_HIGH) when it has no m.
 *
 * K4, K5, K6 (k a multiple of 256, nsb = k/256 super-blocks): GGUF's Q4_K, Q5_K,
 * Q6_K in groups of eight outputs (G = ceil(n/8) groups; outputs past n are zero).
 * Group g's super-block j is one record in q (K4 1024 bytes, K5 1280, K6 1536) and
 * one in s (K4/K5 128, K6 176), at (g * nsb + j) * size.  Output t's element
 * e = 16h + 4m + i of block b sits in byte 8t + 4h + i of 64-byte vectors (so each
 * 8 bytes pair the block's two 16-input halves; the activations use the same order):
 *   nibbles   vector 4(b/2) + m, the low nibble for even b, the high for odd b;
 *   K5 bit 4  vector 16 + m, bit b;
 *   K6 bits 4, 5  vector 16 + 4(b/4) + m, bits 2(b%4), 2(b%4) + 1.
 * K4/K5 scales: fp16 d of outputs 0..7, fp16 dmin, then the 6-bit sc codes [b][t]
 * and mn codes [b/2][t][b%2] packed in 96 bytes (tf_kdot.c, kput_codes: byte i of
 * each holds its low four bits in byte 32 + i, its top two in byte 96 + i % 32); value
 * = q * (d * sc) + (-dmin * mn).  K6 scales: fp16
 * d of outputs 0..7, int8 codes [h][b][t] (h: inputs 16h..16h+15 of the block), then
 * int32 C[t] = the sum over the super-block of code * (q - 32) (exact; it lets a
 * path take the activations plus 128 as unsigned bytes); value = (q - 32) * (d * code). */
typedef struct {
    int32_t fmt;          /* TF_Q4A, TF_Q8, TF_BF16, TF_K4, TF_K5, TF_K6 */
    int32_t flags;        /* TF_HAS_MIN (Q4A, Q8), TF_HIGH (Q4A), TF_HALF (Q4A, Q8) */
    int32_t n;            /* outputs */
    int32_t k;            /* inputs (a multiple of 32; of 256 for K formats) */
    const uint8_t *q;     /* the records' value bits, as above; BF16: n*k uint16 */
    const void *s;        /* the records' scales, as above */
    const float *bias;    /* n floats or NULL */
} tf_weight;

/* q, k, v (and gate, up) run as one call: their outputs side by side, each
 * part in its own format (a Q4_K_M file mixes Q4_K and Q6_K in one layer).
 *
 * A layer mixes its tokens by attention (TF_ATTENTION) or by a Gated DeltaNet
 * (TF_DELTANET, the Qwen3.5 hybrids' linear attention):
 *   attention  q, k, v, o as in Llama; with `qgate` (Qwen3.5's gated attention) the
 *              output is multiplied by sigmoid(qgate . x) before o.
 *   deltanet   q = in_qkv, z, b, a the input projections (in_qkv: the conv_dim
 *              channels of q, k and v), o the output projection; `conv` the causal
 *              depthwise conv [conv_k][conv_dim] (tap t of every channel together); `dt_bias` and `decay_a` (-exp(A_log))
 *              per value head; `gnorm` the gated RMSNorm weight [v_dim].
 * `slot`: the layer's index among the model's layers of its kind (its KV layer, or its
 * part of a state slot). */
enum { TF_ATTENTION = 0, TF_DELTANET = 1 };

typedef struct {
    tf_weight q, k, v, o, gate, up, down;
    const float *attn_norm, *mlp_norm;
    const float *q_norm, *k_norm;       /* per-head norms (Qwen3) or NULL */
    int32_t kind, slot;
    tf_weight qgate, z, b, a;           /* qgate: gated attention, else fmt 0; z, b, a: deltanet */
    const float *conv, *dt_bias, *decay_a, *gnorm;
} tf_layer;

/* The deltanet layers' sizes, and their per-sequence state.  A state slot holds, for
 * each deltanet layer in order, the conv inputs of the last conv_k - 1 positions
 * [conv_k - 1][conv_dim] and the delta-rule matrices [v_heads][k_dim][v_dim], fp32:
 * slot s at state + s * slot_stride.  Row r of a forward reads the state its sequence
 * had before it from slot state_src[r] (-1: the zero state of a fresh sequence) and
 * leaves the state after it in slot state_dst[r] (the same slot to update in place);
 * a sequence's rows run in order, so row r + 1 reads what row r wrote. */
typedef struct {
    int32_t k_heads, v_heads, k_dim, v_dim, conv_k;
    int32_t tiled;                      /* value head h reads key head h % k_heads (llama.cpp's GGUF
                                           order), else h / (v_heads / k_heads) (Hugging Face's) */
    float *state;
    int64_t slot_stride;                /* floats */
    /* On several ranks (tf_model.ranks) k_heads and v_heads count this rank's own heads: a
     * run of key heads and the value heads that read them.  v_all counts the whole model's
     * value heads (b and a stay whole: v_all outputs each); v_order lists every rank's value
     * heads, rank after rank, each by its index in the whole model, rank r's at
     * v_order[v_split[r]..v_split[r+1]) in increasing order.  One rank: v_all = v_heads,
     * v_order NULL. */
    int32_t v_all;
    const int32_t *v_order;
    int32_t v_split[TF_MAX_RANKS + 1];
} tf_deltanet;

typedef struct {
    int32_t layers, hidden, heads, kv_heads, head_dim, ffn, vocab, max_pos, block_size;
    int32_t threads;                    /* the pool's threads this model's forwards use (0: all) */
    float eps;
    const tf_layer *layer;
    tf_weight embed, head;
    const float *norm;
    const float *cos, *sin;             /* [max_pos, rot_dim], rotate-half layout */
    int32_t rot_dim;                    /* the leading dims of a head that rope turns (head_dim, or less) */
    /* M-RoPE (Qwen3.5, interleaved): with a row's three positions (t, h, w), rotary
     * frequency j < rot_dim/2 turns by position h when j % 3 == 1 and j < 3 * mrope[1], by
     * w when j % 3 == 2 and j < 3 * mrope[2], else by t.  A text row's three are equal. */
    int32_t mrope[3];
    tf_deltanet dn;
    /* KV: layer l's keys of block b ([kv_heads, head_dim, B]) at kv + 2*l*kv_stride +
     * b*block_stride, its values ([kv_heads, B, head_dim]) kv_stride further.  The
     * strides make either layout (native/model.py picks): layer by layer (kv_stride
     * every block's keys, block_stride one block's), or block by block (block_stride
     * a block's keys and values of every layer, kv_stride one layer half's).  fp16, or int8
     * when kv_scale is set: a position's key (or value) of one kv head is quantized
     * as the activations are (d = amax/127, q = rne(x * (1/d))), and d is kept in
     * kv_scale, layer l's key scales of block b ([kv_heads, B]) at kv_scale +
     * 2*l*scale_region + b*kv_heads*B, its value scales scale_region further. */
    uint8_t *kv;
    int64_t block_stride;               /* bytes from a block's keys (or values) to the next's */
    int64_t kv_stride;                  /* bytes from a layer's keys to its values */
    float *kv_scale;                    /* NULL: fp16 */
    int64_t scale_region;               /* floats from a layer's key scales to its value scales */
    /* ranks > 1: this model is rank `rank`'s shard.  heads, kv_heads, ffn and vocab
     * count its own part (its q, k, v heads, gate/up/down columns, logits); hidden and
     * every weight's k are whole.  The boundaries split each output among the ranks:
     * rank r owns kv heads [kv_split[r], kv_split[r+1]) (and their q heads), hidden
     * columns [hidden_split[r], ...) of o and down, ffn columns [ffn_split[r], ...) of
     * gate and up.  After each split step, `gather` all-gathers `count` floats of `send`
     * from every rank into `recv`, rank after rank (0: done, else the forward fails),
     * and every rank joins the whole activation: each element the same reduction as on
     * one rank. */
    int32_t ranks, rank;
    int32_t kv_split[TF_MAX_RANKS + 1], hidden_split[TF_MAX_RANKS + 1], ffn_split[TF_MAX_RANKS + 1];
    int (*gather)(const float *send, float *recv, int64_t count);
} tf_model;

/* What a forward's rows carry besides tokens and positions (each NULL when unused):
 * state_src/state_dst their deltanet state slots (tf_deltanet); embed_row[r] >= 0 takes
 * row r's input from embeds [*, hidden] instead of its token's embedding (an image's
 * positions); mrope [rows, 3] their M-RoPE positions. */
typedef struct {
    const int32_t *state_src, *state_dst;
    const int32_t *embed_row;
    const float *embeds;
    const int32_t *mrope;
} tf_inputs;

#endif
