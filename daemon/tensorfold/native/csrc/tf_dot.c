/* Quantized linear: activation quantization and the block dot products
 * (definitions in tf_kernels.h), one scalar reference and SIMD paths that
 * reproduce it bit for bit (AVX2, AVX-512 VNNI on x86; NEON on ARM). */
#include "tf_dot.h"

#include <math.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define TF_X86 1
#endif
#if defined(__aarch64__) || defined(__ARM_NEON)
#include <arm_neon.h>
#define TF_NEON 1
#endif

static inline float tree8(const float *a) {
    return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
}

/* ---------------------------------------------------------------- activations */

static inline float rne(float x) {        /* round half to even for |x| < 2^22 */
    return (x + 12582912.0f) - 12582912.0f;
}

void tf_quantize_row(const float *x, int k, int8_t *q, float *s, float *sum) {
    for (int b = 0; b < k / 32; b++) {
        const float *xb = x + b * 32;
        float amax = 0.0f;
        for (int i = 0; i < 32; i++) {
            float a = fabsf(xb[i]);
            amax = a > amax ? a : amax;
        }
        float d = amax / 127.0f;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        if (id > 3.0e38f) { d = 0.0f; id = 0.0f; }      /* amax below ~4e-37: the block is zero */
        int32_t t = 0;
        for (int i = 0; i < 32; i++) {
            float v = rne(xb[i] * id);
            v = v > 127.0f ? 127.0f : (v < -127.0f ? -127.0f : v);
            q[b * 32 + i] = (int8_t)v;
            t += (int32_t)v;
        }
        s[b] = d;
        sum[b] = (float)t;                              /* exact: |t| <= 32 * 127 */
    }
}

/* ---------------------------------------------------------------- reference */

static inline int q4_at(const uint8_t *qb, int e) { return e < 16 ? (qb[e] & 15) : (qb[e - 16] >> 4); }

static int nscales(const tf_weight *w) {
    if (w->fmt == TF_Q4A) return 2;
    return 1 + ((w->flags & TF_TWO_SCALES) ? 1 : 0) + ((w->flags & TF_HAS_MIN) ? 1 : 0);
}

/* Where output n's scales start (planar: d0[nb], then d1[nb] and/or m[nb]); which rows hold d1, m. */
typedef struct {
    const float *d0, *d1, *m;
} scales;

static scales scales_of(const tf_weight *w, int n) {
    int nb = w->k / 32, S = nscales(w);
    const float *s = w->s + (int64_t)n * S * nb;
    scales r = {s, s, 0};
    if (w->fmt == TF_Q4A) r.m = s + nb;
    else {
        int i = 1;
        if (w->flags & TF_TWO_SCALES) r.d1 = s + nb * i++;
        if (w->flags & TF_HAS_MIN) r.m = s + nb * i;
    }
    return r;
}

static float dot_ref(const tf_weight *w, int n, const tf_acts *a, int r) {
    int nb = w->k / 32;
    scales sc = scales_of(w, n);
    const int8_t *xq = a->q + (int64_t)r * w->k;
    const float *xs = a->s + (int64_t)r * nb, *xsum = a->sum + (int64_t)r * nb;
    float acc[8] = {0}, mac[8] = {0};
    for (int b = 0; b < nb; b++) {
        int32_t p[8] = {0};
        if (w->fmt == TF_Q4A) {
            const uint8_t *qb = w->q + ((int64_t)n * nb + b) * 16;
            for (int e = 0; e < 32; e++) p[e / 4] += q4_at(qb, e) * xq[b * 32 + e];
        } else {
            const int8_t *qb = (const int8_t *)w->q + ((int64_t)n * nb + b) * 32;
            for (int e = 0; e < 32; e++) p[e / 4] += qb[e] * xq[b * 32 + e];
        }
        float s0 = xs[b] * sc.d0[b], s1 = xs[b] * sc.d1[b];
        for (int l = 0; l < 8; l++) acc[l] = fmaf((float)p[l], l < 4 ? s0 : s1, acc[l]);
        if (sc.m) mac[b % 8] = fmaf(xsum[b], xs[b] * sc.m[b], mac[b % 8]);
    }
    return tree8(acc) + tree8(mac);
}

