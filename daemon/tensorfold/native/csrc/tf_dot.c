/* Quantized linear: activation quantization and the block dot products
 * (definitions in tf_kernels.h), one scalar reference and SIMD paths that
 * reproduce it bit for bit (AVX2, AVX-512 VNNI on x86; NEON on ARM). */
#include "tf_dot.h"
#include "tf_lanes.h"

#include <math.h>
#include <string.h>



/* ---------------------------------------------------------------- activations */

static inline float rne(float x) {        /* round half to even for |x| < 2^22 */
    return (x + 12582912.0f) - 12582912.0f;
}

/* d = amax/127 of x[0..n) and its inverse (both 0 when the span is zero) */
static float act_scale(const float *x, int n, float *id) {
    float amax = 0.0f;
    for (int i = 0; i < n; i++) {
        float a = fabsf(x[i]);
        amax = a > amax ? a : amax;
    }
    float d = amax / 127.0f;
    *id = d != 0.0f ? 1.0f / d : 0.0f;
    if (*id > 3.0e38f) { d = 0.0f; *id = 0.0f; }     /* amax below ~4e-37: the span is zero */
    return d;
}

/* q = rne(x * id) clipped to +-127 for n inputs; returns the sum of q (exact) */
static int32_t act_quant(const float *x, int n, float id, int8_t *q) {
    int32_t t = 0;
    for (int i = 0; i < n; i++) {
        float v = rne(x[i] * id);
        v = v > 127.0f ? 127.0f : (v < -127.0f ? -127.0f : v);
        q[i] = (int8_t)v;
        t += (int32_t)v;
    }
    return t;
}

void tf_quantize_row(const float *x, int k, int8_t *q, float *s, float *sum) {
    for (int b = 0; b < k / 32; b++) {
        float id;
        s[b] = act_scale(x + b * 32, 32, &id);
        sum[b] = (float)act_quant(x + b * 32, 32, id, q + b * 32);   /* exact: |sum| <= 32 * 127 */
    }
}

void tf_quantize_row_k(const float *x, int k, int8_t *q, float *s, int16_t *bs) {
    for (int j = 0; j < k / 256; j++) {
        float id;
        s[j] = act_scale(x + j * 256, 256, &id);
        for (int h = 0; h < 2; h++)
            for (int b = 0; b < 8; b++) {
                int o = j * 256 + b * 32 + h * 16;
                int8_t t[16];
                bs[j * 16 + h * 8 + b] = (int16_t)act_quant(x + o, 16, id, t);
                for (int m = 0; m < 4; m++)         /* element 16h + 4m + i at 8m + 4h + i */
                    memcpy(q + j * 256 + b * 32 + 8 * m + 4 * h, t + 4 * m, 4);
            }
    }
}

/* ---------------------------------------------------------------- weights */

/* An output's S scale planes: d is plane 0, m (-1: none) plane 1. */
static inline int nscales(const tf_weight *w) {
    return w->fmt == TF_Q4A || (w->flags & TF_HAS_MIN) ? 2 : 1;
}
static inline int min_plane(const tf_weight *w) { return nscales(w) == 2 ? 1 : -1; }

/* bytes per scale value in s */
static inline int scale_bytes(const tf_weight *w) { return (w->flags & TF_HALF) ? 2 : 4; }

static inline float h2f(uint16_t h) {     /* fp16 -> fp32, exact */
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 31, m = h & 1023, u;
    float f;
    if (e == 31) u = sign | 0x7F800000u | (m << 13);
    else if (e) u = sign | ((e + 112) << 23) | (m << 13);
    else {
        f = (float)m * 5.9604644775390625e-8f;         /* m * 2^-24: exact */
        memcpy(&u, &f, 4);
        u |= sign;
    }
    memcpy(&f, &u, 4);
    return f;
}

/* The fp32 scales of plane `plane` (= output * S + which) for blocks b0..b0+7
 * (zeros past nb), decoded from any encoding: exactly the values the encoding stores. */
static void scales8(const tf_weight *w, int64_t plane, int b0, float *out) {
    int nb = w->k / 32, cnt = nb - b0 < 8 ? nb - b0 : 8;
    int64_t o = plane * nb + b0;
    for (int i = 0; i < 8; i++) out[i] = 0.0f;
    if (w->flags & TF_HALF) {
        const uint16_t *p = (const uint16_t *)w->s + o;
        for (int i = 0; i < cnt; i++) out[i] = h2f(p[i]);
    } else {
        const float *p = (const float *)w->s + o;
        for (int i = 0; i < cnt; i++) out[i] = p[i];
    }
}

