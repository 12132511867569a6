/* The forward of the Llama family (Llama, SmolLM2, Qwen2/2.5, Qwen3) and of the
 * Qwen3.5 hybrids (gated attention and Gated DeltaNet layers) over the paged fp16
 * KV cache and the deltanet state slots: a dozen steps per layer, each split
 * among the pool's threads by output (rows, columns, heads or (row, kv head)
 * pairs), never by reduction. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tf_ahead.h"
#include "tf_dot.h"
#include "tf_kernels.h"
#include "tf_lanes.h"
#include "tf_ops.h"
#include "tf_pool.h"

#define MAX(a, b) ((a) > (b) ? (a) : (b))

static void split(int64_t n, int ith, int nth, int64_t *a, int64_t *b) {
    *a = n * ith / nth;
    *b = n * (ith + 1) / nth;
}

/* ---------------------------------------------------------------- linear */

typedef struct {
    int8_t *q, *qk;
    uint8_t *qku;
    float *s, *xsum, *sk;
    int32_t *base;
    int16_t *bs;
    float *tmp;
} lin_scratch;

/* The activation forms a linear over `parts` reads: per-32 blocks (Q4A, Q8), per-256
 * super-blocks (K formats) and their unsigned copy (Q6_K). */
enum { A_BLOCKS = 1, A_SUPERS = 2, A_K6 = 4 };

static int act_forms(const tf_weight *const *parts, int nparts) {
    int forms = 0;
    for (int i = 0; i < nparts; i++) {
        if (parts[i]->fmt == TF_Q4A || parts[i]->fmt == TF_Q8) forms |= A_BLOCKS;
        if (parts[i]->fmt >= TF_K4) forms |= A_SUPERS;
        if (parts[i]->fmt == TF_K6) forms |= A_K6;
    }
    return forms;
}

/* Row r of x (k inputs a row) quantized into sc in `forms`: a function of the row alone. */
static void quantize_into(const lin_scratch *sc, int forms, const float *x, int64_t r, int64_t k) {
    if (forms & A_BLOCKS)
        tf_quantize_row(x + r * k, (int)k, sc->q + r * k, sc->s + r * (k / 32), sc->base + r * (k / 32),
                        sc->xsum + r * (k / 32));
    if (forms & A_SUPERS)
        tf_quantize_row_k(x + r * k, (int)k, sc->qk + r * k, sc->sk + r * (k / 256), sc->bs + r * (k / 16),
                          (forms & A_K6) ? sc->qku + r * k : NULL);
}

typedef struct {
    const tf_weight *const *parts;   /* outputs side by side; all parts read the same k inputs */
    int nparts, n, k;
    const float *x;
    tf_acts a;                       /* each form NULL unless a part reads it */
    const lin_scratch *sc;
    int forms;
    float *tmp, *y;
    int ldy, accum;
} lin_job;

static void quant_job(void *p, int ith, int nth) {
    lin_job *j = p;
    int64_t r0, r1;
    split(j->a.rows, ith, nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) quantize_into(j->sc, j->forms, j->x, r, j->k);
}

/* y = t + bias, or y + (t + bias) when accum (bias NULL: y + t), n elements; a part with
 * neither is written in place (dot_job) */
TF_CLONES static void add_part(const float *t, const float *bias, float *y, int64_t n, int accum) {
    if (bias && accum) for (int64_t i = 0; i < n; i++) y[i] = y[i] + (t[i] + bias[i]);
    else if (bias) for (int64_t i = 0; i < n; i++) y[i] = t[i] + bias[i];
    else for (int64_t i = 0; i < n; i++) y[i] = y[i] + t[i];
}

