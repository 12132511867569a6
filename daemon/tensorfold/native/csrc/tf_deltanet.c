/* The Gated DeltaNet token mixer of the Qwen3.5 hybrids, in its per-token form.
 *
 * Each row runs the recurrence on the state its sequence had before it, in the
 * order the rows come, so the state after a position has the same bits whether
 * the position came in a prefill chunk of any size, a decode step, a verify row
 * or a replay.  Every step is per channel or per head with its reductions in a
 * fixed order (lanes8 for norms; the k_dim sums of the delta rule one term at a
 * time, in order, separately for every value lane), and threads split channels,
 * rows or heads, never a sum. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tf_kernels.h"
#include "tf_lanes.h"
#include "tf_ops.h"
#include "tf_pool.h"

enum { DN_MAX_V = 1024 };

typedef struct {
    const tf_model *m;
    const tf_layer *L;
    const float *lin;                /* [rows, lw]: in_qkv (conv_dim), z (v heads * v_dim), b, a (v_all each) */
    int lw, rows, cd;
    const int32_t *src, *dst;
    const int32_t *vmap;             /* this rank's value heads' indices in the whole model, or NULL */
    float *mix;                      /* [rows, cd]: conv + SiLU of in_qkv; q and k normalized */
    float *beta, *decay;             /* [rows, v_heads] */
    float *core;                     /* [rows, v_heads * v_dim]: the recurrence's outputs */
    float *out;                      /* [rows, v_heads * v_dim] */
} dn_job;

static inline float sigmoid_(float x) { return 1.0f / (tf_exp(-x) + 1.0f); }
static inline float silu_(float x) { return x / (tf_exp(-x) + 1.0f); }

/* log(1 + u) for u >= 0 from correctly rounded +, -, *, / alone: 2 atanh(s) with
 * s = u / (2 + u), the argument first brought near 1 by a power of two when u is large. */
static float log1p_(float u) {
    float e = 0.0f, s;
    if (u <= 0.41421356f) {
        s = u / (2.0f + u);
    } else {
        int ex;
        float y = frexpf(1.0f + u, &ex);          /* exact: y in [0.5, 1) */
        if (y < 0.70710678f) { y = y * 2.0f; ex = ex - 1; }
        e = (float)ex;
        s = (y - 1.0f) / (y + 1.0f);
    }
    float s2 = s * s;
    float p = s2 * (1.0f / 11.0f);
    p = (p + 1.0f / 9.0f) * s2;
    p = (p + 1.0f / 7.0f) * s2;
    p = (p + 1.0f / 5.0f) * s2;
    p = (p + 1.0f / 3.0f) * s2;
    float r = (2.0f * s) * p + 2.0f * s;
    return e * 0.693359375f + (r + e * -2.12194440e-4f);
}

/* softplus with torch's threshold: x past 20 is x itself */
static inline float softplus_(float x) { return x > 20.0f ? x : log1p_(tf_exp(x)); }

static inline float dot8_(const float *a, const float *b, int n) {
    v8f acc = {0};
    for (int i = 0; i < n; i += 8) acc = acc + load8(a + i) * load8(b + i);
    return tree8v(acc);
}

static inline int64_t layer_floats(const tf_model *m, int cd) {
    const tf_deltanet *d = &m->dn;
    return (int64_t)(d->conv_k - 1) * cd + (int64_t)d->v_heads * d->k_dim * d->v_dim;
}

/* slot's conv history of layer L (NULL for slot -1, the zero state) */
static inline float *dn_state(const dn_job *j, int slot) {
    if (slot < 0) return NULL;
    return j->m->dn.state + slot * j->m->dn.slot_stride + j->L->slot * layer_floats(j->m, j->cd);
}

static void split_(int64_t n, int ith, int nth, int64_t *a, int64_t *b) {
    *a = n * ith / nth;
    *b = n * (ith + 1) / nth;
}

enum { DN_CHUNK = 256 };

/* Channels c0..c0+n-1 of one row: out = SiLU(w[0] v[0] + w[1] v[1] + ... ) in that order,
 * v[t] the history (hs; NULL: zeros) then x; the history the row leaves shifted into hd. */
