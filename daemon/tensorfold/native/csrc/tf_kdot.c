/* The K formats (GGUF's Q4_K, Q5_K and Q6_K bit layouts; tf_kernels.h): dot
 * products over super-blocks of 256 inputs whose integer part is exact (the
 * "K dot"), so only the per-super-block scaling is fp32.  One scalar reference
 * and SIMD paths that reproduce it bit for bit (AVX2, AVX-512 VNNI, NEON). */
#include "tf_dot.h"
#include "tf_lanes.h"
#include "tf_ops.h"

#include <math.h>

/* Byte offsets in a super-block's value bits (q) and its scales (s) (tf_kernels.h). */
enum {
    K4_QS = 0, K4_BITS = 128, K5_QH = 0, K5_QS = 32, K5_BITS = 160, K6_QL = 0, K6_QH = 128, K6_BITS = 192,
    K4_D = 0, K4_DMIN = 2, K4_SC = 4, K4_MN = 12, K4_META = 20, K6_SC = 0, K6_D = 16, K6_META = 18,
};

static inline int bits_bytes(int fmt) { return fmt == TF_K4 ? K4_BITS : fmt == TF_K5 ? K5_BITS : K6_BITS; }
static inline int meta_bytes(int fmt) { return fmt == TF_K6 ? K6_META : K4_META; }

static inline const uint8_t *kbits(const tf_weight *w, int64_t n, int64_t j) {
    return w->q + (n * (w->k / 256) + j) * bits_bytes(w->fmt);
}
static inline const uint8_t *kmeta(const tf_weight *w, int64_t n, int64_t j) {
    return (const uint8_t *)w->s + (n * (w->k / 256) + j) * meta_bytes(w->fmt);
}

static inline uint16_t u16_at(const uint8_t *p) {
    uint16_t v;
    memcpy(&v, p, 2);
    return v;
}

/* The super-block's integer codes: out[0..7] the scale codes of blocks 0..7 (K6:
 * of their inputs 0..15), out[8..15] the mins (K6: the codes of inputs 16..31). */
static inline void kcodes(const tf_weight *w, const uint8_t *meta, int *out) {
    if (w->fmt == TF_K6) {
        for (int b = 0; b < 8; b++) {
            out[b] = (int8_t)meta[K6_SC + 2 * b];
            out[8 + b] = (int8_t)meta[K6_SC + 2 * b + 1];
        }
        return;
    }
    for (int i = 0; i < 16; i++) out[i] = meta[K4_SC + i];
}

/* The code that scales element e (0..255), from kcodes' out. */
static inline int kcode_at(int fmt, const int *c, int e) {
    return fmt == TF_K6 ? c[(e % 32) / 16 * 8 + e / 32] : c[e / 32];
}

/* K4/K5: the min term's exact integer, sum over blocks of mn_b * bsum_b (bs as in tf_acts). */
static inline int32_t kmin_sum(const int *c, const int16_t *bs) {
    int32_t M = 0;
    for (int b = 0; b < 8; b++) M += c[8 + b] * (bs[b] + bs[8 + b]);
    return M;
}

/* The super-scales D (and Dm = -dmin for K4/K5), exactly widened from fp16. */
static inline float kscale(const tf_weight *w, const uint8_t *meta) {
    return tf_h2f(u16_at(meta + (w->fmt == TF_K6 ? K6_D : K4_D)));
}
static inline float kmin_scale(const uint8_t *meta) { return -tf_h2f(u16_at(meta + K4_DMIN)); }

/* The integer value of element e (0..255) of a super-block. */
static int kq_at(int fmt, const uint8_t *q, int e) {
    int b = e / 32, i = e % 32;
    if (fmt == TF_K6) {
        int h = b / 4, t = b % 4, lo = q[K6_QL + 64 * h + 32 * (t & 1) + i];
        lo = t < 2 ? lo & 15 : lo >> 4;
        return (lo | ((q[K6_QH + 32 * h + i] >> (2 * t)) & 3) << 4) - 32;
    }
    int v = q[(fmt == TF_K5 ? K5_QS : K4_QS) + 32 * (b / 2) + i];
    v = b % 2 ? v >> 4 : v & 15;
    if (fmt == TF_K5) v |= ((q[K5_QH + i] >> b) & 1) << 4;
    return v;
}