static void dot_job(void *p, int ith, int nth) {
    lin_job *j = p;
    /* outputs in groups of 16 (the block formats' groups; two of the K formats'), so
     * neighbouring threads never share a group or a cache line of y */
    int64_t g0, g1, groups = (j->n + 15) / 16;
    split(groups, ith, nth, &g0, &g1);
    int n0 = (int)(g0 * 16), n1 = (int)(g1 * 16 > j->n ? j->n : g1 * 16);
    if (n0 >= n1) return;
    int base = 0;
    for (int i = 0; i < j->nparts; i++) {
        const tf_weight *w = j->parts[i];
        int a = n0 > base ? n0 - base : 0, b = n1 - base < w->n ? n1 - base : w->n;
        if (a < b && !j->accum && !w->bias) tf_dot_rows(w, a, b, &j->a, j->x, j->y + base, j->ldy);
        else if (a < b) {
            tf_dot_rows(w, a, b, &j->a, j->x, j->tmp + base, j->n);
            for (int64_t r = 0; r < j->a.rows; r++)
                add_part(j->tmp + r * j->n + base + a, w->bias ? w->bias + a : NULL, j->y + r * j->ldy + base + a,
                         b - a, j->accum);
        }
        base += w->n;
    }
}

/* y[r, :n] (stride ldy) = x[r] @ [parts]^T + bias, or += when accum.  `quantized`: the
 * rows of x are in sc already, in the parts' forms (a row step quantized each row it
 * wrote, quantize_into). */
static void linear(const tf_weight *const *parts, int nparts, const float *x, int rows, float *y, int ldy,
                   int accum, lin_scratch *sc, int threads, int quantized) {
    int n = 0, forms = act_forms(parts, nparts);
    for (int i = 0; i < nparts; i++) n += parts[i]->n;
    int k = parts[0]->k;
    tf_acts a = {rows, k};
    if (forms & A_BLOCKS) { a.q = sc->q; a.s = sc->s; a.base = sc->base; a.xsum = sc->xsum; }
    if (forms & A_SUPERS) { a.qk = sc->qk; a.sk = sc->sk; a.bs = sc->bs; }
    if (forms & A_K6) a.qku = sc->qku;              /* only Q6_K reads the unsigned copy */
    lin_job j = {parts, nparts, n, k, x, a, sc, forms, sc->tmp, y, ldy, accum};
    if (forms && !quantized) {
        if ((int64_t)rows * k >= 4096) tf_pool_run(quant_job, &j, threads);   /* 8 rows of 576 and up */
        else quant_job(&j, 0, 1);
    }
    tf_pool_run(dot_job, &j, threads);
}

/* room for `rows` rows of k inputs, and `outs` output values */
static int alloc_scratch(lin_scratch *sc, int64_t rows, int64_t k, int64_t outs) {
    sc->q = malloc((size_t)(rows * k));
    sc->s = malloc(sizeof(float) * (size_t)(rows * (k / 32)));
    sc->base = malloc(sizeof(int32_t) * (size_t)(rows * (k / 32)));
    sc->xsum = malloc(sizeof(float) * (size_t)(rows * (k / 32)));
    sc->qk = malloc((size_t)(rows * k));
    sc->qku = malloc((size_t)(rows * k));
    sc->sk = malloc(sizeof(float) * (size_t)(rows * (k / 256) + 1));
    sc->bs = malloc(sizeof(int16_t) * (size_t)(rows * (k / 16)));
    sc->tmp = malloc(sizeof(float) * (size_t)outs);
    return sc->q && sc->s && sc->base && sc->xsum && sc->qk && sc->qku && sc->sk && sc->bs && sc->tmp;
}

static void free_scratch(lin_scratch *sc) {
    free(sc->q); free(sc->s); free(sc->base); free(sc->xsum); free(sc->qk); free(sc->qku); free(sc->sk); free(sc->bs); free(sc->tmp);
}

int tf_linear(const tf_weight *w, const float *x, int rows, float *y) {
    lin_scratch sc;
    int ok = alloc_scratch(&sc, rows, w->k, (int64_t)rows * w->n);
    if (ok) linear(&w, 1, x, rows, y, w->n, 0, &sc, 0, 0);
    free_scratch(&sc);
    return ok ? 0 : -1;
}

