/* The eight fp32 lanes every reduction is written in, and the x86 clones of
 * plain-C loops.  Lane-wise IEEE operations give the same bits at any vector
 * width, so a clone changes only the speed. */
#ifndef TF_LANES_H
#define TF_LANES_H

#include <stdint.h>
#include <string.h>

#define TF_INLINE static inline __attribute__((always_inline))

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define TF_X86 1
#define TF_AVX2 __attribute__((target("avx2,fma,f16c")))
#define TF_VNNI __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")))
#define TF_UNROLL _Pragma("GCC unroll 4")
/* An integer sum's running value, made to exist in a register here: without it GCC
 * regroups a long unrolled sum into a tree whose leaves wait on the stack (the AVX2
 * tiles spilled a vector per product).  Integer sums are exact in any grouping. */
#if defined(__GNUC__)
#define TF_IN_REGISTER(v) __asm__("" : "+x"(v))
#else
#define TF_IN_REGISTER(v) (void)0
#endif

/* The lines of p, p + 64, ... below p + bytes: every line of a record but, where records
 * are not line-aligned, its last one, which the next record's prefetch asks for.  With
 * `bytes` a constant of the caller's shape the loop unrolls into bare prefetches (an
 * aligned walk cost the 8-row tiles 4%). */
TF_INLINE void prefetch_span(const void *p, int64_t bytes) {
    for (int64_t i = 0; i < bytes; i += 64) _mm_prefetch((const char *)p + i, _MM_HINT_T0);
}
/* The same lines into L2 only (a core keeps more L2 misses in flight than L1 ones). */
TF_INLINE void prefetch_span_l2(const void *p, int64_t bytes) {
    for (int64_t i = 0; i < bytes; i += 64) _mm_prefetch((const char *)p + i, _MM_HINT_T1);
}
#endif

/* A row's values v of outputs lo..lo+size-1, stored where they fall inside [n0, n1)
 * (the grouped formats compute whole groups; a thread or a part owns a range). */
static inline void tf_store_span(float *yr, int64_t lo, int size, int n0, int n1, const float *v) {
    for (int t = 0; t < size; t++)
        if (lo + t >= n0 && lo + t < n1) yr[lo + t] = v[t];
}

#ifdef TF_X86
/* Eight outputs from lo: one vector store when all lie inside [n0, n1), else lane by lane. */
TF_AVX2 TF_INLINE void tf_store8(float *yr, int64_t lo, int n0, int n1, __m256 v) {
    if (lo >= n0 && lo + 8 <= n1) _mm256_storeu_ps(yr + lo, v);
    else {
        float t[8];
        _mm256_storeu_ps(t, v);
        tf_store_span(yr, lo, 8, n0, n1, t);
    }
}
#endif

#if defined(__aarch64__) || defined(__ARM_NEON)
#include <arm_neon.h>
#define TF_NEON 1

/* p plus four int32 lanes, lane l the exact sum of the products of int8 elements 4l..4l+3. */
static inline int32x4_t dot4(int32x4_t p, int8x16_t w, int8x16_t x) {
#ifdef __ARM_FEATURE_DOTPROD
    return vdotq_s32(p, w, x);
#else
    int16x8_t lo = vmull_s8(vget_low_s8(w), vget_low_s8(x));
    int16x8_t hi = vmull_s8(vget_high_s8(w), vget_high_s8(x));
    return vaddq_s32(p, vpaddq_s32(vpaddlq_s16(lo), vpaddlq_s16(hi)));
#endif
}
#endif

#if defined(TF_X86) && defined(__linux__) && defined(__GNUC__)
#define TF_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define TF_CLONES
#endif

/* Call the path for the instruction set in use (tf_isa(): 1 AVX2, 2 AVX-512 VNNI, 3
 * NEON, else the scalar reference), each with the arguments ARGS. */
#if defined(TF_X86)
#define TF_BY_ISA(REF, AVX2, VNNI, NEON, ARGS) \
    do { int isa_ = tf_isa(); if (isa_ == 1) AVX2 ARGS; else if (isa_ == 2) VNNI ARGS; else REF ARGS; } while (0)
#elif defined(TF_NEON)
#define TF_BY_ISA(REF, AVX2, VNNI, NEON, ARGS) do { if (tf_isa() == 3) NEON ARGS; else REF ARGS; } while (0)
#else
#define TF_BY_ISA(REF, AVX2, VNNI, NEON, ARGS) REF ARGS
#endif

/* lanes8's fixed add tree */
static inline float tree8(const float *a) {
    return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
}

typedef float v8f __attribute__((vector_size(32)));

static inline v8f load8(const float *p) {
    v8f v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline float tree8v(v8f v) {
    float a[8];
    memcpy(a, &v, sizeof a);
    return tree8(a);
}

#endif