static TF_CLONES void conv_span(const float *w, const float *hs, float *hd, const float *x, float *out, int K,
                                int64_t cd, int n) {
    float acc[DN_CHUNK];
    for (int t = 0; t < K; t++) {
        const float *wt = w + t * cd;
        const float *v = t == K - 1 ? x : hs ? hs + t * cd : NULL;
        for (int c = 0; c < n; c++) {
            float term = wt[c] * (v ? v[c] : 0.0f);
            acc[c] = t == 0 ? term : acc[c] + term;
        }
    }
    tf_silu(acc, out, n);
    for (int t = 0; t < K - 1; t++) {
        const float *v = t + 1 == K - 1 ? x : hs ? hs + (t + 1) * cd : NULL;
        for (int c = 0; c < n; c++) hd[t * cd + c] = v ? v[c] : 0.0f;
    }
}

/* Causal depthwise conv and SiLU over channels, every row in order; each row shifts its
 * input into the history it leaves in its dst slot. */
static void conv_job(void *p, int ith, int nth) {
    dn_job *j = p;
    int K = j->m->dn.conv_k;
    int64_t cd = j->cd, g0, g1;
    split_((cd + 15) / 16, ith, nth, &g0, &g1);
    int64_t c0 = g0 * 16, c1 = g1 * 16 < cd ? g1 * 16 : cd;
    for (int r = 0; r < j->rows; r++) {
        const float *hs = dn_state(j, j->src[r]);
        float *hd = dn_state(j, j->dst[r]);
        for (int64_t c = c0; c < c1; c += DN_CHUNK) {
            int n = (int)(c1 - c < DN_CHUNK ? c1 - c : DN_CHUNK);
            conv_span(j->L->conv + c, hs ? hs + c : NULL, hd + c, j->lin + (int64_t)r * j->lw + c,
                      j->mix + (int64_t)r * cd + c, K, cd, n);
        }
    }
}

/* Per row: q and k of each key head scaled to unit length (q then by 1/sqrt(k_dim)),
 * and each value head's beta = sigmoid(b) and decay = exp(-exp(A_log) softplus(a + dt_bias)). */
static void prep_job(void *p, int ith, int nth) {
    dn_job *j = p;
    const tf_deltanet *d = &j->m->dn;
    int KD = d->k_dim, HK = d->k_heads, HV = d->v_heads, VD = d->v_dim;
    float root = sqrtf((float)KD);
    int64_t r0, r1;
    split_(j->rows, ith, nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        float *x = j->mix + r * j->cd;
        for (int h = 0; h < 2 * HK; h++) {              /* q heads, then k heads */
            float *e = x + (int64_t)h * KD;
            float inv = 1.0f / sqrtf(dot8_(e, e, KD) + 1e-6f);
            for (int i = 0; i < KD; i++) e[i] = e[i] * inv;
            if (h < HK)
                for (int i = 0; i < KD; i++) e[i] = e[i] / root;
        }
        const float *b = j->lin + r * j->lw + j->cd + (int64_t)HV * VD, *a = b + d->v_all;
        for (int h = 0; h < HV; h++) {
            int g = j->vmap ? j->vmap[h] : h;           /* b and a are whole on every rank */
            j->beta[r * HV + h] = sigmoid_(b[g]);
            j->decay[r * HV + h] = tf_exp(j->L->decay_a[h] * softplus_(a[g] + j->L->dt_bias[h]));
        }
    }
}

/* One row of one value head (ss NULL: the zero state); each value lane's sums run over
 * k_dim in order, so a vector of lanes gives the same bits as one lane at a time. */
static TF_CLONES void rule_step(const float *ss, float *sd, const float *q, const float *k, const float *v,
                                float g, float beta, int KD, int VD, float *mem, float *delta, float *o) {
    for (int c = 0; c < VD; c++) mem[c] = 0.0f;
    for (int i = 0; i < KD; i++) {
        float *row = sd + (int64_t)i * VD, ki = k[i];
        if (ss) {
            const float *old = ss + (int64_t)i * VD;
            for (int c = 0; c < VD; c++) {
                float s = old[c] * g;
                row[c] = s;
                mem[c] = mem[c] + s * ki;
            }
        } else {
            for (int c = 0; c < VD; c++) row[c] = 0.0f;
        }
    }
    for (int c = 0; c < VD; c++) {
        delta[c] = (v[c] - mem[c]) * beta;
        o[c] = 0.0f;
    }
    for (int i = 0; i < KD; i++) {
        float *row = sd + (int64_t)i * VD, ki = k[i], qi = q[i];
        for (int c = 0; c < VD; c++) {
            float s = row[c] + ki * delta[c];
            row[c] = s;
            o[c] = o[c] + s * qi;
        }
    }
}