/* ---------------------------------------------------------------- reference */

static float kdot_ref(const tf_weight *w, int64_t n, const tf_acts *a, int64_t r) {
    int64_t nsb = w->k / 256;
    const int8_t *xq = a->qk + r * w->k;
    const float *xs = a->sk + r * nsb;
    const int16_t *bs = a->bs + r * nsb * 16;
    float acc = 0.0f;
    for (int64_t j = 0; j < nsb; j++) {
        const uint8_t *q = kbits(w, n, j), *meta = kmeta(w, n, j);
        int c[16];
        kcodes(w, meta, c);
        int32_t I = 0;
        for (int e = 0; e < 256; e++) I += kcode_at(w->fmt, c, e) * kq_at(w->fmt, q, e) * xq[j * 256 + e];
        acc = fmaf((float)I, xs[j] * kscale(w, meta), acc);
        if (w->fmt != TF_K6) acc = fmaf((float)kmin_sum(c, bs + j * 16), xs[j] * kmin_scale(meta), acc);
    }
    return acc;
}

static void krows_ref(const tf_weight *w, int n0, int n1, const tf_acts *a, float *y, int ldy) {
    for (int n = n0; n < n1; n++)
        for (int r = 0; r < a->rows; r++) y[(int64_t)r * ldy + n] = kdot_ref(w, n, a, r);
}

/* ---------------------------------------------------------------- x86 */
#ifdef TF_X86

/* The totals of eight int32x8 vectors, lane i = the total of v[i]. */
TF_AVX2 TF_INLINE __m256i totals8(const __m256i *v) {
    __m256i a = _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
    __m256i c = _mm256_hadd_epi32(_mm256_hadd_epi32(v[4], v[5]), _mm256_hadd_epi32(v[6], v[7]));
    return _mm256_add_epi32(_mm256_permute2x128_si256(a, c, 0x20), _mm256_permute2x128_si256(a, c, 0x31));
}
/* The same for eight int32x4 vectors. */
TF_AVX2 TF_INLINE __m256i totals8x4(const __m128i *v) {
    __m256i a = _mm256_hadd_epi32(_mm256_set_m128i(v[4], v[0]), _mm256_set_m128i(v[5], v[1]));
    __m256i c = _mm256_hadd_epi32(_mm256_set_m128i(v[6], v[2]), _mm256_set_m128i(v[7], v[3]));
    return _mm256_hadd_epi32(a, c);
}

/* Block b's 32 unsigned values from a super-block (F and b constants). */
TF_AVX2 TF_INLINE __m256i kunpack(int F, const uint8_t *q, int b) {
    const __m256i m4 = _mm256_set1_epi8(15);
    if (F == TF_K6) {
        int half = b / 4, t = b % 4;
        __m256i l = _mm256_loadu_si256((const __m256i *)(q + K6_QL + 64 * half + 32 * (t & 1)));
        __m256i x = _mm256_loadu_si256((const __m256i *)(q + K6_QH + 32 * half));
        l = t < 2 ? _mm256_and_si256(l, m4) : _mm256_and_si256(_mm256_srli_epi16(l, 4), m4);
        x = t == 0 ? _mm256_slli_epi16(x, 4) : t == 1 ? _mm256_slli_epi16(x, 2) : t == 2 ? x : _mm256_srli_epi16(x, 2);
        return _mm256_or_si256(l, _mm256_and_si256(x, _mm256_set1_epi8(0x30)));
    }
    __m256i v = _mm256_loadu_si256((const __m256i *)(q + (F == TF_K5 ? K5_QS : K4_QS) + 32 * (b / 2)));
    v = b % 2 ? _mm256_and_si256(_mm256_srli_epi16(v, 4), m4) : _mm256_and_si256(v, m4);
    if (F == TF_K5) {       /* bit b of each qh byte to bit 4 (16-bit shifts keep it in its byte) */
        __m256i x = _mm256_loadu_si256((const __m256i *)(q + K5_QH));
        x = b < 4 ? _mm256_slli_epi16(x, 4 - b) : _mm256_srli_epi16(x, b - 4);
        v = _mm256_or_si256(v, _mm256_and_si256(x, _mm256_set1_epi8(0x10)));
    }
    return v;
}

