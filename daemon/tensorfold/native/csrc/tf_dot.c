/* Quantized linear: activation quantization (definitions in tf_kernels.h), the
 * 16-bit weights' fp32 dots, the instruction set in use, and the dispatch to
 * the block formats (tf_bdot.c) and the K formats (tf_kdot.c). */
#include "tf_dot.h"
#include "tf_lanes.h"

#include <math.h>
#include <string.h>

/* ---------------------------------------------------------------- activations */

static inline float rne(float x) {        /* round half to even for |x| < 2^22 */
    return (x + 12582912.0f) - 12582912.0f;
}

/* d = amax/127 and its inverse (both 0 when the span is zero) */
static inline float scale_of(float amax, float *id) {
    float d = amax / 127.0f;
    *id = d != 0.0f ? 1.0f / d : 0.0f;
    if (*id > 3.0e38f) { d = 0.0f; *id = 0.0f; }     /* amax below ~4e-37: the span is zero */
    return d;
}

/* d of x[0..n) (the largest |x|; a NaN is skipped) */
static float act_scale(const float *x, int n, float *id) {
    float amax = 0.0f;
    for (int i = 0; i < n; i++) {
        float a = fabsf(x[i]);
        amax = a > amax ? a : amax;
    }
    return scale_of(amax, id);
}

/* q = rne(x * id) clipped to +-127 for n inputs, 0 where that is a NaN (a NaN input, or
 * an infinity times 0: the span's amax skipped it); returns the sum of q (exact) */
static int32_t act_quant(const float *x, int n, float id, int8_t *q) {
    int32_t t = 0;
    for (int i = 0; i < n; i++) {
        float v = rne(x[i] * id);
        v = v > 127.0f ? 127.0f : (v < -127.0f ? -127.0f : v);
        v = v == v ? v : 0.0f;
        q[i] = (int8_t)v;
        t += (int32_t)v;
    }
    return t;
}

/* ---- the same rule on x86, eight lanes at a time (max, multiply, add and the clip
 * are lane-wise IEEE operations, and the maximum of a set is one value in any order) */
#ifdef TF_X86
/* the largest |x| of n (a multiple of 8) floats; a NaN lane is skipped, as above */
TF_AVX2 static float amax_avx2(const float *x, int n) {
    const __m256 mag = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    __m256 m = _mm256_setzero_ps();
    for (int i = 0; i < n; i += 8) m = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(x + i), mag), m);
    float t[8], amax = 0.0f;
    _mm256_storeu_ps(t, m);
    for (int i = 0; i < 8; i++) amax = t[i] > amax ? t[i] : amax;
    return amax;
}

TF_AVX2 TF_INLINE __m256i quant8_avx2(const float *x, __m256 id) {
    const __m256 c = _mm256_set1_ps(12582912.0f), hi = _mm256_set1_ps(127.0f);
    __m256 v = _mm256_sub_ps(_mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(x), id), c), c);
    v = _mm256_and_ps(v, _mm256_cmp_ps(v, v, _CMP_ORD_Q));                /* a NaN to 0 */
    return _mm256_cvtps_epi32(_mm256_max_ps(_mm256_min_ps(v, hi), _mm256_sub_ps(_mm256_setzero_ps(), hi)));
}

TF_AVX2 TF_INLINE int32_t hsum8(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
    return _mm_cvtsi128_si32(_mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1)));
}

/* 32 inputs quantized with id into q, their dwords in the order `order` picks from the
 * natural one; the sums of inputs 0..15 and 16..31 */
TF_AVX2 TF_INLINE void quant32_avx2(const float *x, __m256 id, __m256i order, int8_t *q, uint8_t *qu,
                                    int32_t *s0, int32_t *s1) {
    __m256i a = quant8_avx2(x, id), b = quant8_avx2(x + 8, id), c = quant8_avx2(x + 16, id), d = quant8_avx2(x + 24, id);
    *s0 = hsum8(_mm256_add_epi32(a, b));
    *s1 = hsum8(_mm256_add_epi32(c, d));
    /* packs interleave 128-bit lanes: dwords a0-3 b0-3 c0-3 d0-3 a4-7 b4-7 c4-7 d4-7 */
    __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(a, b), _mm256_packs_epi32(c, d));
    p = _mm256_permutevar8x32_epi32(p, order);
    _mm256_storeu_si256((__m256i *)q, p);
    if (qu) _mm256_storeu_si256((__m256i *)qu, _mm256_xor_si256(p, _mm256_set1_epi8((char)0x80)));
}

TF_AVX2 static void quantize_row_avx2(const float *x, int k, int8_t *q, float *s, int32_t *base, float *xsum) {
    const __m256i natural = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for (int b = 0; b < k / 32; b++) {
        float id;
        s[b] = scale_of(amax_avx2(x + b * 32, 32), &id);
        int32_t s0, s1;
        quant32_avx2(x + b * 32, _mm256_set1_ps(id), natural, q + b * 32, NULL, &s0, &s1);
        base[b] = -128 * (s0 + s1);
        xsum[b] = s[b] * (float)(s0 + s1);
    }
}

/* ---- AVX-512: a block's 32 inputs as two vectors, and the scales of sixteen blocks at a
 * time (vdivps rounds as divss does), so the divisions of one block no longer wait on
 * those of the one before: the same rule, the same bits */
TF_VNNI TF_INLINE float amax32_512(const float *x) {
    __m512 m = _mm512_max_ps(_mm512_abs_ps(_mm512_loadu_ps(x)), _mm512_setzero_ps());   /* a NaN lane: 0 */
    m = _mm512_max_ps(_mm512_abs_ps(_mm512_loadu_ps(x + 16)), m);
    return _mm512_reduce_max_ps(m);                                   /* no NaN left: any order */
}