static inline int q4_at(const uint8_t *qb, int e) { return e < 16 ? (qb[e] & 15) : (qb[e - 16] >> 4); }

/* Element e of block b of output n, as the integer the dot multiplies. */
static inline int q_at(const tf_weight *w, int64_t n, int b, int e) {
    int64_t blk = n * (w->k / 32) + b;
    if (w->fmt != TF_Q4A) return ((const int8_t *)w->q)[blk * 32 + e];
    int v = q4_at(w->q + blk * 16, e);
    if (w->flags & TF_HIGH) v |= ((w->qh[blk * 4 + e / 8] >> (e % 8)) & 1) << 4;
    return v;
}

/* ---------------------------------------------------------------- reference */

static float dot_ref(const tf_weight *w, int n, const tf_acts *a, int r) {
    int nb = w->k / 32, S = nscales(w), pm = min_plane(w);
    const int8_t *xq = a->q + (int64_t)r * w->k;
    const float *xs = a->s + (int64_t)r * nb, *xsum = a->sum + (int64_t)r * nb;
    float acc[8] = {0}, mac[8] = {0};
    for (int b0 = 0; b0 < nb; b0 += 8) {
        float d[8], m[8];
        scales8(w, (int64_t)n * S, b0, d);
        if (pm >= 0) scales8(w, (int64_t)n * S + pm, b0, m);
        for (int b = b0; b < nb && b < b0 + 8; b++) {
            int32_t p[8] = {0};
            for (int e = 0; e < 32; e++) p[e / 4] += q_at(w, n, b, e) * xq[b * 32 + e];
            float s = xs[b] * d[b - b0];
            for (int l = 0; l < 8; l++) acc[l] = fmaf((float)p[l], s, acc[l]);
            if (pm >= 0) mac[b % 8] = fmaf(xsum[b], xs[b] * m[b - b0], mac[b % 8]);
        }
    }
    return tree8(acc) + tree8(mac);
}

static void rows_ref(const tf_weight *w, int n0, int n1, const tf_acts *a, float *y, int ldy) {
    for (int n = n0; n < n1; n++)
        for (int r = 0; r < a->rows; r++) y[(int64_t)r * ldy + n] = dot_ref(w, n, a, r);
}

/* ---------------------------------------------------------------- x86 */
#ifdef TF_X86

/* Eight blocks' values from b0; lanes past nb read as zeros (a zero scale and
 * sum leave a lane as it is). */
#define TF_LOAD8(p, b0, mask) _mm256_maskload_ps((p) + (b0), mask)

/* The fp32 scales of `plane` for blocks b0..b0+nblk-1 (zeros past them): fp16
 * widens exactly (F16C). */
TF_AVX2 TF_INLINE __m256 wscale8(const tf_weight *w, int64_t plane, int nb, int b0, int nblk, __m256i mask) {
    int64_t o = plane * nb + b0;
    if (w->flags & TF_HALF) {
        __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)w->s + o));   /* 16 bytes of slack */
        if (nblk < 8) h = _mm_and_si128(h, _mm_cmpgt_epi16(_mm_set1_epi16((short)nblk),
                                                          _mm_setr_epi16(0, 1, 2, 3, 4, 5, 6, 7)));
        return _mm256_cvtph_ps(h);
    }
    return TF_LOAD8((const float *)w->s + plane * nb, b0, mask);
}

/* A block's 32 fifth bits (TF_HIGH) as bytes 0 or 16. */
TF_AVX2 TF_INLINE __m256i high_avx2(const uint8_t *p) {
    int32_t h;
    memcpy(&h, p, 4);
    const __m256i spread = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
                                            2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
    const __m256i bit = _mm256_set1_epi64x((int64_t)0x8040201008040201ULL);
    __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32(h), spread);
    v = _mm256_cmpeq_epi8(_mm256_and_si256(v, bit), bit);
    return _mm256_and_si256(v, _mm256_set1_epi8(16));
}
TF_VNNI TF_INLINE __m256i high_vnni(const uint8_t *p) {
    return _mm256_maskz_mov_epi8(_load_mask32((__mmask32 *)p), _mm256_set1_epi8(16));
}

