/* The elementwise and per-row operations: exp, SiLU-mul, RMSNorm, rope,
 * fp16 conversion and paged attention.  Plain C compiled without contraction
 * (-ffp-contract=off): every reduction is written with explicit lanes
 * (tree8), so the compiler may vectorize lanes but never reorders a sum. */
#include "tf_ops.h"
#include "tf_dot.h"
#include "tf_lanes.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* lanes8 dot product of n (a multiple of 8) elements */
static inline float dot8(const float *a, const float *b, int n) {
    v8f acc = {0};
    for (int i = 0; i < n; i += 8) acc = acc + load8(a + i) * load8(b + i);
    return tree8v(acc);
}

/* The largest of a[0..n), n >= 1 (any order gives the same value). */
static inline float max8(const float *a, int n) {
    float m[8];
    for (int l = 0; l < 8; l++) m[l] = a[0];
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int l = 0; l < 8; l++) m[l] = a[i + l] > m[l] ? a[i + l] : m[l];
    for (; i < n; i++) m[i % 8] = a[i] > m[i % 8] ? a[i] : m[i % 8];
    float r = m[0];
    for (int l = 1; l < 8; l++) r = m[l] > r ? m[l] : r;
    return r;
}

/* lanes8 sum of a[0..n), any n: lane i % 8 takes a[i] in order, then tree8. */
static inline float sum8(const float *a, int n) {
    v8f acc = {0};
    int i = 0;
    for (; i + 8 <= n; i += 8) acc = acc + load8(a + i);
    float t[8];
    memcpy(t, &acc, sizeof t);
    for (; i < n; i++) t[i % 8] = t[i % 8] + a[i];
    return tree8(t);
}

/* ---------------------------------------------------------------- exp, silu */

#define LOG2E 1.4426950408889634f
#define LN2_HI 0.693359375f
#define LN2_LO -2.12194440e-4f
#define Q0 0.49999988079071045f
#define Q1 0.166665181517601f
#define Q2 0.041669536381959915f
#define Q3 0.008368941955268383f
#define Q4 0.001375131425447762f

/* For x in [-88, 88] (of type T, float or a vector of them): n = x / ln 2 rounded to an
 * integer and p = exp(x - n ln 2), by correctly rounded +, -, * alone (no fma). */
#define EXP_PARTS(T, x, n, p)                                                                     \
    T n = (x * LOG2E + 12582912.0f) - 12582912.0f;                                                \
    T r_ = x - n * LN2_HI;                                                                        \
    r_ = r_ - n * LN2_LO;                                                                         \
    T p = r_ * Q4;                                                                                \
    p = p + Q3; p = p * r_;                                                                       \
    p = p + Q2; p = p * r_;                                                                       \
    p = p + Q1; p = p * r_;                                                                       \
    p = p + Q0;                                                                                   \
    p = p * (r_ * r_);                                                                            \
    p = p + r_;                                                                                   \
    p = p + 1.0f

/* exp from correctly rounded +,-,* only (no fma): within 1 ulp on [-87, 88];
 * inputs clamp to [-88, 88] and exp(-88) is exactly +0. */
static inline float exp_(float x) {
    if (x != x) return x;
    x = x < -88.0f ? -88.0f : (x > 88.0f ? 88.0f : x);
    EXP_PARTS(float, x, n, p);
    uint32_t bits = (uint32_t)((int32_t)n + 127) << 23;
    float scale;
    memcpy(&scale, &bits, 4);
    return p * scale;
}

float tf_exp(float x) { return exp_(x); }

/* x / (exp(-x) + 1): SiLU, the form every path computes lane by lane */
static inline float silu_(float x) { return x / (exp_(-x) + 1.0f); }

static inline v8f bcast8(float x) { v8f v = {x, x, x, x, x, x, x, x}; return v; }
static inline void store8(float *p, v8f v) { memcpy(p, &v, sizeof v); }
#ifdef TF_X86
typedef float v16f __attribute__((vector_size(64)));
#define TF_AVX512 __attribute__((target("avx2,fma,f16c,avx512f")))
TF_AVX2 TF_INLINE v8f bcast8v(float x) { return (v8f)_mm256_set1_ps(x); }     /* a constant stays one */
TF_AVX512 TF_INLINE v16f bcast16(float x) { return (v16f)_mm512_set1_ps(x); }
TF_AVX512 TF_INLINE v16f load16(const float *p) { return (v16f)_mm512_loadu_ps(p); }
TF_AVX512 TF_INLINE void store16(float *p, v16f v) { _mm512_storeu_ps(p, (__m512)v); }

/* exp_ in every lane: EXP_PARTS on the vector, the clamp a max and a min in named
 * instructions (P: _mm256 or _mm512; FT, IT its float and integer vector types): a NaN
 * lane clamps to -88, then NANSEL(e, x) gives x back where x is NaN.  (Selects written
 * as vector expressions took three instructions each.) */
#define TF_VEXP(NAME, ATTR, VT, FT, IT, P, NANSEL)                                                \
ATTR TF_INLINE VT NAME(VT x) {                                                                    \
    VT c = (VT)P##_min_ps(P##_max_ps((FT)x, P##_set1_ps(-88.0f)), P##_set1_ps(88.0f));            \
    EXP_PARTS(VT, c, n, p);                                                                       \
    IT bits = P##_slli_epi32(P##_add_epi32(P##_cvttps_epi32((FT)n), P##_set1_epi32(127)), 23);    \
    return (VT)NANSEL((FT)(p * (VT)bits), (FT)x);                                                 \
}
#define NANSEL8(e, x) _mm256_blendv_ps(e, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q))
#define NANSEL16(e, x) _mm512_mask_mov_ps(e, _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), x)
TF_VEXP(exp8v, TF_AVX2, v8f, __m256, __m256i, _mm256, NANSEL8)
TF_VEXP(exp16, TF_AVX512, v16f, __m512, __m512i, _mm512, NANSEL16)