/* ---------------------------------------------------------------- per-row steps */

typedef struct {
    const tf_model *m;
    const tf_layer *L;
    int rows;
    const int32_t *tokens, *pos, *tab_off, *tables, *out_rows;
    const tf_inputs *in;
    float *x, *h, *qkv, *att, *gu, *act;
    int qkv_width;                  /* this layer's q (, gate), k, v outputs per row */
    float *act_own;                 /* where S_SILU writes: act, or this rank's part to send */
    float *att_own;                 /* the mixer's output (S_GATE's): att, or this rank's part to send */
    tf_attn at;
    int step, threads;
    const lin_scratch *sc;
    int forms;                      /* the next linear's activation forms, which the norm and SiLU
                                       steps quantize each row they write into (0: none) */
} fwd;

enum { S_EMBED, S_ATTN_NORM, S_QK, S_GATE, S_MLP_NORM, S_SILU, S_FINAL_NORM };

static void row_step(fwd *f, int64_t r) {
    const tf_model *m = f->m;
    int E = m->hidden, D = m->head_dim, H = m->heads, KV = m->kv_heads, F = m->ffn;
    int QKV = f->qkv_width, G = f->L && f->L->qgate.fmt ? H * D : 0;      /* G: the gate's width */
    switch (f->step) {
    case S_EMBED:
        if (f->in && f->in->embed_row && f->in->embed_row[r] >= 0)
            memcpy(f->x + r * E, f->in->embeds + (int64_t)f->in->embed_row[r] * E, sizeof(float) * (size_t)E);
        else
            tf_dequant_row(&m->embed, f->tokens[r], f->x + r * E);
        break;
    case S_ATTN_NORM:
        tf_rms_norm(f->x + r * E, f->L->attn_norm, m->eps, E, f->h + r * E);
        quantize_into(f->sc, f->forms, f->h, r, E);
        break;
    case S_MLP_NORM:
        tf_rms_norm(f->x + r * E, f->L->mlp_norm, m->eps, E, f->h + r * E);
        quantize_into(f->sc, f->forms, f->h, r, E);
        break;
    case S_FINAL_NORM:
        tf_rms_norm(f->x + (int64_t)f->out_rows[r] * E, m->norm, m->eps, E, f->h + r * E);
        quantize_into(f->sc, f->forms, f->h, r, E);
        break;
    case S_SILU:
        tf_silu_mul(f->gu + r * 2 * F, f->gu + r * 2 * F + F, f->act_own + r * F, F);
        quantize_into(f->sc, f->forms, f->act_own, r, F);
        break;
    case S_GATE: {                                  /* gated attention: out * sigmoid(gate) */
        float *o = f->att_own + r * H * D;
        const float *g = f->qkv + r * QKV + H * D;
        for (int i = 0; i < H * D; i++) o[i] = o[i] * (1.0f / (tf_exp(-g[i]) + 1.0f));
        break;
    }
    case S_QK: {
        float *q = f->qkv + r * QKV, *k = q + H * D + G, *v = k + KV * D;
        int p = f->pos[r], RD = m->rot_dim;
        const float *c = m->cos + (int64_t)p * RD, *s = m->sin + (int64_t)p * RD;
        float mc[512], ms[512];
        if (f->in && f->in->mrope) {            /* each frequency's cos/sin from its position's table row */
            const int32_t *t = f->in->mrope + 3 * r;
            for (int j = 0; j < RD / 2; j++) {
                int a = j % 3 == 1 && j < 3 * m->mrope[1] ? 1 : j % 3 == 2 && j < 3 * m->mrope[2] ? 2 : 0;
                int64_t at = (int64_t)t[a] * RD;
                mc[j] = m->cos[at + j], mc[j + RD / 2] = m->cos[at + j + RD / 2];
                ms[j] = m->sin[at + j], ms[j + RD / 2] = m->sin[at + j + RD / 2];
            }
            c = mc, s = ms;
        }
        float scale = (float)(1.0 / sqrt((double)D));
        for (int hh = 0; hh < H + KV; hh++) {
            float *x = hh < H ? q + hh * D : k + (hh - H) * D;      /* q heads, then k heads */
            if (f->L->q_norm) tf_rms_norm(x, hh < H ? f->L->q_norm : f->L->k_norm, m->eps, D, x);
            tf_rope(x, c, s, RD);
            if (hh < H)
                for (int i = 0; i < D; i++) x[i] = x[i] * scale;
        }
        int B = m->block_size, at = p % B, block = f->tables[f->tab_off[r] + p / B];
        uint8_t *kd = m->kv + 2 * f->L->slot * m->kv_stride + block * m->block_stride, *vd = kd + m->kv_stride;
        if (m->kv_scale) {
            float *ks = m->kv_scale + 2 * f->L->slot * m->scale_region + (int64_t)block * KV * B, *vs = ks + m->scale_region;
            int8_t c[512], *ki = (int8_t *)kd, *vi = (int8_t *)vd;
            for (int hh = 0; hh < KV; hh++) {
                ks[hh * B + at] = tf_quantize_head(k + hh * D, D, c);
                for (int i = 0; i < D; i++) ki[((int64_t)hh * D + i) * B + at] = c[i];    /* keys by dimension */
                vs[hh * B + at] = tf_quantize_head(v + hh * D, D, vi + ((int64_t)hh * B + at) * D);
            }
            break;
        }
        uint16_t *kh = (uint16_t *)kd, *vh = (uint16_t *)vd, h[8];
        for (int hh = 0; hh < KV; hh++) {
            for (int i = 0; i < D; i += 8) {                        /* keys by dimension */
                tf_f2h_row(k + hh * D + i, h, 8);
                for (int e = 0; e < 8; e++) kh[((int64_t)hh * D + i + e) * B + at] = h[e];
            }
            tf_f2h_row(v + hh * D, vh + ((int64_t)hh * B + at) * D, D);
        }
        break;
    }
    }
}