/* A tile of RT rows x NT outputs: eight blocks' scales at a time, then each
 * block's weights unpacked once for all RT rows.  Q4, MIN, HIGH are
 * constants (one instance per weight format); the scale encoding is read per
 * group of eight blocks (a branch that always goes the same way). */
#define TF_TILE(NAME, ATTR, DOT, HIGHX)                                                              \
ATTR TF_INLINE void NAME(const tf_weight *w, int n0, int NT, const tf_acts *a, int r0, int RT,       \
                         float *out, int ldy, int Q4, int MIN, int HIGH) {                          \
    int nb = w->k / 32, S = Q4 || MIN ? 2 : 1;                                                      \
    __m256 acc[4][8], mac[4][8];                                                                    \
    float s0[4][8][8];                  /* xs * d of eight blocks, broadcast from memory per block */ \
    TF_UNROLL for (int t = 0; t < NT; t++)                                                          \
        _Pragma("GCC unroll 8") for (int r = 0; r < RT; r++) acc[t][r] = mac[t][r] = _mm256_setzero_ps();         \
    {   /* the weights a few tiles ahead: their lines arrive while this tile computes */          \
        int64_t ahead = n0 + (int64_t)NT * TF_AHEAD, qb = (Q4 ? 16 : 32) * (int64_t)nb;            \
        int64_t sb = (int64_t)S * nb * scale_bytes(w);                                              \
        if (ahead + NT <= w->n) {                                                                   \
            prefetch_span(w->q + ahead * qb, NT * qb);                                              \
            prefetch_span((const char *)w->s + ahead * sb, NT * sb);                                \
            if (HIGH) prefetch_span(w->qh + ahead * nb * 4, NT * nb * 4);                           \
        }                                                                                           \
    }                                                                                               \
    const __m128i m4 = _mm_set1_epi8(15);                                                           \
    const __m256i iota = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);                                 \
    for (int b0 = 0; b0 < nb; b0 += 8) {                                                            \
        int nblk = nb - b0 < 8 ? nb - b0 : 8;                                                       \
        __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(nblk), iota);                           \
        TF_UNROLL for (int t = 0; t < NT; t++) {                                                    \
            int64_t pl = (int64_t)(n0 + t) * S;                                                     \
            __m256 dv = wscale8(w, pl, nb, b0, nblk, mask);                                         \
            __m256 mv = MIN ? wscale8(w, pl + 1, nb, b0, nblk, mask) : dv;                          \
            _Pragma("GCC unroll 8") for (int r = 0; r < RT; r++) {                                                \
                int64_t row = r0 + r;                                                               \
                __m256 xs = TF_LOAD8(a->s + row * nb, b0, mask);                                    \
                _mm256_storeu_ps(s0[t][r], _mm256_mul_ps(xs, dv));                                  \
                if (MIN)                                                                            \
                    mac[t][r] = _mm256_fmadd_ps(TF_LOAD8(a->sum + row * nb, b0, mask),              \
                                                _mm256_mul_ps(xs, mv), mac[t][r]);                  \
            }                                                                                       \
        }                                                                                           \
        for (int j = 0; j < nblk; j++) {                                                            \
            int b = b0 + j;                                                                         \
            TF_UNROLL for (int t = 0; t < NT; t++) {                                                \
                int64_t n = n0 + t;                                                                 \
                __m256i wv, wabs = _mm256_setzero_si256();                                          \
                if (Q4) {                                                                           \
                    __m128i raw = _mm_loadu_si128((const __m128i *)(w->q + (n * nb + b) * 16));     \
                    wv = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(raw, 4), m4), _mm_and_si128(raw, m4)); \
                    if (HIGH) wv = _mm256_or_si256(wv, HIGHX(w->qh + (n * nb + b) * 4));            \
                } else {                                                                            \
                    wv = _mm256_loadu_si256((const __m256i *)(w->q + (n * nb + b) * 32));           \
                    wabs = _mm256_sign_epi8(wv, wv);                                                \
                }                                                                                   \
                _Pragma("GCC unroll 8") for (int r = 0; r < RT; r++) {                                            \
                    __m256i x = _mm256_loadu_si256((const __m256i *)(a->q + (int64_t)(r0 + r) * w->k + b * 32)); \
                    __m256i p = Q4 ? DOT(wv, x) : DOT(wabs, _mm256_sign_epi8(x, wv));               \
                    acc[t][r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_broadcast_ss(&s0[t][r][j]), acc[t][r]); \
                }                                                                                   \
            }                                                                                       \
        }                                                                                           \
    }                                                                                               \
    TF_UNROLL for (int t = 0; t < NT; t++)                                                          \
        _Pragma("GCC unroll 8") for (int r = 0; r < RT; r++) {                                                    \
            float u[8], v[8];                                                                       \
            _mm256_storeu_ps(u, acc[t][r]);                                                         \
            _mm256_storeu_ps(v, mac[t][r]);                                                         \
            out[(int64_t)(r0 + r) * ldy + n0 + t] = tree8(u) + tree8(v);                            \
        }                                                                                           \
}
/* One function per tile shape and weight format: each is register-allocated on
 * its own (one function holding them all spilled its accumulators). */