/* A tile of RT rows x NT outputs, one super-block at a time: each block's values
 * unpacked once for the RT rows; u8 x s8 pairs (maddubs: at most 2 * 63 * 127, no
 * saturation) times the block's int16 codes summed exactly in int32 lanes (DPW);
 * Q6_K's -32 offset added as (32 * codes) . (-sums of 16); then the exact totals
 * of the tile's (output, row) pairs, one per fp32 lane, are scaled together, in
 * super-block order. */
#define TF_KTILE(NAME, ATTR, DPW)                                                                    \
ATTR TF_INLINE void NAME(const tf_weight *w, int n0, int NT, const tf_acts *a, int r0, int RT,       \
                         float *out, int ldy, int F) {                                              \
    int64_t k = w->k, nsb = k / 256;                                                                \
    int64_t QB = bits_bytes(F), MB = meta_bytes(F);                                                 \
    const int NG = (NT * RT + 7) / 8;            /* groups of eight (output, row) pairs */           \
    __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};   /* lane p = t * RT + r */        \
    {   /* the weights a few tiles ahead: their lines arrive while this tile computes */          \
        int64_t ahead = n0 + (int64_t)NT * TF_AHEAD;                                                \
        if (ahead + NT <= w->n) {                                                                   \
            prefetch_span(w->q + ahead * nsb * QB, NT * nsb * QB);                                  \
            prefetch_span((const uint8_t *)w->s + ahead * nsb * MB, NT * nsb * MB);                 \
        }                                                                                           \
    }                                                                                               \
    for (int64_t j = 0; j < nsb; j++) {                                                             \
        __m256i cd[4], isum[4][8];                                                                  \
        __m128i mn[4];                                                                              \
        const uint8_t *bp[4], *mp[4];                                                               \
        TF_UNROLL for (int t = 0; t < NT; t++) {                                                    \
            bp[t] = w->q + ((n0 + t) * nsb + j) * QB;                                               \
            mp[t] = (const uint8_t *)w->s + ((n0 + t) * nsb + j) * MB;                              \
            if (F == TF_K6) {        /* int8 codes per 16 inputs: evens (inputs 0..15), odds */     \
                __m128i c = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(mp[t] + K6_SC)),     \
                    _mm_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15));          \
                cd[t] = _mm256_set_m128i(_mm_cvtepi8_epi16(_mm_srli_si128(c, 8)), _mm_cvtepi8_epi16(c)); \
            } else {                 /* uint8 codes: sc of blocks 0..7, then mn */                  \
                __m128i c = _mm_loadu_si128((const __m128i *)(mp[t] + K4_SC)), c0 = _mm_cvtepu8_epi16(c); \
                cd[t] = _mm256_set_m128i(c0, c0);                                                   \
                mn[t] = _mm_cvtepu8_epi16(_mm_srli_si128(c, 8));                                    \
            }                                                                                       \
            _Pragma("GCC unroll 8") for (int r = 0; r < RT; r++) isum[t][r] = _mm256_setzero_si256(); \
        }                                                                                           \
        const int8_t *xq = a->qk + (int64_t)r0 * k + j * 256;                                       \
        _Pragma("GCC unroll 8") for (int b = 0; b < 8; b++) {                                       \
            const __m256i ctrl = _mm256_set1_epi16((short)(0x0100 + 0x0202 * b));                   \
            TF_UNROLL for (int t = 0; t < NT; t++) {                                                \
                __m256i wv = kunpack(F, bp[t], b), sc = _mm256_shuffle_epi8(cd[t], ctrl);           \
                _Pragma("GCC unroll 8") for (int r = 0; r < RT; r++) {                              \
                    __m256i x = _mm256_loadu_si256((const __m256i *)(xq + r * k + 32 * b));         \
                    isum[t][r] = DPW(isum[t][r], _mm256_maddubs_epi16(wv, x), sc);                  \
                }                                                                                   \
            }                                                                                       \
        }                                                                                           \
        __m256i tot[16];                                                                            \
        __m128i mtot[16];                                                                           \
        float xsa[16], da[16], ma[16];                                                              \
        _Pragma("GCC unroll 16") for (int p = 0; p < 8 * NG; p++) {                                 \
            tot[p] = _mm256_setzero_si256();                                                        \
            mtot[p] = _mm_setzero_si128();                                                          \
            xsa[p] = da[p] = ma[p] = 0.0f;                                                          \
        }                                                                                           \
        _Pragma("GCC unroll 8") for (int r = 0; r < RT; r++) {                                      \
            int64_t row = r0 + r;                                                                   \
            __m256i bsv = _mm256_loadu_si256((const __m256i *)(a->bs + (row * nsb + j) * 16));      \
            __m256i nbs = _mm256_sub_epi16(_mm256_setzero_si256(), bsv);                            \
            __m128i b32 = _mm_add_epi16(_mm256_castsi256_si128(bsv), _mm256_extracti128_si256(bsv, 1)); \
            TF_UNROLL for (int t = 0; t < NT; t++) {                                                \
                int p = t * RT + r;                                                                 \
                tot[p] = F == TF_K6 ? DPW(isum[t][r], _mm256_slli_epi16(cd[t], 5), nbs) : isum[t][r]; \
                if (F != TF_K6) mtot[p] = _mm_madd_epi16(mn[t], b32);                               \
                xsa[p] = a->sk[row * nsb + j];                                                      \
                da[p] = _cvtsh_ss(u16_at(mp[t] + (F == TF_K6 ? K6_D : K4_D)));                      \
                if (F != TF_K6) ma[p] = -_cvtsh_ss(u16_at(mp[t] + K4_DMIN));                        \
            }                                                                                       \
        }                                                                                           \
        TF_UNROLL for (int g = 0; g < NG; g++) {                                                    \
            __m256 xsv = _mm256_loadu_ps(xsa + 8 * g);                                              \
            acc[g] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(totals8(tot + 8 * g)),                      \
                                     _mm256_mul_ps(xsv, _mm256_loadu_ps(da + 8 * g)), acc[g]);      \
            if (F != TF_K6)                                                                         \
                acc[g] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(totals8x4(mtot + 8 * g)),               \
                                         _mm256_mul_ps(xsv, _mm256_loadu_ps(ma + 8 * g)), acc[g]);  \
        }                                                                                           \
    }                                                                                               \
    float res[16];                                                                                  \
    _mm256_storeu_ps(res, acc[0]);                                                                  \
    _mm256_storeu_ps(res + 8, acc[1]);                                                              \
    TF_UNROLL for (int t = 0; t < NT; t++)                                                          \
        _Pragma("GCC unroll 8") for (int r = 0; r < RT; r++)                                        \
            out[(int64_t)(r0 + r) * ldy + n0 + t] = res[t * RT + r];                                \
}
#define TF_KSHAPE(NAME, ATTR, f, F, NT, RT)                                                          \
ATTR __attribute__((noinline)) static void NAME##_##f##_##NT##RT(                                   \
        const tf_weight *w, int n, const tf_acts *a, int r, float *y, int ldy) {                    \
    NAME(w, n, NT, a, r, RT, y, ldy, F);                                                            \
}
/* Shapes: 2 outputs x 8 rows (R8: with 32 vector registers) or x 4 rows; the last rows 2 x 3,
 * 2 x 2 or 4 x 1; one output for a ragged tail. */