static void rows_job(void *p, int ith, int nth) {
    fwd *f = p;
    int64_t r0, r1;
    split(f->rows, ith, nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) row_step(f, r);
}

/* Row step `step` over `rows` rows; the norm and SiLU steps quantize their rows in the
 * forms `forms` (quantize_into) for the linear that reads them next. */
static void run_rows(fwd *f, int step, int rows, int forms) {
    f->step = step;
    f->forms = forms;
    f->rows = rows;
    if (rows <= 1) { if (rows == 1) row_step(f, 0); }
    else tf_pool_run(rows_job, f, f->threads);
}

/* Thread ith's share [a, b) of the (row, kv head) pairs: contiguous, and as even in the
 * keys read (a row's pos + 1, plus ATTN_CALL for the call) as whole pairs allow, so a
 * prefill's later rows, which read more keys, do not all fall to the last thread (one
 * sequence's 512-row prefill on 2 threads: the first thread's half of the pairs read a
 * quarter of the keys; SmolLM2's 2048-row prefill took 2.39-2.51 s, not 2.82-2.96). */
enum { ATTN_CALL = 16 };
static inline int64_t pair_keys(const tf_attn *t, int64_t i) { return t->pos[i / t->kv_heads] + 1 + ATTN_CALL; }
static void attn_share(const tf_attn *t, int ith, int nth, int64_t *a, int64_t *b) {
    int64_t n = (int64_t)t->rows * t->kv_heads, total = 0, run = 0, i = 0;
    for (int64_t j = 0; j < n; j++) total += pair_keys(t, j);
    /* pair i is ith's if its keys start in [lo, hi): a, b the first pairs starting at lo, hi or on */
    int64_t lo = total * ith / nth, hi = total * (ith + 1) / nth;
    for (; i < n && run < lo; i++) run += pair_keys(t, i);
    *a = i;
    for (; i < n && run < hi; i++) run += pair_keys(t, i);
    *b = i;
}