#define TF_SHAPE(NAME, ATTR, F, NT, RT, Q4, MIN, HIGH)                                          \
ATTR __attribute__((noinline)) static void NAME##_##F##_##NT##RT(                                   \
        const tf_weight *w, int n, const tf_acts *a, int r, float *y, int ldy) {                    \
    NAME(w, n, NT, a, r, RT, y, ldy, Q4, MIN, HIGH);                                           \
}
#define TF_FORMAT(NAME, ATTR, F, Q4, MIN, HIGH, R8)                                             \
TF_SHAPE(NAME, ATTR, F, 1, 8, Q4, MIN, HIGH)                                                    \
TF_SHAPE(NAME, ATTR, F, 1, 4, Q4, MIN, HIGH)                                                    \
TF_SHAPE(NAME, ATTR, F, 1, 3, Q4, MIN, HIGH)                                                    \
TF_SHAPE(NAME, ATTR, F, 2, 2, Q4, MIN, HIGH)                                                    \
TF_SHAPE(NAME, ATTR, F, 1, 2, Q4, MIN, HIGH)                                                    \
TF_SHAPE(NAME, ATTR, F, 2, 1, Q4, MIN, HIGH)                                                    \
TF_SHAPE(NAME, ATTR, F, 1, 1, Q4, MIN, HIGH)                                                    \
ATTR static void NAME##_##F(const tf_weight *w, int n0, int n1, const tf_acts *a, float *y, int ldy) { \
    int rows = a->rows, r = 0, n;                                                                   \
    for (; R8 && r + 8 <= rows; r += 8)                                                             \
        for (n = n0; n < n1; n++) NAME##_##F##_18(w, n, a, r, y, ldy);                              \
    for (; r + 4 <= rows; r += 4)                                                                   \
        for (n = n0; n < n1; n++) NAME##_##F##_14(w, n, a, r, y, ldy);                              \
    switch (rows - r) {                                                                             \
    case 3:                                                                                         \
        for (n = n0; n < n1; n++) NAME##_##F##_13(w, n, a, r, y, ldy);                              \
        break;                                                                                      \
    case 2:                                                                                         \
        for (n = n0; n + 2 <= n1; n += 2) NAME##_##F##_22(w, n, a, r, y, ldy);                      \
        for (; n < n1; n++) NAME##_##F##_12(w, n, a, r, y, ldy);                                    \
        break;                                                                                      \
    case 1:                                                                                         \
        for (n = n0; n + 2 <= n1; n += 2) NAME##_##F##_21(w, n, a, r, y, ldy);                      \
        for (; n < n1; n++) NAME##_##F##_11(w, n, a, r, y, ldy);                                    \
        break;                                                                                      \
    }                                                                                               \
}
#define TF_KERNELS(NAME, ATTR, R8)                                                                   \
TF_FORMAT(NAME, ATTR, q4a, 1, 1, 0, R8)                                                              \
TF_FORMAT(NAME, ATTR, q5a, 1, 1, 1, R8)                                                              \
TF_FORMAT(NAME, ATTR, q8m, 0, 1, 0, R8)                                                              \
TF_FORMAT(NAME, ATTR, q8, 0, 0, 0, R8)                                                               \
ATTR static void NAME##_rows(const tf_weight *w, int n0, int n1, const tf_acts *a, float *y, int ldy) { \
    if (w->fmt == TF_Q4A) {                                                                         \
        if (w->flags & TF_HIGH) NAME##_q5a(w, n0, n1, a, y, ldy);                                   \
        else NAME##_q4a(w, n0, n1, a, y, ldy);                                                      \
    } else if (w->flags & TF_HAS_MIN) NAME##_q8m(w, n0, n1, a, y, ldy);                             \
    else NAME##_q8(w, n0, n1, a, y, ldy);                                                           \
}