TF_VNNI TF_INLINE __m512i quant16_512(const float *x, __m512 id) {
    const __m512 c = _mm512_set1_ps(12582912.0f), hi = _mm512_set1_ps(127.0f);
    __m512 v = _mm512_sub_ps(_mm512_add_ps(_mm512_mul_ps(_mm512_loadu_ps(x), id), c), c);
    v = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(v, v, _CMP_ORD_Q), v);          /* a NaN to 0 */
    return _mm512_cvtps_epi32(_mm512_max_ps(_mm512_min_ps(v, hi), _mm512_sub_ps(_mm512_setzero_ps(), hi)));
}

TF_VNNI static void quantize_row_512(const float *x, int k, int8_t *q, float *s, int32_t *base, float *xsum) {
    const __m512 zero = _mm512_setzero_ps();
    for (int b0 = 0; b0 < k / 32; b0 += 16) {
        int n = k / 32 - b0 < 16 ? k / 32 - b0 : 16;
        __mmask16 live = (__mmask16)((1u << n) - 1);
        float amax[16] = {0}, id[16];
        for (int b = 0; b < n; b++) amax[b] = amax32_512(x + (b0 + b) * 32);
        __m512 d = _mm512_div_ps(_mm512_loadu_ps(amax), _mm512_set1_ps(127.0f));   /* scale_of, lane by lane */
        __m512 inv = _mm512_maskz_div_ps(_mm512_cmp_ps_mask(d, zero, _CMP_NEQ_OQ), _mm512_set1_ps(1.0f), d);
        __mmask16 tiny = _mm512_cmp_ps_mask(inv, _mm512_set1_ps(3.0e38f), _CMP_GT_OQ);
        _mm512_mask_storeu_ps(s + b0, live, _mm512_mask_mov_ps(d, tiny, zero));
        _mm512_storeu_ps(id, _mm512_mask_mov_ps(inv, tiny, zero));
        for (int b = 0; b < n; b++) {
            const float *xb = x + (b0 + b) * 32;
            __m512i lo = quant16_512(xb, _mm512_set1_ps(id[b])), hi = quant16_512(xb + 16, _mm512_set1_ps(id[b]));
            _mm_storeu_si128((__m128i *)(q + (b0 + b) * 32), _mm512_cvtepi32_epi8(lo));
            _mm_storeu_si128((__m128i *)(q + (b0 + b) * 32 + 16), _mm512_cvtepi32_epi8(hi));
            int32_t sum = _mm512_reduce_add_epi32(_mm512_add_epi32(lo, hi));     /* |sum| <= 32 * 127 */
            base[b0 + b] = -128 * sum;
            xsum[b0 + b] = s[b0 + b] * (float)sum;
        }
    }
}

TF_AVX2 static void quantize_row_k_avx2(const float *x, int k, int8_t *q, float *s, int16_t *bs, uint8_t *qu) {
    const __m256i korder = _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7);   /* natural dword 4h + m at 2m + h */
    for (int j = 0; j < k / 256; j++) {
        float id;
        s[j] = scale_of(amax_avx2(x + j * 256, 256), &id);
        for (int b = 0; b < 8; b++) {
            int32_t s0, s1;
            quant32_avx2(x + j * 256 + b * 32, _mm256_set1_ps(id), korder, q + j * 256 + b * 32,
                         qu ? qu + j * 256 + b * 32 : NULL, &s0, &s1);
            bs[j * 16 + b] = (int16_t)s0;
            bs[j * 16 + 8 + b] = (int16_t)s1;
        }
    }
}
#endif

float tf_quantize_head(const float *x, int n, int8_t *q) {
    float id, d = act_scale(x, n, &id);
    act_quant(x, n, id, q);
    return d;
}

void tf_quantize_row(const float *x, int k, int8_t *q, float *s, int32_t *base, float *xsum) {
#ifdef TF_X86
    if (tf_isa() == 2) { quantize_row_512(x, k, q, s, base, xsum); return; }
    if (tf_isa() == 1) { quantize_row_avx2(x, k, q, s, base, xsum); return; }
#endif
    for (int b = 0; b < k / 32; b++) {
        float id;
        s[b] = act_scale(x + b * 32, 32, &id);
        int32_t sum = act_quant(x + b * 32, 32, id, q + b * 32);     /* |sum| <= 32 * 127 */
        base[b] = -128 * sum;
        xsum[b] = s[b] * (float)sum;
    }
}

void tf_quantize_row_k(const float *x, int k, int8_t *q, float *s, int16_t *bs, uint8_t *qu) {
#ifdef TF_X86
    if (tf_isa() >= 1) { quantize_row_k_avx2(x, k, q, s, bs, qu); return; }
#endif
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
    if (qu)
        for (int i = 0; i < k; i++) qu[i] = (uint8_t)(q[i] + 128);
}

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
    if (w->fmt == TF_BF16) rows_bf16(w, n0, n1, x, a->rows, y, ldy);
    else if (w->fmt >= TF_K4) tf_kdot_rows(w, n0, n1, a, y, ldy);
    else tf_bdot_rows(w, n0, n1, a, y, ldy);
}

/* One row of a weight as fp32 (embedding lookup). */
void tf_dequant_row(const tf_weight *w, int n, float *out) {
    if (w->fmt == TF_BF16) {
        const uint16_t *wr = (const uint16_t *)w->q + (int64_t)n * w->k;
        for (int i = 0; i < w->k; i++) out[i] = bf16_f32(wr[i]);
    } else if (w->fmt >= TF_K4) tf_kdequant_row(w, n, out);
    else tf_bdequant_row(w, n, out);
}