#define TF_KFORMAT(NAME, ATTR, f, F, R8)                                                             \
TF_KSHAPE(NAME, ATTR, f, F, 2, 8) TF_KSHAPE(NAME, ATTR, f, F, 1, 8)                                  \
TF_KSHAPE(NAME, ATTR, f, F, 2, 4) TF_KSHAPE(NAME, ATTR, f, F, 1, 4)                                  \
TF_KSHAPE(NAME, ATTR, f, F, 2, 3) TF_KSHAPE(NAME, ATTR, f, F, 1, 3)                                  \
TF_KSHAPE(NAME, ATTR, f, F, 2, 2) TF_KSHAPE(NAME, ATTR, f, F, 1, 2)                                  \
TF_KSHAPE(NAME, ATTR, f, F, 4, 1) TF_KSHAPE(NAME, ATTR, f, F, 1, 1)                                  \
ATTR static void NAME##_##f(const tf_weight *w, int n0, int n1, const tf_acts *a, float *y, int ldy) { \
    int rows = a->rows, r = 0, n;                                                                   \
    for (; R8 && r + 8 <= rows; r += 8) {                                                           \
        for (n = n0; n + 2 <= n1; n += 2) NAME##_##f##_28(w, n, a, r, y, ldy);                      \
        for (; n < n1; n++) NAME##_##f##_18(w, n, a, r, y, ldy);                                    \
    }                                                                                               \
    for (; r + 4 <= rows; r += 4) {                                                                 \
        for (n = n0; n + 2 <= n1; n += 2) NAME##_##f##_24(w, n, a, r, y, ldy);                      \
        for (; n < n1; n++) NAME##_##f##_14(w, n, a, r, y, ldy);                                    \
    }                                                                                               \
    switch (rows - r) {                                                                             \
    case 3:                                                                                         \
        for (n = n0; n + 2 <= n1; n += 2) NAME##_##f##_23(w, n, a, r, y, ldy);                      \
        for (; n < n1; n++) NAME##_##f##_13(w, n, a, r, y, ldy);                                    \
        break;                                                                                      \
    case 2:                                                                                         \
        for (n = n0; n + 2 <= n1; n += 2) NAME##_##f##_22(w, n, a, r, y, ldy);                      \
        for (; n < n1; n++) NAME##_##f##_12(w, n, a, r, y, ldy);                                    \
        break;                                                                                      \
    case 1:                                                                                         \
        for (n = n0; n + 4 <= n1; n += 4) NAME##_##f##_41(w, n, a, r, y, ldy);                      \
        for (; n < n1; n++) NAME##_##f##_11(w, n, a, r, y, ldy);                                    \
        break;                                                                                      \
    }                                                                                               \
}
#define TF_KKERNELS(NAME, ATTR, R8)                                                                  \
TF_KFORMAT(NAME, ATTR, k4, TF_K4, R8)                                                                \
TF_KFORMAT(NAME, ATTR, k5, TF_K5, R8)                                                                \
TF_KFORMAT(NAME, ATTR, k6, TF_K6, R8)                                                                \
ATTR static void NAME##_rows(const tf_weight *w, int n0, int n1, const tf_acts *a, float *y, int ldy) { \
    if (w->fmt == TF_K4) NAME##_k4(w, n0, n1, a, y, ldy);                                           \
    else if (w->fmt == TF_K5) NAME##_k5(w, n0, n1, a, y, ldy);                                      \
    else NAME##_k6(w, n0, n1, a, y, ldy);                                                           \
}