TF_AVX2 TF_INLINE __m256i dot_avx2(__m256i u, __m256i s) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}
TF_VNNI TF_INLINE __m256i dot_vnni(__m256i u, __m256i s) {
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s);
}
TF_TILE(tile_avx2, TF_AVX2, dot_avx2, high_avx2)
TF_TILE(tile_vnni, TF_VNNI, dot_vnni, high_vnni)
TF_KERNELS(tile_avx2, TF_AVX2, 0)
TF_KERNELS(tile_vnni, TF_VNNI, 1)
#endif

/* ---------------------------------------------------------------- NEON */
#ifdef TF_NEON
/* A block's 32 fifth bits (TF_HIGH) as bytes 0 or 16: elements 0..15, then 16..31. */
static inline void high_neon(const uint8_t *p, uint8x16_t *h0, uint8x16_t *h1) {
    static const uint8_t bit[16] = {1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128};
    uint8x16_t m = vld1q_u8(bit), sixteen = vdupq_n_u8(16);
    *h0 = vandq_u8(vtstq_u8(vcombine_u8(vdup_n_u8(p[0]), vdup_n_u8(p[1])), m), sixteen);
    *h1 = vandq_u8(vtstq_u8(vcombine_u8(vdup_n_u8(p[2]), vdup_n_u8(p[3])), m), sixteen);
}

static void tile_neon_rows(const tf_weight *w, int n0, int n1, const tf_acts *a, float *y, int ldy) {
    int nb = w->k / 32, q4 = w->fmt == TF_Q4A, high = q4 && (w->flags & TF_HIGH);
    int S = nscales(w), pm = min_plane(w);
    for (int n = n0; n < n1; n++) {
        int64_t base = (int64_t)n * S;
        for (int r = 0; r < a->rows; r++) {
            float32x4_t acc0 = vdupq_n_f32(0), acc1 = vdupq_n_f32(0);
            float mac[8] = {0};
            const float *xs = a->s + (int64_t)r * nb, *xsum = a->sum + (int64_t)r * nb;
            for (int b0 = 0; b0 < nb; b0 += 8) {
                float d[8], m[8];
                scales8(w, base, b0, d);
                if (pm >= 0) scales8(w, base + pm, b0, m);
                for (int b = b0; b < nb && b < b0 + 8; b++) {
                    int8x16_t w0, w1;
                    if (q4) {
                        uint8x16_t raw = vld1q_u8(w->q + ((int64_t)n * nb + b) * 16);
                        uint8x16_t lo = vandq_u8(raw, vdupq_n_u8(15)), hi = vshrq_n_u8(raw, 4);
                        if (high) {
                            uint8x16_t h0, h1;
                            high_neon(w->qh + ((int64_t)n * nb + b) * 4, &h0, &h1);
                            lo = vorrq_u8(lo, h0);
                            hi = vorrq_u8(hi, h1);
                        }
                        w0 = vreinterpretq_s8_u8(lo);
                        w1 = vreinterpretq_s8_u8(hi);
                    } else {
                        const int8_t *qb = (const int8_t *)w->q + ((int64_t)n * nb + b) * 32;
                        w0 = vld1q_s8(qb);
                        w1 = vld1q_s8(qb + 16);
                    }
                    const int8_t *xb = a->q + (int64_t)r * w->k + b * 32;
                    float s = xs[b] * d[b - b0];
                    acc0 = vfmaq_f32(acc0, vcvtq_f32_s32(dot4(w0, vld1q_s8(xb))), vdupq_n_f32(s));
                    acc1 = vfmaq_f32(acc1, vcvtq_f32_s32(dot4(w1, vld1q_s8(xb + 16))), vdupq_n_f32(s));
                    if (pm >= 0) mac[b % 8] = fmaf(xsum[b], xs[b] * m[b - b0], mac[b % 8]);
                }
            }
            float t[8];
            vst1q_f32(t, acc0);
            vst1q_f32(t + 4, acc1);
            y[(int64_t)r * ldy + n] = tree8(t) + tree8(mac);
        }
    }
}
#endif

/* ---------------------------------------------------------------- 16-bit weights */

static inline float bf16_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* lanes8 over k for four outputs at once (four independent chains); bf16 widens by a shift */
typedef uint32_t v8u __attribute__((vector_size(32)));
typedef uint16_t v8h __attribute__((vector_size(16)));

