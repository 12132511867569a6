#ifndef TF_DOT_H
#define TF_DOT_H

#include "tf_kernels.h"

/* Quantized activations of `rows` rows of k inputs (k a multiple of 32), in the
 * per-32 form (Q4A, Q8 weights) and the per-256 form (K weights; k a multiple of
 * 256), each present when a weight of the call reads it. */
typedef struct {
    int32_t rows, k;
    int8_t *q;            /* rows * k */
    float *s;             /* rows * k/32 */
    int32_t *base;        /* rows * k/32: -128 times the sum of each block's q (exact): the
                             starting total of the VNNI Q8 tiles, whose weights are offset to unsigned */
    float *xsum;          /* rows * k/32: s times the sum of the block's q, the factor of its min term */
    int8_t *qk;           /* rows * k; within each block of 32, element 16h + 4m + i at 8m + 4h + i */
    float *sk;            /* rows * k/256 */
    uint8_t *qku;         /* rows * k: qk + 128 as unsigned bytes (read by K6 on AVX-512 VNNI), or NULL */
    int16_t *bs;          /* rows * k/16: per super-block, the sums of q over inputs
                             32b + 16h .. +15 at [h * 8 + b] (exact) */
} tf_acts;

/* One group of `size` outputs (K: 8, blocks: 16) by RT rows from row r, storing outputs
 * [n0, n1); `first`: the group's first pass over a chunk of rows (it prefetches ahead). */
typedef void (*tf_tile_fn)(const tf_weight *w, int64_t g, const tf_acts *a, int r, float *y, int ldy,
                           int n0, int n1, int first);

/* The grouped formats' driver: rows in chunks whose activations stay in cache while
 * every group passes over them, each group by up to rmax rows at a time (shapes[RT]). */
static inline void tf_tiles(const tf_tile_fn *shapes, int size, int rmax, const tf_weight *w, int n0, int n1,
                            const tf_acts *a, float *y, int ldy) {
    int rows = a->rows, chunk = (int)(393216 / w->k) / rmax * rmax;
    if (chunk < rmax) chunk = rmax;
    for (int c = 0; c < rows; c += chunk) {
        int end = c + chunk < rows ? c + chunk : rows;
        for (int64_t g = n0 / size; g * size < n1; g++)
            for (int r = c; r < end; r += rmax) {
                int RT = end - r < rmax ? end - r : rmax;
                shapes[RT](w, g, a, r, y, ldy, n0, n1, r == c);
            }
    }
}

void tf_quantize_row(const float *x, int k, int8_t *q, float *s, int32_t *base, float *xsum);
/* n values (a kv head's key or value) as int8 codes q, by the activations' rule over all n; returns d */
float tf_quantize_head(const float *x, int n, int8_t *q);
void tf_quantize_row_k(const float *x, int k, int8_t *q, float *s, int16_t *bs, uint8_t *qu);
/* y[r, n] (row stride ldy) = dot of row r with output n, for n in [n0, n1); no bias.
 * Quantized formats read `a`; TF_BF16 reads the fp32 rows `x`. */
void tf_dot_rows(const tf_weight *w, int n0, int n1, const tf_acts *a, const float *x, float *y, int ldy);
void tf_dequant_row(const tf_weight *w, int n, float *out);
/* the block formats (tf_bdot.c) */
void tf_bdot_rows(const tf_weight *w, int n0, int n1, const tf_acts *a, float *y, int ldy);
void tf_bdequant_row(const tf_weight *w, int n, float *out);
void tf_bpack(int fmt, int flags, int n, int k, const uint8_t *q, const uint8_t *qh, const uint8_t *s,
              uint8_t *oq, uint8_t *os);
/* the K formats (tf_kdot.c) */
void tf_kdot_rows(const tf_weight *w, int n0, int n1, const tf_acts *a, float *y, int ldy);
void tf_kdequant_row(const tf_weight *w, int n, float *out);
void tf_kpack(int fmt, const uint8_t *raw, int n, int k, uint8_t *q, uint8_t *s);
int tf_isa(void);
int tf_best_isa(void);
int tf_set_isa(int want);

#endif