/* SiLU (with MUL: times u) W lanes at a time, each lane the scalar form's operations. */
#define TF_VSILU(NAME, ATTR, VT, W, EXPV, LOAD, STORE, MUL)                                        \
ATTR static void NAME(const float *g, const float *u, float *out, int64_t n) {                     \
    int64_t i = 0;                                                                                \
    for (; i + W <= n; i += W) {                                                                  \
        VT x = LOAD(g + i), e = EXPV(-x) + 1.0f;                                                  \
        STORE(out + i, MUL ? (x / e) * LOAD(u + i) : x / e);                                      \
    }                                                                                             \
    for (; i < n; i++) out[i] = MUL ? silu_(g[i]) * u[i] : silu_(g[i]);                         \
}
TF_VSILU(silu_mul8, TF_AVX2, v8f, 8, exp8v, load8, store8, 1)
TF_VSILU(silu_mul16, TF_AVX512, v16f, 16, exp16, load16, store16, 1)
TF_VSILU(silu8, TF_AVX2, v8f, 8, exp8v, load8, store8, 0)
TF_VSILU(silu16, TF_AVX512, v16f, 16, exp16, load16, store16, 0)
#endif

void tf_silu(const float *x, float *out, int64_t n) {
#ifdef TF_X86
    if (tf_isa() == 2) { silu16(x, NULL, out, n); return; }
    if (tf_isa() == 1) { silu8(x, NULL, out, n); return; }
#endif
    for (int64_t i = 0; i < n; i++) out[i] = silu_(x[i]);
}

void tf_silu_mul(const float *g, const float *u, float *out, int64_t n) {
#ifdef TF_X86
    if (tf_isa() == 2) { silu_mul16(g, u, out, n); return; }
    if (tf_isa() == 1) { silu_mul8(g, u, out, n); return; }
#endif
    for (int64_t i = 0; i < n; i++) out[i] = silu_(g[i]) * u[i];
}

/* ---------------------------------------------------------------- norm, rope */

TF_CLONES void tf_rms_norm(const float *x, const float *w, float eps, int k, float *out) {
    float r = 1.0f / sqrtf(dot8(x, x, k) / (float)k + eps);
    for (int i = 0; i < k; i++) out[i] = (x[i] * r) * w[i];
}

void tf_rope(float *x, const float *c, const float *s, int d) {
    int h = d / 2;
    for (int i = 0; i < h; i++) {
        float a = x[i], b = x[i + h];
        x[i] = a * c[i] - b * s[i];
        x[i + h] = b * c[i + h] + a * s[i + h];
    }
}

/* ---------------------------------------------------------------- fp16 */

uint16_t tf_f2h(float f) {          /* IEEE round to nearest even */
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000, ax = x & 0x7fffffff;
    if (ax >= 0x7f800000) return (uint16_t)(sign | (ax > 0x7f800000 ? 0x7e00 : 0x7c00));
    if (ax >= 0x477ff000) return (uint16_t)(sign | 0x7c00);            /* rounds to >= 65520: inf */
    if (ax < 0x38800000) {                                             /* subnormal or zero in fp16 */
        if (ax < 0x33000000) return (uint16_t)sign;                    /* < 2^-25: rounds to 0 */
        uint32_t m = (ax & 0x7fffff) | 0x800000;
        /* value = m * 2^(e-150), in units of 2^-24: m >> (126 - e) */
        int shift = 126 - (int)(ax >> 23);
        uint32_t q = m >> shift, rem = m & ((1u << shift) - 1);
        uint32_t half = 1u << (shift - 1);
        if (rem > half || (rem == half && (q & 1))) q++;
        return (uint16_t)(sign | q);
    }
    uint32_t e = (ax >> 23) - 112, m = ax & 0x7fffff;
    uint32_t h = (e << 10) | (m >> 13), rem = m & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) h++;
    return (uint16_t)(sign | h);
}

float tf_h2f(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 31, m = h & 0x3ff, x;
    if (e == 31) x = sign | 0x7f800000 | (m << 13);
    else if (e) x = sign | ((e + 112) << 23) | (m << 13);
    else if (!m) x = sign;
    else {
        int s = 0;
        while (!(m & 0x400)) { m <<= 1; s++; }
        x = sign | ((uint32_t)(113 - s) << 23) | ((m & 0x3ff) << 13);
    }
    float f;
    memcpy(&f, &x, 4);
    return f;
}

/* fp32 -> fp16 with F16C: the same rounding (IEEE nearest even); eight inputs with
 * a NaN among them go through tf_f2h, whose NaN is canonical */
#ifdef TF_X86
__attribute__((target("avx2,f16c"))) static void f2h_f16c(const float *f, uint16_t *h, int n) {
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 x = _mm256_loadu_ps(f + i);
        __m256 nan = _mm256_cmp_ps(x, x, _CMP_UNORD_Q);
        if (_mm256_testz_ps(nan, nan))
            _mm_storeu_si128((__m128i *)(h + i), _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        else
            for (int j = i; j < i + 8; j++) h[j] = tf_f2h(f[j]);
    }
    for (; i < n; i++) h[i] = tf_f2h(f[i]);
}
#endif

static void f2h_soft(const float *f, uint16_t *h, int n) {
    for (int i = 0; i < n; i++) h[i] = tf_f2h(f[i]);
}

/* 1: the fp16 rows and attention convert with F16C (x86) or NEON; 0: in plain C
 * (also what tf_set_soft_fp16(1) picks, for tests); -1: not decided yet */
static int fast_fp16 = -1;

static int fp16_fast(void) {
    if (fast_fp16 < 0) {
        fast_fp16 = 0;
#ifdef TF_X86
        __builtin_cpu_init();
        fast_fp16 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
#elif defined(TF_NEON)
        fast_fp16 = 1;
#endif
    }
    return fast_fp16;
}

void tf_f2h_row(const float *f, uint16_t *h, int n) {
#ifdef TF_X86
    if (fp16_fast()) { f2h_f16c(f, h, n); return; }
#endif
    f2h_soft(f, h, n);
}