TF_AVX2 TF_INLINE __m256i dpw_avx2(__m256i acc, __m256i p, __m256i s) {
    return _mm256_add_epi32(acc, _mm256_madd_epi16(p, s));
}
TF_VNNI TF_INLINE __m256i dpw_vnni(__m256i acc, __m256i p, __m256i s) {
    return _mm256_dpwssd_epi32(acc, p, s);
}
TF_KTILE(ktile_avx2, TF_AVX2, dpw_avx2)
TF_KTILE(ktile_vnni, TF_VNNI, dpw_vnni)
TF_KKERNELS(ktile_avx2, TF_AVX2, 0)
TF_KKERNELS(ktile_vnni, TF_VNNI, 1)
#endif

/* ---------------------------------------------------------------- NEON */
#ifdef TF_NEON
/* 16 values of block b from byte offset o (0 or 16) of the block's 32, as signed int8 */
static inline int8x16_t kunpack_neon(int F, const uint8_t *q, int b, int o) {
    uint8x16_t m4 = vdupq_n_u8(15);
    if (F == TF_K6) {
        int half = b / 4, t = b % 4;
        uint8x16_t l = vld1q_u8(q + K6_QL + 64 * half + 32 * (t & 1) + o);
        uint8x16_t x = vld1q_u8(q + K6_QH + 32 * half + o);
        l = t < 2 ? vandq_u8(l, m4) : vshrq_n_u8(l, 4);
        x = vandq_u8(vshlq_u8(x, vdupq_n_s8((int8_t)(-2 * t))), vdupq_n_u8(3));
        return vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(l, vshlq_n_u8(x, 4))), vdupq_n_s8(32));
    }
    uint8x16_t v = vld1q_u8(q + (F == TF_K5 ? K5_QS : K4_QS) + 32 * (b / 2) + o);
    v = b % 2 ? vshrq_n_u8(v, 4) : vandq_u8(v, m4);
    if (F == TF_K5) {
        uint8x16_t x = vandq_u8(vshlq_u8(vld1q_u8(q + K5_QH + o), vdupq_n_s8((int8_t)-b)), vdupq_n_u8(1));
        v = vorrq_u8(v, vshlq_n_u8(x, 4));
    }
    return vreinterpretq_s8_u8(v);
}

