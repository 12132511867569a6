/* The keyed sampler's integer masses (tensorfold/engine/sampler.py, token_masses): the
 * same float64 operations, one rounding each, in the same order, so every mass has the
 * bits the torch reference gives it; the SIMD paths do each lane's operations alone, so
 * they give the scalar path's bits.  Compiled without contraction (-ffp-contract=off). */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "tf_dot.h"
#include "tf_lanes.h"
#include "tf_ops.h"

#define LOG2E 1.4426950408889634
#define LN2 0.6931471805599453
#define MIN_EXPONENT -64.0

/* 1/k! for k = 0..17, as Python computes 1.0 / math.factorial(k) (each correctly rounded) */
static const double COEFFS[18] = {
    1.0, 1.0, 0.5, 0.16666666666666666, 0.041666666666666664, 0.008333333333333333,
    0.001388888888888889, 0.0001984126984126984, 2.48015873015873e-05, 2.7557319223985893e-06,
    2.755731922398589e-07, 2.505210838544172e-08, 2.08767569878681e-09, 1.6059043836821613e-10,
    1.1470745597729725e-11, 7.647163731819816e-13, 4.779477332387385e-14, 2.8114572543455206e-15};

/* mass = round_half_even(exp(d) * 2^40) for d = logit / temperature - z_max <= 0, with
 * exp(d) = 2^e * p(g): t = max(d, -64) * log2(e), e = floor(t), g = (t - e) * ln 2, p the
 * Taylor series in Horner form; scaling by 2^(e + 40) is exact (-93 <= e <= 0).  A NaN
 * logit (or every logit -inf, z_max too) has mass 0. */
static void masses_ref(const float *x, int64_t n, double temperature, double z_max, int64_t *mass) {
    for (int64_t i = 0; i < n; i++) {
        double d = (double)x[i] / temperature - z_max;
        if (d != d) { mass[i] = 0; continue; }
        double t = (d < MIN_EXPONENT ? MIN_EXPONENT : d) * LOG2E;
        double e = floor(t), g = (t - e) * LN2, p = COEFFS[17];
        for (int c = 16; c >= 0; c--) {
            p = p * g;
            p = p + COEFFS[c];
        }
        mass[i] = (int64_t)nearbyint(ldexp(p, (int)e + 40));
    }
}

#ifdef TF_X86
/* exact for integers 0 <= w < 2^52: w + 2^52's bits less 2^52's */
#define MAGIC 4503599627370496.0

/* Four vectors of four lanes at a time, their Horner chains interleaved. */
TF_AVX2 static void masses_avx2(const float *x, int64_t n, double temperature, double z_max, int64_t *mass) {
    const __m256d T = _mm256_set1_pd(temperature), Z = _mm256_set1_pd(z_max), lo = _mm256_set1_pd(MIN_EXPONENT);
    const __m256d l2e = _mm256_set1_pd(LOG2E), ln2 = _mm256_set1_pd(LN2), magic = _mm256_set1_pd(MAGIC);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256d d[4], e[4], g[4], p[4];
        _Pragma("GCC unroll 4") for (int u = 0; u < 4; u++) {
            d[u] = _mm256_sub_pd(_mm256_div_pd(_mm256_cvtps_pd(_mm_loadu_ps(x + i + 4 * u)), T), Z);
            __m256d t = _mm256_mul_pd(_mm256_max_pd(d[u], lo), l2e);      /* max(NaN, lo) = lo */
            e[u] = _mm256_floor_pd(t);
            g[u] = _mm256_mul_pd(_mm256_sub_pd(t, e[u]), ln2);
            p[u] = _mm256_set1_pd(COEFFS[17]);
        }
        _Pragma("GCC unroll 17") for (int c = 16; c >= 0; c--)
            _Pragma("GCC unroll 4") for (int u = 0; u < 4; u++)
                p[u] = _mm256_add_pd(_mm256_mul_pd(p[u], g[u]), _mm256_set1_pd(COEFFS[c]));
        _Pragma("GCC unroll 4") for (int u = 0; u < 4; u++) {
            __m128i bias = _mm_add_epi32(_mm256_cvtpd_epi32(e[u]), _mm_set1_epi32(1023 + 40));
            __m256d s = _mm256_castsi256_pd(_mm256_slli_epi64(_mm256_cvtepi32_epi64(bias), 52));   /* 2^(e + 40) */
            __m256d w = _mm256_round_pd(_mm256_mul_pd(p[u], s), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
            __m256i m = _mm256_sub_epi64(_mm256_castpd_si256(_mm256_add_pd(w, magic)), _mm256_castpd_si256(magic));
            __m256d nan = _mm256_cmp_pd(d[u], d[u], _CMP_UNORD_Q);
            m = _mm256_andnot_si256(_mm256_castpd_si256(nan), m);
            _mm256_storeu_si256((__m256i *)(mass + i + 4 * u), m);
        }
    }
    masses_ref(x + i, n - i, temperature, z_max, mass + i);
}
#endif

void tf_token_masses(const float *logits, int64_t n, double temperature, double z_max, int64_t *mass) {
#ifdef TF_X86
    if (tf_isa() >= 1) { masses_avx2(logits, n, temperature, z_max, mass); return; }
#endif
    masses_ref(logits, n, temperature, z_max, mass);
}