void tf_set_soft_fp16(int soft) {
    fast_fp16 = -1;
    if (soft) fast_fp16 = 0;
}

/* ---------------------------------------------------------------- attention */

#define AHEAD 2      /* blocks read ahead: each key chunk asks for its part of the block AHEAD on */
/* Their lines into the second-level cache, ahead of their use: into the first level
 * they cost a 9-head, 512-key fp16 call 32 us out of cache where L2 takes 21.5 (52 and
 * 32 with the blocks scattered; a Zen 4 core).  Where a call's keys and values fit
 * EARLY_V, the scores' pass asks for the values' lines too: asked for only in the
 * values' pass, they stalled its loads (SmolLM2, 8 rows of 512 positions, 1 thread:
 * the step 14.7 ms before, 14.4 after, means of four alternations).  Past it they
 * would leave the cache before their use.  There the values' pass asks, block by block,
 * for the keys of the next row where that row is another sequence's (the call the
 * thread makes next), so each pass reads one stream and the next call's first keys do
 * not start cold: 8 rows of 560 positions on two threads (where the forward's walk of
 * the next layer's KV is off), runs alternated, fastest of 60: SmolLM2 9.38, 8.78,
 * 9.12, 9.25, 9.91 -> 8.32, 8.58, 7.91, 8.88, 8.76 ms; the 0.5B 22.06, 17.63, 19.45 ->
 * 19.31, 17.29, 19.17.  On one thread, with that walk, no change. */
#define EARLY_V (512 << 10)   /* the most bytes of keys and values a call asks for early: half a Zen 4 L2 */
/* Asks for the lines of p's first bytes (p = 0: none).  Where PFIN is 1 the QK and PV
 * steps ask for the chunk AHEAD blocks on a few lines at a time among their
 * multiply-adds: asked for all at once before each step, the requests held it up (8-row
 * steps at 512 positions, one thread, runs alternated, fastest of 40: SmolLM2 13.27
 * -> 12.67 ms with AVX-512, 21.6 -> 20.8 with AVX2).  In QK_KEYS they go outside the
 * loop over l, which must unroll to keep its chains in registers. */
static inline __attribute__((always_inline)) void ask_lines(const void *p, int bytes) {
    if (p) for (int i = 0; i < bytes; i += 64) __builtin_prefetch((const char *)p + i, 0, 2);
}

/* int8 keys and values: s[g][j] times the scale of key (or value) j, for G rows of nj */
static inline void scale_cols(float *s, int G, int nj, int Lp, const float *sc) {
    for (int g = 0; g < G; g++)
        for (int j = 0; j < nj; j++) s[(int64_t)g * Lp + j] = s[(int64_t)g * Lp + j] * sc[j];
}

/* Attention widens the fp16 (or int8) keys and values exactly to fp32 as it reads them (H)
 * and multiply-adds lane by lane with one rounding (FMA).  Each key's score, and
 * each output element, is a chain alone in its lane, so the vector width and how
 * many query heads share a widened vector change only the speed. */
static inline v8f fma8_soft(v8f a, v8f b, v8f c) {
    v8f r;
    for (int l = 0; l < 8; l++) r[l] = fmaf(a[l], b[l], c[l]);
    return r;
}
static inline v8f h8_soft(const uint16_t *p) {
    v8f v;
    for (int i = 0; i < 8; i++) v[i] = tf_h2f(p[i]);
    return v;
}
static inline v8f b8_soft(const int8_t *p) {
    v8f v;
    for (int i = 0; i < 8; i++) v[i] = (float)p[i];
    return v;
}
#ifdef TF_X86
TF_AVX512 TF_INLINE v16f fma16(v16f a, v16f b, v16f c) {
    return (v16f)_mm512_fmadd_ps((__m512)a, (__m512)b, (__m512)c);
}
TF_AVX512 TF_INLINE v16f h16(const uint16_t *p) {
    return (v16f)_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
}
TF_AVX512 TF_INLINE v16f b16(const int8_t *p) {
    return (v16f)_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)p)));
}
#endif

TF_CLONES static void softmax_c(float *s, int G, int L, int stride, float *den) {
    for (int g = 0; g < G; g++) {
        float *sg = s + (int64_t)g * stride;
        float mx = max8(sg, L);
        for (int j = 0; j < L; j++) sg[j] = exp_(sg[j] - mx);
        den[g] = sum8(sg, L);
    }
}

#ifdef TF_X86
/* tf_softmax_rows W lanes at a time: the max is the same value in any order, EXPV is exp_
 * (lane by lane), and the sum8 lanes (element j in lane j % 8, in order) take each W exps
 * as they come (ADD8: W / 8 adds), one pass. */