static void krows_neon(const tf_weight *w, int n0, int n1, const tf_acts *a, float *y, int ldy) {
    int F = w->fmt;
    int64_t k = w->k, nsb = k / 256;
    for (int64_t n = n0; n < n1; n++)
        for (int64_t r = 0; r < a->rows; r++) {
            float acc = 0.0f;
            for (int64_t j = 0; j < nsb; j++) {
                const uint8_t *q = kbits(w, n, j), *meta = kmeta(w, n, j);
                const int8_t *xq = a->qk + r * k + j * 256;
                int c[16];
                kcodes(w, meta, c);
                int32x4_t is = vdupq_n_s32(0);
                for (int b = 0; b < 8; b++) {
                    int32x4_t lo = dot4(kunpack_neon(F, q, b, 0), vld1q_s8(xq + 32 * b));
                    int32x4_t hi = dot4(kunpack_neon(F, q, b, 16), vld1q_s8(xq + 32 * b + 16));
                    is = vmlaq_n_s32(is, lo, c[b]);
                    is = vmlaq_n_s32(is, hi, F == TF_K6 ? c[8 + b] : c[b]);
                }
                float xs = a->sk[r * nsb + j];
                acc = fmaf((float)vaddvq_s32(is), xs * kscale(w, meta), acc);
                if (F != TF_K6)
                    acc = fmaf((float)kmin_sum(c, a->bs + (r * nsb + j) * 16), xs * kmin_scale(meta), acc);
            }
            y[r * ldy + n] = acc;
        }
}
#endif

/* ---------------------------------------------------------------- dispatch */

void tf_kdot_rows(const tf_weight *w, int n0, int n1, const tf_acts *a, float *y, int ldy) {
    switch (tf_isa()) {
#ifdef TF_X86
    case 1: ktile_avx2_rows(w, n0, n1, a, y, ldy); return;
    case 2: ktile_vnni_rows(w, n0, n1, a, y, ldy); return;
#endif
#ifdef TF_NEON
    case 3: krows_neon(w, n0, n1, a, y, ldy); return;
#endif
    default: krows_ref(w, n0, n1, a, y, ldy);
    }
}

/* One row as fp32: q * (D * code) (+ Dm * mcode), as quant.dequantize computes it. */
void tf_kdequant_row(const tf_weight *w, int n, float *out) {
    for (int64_t j = 0; j < w->k / 256; j++) {
        const uint8_t *q = kbits(w, n, j), *meta = kmeta(w, n, j);
        int c[16];
        kcodes(w, meta, c);
        float D = kscale(w, meta), Dm = w->fmt == TF_K6 ? 0.0f : kmin_scale(meta);
        for (int e = 0; e < 256; e++) {
            float v = (float)kq_at(w->fmt, q, e) * (D * (float)kcode_at(w->fmt, c, e));
            if (w->fmt != TF_K6) v = v + Dm * (float)c[8 + e / 32];
            out[j * 256 + e] = v;
        }
    }
}
