#ifndef TF_OPS_H
#define TF_OPS_H

#include <stdint.h>

/* Paged attention for a batch of rows over fp16 keys and values, or int8 ones (ks and vs
 * set) whose position and kv head each have one fp32 scale: a key's score is its fp32
 * dot with the int8 codes times the key's scale, and a value's weight is its softmax
 * term times the value's scale. */
typedef struct {
    const float *q;            /* [rows, q_stride]: head h at h*head_dim, scaled, rope applied */
    float *out;                /* [rows, out_stride] */
    int32_t rows, heads, kv_heads, head_dim, block_size, q_stride, out_stride;
    const int32_t *pos;        /* [rows] */
    const int32_t *tab_off;    /* [rows]: where the row's block table starts in `tables` */
    const int32_t *tables;
    const void *k, *v;         /* block 0's keys [kv_heads, head_dim, B] and values [kv_heads, B, head_dim] of this layer */
    int64_t block_stride;      /* bytes from one block's keys (or values) to the next's */
    const float *ks, *vs;      /* int8: block 0's key and value scales [kv_heads, B] (block b's b*kv_heads*B
                                  further); NULL: fp16 */
} tf_attn;

float tf_exp(float x);
/* each of G rows of L scores (stride apart) as exp(s - max), den[g] their lanes8 sum (attention) */
void tf_softmax_rows(float *s, int G, int L, int stride, float *den);
void tf_silu_mul(const float *g, const float *u, float *out, int64_t n);
void tf_silu(const float *x, float *out, int64_t n);           /* x / (exp(-x) + 1) */
void tf_rms_norm(const float *x, const float *w, float eps, int k, float *out);
void tf_rope(float *x, const float *c, const float *s, int d);
uint16_t tf_f2h(float f);
float tf_h2f(uint16_t h);
void tf_f2h_row(const float *f, uint16_t *h, int n);
void tf_set_soft_fp16(int soft);      /* 1: fp16 conversions in plain C (tests) */
/* floats of scratch tf_attend needs for rows at positions up to pos */
int64_t tf_attend_scratch(const tf_attn *t, int pos);
/* query row `row` over kv heads h0..h1-1 (the bits of each head do not depend on the range) */
void tf_attend(const tf_attn *t, int row, int h0, int h1, float *scratch);

/* The keyed sampler's integer masses of one row of logits (tf_sample.c; engine/sampler.py,
 * token_masses): mass[i] that of logits[i], z_max >= every logit / temperature. */
void tf_token_masses(const float *logits, int64_t n, double temperature, double z_max, int64_t *mass);

/* A Gated DeltaNet layer's token mixing (tf_deltanet.c): lin [rows, lw] holds the rows'
 * in_qkv, z, b and a outputs side by side; out [rows, v_heads * v_dim] gets the gated,
 * normed outputs before the output projection.  0, or -1 (no memory, or sizes the
 * kernels do not take). */
#include "tf_kernels.h"
int tf_deltanet_mix(const tf_model *m, const tf_layer *L, const float *lin, int lw, int rows,
                    const int32_t *src, const int32_t *dst, float *out, int threads);

#endif