#define TF_VSOFTMAX(NAME, ATTR, VT, W, EXPV, BCAST, LOAD, STORE, MAX, ADD8)                        \
ATTR static void NAME(float *s, int G, int L, int stride, float *den) {                           \
    for (int g = 0; g < G; g++) {                                                                 \
        float *sg = s + (int64_t)g * stride;                                                      \
        VT m = BCAST(sg[0]);                                                                      \
        int j = 0;                                                                                \
        for (; j + W <= L; j += W) m = MAX(LOAD(sg + j), m);          /* a > m ? a : m */         \
        float lanes[W], mx = sg[0];                                                               \
        STORE(lanes, m);                                                                          \
        for (int l = 0; l < W; l++) mx = lanes[l] > mx ? lanes[l] : mx;                           \
        for (; j < L; j++) mx = sg[j] > mx ? sg[j] : mx;                                          \
        __m256 acc = _mm256_setzero_ps();                                                         \
        for (j = 0; j + W <= L; j += W) {                                                         \
            VT e = EXPV(LOAD(sg + j) - mx);                                                       \
            STORE(sg + j, e);                                                                     \
            acc = ADD8(acc, e);                                                                   \
        }                                                                                         \
        float t[8];                                                                               \
        _mm256_storeu_ps(t, acc);                                                                 \
        for (; j < L; j++) {                                                                      \
            sg[j] = exp_(sg[j] - mx);                                                             \
            t[j % 8] = t[j % 8] + sg[j];                                                          \
        }                                                                                         \
        den[g] = tree8(t);                                                                        \
    }                                                                                             \
}
TF_AVX2 TF_INLINE v8f max8v(v8f a, v8f b) { return (v8f)_mm256_max_ps((__m256)a, (__m256)b); }
TF_AVX512 TF_INLINE v16f max16v(v16f a, v16f b) { return (v16f)_mm512_max_ps((__m512)a, (__m512)b); }
TF_AVX2 TF_INLINE __m256 add8_8(__m256 acc, v8f e) { return _mm256_add_ps(acc, (__m256)e); }
TF_AVX512 TF_INLINE __m256 add8_16(__m256 acc, v16f e) {
    __m512 v = (__m512)e;
    acc = _mm256_add_ps(acc, _mm512_castps512_ps256(v));
    return _mm256_add_ps(acc, _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
}
TF_VSOFTMAX(softmax8, TF_AVX2, v8f, 8, exp8v, bcast8v, load8, store8, max8v, add8_8)
TF_VSOFTMAX(softmax16, TF_AVX512, v16f, 16, exp16, bcast16, load16, store16, max16v, add8_16)
#endif

/* Each of G rows of L scores (row g at s + g*stride) as exp(s - max), and den[g]
 * their lanes8 sum: the same bits on every path. */
void tf_softmax_rows(float *s, int G, int L, int stride, float *den) {
#ifdef TF_X86
    if (tf_isa() == 2) { softmax16(s, G, L, stride, den); return; }
    if (tf_isa() == 1) { softmax8(s, G, L, stride, den); return; }
#endif
    softmax_c(s, G, L, stride, den);
}

/* Scores of keys j.. (one per vector lane) of block kb ([head_dim, B]: keys by
 * dimension) for the GN query heads from g0: lane chain l multiply-adds q[i] * k[i]
 * for i = l, l+8, ... in order, then tree8 over the eight chains (the lanes8 dot). */
#define QK_KEYS(VT, W, H, FMA, BCAST, STORE, GN)                                                   \
    do {                                                                                          \
        VT c[GN][8];                                                                              \
        memset(c, 0, sizeof c);                                                                   \
        for (int i = 0; i < d; i += 8) {                                                          \
            ask_lines(g0 || !pfk ? 0 : pfk + i * W, 8 * W * (int)sizeof(*kb));                    \
            ask_lines(g0 || !pfv ? 0 : pfv + i * W, 8 * W * (int)sizeof(*kb));                    \
            for (int l = 0; l < 8; l++) {                                                         \
                VT k = H(kb + (int64_t)(i + l) * B + j);                                          \
                for (int gi = 0; gi < GN; gi++)                                                   \
                    c[gi][l] = FMA(BCAST(q[(g0 + gi) * d + i + l]), k, c[gi][l]);                 \
            }                                                                                     \
        }                                                                                         \
        for (int gi = 0; gi < GN; gi++)                                                           \
            STORE(s + (int64_t)(g0 + gi) * Lp + j0 + j,                                           \
                  ((c[gi][0] + c[gi][1]) + (c[gi][2] + c[gi][3])) + ((c[gi][4] + c[gi][5]) + (c[gi][6] + c[gi][7]))); \
    } while (0)

/* o[g][c + i] = fma(w[g][j], v[j][c + i], o[g][c + i]) for the nj values j of block vb
 * ([B, head_dim]) in order, i < W * NV, for the GN query heads from g0. */
#define PV_ROWS(VT, W, H, FMA, BCAST, LOAD, STORE, GN, NV)                                        \
    do {                                                                                          \
        for (int c = 0; c < d; c += W * NV) {                                                     \
            VT a[GN][NV];                                                                         \
            for (int gi = 0; gi < GN; gi++)                                                       \
                for (int u = 0; u < NV; u++) a[gi][u] = LOAD(o + (g0 + gi) * d + c + W * u);    \
            for (int j = 0; j < nj; j++) {                                                        \
                VT v[NV];                                                                         \
                for (int u = 0; u < NV; u++) v[u] = H(vb + (int64_t)j * d + c + W * u);          \
                ask_lines(g0 || !pvn ? 0 : pvn + (int64_t)j * d + c, W * NV * (int)sizeof(*vb));  \
                ask_lines(g0 || !pkn ? 0 : pkn + (int64_t)j * d + c, W * NV * (int)sizeof(*vb));  \
                for (int gi = 0; gi < GN; gi++) {                                                 \
                    VT x = BCAST(s[(int64_t)(g0 + gi) * Lp + j0 + j]);                            \
                    for (int u = 0; u < NV; u++) a[gi][u] = FMA(x, v[u], a[gi][u]);              \
                }                                                                                 \
            }                                                                                     \
            for (int gi = 0; gi < GN; gi++)                                                       \
                for (int u = 0; u < NV; u++) STORE(o + (g0 + gi) * d + c + W * u, a[gi][u]);     \
        }                                                                                         \
    } while (0)

/* STEP(gn) for the next gn query heads from g0, gn a constant: the G - g0 left in as few
 * passes of at most MAXG (<= 7) as they take, shared evenly (8 heads: 4 and 4, not 7 and 1) */
#define BY_HEADS(MAXG, STEP)                                                                      \
    do {                                                                                          \
        int left_ = G - g0, passes_ = (left_ + MAXG - 1) / MAXG;                                   \
        gn_ = (left_ + passes_ - 1) / passes_;                                                    \
        switch (gn_) {                                                                            \
        case 7: if (MAXG >= 7) STEP(7); break;                                                    \
        case 6: if (MAXG >= 6) STEP(6); break;                                                    \
        case 5: if (MAXG >= 5) STEP(5); break;                                                    \
        case 4: if (MAXG >= 4) STEP(4); break;                                                    \
        case 3: STEP(3); break;                                                                   \
        case 2: STEP(2); break;                                                                   \
        default: STEP(1);                                                                         \
        }                                                                                         \
    } while (0)

/* One query row and kv heads h0..h1-1, each with the G query heads that share it,
 * over keys 0..pos of the row's sequence, block by block (a block keeps its kv heads
 * side by side, so the heads' reads run on in memory): scores W keys at a time (QK(gn),
 * QG heads per widened key), tf_softmax_rows, the weighted values (PV(gn), PG heads per
 * widened value), o / den.  Every query head's arithmetic is the same whichever heads
 * share the call.  W divides the block size (16 does).  DC, BC: the head_dim and block
 * size as constants, or 0 for the model's.  KT: the keys' and values' type (uint16_t: fp16;
 * int8_t: int8, whose scales multiply the scores, then the softmax terms, I8 = 1).  PFIN:
 * 1 where QK and PV ask for the lines ahead themselves (pfk, pfv, pvn, pkn: ask_lines),
 * 0 where the loops around them ask. */
#define TF_ATTEND(NAME, ATTR, W, QK, QG, PV, PG, DC, BC, KT, I8, PFIN)                             \
ATTR static void NAME(const tf_attn *t, int row, int h0, int h1, float *scratch) {                \
    int d = DC ? DC : t->head_dim, G = t->heads / t->kv_heads, B = BC ? BC : t->block_size;     \
    int L = t->pos[row] + 1, NH = (h1 - h0) * G;                                                  \
    int Lp = (L + B - 1) / B * B;                                                                 \
    const int i8_ = I8;                                                                           \
    const int32_t *table = t->tables + t->tab_off[row];                                           \
    const char *kbase = (const char *)t->k, *vbase = (const char *)t->v;                          \
    int64_t bs = t->block_stride, ss = (int64_t)t->kv_heads * B;                                  \
    float *s0 = scratch, *o0 = s0 + (int64_t)NH * Lp, *den = o0 + (int64_t)NH * d; /* [NH, Lp], [NH, d], [NH] */ \
    int early_v = (int64_t)L * (h1 - h0) * d * (int)sizeof(KT) * 2 <= EARLY_V;                    \
    int next = early_v && row + 1 < t->rows && t->tab_off[row + 1] != t->tab_off[row];            \
    const int32_t *next_table = next ? t->tables + t->tab_off[row + 1] : 0;                       \
    for (int j0 = 0; j0 < L; j0 += B) {                                                           \
        int nj = L - j0 < B ? L - j0 : B;                                                         \
        for (int kvh = h0; kvh < h1; kvh++) {                                                     \
            const float *q = t->q + (int64_t)row * t->q_stride + kvh * G * d;                     \
            float *s = s0 + (int64_t)(kvh - h0) * G * Lp;                                         \
            int64_t head = (int64_t)kvh * B * d;                                                  \
            const KT *kb = (const KT *)(kbase + table[j0 / B] * bs) + head;                      \
            const KT *pk = j0 + AHEAD * B < L ? (const KT *)(kbase + table[j0 / B + AHEAD] * bs) + head : 0; \
            const KT *pv = pk && early_v ? (const KT *)(vbase + table[j0 / B + AHEAD] * bs) + head : 0; \
            for (int j = 0; j < nj; j += W) {                                                     \
                const KT *pfk = pk ? pk + j * d : 0, *pfv = pv ? pv + j * d : 0;   /* its part ahead */ \
                if (!PFIN) {                                    /* asked for here, not by QK */   \
                    ask_lines(pfk, W * d * (int)sizeof(KT));                                      \
                    ask_lines(pfv, W * d * (int)sizeof(KT));                                      \
                    pfk = pfv = 0;                                                                \
                }                                                                                 \
                for (int g0 = 0, gn_; g0 < G; g0 += gn_) BY_HEADS(QG, QK);                         \
            }                                                                                     \
            if (i8_) scale_cols(s + j0, G, nj, Lp, t->ks + table[j0 / B] * ss + kvh * B);        \
        }                                                                                         \
    }                                                                                             \
    for (int b = 0; b < AHEAD && b * B < L; b++)                  /* the first values, meanwhile */ \
        for (int kvh = h0; kvh < h1; kvh++)                                                       \
            ask_lines((const KT *)(vbase + table[b] * bs) + (int64_t)kvh * B * d, B * d * (int)sizeof(KT)); \
    tf_softmax_rows(s0, NH, L, Lp, den);                                                          \
    memset(o0, 0, sizeof(float) * NH * d);                                                        \
    for (int j0 = 0; j0 < L; j0 += B) {                                                           \
        int nj = L - j0 < B ? L - j0 : B;                                                         \
        for (int kvh = h0; kvh < h1; kvh++) {                                                     \
            float *s = s0 + (int64_t)(kvh - h0) * G * Lp;                                         \
            float *o = o0 + (int64_t)(kvh - h0) * G * d;                                          \
            int64_t head = (int64_t)kvh * B * d;                                                  \
            const KT *vb = (const KT *)(vbase + table[j0 / B] * bs) + head;                      \
            const KT *pvn = j0 + AHEAD * B < L ? (const KT *)(vbase + table[j0 / B + AHEAD] * bs) + head : 0; \
            const KT *pkn = next && j0 <= t->pos[row + 1] ? (const KT *)(kbase + next_table[j0 / B] * bs) + head : 0; \
            if (!PFIN) {                                        /* asked for here, not by PV */   \
                ask_lines(pvn, B * d * (int)sizeof(KT));                                          \
                ask_lines(pkn, B * d * (int)sizeof(KT));                                          \
                pvn = pkn = 0;                                                                    \
            }                                                                                     \
            if (i8_) scale_cols(s + j0, G, nj, Lp, t->vs + table[j0 / B] * ss + kvh * B);        \
            for (int g0 = 0, gn_; g0 < G; g0 += gn_) BY_HEADS(PG, PV);                             \
        }                                                                                         \
    }                                                                                             \
    float *dst = t->out + (int64_t)row * t->out_stride + h0 * G * d;                              \
    for (int g = 0; g < NH; g++)                                                                  \
        for (int i = 0; i < d; i++) dst[g * d + i] = o0[g * d + i] / den[g] + 0.0f;               \
}

#define QK_SOFT(GN) QK_KEYS(v8f, 8, h8_soft, fma8_soft, bcast8, store8, GN)
#define PV_SOFT(GN) PV_ROWS(v8f, 8, h8_soft, fma8_soft, bcast8, load8, store8, GN, 1)
TF_ATTEND(attend_soft, , 8, QK_SOFT, 1, PV_SOFT, 1, 0, 0, uint16_t, 0, 0)
#define QK_SOFT_I8(GN) QK_KEYS(v8f, 8, b8_soft, fma8_soft, bcast8, store8, GN)
#define PV_SOFT_I8(GN) PV_ROWS(v8f, 8, b8_soft, fma8_soft, bcast8, load8, store8, GN, 1)
TF_ATTEND(attend_soft_i8, , 8, QK_SOFT_I8, 1, PV_SOFT_I8, 1, 0, 0, int8_t, 1, 0)
#ifdef TF_X86
/* AVX2: the same chains in named registers (the generic forms above spill them here).
 * Scores of the sixteen keys of the chunk at k (dimension i at k + i*B), as two vectors
 * that share each broadcast query element, for GN query heads: chain l of a head takes
 * dimensions l, l + 8, ... in order.  Chains l and l + 1 run together (twelve independent
 * chains hide the fma latency) and their pair sum goes through the score row:
 * ((0+1)+(2+3))+((4+5)+(6+7)), the tree8 order. */
/* eight keys (or value elements) from element i of p: fp16, or int8 (i8) */
TF_AVX2 TF_INLINE __m256 kv8_avx2(const void *p, int64_t i, int i8) {
    if (i8) return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)((const int8_t *)p + i))));
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)p + i)));
}
/* Chains l and l + 1's pair sum (l even) into the score row at sp, in the tree8 order
 * ((0+1)+(2+3))+((4+5)+(6+7)); *p45 keeps (4+5) until (6+7) comes. */