static void attn_job(void *p, int ith, int nth) {
    fwd *f = p;
    const tf_attn *t = &f->at;
    int64_t a, b;
    attn_share(t, ith, nth, &a, &b);
    if (a >= b) return;
    int maxpos = 0;
    for (int64_t i = a; i < b; i++) maxpos = MAX(maxpos, t->pos[i / t->kv_heads]);
    float *scratch = malloc(sizeof(float) * (size_t)tf_attend_scratch(t, maxpos));
    if (!scratch) abort();
    for (int64_t i = a; i < b;) {                      /* a row's heads of the share in one call */
        int row = (int)(i / t->kv_heads), h0 = (int)(i % t->kv_heads);
        int h1 = b - i < t->kv_heads - h0 ? h0 + (int)(b - i) : t->kv_heads;
        tf_attend(t, row, h0, h1, scratch);
        i += h1 - h0;
    }
    free(scratch);
}

/* ---------------------------------------------------------------- ranks */

typedef struct {
    float *send, *recv;
} rank_bufs;

/* Every rank's part of a split output (rank r's in send: rows x its width, where width
 * = (split[r+1] - split[r]) * unit) into y's columns split[r]*unit.. of each row (stride
 * ldy): copied, or added (y + part, the unsplit linear's accumulate) when accum.  With
 * `order`, unit i of the parts, rank after rank, goes to columns order[i]*unit.. instead
 * (a deltanet's value heads, which a GGUF's tiled order scatters). */
static int join(const tf_model *m, const rank_bufs *b, const int32_t *split, int unit, int rows, float *y,
                int ldy, int accum, const int32_t *order) {
    int64_t most = 0;
    for (int q = 0; q < m->ranks; q++) most = MAX(most, (int64_t)(split[q + 1] - split[q]) * unit);
    int64_t count = most * rows;
    if (m->gather(b->send, b->recv, count)) return -1;
    for (int q = 0; q < m->ranks; q++) {
        int64_t n = (int64_t)(split[q + 1] - split[q]) * unit;
        const float *src = b->recv + q * count;
        for (int64_t r = 0; r < rows; r++) {
            const float *p = src + r * n;
            if (order) {
                for (int i = split[q]; i < split[q + 1]; i++)
                    memcpy(y + r * ldy + (int64_t)order[i] * unit, p + (int64_t)(i - split[q]) * unit,
                           sizeof(float) * (size_t)unit);
                continue;
            }
            float *d = y + r * ldy + (int64_t)split[q] * unit;
            if (accum)
                for (int64_t c = 0; c < n; c++) d[c] = d[c] + p[c];
            else
                memcpy(d, p, sizeof(float) * (size_t)n);
        }
    }
    return 0;
}

/* x += in @ w^T for a weight split by hidden columns: this rank's columns, then all joined */
static int residual_split(fwd *f, const rank_bufs *b, const tf_weight *w, const float *in, int rows,
                          lin_scratch *sc) {
    const tf_model *m = f->m;
    const int32_t *hs = m->hidden_split;
    linear(&w, 1, in, rows, b->send, hs[m->rank + 1] - hs[m->rank], 0, sc, f->threads, 0);
    return join(m, b, hs, 1, rows, f->x, m->hidden, 1, NULL);
}

/* the widest part of each split, times rows: what one rank sends at most */
static int64_t most_sent(const tf_model *m, int64_t rows) {
    int64_t most = 0, group = m->heads / m->kv_heads * m->head_dim;
    for (int q = 0; q < m->ranks; q++) {
        most = MAX(most, (int64_t)(m->kv_split[q + 1] - m->kv_split[q]) * group);
        most = MAX(most, (int64_t)(m->hidden_split[q + 1] - m->hidden_split[q]));
        most = MAX(most, (int64_t)(m->ffn_split[q + 1] - m->ffn_split[q]));
        most = MAX(most, (int64_t)(m->dn.v_split[q + 1] - m->dn.v_split[q]) * m->dn.v_dim);
    }
    return most * rows;
}