static void rows_ref(const tf_weight *w, int n0, int n1, const tf_acts *a, float *y, int ldy) {
    for (int n = n0; n < n1; n++)
        for (int r = 0; r < a->rows; r++) y[(int64_t)r * ldy + n] = dot_ref(w, n, a, r);
}

/* ---------------------------------------------------------------- x86 */
#ifdef TF_X86

#define TF_AVX2 __attribute__((target("avx2,fma")))
#define TF_VNNI __attribute__((target("avx2,fma,avx512f,avx512bw,avx512vl,avx512vnni")))
#define TF_INLINE static inline __attribute__((always_inline))

#define TF_UNROLL _Pragma("GCC unroll 4")
#define TF_AHEAD 4                  /* tiles of weights prefetched ahead */

/* Eight blocks' values from b0; lanes past nb read as zeros (a zero scale and
 * sum leave a lane as it is). */
#define TF_LOAD8(p, b0, mask) _mm256_maskload_ps((p) + (b0), mask)

/* A tile of RT rows x NT outputs: eight blocks' scales at a time, then each
 * block's weights unpacked once for all RT rows.  Q4, TWO, MIN are constants
 * (one instance per weight format). */
#define TF_TILE(NAME, ATTR, DOT)                                                                     \
ATTR TF_INLINE void NAME(const tf_weight *w, int n0, int NT, const tf_acts *a, int r0, int RT,       \
                         float *out, int ldy, int Q4, int TWO, int MIN) {                           \
    int nb = w->k / 32;                                                                             \
    scales sc[4];                                                                                   \
    __m256 acc[4][4], mac[4][4], s0[4][4], s1[4][4];                                                \
    TF_UNROLL for (int t = 0; t < NT; t++) {                                                        \
        sc[t] = scales_of(w, n0 + t);                                                               \
        TF_UNROLL for (int r = 0; r < RT; r++) acc[t][r] = mac[t][r] = _mm256_setzero_ps();         \
    }                                                                                               \
    {   /* the weights a few tiles ahead: their lines arrive while this tile computes */          \
        int64_t ahead = n0 + (int64_t)NT * TF_AHEAD, qb = (Q4 ? 16 : 32) * (int64_t)nb;            \
        int64_t sb = (int64_t)(2 + (Q4 ? 0 : TWO + MIN - 1)) * nb * 4;                              \
        if (ahead + NT <= w->n) {                                                                   \
            const char *pq = (const char *)w->q + ahead * qb, *ps = (const char *)(w->s) + ahead * sb; \
            for (int64_t o = 0; o < NT * qb; o += 64) _mm_prefetch(pq + o, _MM_HINT_T0);            \
            for (int64_t o = 0; o < NT * sb; o += 64) _mm_prefetch(ps + o, _MM_HINT_T0);            \
        }                                                                                           \
    }                                                                                               \
    const __m128i m4 = _mm_set1_epi8(15);                                                           \
    const __m256i iota = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);                                 \
    for (int b0 = 0; b0 < nb; b0 += 8) {                                                            \
        int nblk = nb - b0 < 8 ? nb - b0 : 8;                                                       \
        __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(nblk), iota);                           \
        TF_UNROLL for (int t = 0; t < NT; t++) {                                                    \
            __m256 dv = TF_LOAD8(sc[t].d0, b0, mask);                                               \
            __m256 d1v = TWO ? TF_LOAD8(sc[t].d1, b0, mask) : dv;                                   \
            __m256 mv = MIN ? TF_LOAD8(sc[t].m, b0, mask) : dv;                                     \
            TF_UNROLL for (int r = 0; r < RT; r++) {                                                \
                int64_t row = r0 + r;                                                               \
                __m256 xs = TF_LOAD8(a->s + row * nb, b0, mask);                                    \
                s0[t][r] = _mm256_mul_ps(xs, dv);                                                   \
                if (TWO) s1[t][r] = _mm256_mul_ps(xs, d1v);                                         \
                if (MIN)                                                                            \
                    mac[t][r] = _mm256_fmadd_ps(TF_LOAD8(a->sum + row * nb, b0, mask),              \
                                                _mm256_mul_ps(xs, mv), mac[t][r]);                  \
            }                                                                                       \
        }                                                                                           \
        for (int j = 0; j < nblk; j++) {                                                            \
            int b = b0 + j;                                                                         \
            __m256i idx = _mm256_set1_epi32(j);                                                     \
            TF_UNROLL for (int t = 0; t < NT; t++) {                                                \
                int64_t n = n0 + t;                                                                 \
                __m256i wv, wabs = _mm256_setzero_si256();                                          \
                if (Q4) {                                                                           \
                    __m128i raw = _mm_loadu_si128((const __m128i *)(w->q + (n * nb + b) * 16));     \
                    wv = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(raw, 4), m4), _mm_and_si128(raw, m4)); \
                } else {                                                                            \
                    wv = _mm256_loadu_si256((const __m256i *)(w->q + (n * nb + b) * 32));           \
                    wabs = _mm256_sign_epi8(wv, wv);                                                \
                }                                                                                   \
                TF_UNROLL for (int r = 0; r < RT; r++) {                                            \
                    __m256i x = _mm256_loadu_si256((const __m256i *)(a->q + (int64_t)(r0 + r) * w->k + b * 32)); \
                    __m256i p = Q4 ? DOT(wv, x) : DOT(wabs, _mm256_sign_epi8(x, wv));               \
                    __m256 s = _mm256_permutevar8x32_ps(s0[t][r], idx);                             \
                    if (TWO) s = _mm256_blend_ps(s, _mm256_permutevar8x32_ps(s1[t][r], idx), 0xF0); \
                    acc[t][r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), s, acc[t][r]);               \
                }                                                                                   \
            }                                                                                       \
        }                                                                                           \
    }                                                                                               \
    TF_UNROLL for (int t = 0; t < NT; t++)                                                          \
        TF_UNROLL for (int r = 0; r < RT; r++) {                                                    \
            float u[8], v[8];                                                                       \
            _mm256_storeu_ps(u, acc[t][r]);                                                         \
            _mm256_storeu_ps(v, mac[t][r]);                                                         \
            out[(int64_t)(r0 + r) * ldy + n0 + t] = tree8(u) + tree8(v);                            \
        }                                                                                           \
}                                                                                                   \
ATTR TF_INLINE void NAME##_run(const tf_weight *w, int n0, int n1, const tf_acts *a, float *y, int ldy, \
                               int Q4, int TWO, int MIN) {                                          \
    int rows = a->rows, r = 0, n;                                                                   \
    for (; r + 4 <= rows; r += 4)                                                                   \
        for (n = n0; n < n1; n++) NAME(w, n, 1, a, r, 4, y, ldy, Q4, TWO, MIN);                     \
    switch (rows - r) {                                                                             \
    case 3:                                                                                         \
        for (n = n0; n < n1; n++) NAME(w, n, 1, a, r, 3, y, ldy, Q4, TWO, MIN);                     \
        break;                                                                                      \
    case 2:                                                                                         \
        for (n = n0; n + 2 <= n1; n += 2) NAME(w, n, 2, a, r, 2, y, ldy, Q4, TWO, MIN);             \
        for (; n < n1; n++) NAME(w, n, 1, a, r, 2, y, ldy, Q4, TWO, MIN);                           \
        break;                                                                                      \
    case 1:                                                                                         \
        for (n = n0; n + 2 <= n1; n += 2) NAME(w, n, 2, a, r, 1, y, ldy, Q4, TWO, MIN);             \
        for (; n < n1; n++) NAME(w, n, 1, a, r, 1, y, ldy, Q4, TWO, MIN);                           \
        break;                                                                                      \
    }                                                                                               \
}                                                                                                   \
ATTR static void NAME##_rows(const tf_weight *w, int n0, int n1, const tf_acts *a, float *y, int ldy) { \
    int two = (w->flags & TF_TWO_SCALES) != 0, min = (w->flags & TF_HAS_MIN) != 0;                  \
    if (w->fmt == TF_Q4A) NAME##_run(w, n0, n1, a, y, ldy, 1, 0, 1);                                \
    else if (two && min) NAME##_run(w, n0, n1, a, y, ldy, 0, 1, 1);                                 \
    else if (two) NAME##_run(w, n0, n1, a, y, ldy, 0, 1, 0);                                        \
    else if (min) NAME##_run(w, n0, n1, a, y, ldy, 0, 0, 1);                                        \
    else NAME##_run(w, n0, n1, a, y, ldy, 0, 0, 0);                                                 \
}