TF_AVX2 TF_INLINE void tree_pair_avx2(float *sp, int l, __m256 pair, __m256 *p45) {
    if (l == 0) _mm256_storeu_ps(sp, pair);
    else if (l == 2) _mm256_storeu_ps(sp, _mm256_add_ps(_mm256_loadu_ps(sp), pair));
    else if (l == 4) *p45 = pair;
    else _mm256_storeu_ps(sp, _mm256_add_ps(_mm256_loadu_ps(sp), _mm256_add_ps(*p45, pair)));
}
TF_AVX2 TF_INLINE void qk_avx2(int GN, int d, const float *q, const void *k, int i8, int B, float *s, int Lp,
                                const char *pk, const char *pv) {
    __m256 p45[3][2];
    _Pragma("GCC unroll 4") for (int l = 0; l < 8; l += 2) {
        __m256 c[3][2][2];
        _Pragma("GCC unroll 3") for (int g = 0; g < GN; g++)
            c[g][0][0] = c[g][0][1] = c[g][1][0] = c[g][1][1] = _mm256_setzero_ps();
        _Pragma("GCC unroll 16") for (int i = 0; i < d; i += 8)
            _Pragma("GCC unroll 2") for (int h = 0; h < 2; h++) {
                int64_t kp = (int64_t)(i + l + h) * B;
                __m256 k0 = kv8_avx2(k, kp, i8), k1 = kv8_avx2(k, kp + 8, i8);
                if (!(((l + h) * 16 << !i8) & 63)) {                           /* a line's first key */
                    ask_lines(pk ? pk + ((i + l + h) * 16 << !i8) : 0, 1);
                    ask_lines(pv ? pv + ((i + l + h) * 16 << !i8) : 0, 1);
                }
                _Pragma("GCC unroll 3") for (int g = 0; g < GN; g++) {
                    __m256 x = _mm256_broadcast_ss(q + g * d + i + l + h);
                    c[g][h][0] = _mm256_fmadd_ps(x, k0, c[g][h][0]);
                    c[g][h][1] = _mm256_fmadd_ps(x, k1, c[g][h][1]);
                }
            }
        _Pragma("GCC unroll 3") for (int g = 0; g < GN; g++)
            _Pragma("GCC unroll 2") for (int u = 0; u < 2; u++)
                tree_pair_avx2(s + (int64_t)g * Lp + 8 * u, l, _mm256_add_ps(c[g][0][u], c[g][1][u]), &p45[g][u]);
    }
}