/* ---------------------------------------------------------------- forward */

/* The widths of the model's widest layer of each kind: a row's q (, gate), k, v
 * outputs (attention) or in_qkv, z, b, a outputs (deltanet), and its mixer's output. */
static void layer_widths(const tf_model *m, int *lin, int *mixed) {
    const tf_deltanet *d = &m->dn;
    int D = m->head_dim, H = m->heads, KV = m->kv_heads;
    *lin = 0, *mixed = 0;
    for (int l = 0; l < m->layers; l++) {
        const tf_layer *L = &m->layer[l];
        if (L->kind == TF_DELTANET) {
            int cd = 2 * d->k_heads * d->k_dim + d->v_heads * d->v_dim, vd = d->v_heads * d->v_dim;
            *lin = MAX(*lin, cd + vd + 2 * d->v_all);
            *mixed = MAX(*mixed, d->v_all * d->v_dim);            /* joined: every rank's heads */
        } else {
            *lin = MAX(*lin, (H * (L->qgate.fmt ? 2 : 1) + 2 * KV) * D);
            *mixed = MAX(*mixed, H * D);
        }
    }
}

/* The next layer's KV, for its attention, asked for among the tile steps of layer l's
 * linears from `lin` on (after an attention: its output projection and the MLP;
 * tf_ahead.h): each sequence's blocks once (a prefill's rows share theirs), keys and
 * values.  With KV_AHEAD_ROWS rows or more on one thread.  8 rows of 512 positions, one
 * Zen 4 thread, alternated: SmolLM2 (three query heads a kv head) 14.25-14.83 ms a step ->
 * 13.28-13.67; from the output projection on, not the MLP only: 13.45-13.50 -> 13.20-13.33.
 * Qwen2.5-Coder's six (1.5B) and seven (0.5B) query heads a kv head, ten and seven
 * alternations: the 1.5B 98.3-103.1 ms (mean 100.1) -> 96.4-103.0 (98.6), the 0.5B
 * 34.3-35.4 (34.9) -> 32.9-34.6 (33.9) (an earlier session had measured the 1.5B slower
 * with it, 95.6-96.7 -> 97.5-97.8, on three alternations).  On two threads (each core's
 * own reads in flight) it slowed SmolLM2's step: 8.86-9.29 -> 9.17-9.65.  On an Intel
 * Ice Lake core it slowed every 8-row step: off there (tf_kv_ahead, tf_ahead.c). */
enum { KV_AHEAD_ROWS = 4 };
static int64_t tile_steps(const tf_weight *w) {
    if (w->fmt == TF_K4 || w->fmt == TF_K5 || w->fmt == TF_K6) return (int64_t)(w->n / 8) * (w->k / 256);
    return w->fmt == TF_Q4A || w->fmt == TF_Q8 ? (int64_t)(w->n / 16) * (w->k / 32) : 0;
}
static void plan_kv_ahead(const fwd *f, int l, int rows, const tf_weight *const *lin, int nlin, tf_span *spans) {
    const tf_model *m = f->m;
    if (!spans || l + 1 >= m->layers || m->layer[l + 1].kind != TF_ATTENTION) return;
    int B = m->block_size, n = 0;
    int64_t half = (int64_t)m->kv_heads * B * m->head_dim * (m->kv_scale ? 1 : 2), steps = 0;
    const char *keys = (const char *)m->kv + 2 * m->layer[l + 1].slot * m->kv_stride;
    for (int r = 0; r < rows; r++) {
        if (r + 1 < rows && f->tab_off[r + 1] == f->tab_off[r]) continue;   /* its sequence's last row */
        for (int j = 0; j <= f->pos[r] / B; j++) {
            const char *k = keys + (int64_t)f->tables[f->tab_off[r] + j] * m->block_stride;
            spans[n++] = (tf_span){k, half};
            spans[n++] = (tf_span){k + m->kv_stride, half};
        }
    }
    for (int i = 0; i < nlin; i++) steps += tile_steps(lin[i]);
    tf_ahead_plan(spans, n, steps);
}