TF_AVX2 TF_INLINE __m256i dot_avx2(__m256i u, __m256i s) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}
TF_VNNI TF_INLINE __m256i dot_vnni(__m256i u, __m256i s) {
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s);
}
TF_TILE(tile_avx2, TF_AVX2, dot_avx2)
TF_TILE(tile_vnni, TF_VNNI, dot_vnni)
#endif

/* ---------------------------------------------------------------- NEON */
#ifdef TF_NEON
static inline int32x4_t dot4(int8x16_t w, int8x16_t x) {
#ifdef __ARM_FEATURE_DOTPROD
    return vdotq_s32(vdupq_n_s32(0), w, x);
#else
    int16x8_t lo = vmull_s8(vget_low_s8(w), vget_low_s8(x));
    int16x8_t hi = vmull_s8(vget_high_s8(w), vget_high_s8(x));
    return vpaddq_s32(vpaddlq_s16(lo), vpaddlq_s16(hi));
#endif
}

static void tile_neon_rows(const tf_weight *w, int n0, int n1, const tf_acts *a, float *y, int ldy) {
    int nb = w->k / 32, q4 = w->fmt == TF_Q4A;
    for (int n = n0; n < n1; n++) {
        scales sc = scales_of(w, n);
        for (int r = 0; r < a->rows; r++) {
            float32x4_t acc0 = vdupq_n_f32(0), acc1 = vdupq_n_f32(0);
            float mac[8] = {0};
            const float *xs = a->s + (int64_t)r * nb, *xsum = a->sum + (int64_t)r * nb;
            for (int b = 0; b < nb; b++) {
                int8x16_t w0, w1;
                if (q4) {
                    uint8x16_t raw = vld1q_u8(w->q + ((int64_t)n * nb + b) * 16);
                    w0 = vreinterpretq_s8_u8(vandq_u8(raw, vdupq_n_u8(15)));
                    w1 = vreinterpretq_s8_u8(vshrq_n_u8(raw, 4));
                } else {
                    const int8_t *qb = (const int8_t *)w->q + ((int64_t)n * nb + b) * 32;
                    w0 = vld1q_s8(qb);
                    w1 = vld1q_s8(qb + 16);
                }
                const int8_t *xb = a->q + (int64_t)r * w->k + b * 32;
                float s0 = xs[b] * sc.d0[b], s1 = xs[b] * sc.d1[b];
                acc0 = vfmaq_f32(acc0, vcvtq_f32_s32(dot4(w0, vld1q_s8(xb))), vdupq_n_f32(s0));
                acc1 = vfmaq_f32(acc1, vcvtq_f32_s32(dot4(w1, vld1q_s8(xb + 16))), vdupq_n_f32(s1));
                if (sc.m) mac[b % 8] = fmaf(xsum[b], xs[b] * sc.m[b], mac[b % 8]);
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

static void rows_bf16(const tf_weight *w, int n0, int n1, const float *x, int rows, float *y, int ldy) {
    const uint16_t *wq = (const uint16_t *)w->q;
    for (int n = n0; n < n1; n++) {
        const uint16_t *wr = wq + (int64_t)n * w->k;
        for (int r = 0; r < rows; r++) {
            const float *xr = x + (int64_t)r * w->k;
            float acc[8] = {0};
            for (int i = 0; i < w->k; i += 8)
                for (int l = 0; l < 8; l++) acc[l] = acc[l] + xr[i + l] * bf16_f32(wr[i + l]);
            y[(int64_t)r * ldy + n] = tree8(acc);
        }
    }
}

/* ---------------------------------------------------------------- dispatch */

static int isa = -1;          /* 0 scalar, 1 AVX2, 2 AVX-512 VNNI, 3 NEON */

int tf_best_isa(void) {
#ifdef TF_X86
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512vl") &&
        __builtin_cpu_supports("avx512bw"))
        return 2;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return 1;
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
    scales sc = scales_of(w, n);
    for (int b = 0; b < nb; b++)
        for (int e = 0; e < 32; e++) {
            float q = w->fmt == TF_Q4A ? (float)q4_at(w->q + ((int64_t)n * nb + b) * 16, e)
                                       : (float)((const int8_t *)w->q)[((int64_t)n * nb + b) * 32 + e];
            float v = q * (e < 16 ? sc.d0[b] : sc.d1[b]);
            out[b * 32 + e] = sc.m ? v + sc.m[b] : v;
        }
}