/* o[g][:] = fma(w[g][j], v[j][:], o[g][:]) over the nj values of a block in order, for GN
 * heads, 32 dimensions at a time: up to twelve chains, enough to hide the fma latency. */
TF_AVX2 TF_INLINE void pv_avx2(int GN, int d, const void *vb, int i8, int nj, const float *w, int Lp, float *o,
                                const char *pn, const char *pk) {
    _Pragma("GCC unroll 4") for (int c = 0; c < d; c += 32) {
        __m256 a[3][4];
        _Pragma("GCC unroll 3") for (int g = 0; g < GN; g++)
            _Pragma("GCC unroll 4") for (int u = 0; u < 4; u++) a[g][u] = _mm256_loadu_ps(o + g * d + c + 8 * u);
        for (int j = 0; j < nj; j++) {
            __m256 x[3];
            _Pragma("GCC unroll 3") for (int g = 0; g < GN; g++) x[g] = _mm256_broadcast_ss(w + (int64_t)g * Lp + j);
            ask_lines(pn ? pn + (((int64_t)j * d + c) << !i8) : 0, 32 << !i8);
            ask_lines(pk ? pk + (((int64_t)j * d + c) << !i8) : 0, 32 << !i8);
            _Pragma("GCC unroll 4") for (int u = 0; u < 4; u++) {
                __m256 v = kv8_avx2(vb, (int64_t)j * d + c + 8 * u, i8);
                _Pragma("GCC unroll 3") for (int g = 0; g < GN; g++) a[g][u] = _mm256_fmadd_ps(x[g], v, a[g][u]);
            }
        }
        _Pragma("GCC unroll 3") for (int g = 0; g < GN; g++)
            _Pragma("GCC unroll 4") for (int u = 0; u < 4; u++) _mm256_storeu_ps(o + g * d + c + 8 * u, a[g][u]);
    }
}
/* Scores for kv heads that serve four to seven query heads (Qwen2.5: six or seven): eight
 * keys at a time, each widened key feeding every head of the pass, so a key is widened
 * once where qk_avx2 would widen it two or three times.  The chains, their order and the
 * tree are qk_avx2's.  (The values keep pv_avx2: a wide form of it measured slower.) */