/* The delta rule of value heads split among threads, every row in order:
 *   S = S * decay;  mem = k . S;  delta = (v - mem) * beta;  S = S + k (x) delta;  o = q . S
 * (S [k_dim][v_dim]; the dots sum over k_dim in order, for each value lane). */
static void rule_job(void *p, int ith, int nth) {
    dn_job *j = p;
    const tf_deltanet *d = &j->m->dn;
    int KD = d->k_dim, VD = d->v_dim, HK = d->k_heads, HV = d->v_heads, cd = j->cd;
    int64_t h0, h1, S = (int64_t)KD * VD;
    split_(HV, ith, nth, &h0, &h1);
    float mem[DN_MAX_V], delta[DN_MAX_V], o[DN_MAX_V];
    for (int64_t h = h0; h < h1; h++) {
        int kh = d->tiled ? (int)(h % HK) : (int)(h / (HV / HK));
        for (int r = 0; r < j->rows; r++) {
            const float *x = j->mix + (int64_t)r * cd;
            const float *q = x + (int64_t)kh * KD, *k = x + (int64_t)(HK + kh) * KD;
            const float *v = x + (int64_t)2 * HK * KD + h * VD;
            float *sd = dn_state(j, j->dst[r]) + (int64_t)(d->conv_k - 1) * cd + h * S;
            float *ss = j->src[r] < 0 ? NULL : dn_state(j, j->src[r]) + (int64_t)(d->conv_k - 1) * cd + h * S;
            rule_step(ss, sd, q, k, v, j->decay[(int64_t)r * HV + h], j->beta[(int64_t)r * HV + h], KD, VD, mem,
                      delta, o);
            memcpy(j->core + ((int64_t)r * HV + h) * VD, o, sizeof(float) * (size_t)VD);
        }
    }
}

/* Per row and value head: RMSNorm of the output (weight gnorm) times SiLU(z). */
static void gate_job(void *p, int ith, int nth) {
    dn_job *j = p;
    const tf_deltanet *d = &j->m->dn;
    int HV = d->v_heads, VD = d->v_dim;
    int64_t r0, r1;
    split_(j->rows, ith, nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++)
        for (int h = 0; h < HV; h++) {
            int64_t at = (r * HV + h) * VD;
            const float *z = j->lin + r * j->lw + j->cd + (int64_t)h * VD;
            tf_rms_norm(j->core + at, j->L->gnorm, j->m->eps, VD, j->out + at);
            for (int c = 0; c < VD; c++) j->out[at + c] = j->out[at + c] * silu_(z[c]);
        }
}

int tf_deltanet_mix(const tf_model *m, const tf_layer *L, const float *lin, int lw, int rows,
                    const int32_t *src, const int32_t *dst, float *out, int threads) {
    const tf_deltanet *d = &m->dn;
    int cd = 2 * d->k_heads * d->k_dim + d->v_heads * d->v_dim;
    if (d->v_dim > DN_MAX_V || d->k_dim % 8 || d->v_dim % 8) return -1;
    dn_job j = {m, L, lin, lw, rows, cd, src, dst, d->v_order ? d->v_order + d->v_split[m->rank] : NULL};
    j.mix = malloc(sizeof(float) * (size_t)rows * (size_t)cd);
    j.beta = malloc(sizeof(float) * (size_t)rows * (size_t)d->v_heads);
    j.decay = malloc(sizeof(float) * (size_t)rows * (size_t)d->v_heads);
    j.core = malloc(sizeof(float) * (size_t)rows * (size_t)d->v_heads * (size_t)d->v_dim);
    j.out = out;
    int ok = j.mix && j.beta && j.decay && j.core;
    if (ok) {
        tf_pool_run(conv_job, &j, threads);
        tf_pool_run(prep_job, &j, threads);
        tf_pool_run(rule_job, &j, threads);
        tf_pool_run(gate_job, &j, threads);
    }
    free(j.mix); free(j.beta); free(j.decay); free(j.core);
    return ok ? 0 : -1;
}