static inline v8f bf16x8(const uint16_t *p) {
    v8h h;
    memcpy(&h, p, sizeof h);
    v8u u = __builtin_convertvector(h, v8u) << 16;
    v8f f;
    memcpy(&f, &u, sizeof f);
    return f;
}


TF_CLONES static void rows_bf16(const tf_weight *w, int n0, int n1, const float *x, int rows, float *y, int ldy) {
    const uint16_t *wq = (const uint16_t *)w->q;
    int k = w->k, n = n0;
    for (; n + 4 <= n1; n += 4) {
        const uint16_t *w0 = wq + (int64_t)n * k, *w1 = w0 + k, *w2 = w1 + k, *w3 = w2 + k;
        for (int r = 0; r < rows; r++) {
            const float *xr = x + (int64_t)r * k;
            v8f a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
            for (int i = 0; i < k; i += 8) {
                v8f xv = load8(xr + i);
                a0 = a0 + xv * bf16x8(w0 + i);
                a1 = a1 + xv * bf16x8(w1 + i);
                a2 = a2 + xv * bf16x8(w2 + i);
                a3 = a3 + xv * bf16x8(w3 + i);
            }
            float *yr = y + (int64_t)r * ldy + n;
            yr[0] = tree8v(a0); yr[1] = tree8v(a1); yr[2] = tree8v(a2); yr[3] = tree8v(a3);
        }
    }
    for (; n < n1; n++)
        for (int r = 0; r < rows; r++) {
            v8f a = {0};
            for (int i = 0; i < k; i += 8) a = a + load8(x + (int64_t)r * k + i) * bf16x8(wq + (int64_t)n * k + i);
            y[(int64_t)r * ldy + n] = tree8v(a);
        }
}

/* ---------------------------------------------------------------- dispatch */

static int isa = -1;          /* 0 scalar, 1 AVX2, 2 AVX-512 VNNI, 3 NEON */

int tf_best_isa(void) {
#ifdef TF_X86
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512vl") &&
        __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("f16c"))
        return 2;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c"))
        return 1;
    return 0;
#elif defined(TF_NEON)
    return 3;
#else
    return 0;
#endif
}

int tf_isa(void) {
    if (isa < 0) isa = tf_best_isa();
    return isa;
}

int tf_set_isa(int want) {
    int best = tf_best_isa();
    if (want < 0) want = best;
    if (want != 0 && want != best && !(want == 1 && best == 2)) return -1;
    isa = want;
    return isa;
}

void tf_dot_rows(const tf_weight *w, int n0, int n1, const tf_acts *a, const float *x, float *y, int ldy) {
    if (w->fmt == TF_BF16) { rows_bf16(w, n0, n1, x, a->rows, y, ldy); return; }
    if (w->fmt >= TF_K4) { tf_kdot_rows(w, n0, n1, a, y, ldy); return; }
    switch (tf_isa()) {
#ifdef TF_X86
    case 1: tile_avx2_rows(w, n0, n1, a, y, ldy); return;
    case 2: tile_vnni_rows(w, n0, n1, a, y, ldy); return;
#endif
#ifdef TF_NEON
    case 3: tile_neon_rows(w, n0, n1, a, y, ldy); return;
#endif
    default: rows_ref(w, n0, n1, a, y, ldy);
    }
}

/* One row of a weight as fp32 (embedding lookup): q * d (+ m). */
void tf_dequant_row(const tf_weight *w, int n, float *out) {
    int nb = w->k / 32;
    if (w->fmt == TF_BF16) {
        const uint16_t *wr = (const uint16_t *)w->q + (int64_t)n * w->k;
        for (int i = 0; i < w->k; i++) out[i] = bf16_f32(wr[i]);
        return;
    }
    if (w->fmt >= TF_K4) { tf_kdequant_row(w, n, out); return; }
    int S = nscales(w), pm = min_plane(w);
    int64_t base = (int64_t)n * S;
    for (int b0 = 0; b0 < nb; b0 += 8) {
        float d[8], m[8];
        scales8(w, base, b0, d);
        if (pm >= 0) scales8(w, base + pm, b0, m);
        for (int b = b0; b < nb && b < b0 + 8; b++)
            for (int e = 0; e < 32; e++) {
                float v = (float)q_at(w, n, b, e) * d[b - b0];
                out[b * 32 + e] = pm >= 0 ? v + m[b - b0] : v;
            }
    }
}