TF_AVX2 TF_INLINE void qkw_avx2(int GN, int d, const float *q, const void *k, int i8, int B, float *s, int Lp,
                                 const char *pk, const char *pv) {
    __m256 p45[7];
    _Pragma("GCC unroll 4") for (int l = 0; l < 8; l += 2) {
        __m256 c[7][2];
        _Pragma("GCC unroll 7") for (int g = 0; g < GN; g++) c[g][0] = c[g][1] = _mm256_setzero_ps();
        _Pragma("GCC unroll 16") for (int i = 0; i < d; i += 8)
            _Pragma("GCC unroll 2") for (int h = 0; h < 2; h++) {
                __m256 kv = kv8_avx2(k, (int64_t)(i + l + h) * B, i8);
                if (!(((l + h) * 8 << !i8) & 63)) {                            /* a line's first key */
                    ask_lines(pk ? pk + ((i + l + h) * 8 << !i8) : 0, 1);
                    ask_lines(pv ? pv + ((i + l + h) * 8 << !i8) : 0, 1);
                }
                _Pragma("GCC unroll 7") for (int g = 0; g < GN; g++)
                    c[g][h] = _mm256_fmadd_ps(_mm256_broadcast_ss(q + g * d + i + l + h), kv, c[g][h]);
            }
        _Pragma("GCC unroll 7") for (int g = 0; g < GN; g++)
            tree_pair_avx2(s + (int64_t)g * Lp, l, _mm256_add_ps(c[g][0], c[g][1]), &p45[g]);
    }
}
#define QK_AVX2(GN) qk_avx2(GN, d, q + g0 * d, kb + j, i8_, B, s + (int64_t)g0 * Lp + j0 + j, Lp, \
                            g0 ? 0 : (const char *)pfk, g0 ? 0 : (const char *)pfv)
#define PV_AVX2(GN) pv_avx2(GN, d, vb, i8_, nj, s + (int64_t)g0 * Lp + j0, Lp, o + g0 * d, g0 ? 0 : (const char *)pvn, \
                            g0 ? 0 : (const char *)pkn)
/* The common shapes with their sizes as constants (every address an immediate), and any
 * other, each with fp16 and with int8 keys and values; AVX2_PICK names the one for d, B, i8. */