/* 0: done; -1: out of memory (or sizes the kernels do not take); -2: a gather failed
 * (the ranks are out of step).  `in`: the rows' state slots, image embeddings and
 * M-RoPE positions (tf_inputs; NULL for plain token rows of a Llama-family model). */
int tf_forward(const tf_model *m, const int32_t *tokens, int rows, const int32_t *pos, const int32_t *tab_off,
               const int32_t *tables, const int32_t *out_rows, int n_out, float *logits, const tf_inputs *in) {
    const int32_t *state_src = in ? in->state_src : NULL, *state_dst = in ? in->state_dst : NULL;
    if (m->rot_dim > 512) return -1;
    int E = m->hidden, D = m->head_dim, H = m->heads, KV = m->kv_heads, F = m->ffn;
    int QKV, MIX, split = m->ranks > 1;
    layer_widths(m, &QKV, &MIX);
    int HW = split ? m->kv_split[m->ranks] * (H / KV) : H;          /* the whole model's q heads */
    int FW = split ? m->ffn_split[m->ranks] : F;
    int64_t R = MAX(rows, n_out);
    int maxk = MAX(MAX(MAX(E, HW * D), FW), MIX);
    int64_t outs = MAX(rows * (int64_t)MAX(MAX(QKV, 2 * F), E), n_out * (int64_t)m->vocab);
    fwd f = {m, 0, rows, tokens, pos, tab_off, tables, out_rows, in};
    f.threads = m->threads;
    f.x = malloc(sizeof(float) * R * E);
    f.h = malloc(sizeof(float) * R * MAX(E, HW * D));
    f.qkv = malloc(sizeof(float) * R * QKV);
    f.att = malloc(sizeof(float) * R * MAX(HW * D, MIX));
    f.gu = malloc(sizeof(float) * R * 2 * F);
    f.act = malloc(sizeof(float) * R * FW);
    tf_span *spans = NULL;                        /* plan_kv_ahead's, where a tile walks them */
#ifdef TF_X86                                     /* only the x86 tiles walk them (tf_ahead.h) */
    if (rows >= KV_AHEAD_ROWS && f.threads == 1 && tf_kv_ahead()) {
        int64_t n = 0;
        for (int r = 0; r < rows; r++) n += 2 * (pos[r] / m->block_size + 1);
        spans = malloc(sizeof(tf_span) * (size_t)n);
    }
#endif
    rank_bufs b = {0};
    if (split) {
        int64_t most = most_sent(m, rows);
        b.send = malloc(sizeof(float) * (size_t)most);
        b.recv = malloc(sizeof(float) * (size_t)(most * m->ranks));
    }
    f.act_own = split ? b.send : f.act;
    float *att_own = f.att_own = split ? b.send : f.att;
    lin_scratch sc;
    int ok = alloc_scratch(&sc, R, maxk, outs) && f.x && f.h && f.qkv && f.att && f.gu && f.act &&
             (!split || (b.send && b.recv));
    int rc = ok ? 0 : -1;
    if (ok) {
        f.sc = &sc;
        run_rows(&f, S_EMBED, rows, 0);
        for (int l = 0; l < m->layers && rc == 0; l++) {
            const tf_layer *L = &m->layer[l];
            f.L = L;
            const tf_weight *o = &L->o, *gu[2] = {&L->gate, &L->up}, *down = &L->down;
            /* the layer's first linear: the deltanet's input projections, or q (, gate), k, v */
            const tf_weight *dn_in[4] = {&L->q, &L->z, &L->b, &L->a}, *gated[4] = {&L->q, &L->qgate, &L->k, &L->v},
                            *plain[3] = {&L->q, &L->k, &L->v};
            const tf_weight *const *first = L->kind == TF_DELTANET ? dn_in : L->qgate.fmt ? gated : plain;
            int nfirst = L->kind == TF_DELTANET || L->qgate.fmt ? 4 : 3;
            run_rows(&f, S_ATTN_NORM, rows, act_forms(first, nfirst));
            if (L->kind == TF_DELTANET) {
                linear(first, nfirst, f.h, rows, f.qkv, QKV, 0, &sc, f.threads, 1);
                if (!state_src || tf_deltanet_mix(m, L, f.qkv, QKV, rows, state_src, state_dst, att_own, f.threads)) {
                    rc = -1;
                    break;
                }
                const tf_deltanet *d = &m->dn;
                if (split) {
                    if (join(m, &b, d->v_split, d->v_dim, rows, f.att, d->v_all * d->v_dim, 0, d->v_order) ||
                        residual_split(&f, &b, o, f.att, rows, &sc)) { rc = -2; break; }
                } else {
                    linear(&o, 1, f.att, rows, f.x, E, 1, &sc, f.threads, 0);
                }
            } else {
                f.qkv_width = (H * (L->qgate.fmt ? 2 : 1) + 2 * KV) * D;
                linear(first, nfirst, f.h, rows, f.qkv, f.qkv_width, 0, &sc, f.threads, 1);
                run_rows(&f, S_QK, rows, 0);
                int B = m->block_size;
                const uint8_t *keys = m->kv + 2 * L->slot * m->kv_stride;
                const float *ks = m->kv_scale ? m->kv_scale + 2 * L->slot * m->scale_region : NULL;
                tf_attn at = {f.qkv, att_own, rows, H, KV, D, B, f.qkv_width, H * D, pos, tab_off, tables,
                              keys, keys + m->kv_stride, m->block_stride, ks, ks ? ks + m->scale_region : NULL};
                f.at = at;
                tf_pool_run(attn_job, &f, f.threads);
                const tf_weight *rest[4] = {o, gu[0], gu[1], down};    /* from here on to the layer's end */
                plan_kv_ahead(&f, l, rows, rest, 4, spans);
                if (L->qgate.fmt) run_rows(&f, S_GATE, rows, 0);
                if (split) {
                    if (join(m, &b, m->kv_split, H / KV * D, rows, f.att, HW * D, 0, NULL) ||
                        residual_split(&f, &b, o, f.att, rows, &sc)) { rc = -2; break; }
                } else {
                    linear(&o, 1, f.att, rows, f.x, E, 1, &sc, f.threads, 0);
                }
            }
            const tf_weight *mlp[3] = {gu[0], gu[1], down};
            if (L->kind == TF_DELTANET) plan_kv_ahead(&f, l, rows, mlp, 3, spans);
            run_rows(&f, S_MLP_NORM, rows, act_forms(gu, 2));
            linear(gu, 2, f.h, rows, f.gu, 2 * F, 0, &sc, f.threads, 1);
            /* a split forward joins the ranks' SiLU parts before down reads them: quantized then */
            run_rows(&f, S_SILU, rows, split ? 0 : act_forms(&down, 1));
            if (split) {
                if (join(m, &b, m->ffn_split, 1, rows, f.act, FW, 0, NULL) ||
                    residual_split(&f, &b, down, f.act, rows, &sc)) { rc = -2; break; }
            } else {
                linear(&down, 1, f.act, rows, f.x, E, 1, &sc, f.threads, 1);
            }
            tf_ahead_clear();
        }
        if (rc == 0) {
            const tf_weight *head = &m->head;     /* a rank's own vocabulary columns */
            run_rows(&f, S_FINAL_NORM, n_out, act_forms(&head, 1));
            linear(&head, 1, f.h, n_out, logits, m->vocab, 0, &sc, f.threads, 1);
        }
    }
    tf_ahead_clear();
    free(spans);
    free(f.x); free(f.h); free(f.qkv); free(f.att); free(f.gu); free(f.act);
    free(b.send); free(b.recv);
    free_scratch(&sc);
    return rc;
}