#define TF_ATTEND_AVX2(NAME, W, QK, QG)                                                            \
TF_ATTEND(NAME##_64, TF_AVX2, W, QK, QG, PV_AVX2, 3, 64, 32, uint16_t, 0, 1)                       \
TF_ATTEND(NAME##_128, TF_AVX2, W, QK, QG, PV_AVX2, 3, 128, 32, uint16_t, 0, 1)                     \
TF_ATTEND(NAME, TF_AVX2, W, QK, QG, PV_AVX2, 3, 0, 0, uint16_t, 0, 1)                              \
TF_ATTEND(NAME##_64_i8, TF_AVX2, W, QK, QG, PV_AVX2, 3, 64, 32, int8_t, 1, 1)                      \
TF_ATTEND(NAME##_128_i8, TF_AVX2, W, QK, QG, PV_AVX2, 3, 128, 32, int8_t, 1, 1)                    \
TF_ATTEND(NAME##_i8, TF_AVX2, W, QK, QG, PV_AVX2, 3, 0, 0, int8_t, 1, 1)
#define AVX2_PICK(NAME, d, B, i8)                                                                  \
    ((d) == 64 && (B) == 32 ? ((i8) ? NAME##_64_i8 : NAME##_64)                                    \
     : (d) == 128 && (B) == 32 ? ((i8) ? NAME##_128_i8 : NAME##_128) : ((i8) ? NAME##_i8 : NAME))
TF_ATTEND_AVX2(attend_avx2, 16, QK_AVX2, 3)
#define QKW_AVX2(GN) qkw_avx2(GN, d, q + g0 * d, kb + j, i8_, B, s + (int64_t)g0 * Lp + j0 + j, Lp, \
                              g0 ? 0 : (const char *)pfk, g0 ? 0 : (const char *)pfv)
TF_ATTEND_AVX2(attendw_avx2, 8, QKW_AVX2, 7)
/* AVX-512: the values take up to six query heads a pass (24 of the 32 registers hold
 * their sums), so a kv head of six (Qwen2.5-Coder-1.5B) widens each value once, not
 * twice, and one of seven (the 0.5B) twice, not three times: 8 rows of 560 positions in
 * cache, 1 thread, the two builds alternated: the 1.5B's 28 layers 8.96-9.07 -> 8.60-8.69
 * ms (the int8 form takes the same count, untimed).  The scores keep three (a wide form
 * of them, qkw_avx2's on 16 keys, measured no faster). */
#define QK_AVX512(GN) QK_KEYS(v16f, 16, h16, fma16, bcast16, store16, GN)
#define PV_AVX512(GN) PV_ROWS(v16f, 16, h16, fma16, bcast16, load16, store16, GN, 4)
TF_ATTEND(attend_avx512, TF_AVX512, 16, QK_AVX512, 3, PV_AVX512, 6, 0, 0, uint16_t, 0, 1)
#define QK_AVX512_I8(GN) QK_KEYS(v16f, 16, b16, fma16, bcast16, store16, GN)
#define PV_AVX512_I8(GN) PV_ROWS(v16f, 16, b16, fma16, bcast16, load16, store16, GN, 4)
TF_ATTEND(attend_avx512_i8, TF_AVX512, 16, QK_AVX512_I8, 3, PV_AVX512_I8, 6, 0, 0, int8_t, 1, 1)
#endif
#ifdef TF_NEON
/* NEON: qk_avx2 and pv_avx2's chains as pairs of four-lane registers (the generic forms
 * above compiled to scalar multiply-adds through the stack). */
/* four keys (or value elements) from element i of p: fp16, or int8 (i8) */
static inline __attribute__((always_inline)) float32x4_t kv4_neon(const void *p, int64_t i, int i8) {
    if (i8) {
        int32_t w;
        memcpy(&w, (const int8_t *)p + i, 4);
        return vcvtq_f32_s32(vmovl_s16(vget_low_s16(vmovl_s8(vreinterpret_s8_s32(vdup_n_s32(w))))));
    }
    return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16((const uint16_t *)p + i)));
}
static inline __attribute__((always_inline)) void qk_neon(int GN, int d, const float *q, const void *k, int i8,
                                                          int B, float *s, int Lp) {
    float32x4_t c0[3][2], t01[3][2], t03[3][2], t45[3][2];
    _Pragma("GCC unroll 8") for (int l = 0; l < 8; l++) {
        float32x4_t c[3][2];
        _Pragma("GCC unroll 3") for (int g = 0; g < GN; g++) c[g][0] = c[g][1] = vdupq_n_f32(0.0f);
        _Pragma("GCC unroll 2") for (int i = 0; i < d; i += 8) {
            int64_t kp = (int64_t)(i + l) * B;
            float32x4_t k0 = kv4_neon(k, kp, i8), k1 = kv4_neon(k, kp + 4, i8);
            _Pragma("GCC unroll 3") for (int g = 0; g < GN; g++) {
                float x = q[g * d + i + l];
                c[g][0] = vfmaq_n_f32(c[g][0], k0, x);
                c[g][1] = vfmaq_n_f32(c[g][1], k1, x);
            }
        }
        _Pragma("GCC unroll 3") for (int g = 0; g < GN; g++)       /* ((0+1)+(2+3))+((4+5)+(6+7)) */
            _Pragma("GCC unroll 2") for (int h = 0; h < 2; h++) {
                if (l % 2 == 0) { c0[g][h] = c[g][h]; continue; }
                float32x4_t pair = vaddq_f32(c0[g][h], c[g][h]);
                if (l == 1) t01[g][h] = pair;
                else if (l == 3) t03[g][h] = vaddq_f32(t01[g][h], pair);
                else if (l == 5) t45[g][h] = pair;
                else vst1q_f32(s + (int64_t)g * Lp + 4 * h, vaddq_f32(t03[g][h], vaddq_f32(t45[g][h], pair)));
            }
    }
}
/* o[g][:] = fma(w[g][j], v[j][:], o[g][:]) over the nj values in order, 16 dimensions at a time */
static inline __attribute__((always_inline)) void pv_neon(int GN, int d, const void *vb, int i8, int nj,
                                                          const float *w, int Lp, float *o) {
    for (int c = 0; c < d; c += 16) {
        float32x4_t a[3][4];
        _Pragma("GCC unroll 3") for (int g = 0; g < GN; g++)
            _Pragma("GCC unroll 4") for (int u = 0; u < 4; u++) a[g][u] = vld1q_f32(o + g * d + c + 4 * u);
        for (int j = 0; j < nj; j++) {
            float32x4_t v[4];
            _Pragma("GCC unroll 4") for (int u = 0; u < 4; u++) v[u] = kv4_neon(vb, (int64_t)j * d + c + 4 * u, i8);
            _Pragma("GCC unroll 3") for (int g = 0; g < GN; g++) {
                float x = w[(int64_t)g * Lp + j];
                _Pragma("GCC unroll 4") for (int u = 0; u < 4; u++) a[g][u] = vfmaq_n_f32(a[g][u], v[u], x);
            }
        }
        _Pragma("GCC unroll 3") for (int g = 0; g < GN; g++)
            _Pragma("GCC unroll 4") for (int u = 0; u < 4; u++) vst1q_f32(o + g * d + c + 4 * u, a[g][u]);
    }
}
#define QK_NEON(GN) qk_neon(GN, d, q + g0 * d, kb + j, i8_, B, s + (int64_t)g0 * Lp + j0 + j, Lp)
#define PV_NEON(GN) pv_neon(GN, d, vb, i8_, nj, s + (int64_t)g0 * Lp + j0, Lp, o + g0 * d)
TF_ATTEND(attend_neon, , 8, QK_NEON, 3, PV_NEON, 3, 0, 0, uint16_t, 0, 0)
TF_ATTEND(attend_neon_i8, , 8, QK_NEON, 3, PV_NEON, 3, 0, 0, int8_t, 1, 0)
#endif

int64_t tf_attend_scratch(const tf_attn *t, int pos) {
    int B = t->block_size;
    return (int64_t)t->heads * ((pos + B) / B * B + t->head_dim + 1);
}

void tf_attend(const tf_attn *t, int row, int h0, int h1, float *scratch) {
    int d = t->head_dim, isa = fp16_fast() ? tf_isa() : 0, i8 = t->ks != NULL;
    void (*fn)(const tf_attn *, int, int, int, float *) = i8 ? attend_soft_i8 : attend_soft;
#ifdef TF_X86
    if (isa == 2 && d % 64 == 0) fn = i8 ? attend_avx512_i8 : attend_avx512;
    else if (isa >= 1 && d % 32 == 0)              /* four or more query heads a kv head: the wide form */
        fn = t->heads > 3 * t->kv_heads ? AVX2_PICK(attendw_avx2, d, t->block_size, i8)
                                        : AVX2_PICK(attend_avx2, d, t->block_size, i8);
#endif
#ifdef TF_NEON
    if (isa == 3 && d % 32 == 0) fn = i8 ? attend_neon_i8 : attend_neon;
#endif
    fn(t, row, h0, h1, scratch);
}
