/* The block formats (Q4A: GGUF's Q4_0, Q4_1, Q5_0, Q5_1; Q8: Q8_0 and weights
 * quantized at load), repacked in groups of sixteen outputs (tf_kernels.h): dot
 * products whose per-block integer part is exact (the "block dot"), so only the
 * per-block scaling is fp32.  One scalar reference and SIMD paths that reproduce
 * it bit for bit (AVX2, AVX-512 VNNI, NEON).
 *
 * Each 64-byte vector of a record holds the sixteen outputs' four inputs side by
 * side: one broadcast of four activation bytes feeds sixteen outputs, each
 * output's exact block total lands in its own int32 lane, and a block ends with
 * one fp32 multiply-add (two with a min) per sixteen outputs. */
#include "tf_ahead.h"
#include "tf_dot.h"
#include "tf_lanes.h"
#include "tf_ops.h"
#include "tf_pool.h"

#include <math.h>

enum { BG = 16, BQ4 = 256, BQ5 = 320, BQ8 = 512, B_HIGH = 256 };

static inline int bq_bytes(int fmt, int flags) { return fmt == TF_Q8 ? BQ8 : (flags & TF_HIGH) ? BQ5 : BQ4; }
static inline int bplanes(int flags) { return flags & TF_HAS_MIN ? 2 : 1; }
/* A Q4A weight without a min plane (GGUF's Q4_0, Q5_0) has the fixed offset 8 (16 with
 * TF_HIGH): its integer values are the stored q minus that, so the offset is part of
 * the block's exact integer total, which bstart gives from the activations' base
 * (-128 * the block's sum: a multiple of 128, so the division is exact). */
static inline int boffset_of(int q4, int high, int min) { return q4 && !min ? 8 << !!high : 0; }
static inline int boffset(int fmt, int flags) {
    return boffset_of(fmt == TF_Q4A, flags & TF_HIGH, flags & TF_HAS_MIN);
}
static inline int32_t bstart(int32_t base, int off) { return off ? base / (128 / off) : 0; }
static inline int bscale_bytes(int flags) { return (flags & TF_HALF) ? 2 : 4; }
static inline int bs_bytes(int flags) { return bplanes(flags) * BG * bscale_bytes(flags); }

/* group g's record of block b */
static inline const uint8_t *bbits(const tf_weight *w, int64_t g, int64_t b) {
    return w->q + (g * (w->k / 32) + b) * bq_bytes(w->fmt, w->flags);
}
static inline const uint8_t *bmeta(const tf_weight *w, int64_t g, int64_t b) {
    return (const uint8_t *)w->s + (g * (w->k / 32) + b) * bs_bytes(w->flags);
}

/* Where a record keeps output t's element e = 4j + i (the one statement of the layout
 * every path reads and the packer writes): byte bpos(t, e) of the 64-byte vector at
 * bvec_at (Q8: vector j; Q4A: vector j % 4, the low nibble for e < 16, the high for
 * e >= 16, so each dword of a GGUF block stays whole), and its fifth bit (TF_HIGH) at
 * bit e / 4 of the byte at bhigh_at(bpos): one 64-byte plane whose bit j completes
 * vector j's bytes, so a shift and a mask unpack it where the bytes lie. */
static inline int bpos(int t, int e) { return 4 * t + e % 4; }
static inline int bvec_at(int fmt, int e) { return 64 * (fmt == TF_Q8 ? e / 4 : e / 4 % 4); }
static inline int bhigh_at(int p) { return B_HIGH + p; }
/* the byte of output t's scale in plane p (0: d, 1: m) */
static inline int bscale_at(int flags, int p, int t) { return (p * BG + t) * bscale_bytes(flags); }

/* The integer value of output t's element e of a record. */
static inline int bq_at(const tf_weight *w, const uint8_t *rec, int t, int e) {
    int p = bpos(t, e), v = rec[bvec_at(w->fmt, e) + p];
    if (w->fmt == TF_Q8) return (int8_t)v;
    v = e < 16 ? v & 15 : v >> 4;
    if (w->flags & TF_HIGH) v |= ((rec[bhigh_at(p)] >> (e / 4)) & 1) << 4;
    return v - boffset(w->fmt, w->flags);
}

/* Output t's scale in plane p, exactly the fp32 value the encoding stores. */
static inline float bscale(const tf_weight *w, const uint8_t *meta, int p, int t) {
    const uint8_t *at = meta + bscale_at(w->flags, p, t);
    if (w->flags & TF_HALF) {
        uint16_t h;
        memcpy(&h, at, 2);
        return tf_h2f(h);
    }
    float f;
    memcpy(&f, at, 4);
    return f;
}

static inline int32_t x4(const int8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* ---------------------------------------------------------------- reference */

static void brows_ref(const tf_weight *w, int n0, int n1, const tf_acts *a, float *y, int ldy) {
    int64_t k = w->k, nb = k / 32;
    int mins = bplanes(w->flags) == 2;
    for (int64_t g = n0 / BG; g * BG < n1; g++)
        for (int64_t r = 0; r < a->rows; r++) {
            float acc[BG];
            for (int t = 0; t < BG; t++) {
                acc[t] = 0.0f;
                for (int64_t b = 0; b < nb; b++) {
                    const uint8_t *rec = bbits(w, g, b), *meta = bmeta(w, g, b);
                    const int8_t *xq = a->q + r * k + b * 32;
                    float xs = a->s[r * nb + b];
                    int32_t P = 0;
                    for (int e = 0; e < 32; e++) P += bq_at(w, rec, t, e) * xq[e];
                    acc[t] = fmaf((float)P, xs * bscale(w, meta, 0, t), acc[t]);
                    if (mins) acc[t] = fmaf(a->xsum[r * nb + b], bscale(w, meta, 1, t), acc[t]);
                }
            }
            tf_store_span(y + r * ldy, BG * g, BG, n0, n1, acc);
        }
}

/* ---------------------------------------------------------------- x86 */
#ifdef TF_X86

/* A tile's walk over group g's records, a block at a time, for the shape's format (Q4,
 * HIGH, MIN): the record sizes are constants of the shape and the rest is read once,
 * so nothing of the format is decided again block by block.  Records run in memory
 * in the order a pass reads them (a group's blocks, then the next group's), so on a
 * group's first pass over a chunk of rows the bytes BDIST ahead are prefetched,
 * values and scales alike (2 KB: Qwen2.5-Coder-0.5B Q4_K_M on a Zen 4 core, 1 row,
 * 18.5 ms a step with 8 KB, 18.0 with 4, 17.3 with 2; SmolLM2 4.6 -> 4.4).  It declares
 * fmt, flags, QB, SB, rec and meta (block 0's), and rows r0.. of the activations from
 * xq0, xs0, xsum0 and base0.  A tile of BFAR_ROWS rows or more spends ~90 cycles a
 * block, so bits asked for 2 KB on came in late: it also asks for the bits BFAR on, into
 * L2 (Qwen2.5-Coder-0.5B's Q8_0 head, 151936 x 896, 8 rows, 1 thread: 8.27-8.75 ms,
 * 6.81-6.86 with 6 KB, 6.59-6.65 with 12; its 8-row step 34.7-36.9 -> 32.5-32.7 ms, and
 * 32.5-33.0 with 24 KB; 1 KB more or less for the L1 distance of these tiles was slower).
 * Smaller tiles ask for theirs BNEAR on, into L2: a Q8_0 record is 512 bytes, so 2 KB
 * is four records (tf_linear alone, 1 row, alternated in one process: the 0.5B's head
 * 6.0 -> 5.2 ms on one thread, 4.5-5.2 -> 4.1 on two; SmolLM2's, 49152 x 576, 1.81 ->
 * 1.48 and 1.13-1.24 -> 1.10; 4 to 8 KB alike, 16 slower; Q4_1 unchanged). */
#ifndef TF_BDIST
#define TF_BDIST 2048
#endif
enum { BFAR = 12288, BFAR_ROWS = 4, BNEAR = 4096 };
#define BLOCK_WALK(w, g, a, r0, k, nb, Q4, HIGH, MIN)                                                \
    const int fmt = Q4 ? TF_Q4A : TF_Q8, flags = (w)->flags;                                        \
    const int QB = Q4 ? (HIGH ? BQ5 : BQ4) : BQ8, SB = (MIN ? 2 : 1) * BG * bscale_bytes(flags);    \
    const int64_t meta_ahead = TF_BDIST / QB * SB;                                                  \
    const uint8_t *rec = bbits(w, g, 0), *meta = bmeta(w, g, 0);                                    \
    const int8_t *xq0 = (a)->q + (int64_t)(r0) * (k);                                               \
    const float *xs0 = (a)->s + (int64_t)(r0) * (nb), *xsum0 = (a)->xsum + (int64_t)(r0) * (nb);    \
    const int32_t *base0 = (a)->base + (int64_t)(r0) * (nb);                                        \
    (void)base0
/* A Q4A total's start for rows' block `at`: the fixed offset's part, or 0 with a min. */
#define BSTART(Q4, HIGH, MIN, at) bstart(base0[at], boffset_of(Q4, HIGH, MIN))
#define BLOCK_AHEAD(ahead, rec, meta, RT)                                                            \
    do {                                                                                            \
        if (ahead) {                                                                                \
            prefetch_span((rec) + TF_BDIST, QB);                                                    \
            prefetch_span_l2((rec) + (RT >= BFAR_ROWS ? BFAR : BNEAR), QB);                         \
            prefetch_span((meta) + meta_ahead, SB);                                                 \
        }                                                                                           \
        TF_AHEAD_STEP();                  /* the next layer's KV (tf_ahead.h, TF_AHEAD_TAKE) */   \
    } while (0)

/* Vector j's fifth bits (TF_HIGH) as bytes 0 or 16, from the plane's bytes h: bit j to
 * bit 4 (16-bit shifts keep it in its byte once masked), j a constant of the caller. */
TF_AVX2 TF_INLINE __m256i bhigh_avx2(__m256i h, int j) {
    const __m256i bit4 = _mm256_set1_epi8(16);
    if (j < 4) return _mm256_and_si256(_mm256_slli_epi16(h, 4 - j), bit4);
    return _mm256_and_si256(j == 4 ? h : _mm256_srli_epi16(h, j - 4), bit4);
}

/* Eight outputs' (half o of a group) scales of plane p. */
TF_AVX2 TF_INLINE __m256 bscale8(const uint8_t *meta, int flags, int p, int o) {
    const uint8_t *at = meta + bscale_at(flags, p, 8 * o);
    if (flags & TF_HALF) return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)at));
    return _mm256_loadu_ps((const float *)at);
}

/* The block dot's fp32 steps for one row: P the exact totals, xs and xsum the row's
 * block scale and its product with the block's q sum. */
#define TF_BFINISH(ACC, P, XS, XSUM, D, M, MIN, FMA, MUL, SET1)                                     \
    do {                                                                                            \
        ACC = FMA(P, MUL(SET1(XS), D), ACC);                                                        \
        if (MIN) ACC = FMA(SET1(XSUM), M, ACC);                                                     \
    } while (0)

/* AVX2: half o (outputs 8o..8o+7) of group g by RT rows, a block at a time, in two
 * parts of four vectors (Q4A: the low, then the high nibbles).  Q4A: each vector's
 * maddubs pair sums (at most 2 * 31 * 127) of the part added in int16, then one madd;
 * Q8: maddubs of |w| and x with w's sign, one madd per vector. */
TF_AVX2 TF_INLINE void btile_avx2(const tf_weight *w, int64_t g, int o, const tf_acts *a, int r0, int RT,
                                  float *y, int ldy, int n0, int n1, int ahead, int Q4, int HIGH, int MIN) {
    int64_t k = w->k, nb = k / 32;
    const __m256i m4 = _mm256_set1_epi8(15), ones = _mm256_set1_epi16(1);
    BLOCK_WALK(w, g, a, r0, k, nb, Q4, HIGH, MIN);
    ahead = ahead && o == 0;
    TF_AHEAD_TAKE(ahead && RT >= BFAR_ROWS);
    __m256 acc[8];                  /* RT <= 4 (shapes past the row tile are never called) */
    _Pragma("GCC unroll 4") for (int r = 0; r < RT; r++) acc[r] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++, rec += QB, meta += SB) {
        BLOCK_AHEAD(ahead, rec, meta, RT);
        __m256i P[8];
        _Pragma("GCC unroll 4") for (int r = 0; r < RT; r++) P[r] = _mm256_set1_epi32(BSTART(Q4, HIGH, MIN, r * nb + b));
        _Pragma("GCC unroll 2") for (int part = 0; part < 2; part++) {
            __m256i v[4], h = HIGH ? _mm256_loadu_si256((const __m256i *)(rec + bhigh_at(32 * o))) : m4;
            _Pragma("GCC unroll 4") for (int m = 0; m < 4; m++) {
                int e = 16 * part + 4 * m;
                v[m] = _mm256_loadu_si256((const __m256i *)(rec + bvec_at(fmt, e) + 32 * o));
                if (Q4) {
                    v[m] = part ? _mm256_and_si256(_mm256_srli_epi16(v[m], 4), m4) : _mm256_and_si256(v[m], m4);
                    if (HIGH) v[m] = _mm256_or_si256(v[m], bhigh_avx2(h, e / 4));
                }
            }
            _Pragma("GCC unroll 4") for (int r = 0; r < RT; r++) {
                const int8_t *xq = xq0 + r * k + b * 32 + 16 * part;
                if (Q4) {
                    __m256i p16 = _mm256_maddubs_epi16(v[0], _mm256_set1_epi32(x4(xq)));
                    _Pragma("GCC unroll 3") for (int m = 1; m < 4; m++)
                        p16 = _mm256_add_epi16(p16, _mm256_maddubs_epi16(v[m], _mm256_set1_epi32(x4(xq + 4 * m))));
                    P[r] = _mm256_add_epi32(P[r], _mm256_madd_epi16(p16, ones));
                    TF_IN_REGISTER(P[r]);
                } else {
                    _Pragma("GCC unroll 4") for (int m = 0; m < 4; m++) {
                        __m256i x = _mm256_sign_epi8(_mm256_set1_epi32(x4(xq + 4 * m)), v[m]);
                        P[r] = _mm256_add_epi32(P[r], _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_sign_epi8(v[m], v[m]), x), ones));
                        TF_IN_REGISTER(P[r]);
                    }
                }
            }
        }
        __m256 d = bscale8(meta, flags, 0, o), mn = MIN ? bscale8(meta, flags, 1, o) : d;
        _Pragma("GCC unroll 4") for (int r = 0; r < RT; r++) {
            int64_t at = r * nb + b;
            TF_BFINISH(acc[r], _mm256_cvtepi32_ps(P[r]), xs0[at], xsum0[at], d, mn, MIN,
                       _mm256_fmadd_ps, _mm256_mul_ps, _mm256_set1_ps);
        }
    }
    TF_AHEAD_PUT();
    _Pragma("GCC unroll 4") for (int r = 0; r < RT; r++) tf_store8(y + (int64_t)(r0 + r) * ldy, BG * g + 8 * o, n0, n1, acc[r]);
}

/* Sixteen outputs' scales of plane p. */
TF_VNNI TF_INLINE __m512 bscale16(const uint8_t *meta, int flags, int p) {
    const uint8_t *at = meta + bscale_at(flags, p, 0);
    if (flags & TF_HALF) return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)at));
    return _mm512_loadu_ps((const float *)at);
}

/* p + dpbusd(v, the four bytes at x broadcast): the broadcast folded into the
 * instruction's memory operand (GCC emits a separate broadcast for the intrinsic,
 * which costs a cycle and a half a row and block). */
typedef int32_t tf_i32_alias __attribute__((may_alias));
TF_VNNI TF_INLINE __m512i dpbusd_x4(__m512i p, __m512i v, const int8_t *x) {
#if defined(__GNUC__)
    __asm__("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(p) : "v"(v), "m"(*(const tf_i32_alias *)x));
    return p;
#else
    return _mm512_dpbusd_epi32(p, v, _mm512_set1_epi32(x4(x)));
#endif
}

/* AVX-512 VNNI: group g by RT rows, a block at a time: the eight vectors unpacked once
 * (Q8 offset to unsigned by 128, taken back exactly by starting the total at -128 * the
 * row's q sum, where it was an fp32 multiply-add on the multiply pipe: a tenth of the
 * Q8 tile's; a Q4A's fixed offset likewise), one dpbusd per vector and row, in two
 * chains of four a row (exact integers, added once: SmolLM2's 8-row step 1.5% shorter
 * than with one chain of eight). */
TF_VNNI TF_INLINE void btile_vnni(const tf_weight *w, int64_t g, const tf_acts *a, int r0, int RT,
                                  float *y, int ldy, int n0, int n1, int ahead, int Q4, int HIGH, int MIN) {
    int64_t k = w->k, nb = k / 32;
    const __m512i m4 = _mm512_set1_epi8(15);
    BLOCK_WALK(w, g, a, r0, k, nb, Q4, HIGH, MIN);
    TF_AHEAD_TAKE(ahead && RT >= BFAR_ROWS);
    __m512 acc[8];
    _Pragma("GCC unroll 8") for (int r = 0; r < RT; r++) acc[r] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++, rec += QB, meta += SB) {
        BLOCK_AHEAD(ahead, rec, meta, RT);
        __m512i v[8];
        _Pragma("GCC unroll 8") for (int j = 0; j < 8; j++) {
            __m512i raw = _mm512_loadu_si512((const void *)(rec + bvec_at(fmt, 4 * j)));
            if (!Q4) v[j] = _mm512_xor_si512(raw, _mm512_set1_epi8((char)0x80));
            else v[j] = j < 4 ? _mm512_and_si512(raw, m4) : _mm512_and_si512(_mm512_srli_epi16(raw, 4), m4);
            if (HIGH) {
                __m512i h = _mm512_loadu_si512((const void *)(rec + bhigh_at(0)));
                v[j] = _mm512_mask_add_epi8(v[j], _mm512_test_epi8_mask(h, _mm512_set1_epi8((char)(1 << j))), v[j],
                                            _mm512_set1_epi8(16));
            }
        }
        __m512 d = bscale16(meta, flags, 0), mn = MIN ? bscale16(meta, flags, 1) : d;
        _Pragma("GCC unroll 8") for (int r = 0; r < RT; r++) {
            int64_t at = r * nb + b;
            const int8_t *xq = xq0 + r * k + b * 32;
            __m512i p = _mm512_set1_epi32(Q4 ? BSTART(Q4, HIGH, MIN, at) : base0[at]), p1 = _mm512_setzero_si512();
            _Pragma("GCC unroll 4") for (int j = 0; j < 8; j += 2) {
                p = dpbusd_x4(p, v[j], xq + 4 * j);
                p1 = dpbusd_x4(p1, v[j + 1], xq + 4 * j + 4);
            }
            __m512 P = _mm512_cvtepi32_ps(_mm512_add_epi32(p, p1));
            TF_BFINISH(acc[r], P, xs0[at], xsum0[at], d, mn, MIN, _mm512_fmadd_ps, _mm512_mul_ps, _mm512_set1_ps);
        }
    }
    TF_AHEAD_PUT();
    _Pragma("GCC unroll 8") for (int r = 0; r < RT; r++) {
        float *yr = y + (int64_t)(r0 + r) * ldy;
        if (g * BG >= n0 && g * BG + BG <= n1) _mm512_storeu_ps(yr + g * BG, acc[r]);
        else {
            float t[BG];
            _mm512_storeu_ps(t, acc[r]);
            tf_store_span(yr, BG * g, BG, n0, n1, t);
        }
    }
}

/* One function per tile shape and format, each register-allocated on its own. */
#define TF_BSHAPE(NAME, ATTR, f, Q4, HIGH, MIN, RT)                                                  \
ATTR __attribute__((noinline)) static void NAME##_##f##_##RT(                                       \
        const tf_weight *w, int64_t g, const tf_acts *a, int r, float *y, int ldy, int n0, int n1, int ahead) { \
    NAME##_group(w, g, a, r, RT, y, ldy, n0, n1, ahead, Q4, HIGH, MIN);                             \
}
/* Shapes: a group by RMAX rows, and by each smaller count for the last rows (tf_tiles). */
#define TF_BFORMAT(NAME, ATTR, f, Q4, HIGH, MIN, RMAX)                                               \
TF_BSHAPE(NAME, ATTR, f, Q4, HIGH, MIN, 1) TF_BSHAPE(NAME, ATTR, f, Q4, HIGH, MIN, 2)                \
TF_BSHAPE(NAME, ATTR, f, Q4, HIGH, MIN, 3) TF_BSHAPE(NAME, ATTR, f, Q4, HIGH, MIN, 4)                \
TF_BSHAPE(NAME, ATTR, f, Q4, HIGH, MIN, 5) TF_BSHAPE(NAME, ATTR, f, Q4, HIGH, MIN, 6)                \
TF_BSHAPE(NAME, ATTR, f, Q4, HIGH, MIN, 7) TF_BSHAPE(NAME, ATTR, f, Q4, HIGH, MIN, 8)                \
ATTR static void NAME##_##f(const tf_weight *w, int n0, int n1, const tf_acts *a, float *y, int ldy) { \
    static const tf_tile_fn shapes[9] = {0, NAME##_##f##_1, NAME##_##f##_2, NAME##_##f##_3, NAME##_##f##_4, \
                                    NAME##_##f##_5, NAME##_##f##_6, NAME##_##f##_7, NAME##_##f##_8}; \
    tf_tiles(shapes, BG, RMAX, w, n0, n1, a, y, ldy);                                               \
}
#define TF_BKERNELS(NAME, ATTR, RMAX)                                                                \
TF_BFORMAT(NAME, ATTR, q4a, 1, 0, 1, RMAX)                                                           \
TF_BFORMAT(NAME, ATTR, q5a, 1, 1, 1, RMAX)                                                           \
TF_BFORMAT(NAME, ATTR, q4o, 1, 0, 0, RMAX)                                                           \
TF_BFORMAT(NAME, ATTR, q5o, 1, 1, 0, RMAX)                                                           \
TF_BFORMAT(NAME, ATTR, q8m, 0, 0, 1, RMAX)                                                           \
TF_BFORMAT(NAME, ATTR, q8, 0, 0, 0, RMAX)                                                            \
ATTR static void NAME##_rows(const tf_weight *w, int n0, int n1, const tf_acts *a, float *y, int ldy) { \
    int min_ = w->flags & TF_HAS_MIN;                                                               \
    if (w->fmt == TF_Q4A) {                                                                         \
        if (w->flags & TF_HIGH) (min_ ? NAME##_q5a : NAME##_q5o)(w, n0, n1, a, y, ldy);             \
        else (min_ ? NAME##_q4a : NAME##_q4o)(w, n0, n1, a, y, ldy);                                \
    } else if (min_) NAME##_q8m(w, n0, n1, a, y, ldy);                                              \
    else NAME##_q8(w, n0, n1, a, y, ldy);                                                           \
}

/* AVX2 runs a group as its two halves of eight outputs (those inside [n0, n1)). */
TF_AVX2 TF_INLINE void bavx2_group(const tf_weight *w, int64_t g, const tf_acts *a, int r0, int RT, float *y,
                                   int ldy, int n0, int n1, int ahead, int Q4, int HIGH, int MIN) {
    _Pragma("GCC unroll 2") for (int o = 0; o < 2; o++)
        if (BG * g + 8 * o + 8 > n0 && BG * g + 8 * o < n1)
            btile_avx2(w, g, o, a, r0, RT, y, ldy, n0, n1, ahead, Q4, HIGH, MIN);
}
TF_VNNI TF_INLINE void bvnni_group(const tf_weight *w, int64_t g, const tf_acts *a, int r0, int RT, float *y,
                                   int ldy, int n0, int n1, int ahead, int Q4, int HIGH, int MIN) {
    btile_vnni(w, g, a, r0, RT, y, ldy, n0, n1, ahead, Q4, HIGH, MIN);
}
TF_BKERNELS(bavx2, TF_AVX2, 4)
TF_BKERNELS(bvnni, TF_VNNI, 8)
#endif

/* ---------------------------------------------------------------- NEON */
#ifdef TF_NEON
/* Four outputs' (quarter o of a group) vector of elements e..e+3, as int8 (Q4A: 0..31). */
static inline int8x16_t bunpack_neon(const tf_weight *w, const uint8_t *rec, int e, int o) {
    uint8x16_t v = vld1q_u8(rec + bvec_at(w->fmt, e) + 16 * o);
    if (w->fmt == TF_Q8) return vreinterpretq_s8_u8(v);
    v = e < 16 ? vandq_u8(v, vdupq_n_u8(15)) : vshrq_n_u8(v, 4);
    if (w->flags & TF_HIGH) {
        uint8x16_t hb = vtstq_u8(vld1q_u8(rec + bhigh_at(16 * o)), vdupq_n_u8((uint8_t)(1 << (e / 4))));
        v = vorrq_u8(v, vandq_u8(hb, vdupq_n_u8(16)));
    }
    return vreinterpretq_s8_u8(v);
}

/* Four outputs' (quarter o of a group) scales of plane p. */
static inline float32x4_t bscale4_neon(const tf_weight *w, const uint8_t *meta, int p, int o) {
    const uint8_t *at = meta + bscale_at(w->flags, p, 4 * o);
    if (w->flags & TF_HALF) {
        uint16_t h[4];
        memcpy(h, at, 8);
        return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(h)));
    }
    float f[4];
    memcpy(f, at, 16);
    return vld1q_f32(f);
}

/* Group g by RT rows from r0, a quarter of four outputs at a time: a block's eight
 * vectors unpacked once for the rows, each row's exact block total by dot4, then the
 * block dot's fp32 steps. */
static inline __attribute__((always_inline)) void btile_neon(const tf_weight *w, int64_t g, const tf_acts *a, int r0,
                                                             int RT, float *y, int ldy, int n0, int n1) {
    int64_t k = w->k, nb = k / 32;
    int mins = bplanes(w->flags) == 2, off = boffset(w->fmt, w->flags);
    float out[4][BG];
    for (int o = 0; o < 4; o++) {
        float32x4_t acc[4];
        for (int r = 0; r < RT; r++) acc[r] = vdupq_n_f32(0.0f);
        for (int64_t b = 0; b < nb; b++) {
            const uint8_t *rec = bbits(w, g, b), *meta = bmeta(w, g, b);
            int8x16_t v[8];
            for (int j = 0; j < 8; j++) v[j] = bunpack_neon(w, rec, 4 * j, o);
            float32x4_t d = bscale4_neon(w, meta, 0, o), m = mins ? bscale4_neon(w, meta, 1, o) : d;
            for (int r = 0; r < RT; r++) {
                int64_t at = (int64_t)(r0 + r) * nb + b;
                const int8_t *xq = a->q + (int64_t)(r0 + r) * k + b * 32;
                int32x4_t P = vdupq_n_s32(bstart(a->base[at], off));
                for (int j = 0; j < 8; j++) P = dot4(P, v[j], vreinterpretq_s8_s32(vdupq_n_s32(x4(xq + 4 * j))));
                acc[r] = vfmaq_f32(acc[r], vcvtq_f32_s32(P), vmulq_n_f32(d, a->s[at]));
                if (mins) acc[r] = vfmaq_f32(acc[r], vdupq_n_f32(a->xsum[at]), m);
            }
        }
        for (int r = 0; r < RT; r++) vst1q_f32(out[r] + 4 * o, acc[r]);
    }
    for (int r = 0; r < RT; r++) tf_store_span(y + (int64_t)(r0 + r) * ldy, BG * g, BG, n0, n1, out[r]);
}
#define TF_BSHAPE_NEON(RT)                                                                           \
static void btile_neon_##RT(const tf_weight *w, int64_t g, const tf_acts *a, int r, float *y, int ldy, \
                            int n0, int n1, int first) {                                            \
    (void)first;                                                                                    \
    btile_neon(w, g, a, r, RT, y, ldy, n0, n1);                                                     \
}
TF_BSHAPE_NEON(1) TF_BSHAPE_NEON(2) TF_BSHAPE_NEON(3) TF_BSHAPE_NEON(4)

static void brows_neon(const tf_weight *w, int n0, int n1, const tf_acts *a, float *y, int ldy) {
    static const tf_tile_fn shapes[5] = {0, btile_neon_1, btile_neon_2, btile_neon_3, btile_neon_4};
    tf_tiles(shapes, BG, 4, w, n0, n1, a, y, ldy);
}
#endif

/* ---------------------------------------------------------------- dispatch */

void tf_bdot_rows(const tf_weight *w, int n0, int n1, const tf_acts *a, float *y, int ldy) {
    TF_BY_ISA(brows_ref, bavx2_rows, bvnni_rows, brows_neon, (w, n0, n1, a, y, ldy));
}

/* One output row as fp32: q * d (+ m), a multiply then an add. */
void tf_bdequant_row(const tf_weight *w, int n, float *out) {
    int mins = bplanes(w->flags) == 2, t = n % BG;
    for (int64_t b = 0; b < w->k / 32; b++) {
        const uint8_t *rec = bbits(w, n / BG, b), *meta = bmeta(w, n / BG, b);
        float d = bscale(w, meta, 0, t), m = mins ? bscale(w, meta, 1, t) : 0.0f;
        for (int e = 0; e < 32; e++) {
            float v = (float)bq_at(w, rec, t, e) * d;
            out[b * 32 + e] = mins ? v + m : v;
        }
    }
}

/* ---------------------------------------------------------------- repacking */

typedef struct {
    int fmt, flags, n, k;
    const uint8_t *q, *qh, *s;
    uint8_t *oq, *os;
} bpack_job;

/* The rows of groups [ith/nth, (ith+1)/nth) of the whole: threads never share a record. */
static void bpack_rows(void *ctx, int ith, int nth) {
    const bpack_job *p = ctx;
    int fmt = p->fmt, flags = p->flags, S = bplanes(flags), es = bscale_bytes(flags);
    int64_t nb = p->k / 32, QB = bq_bytes(fmt, flags), SB = bs_bytes(flags), groups = (p->n + BG - 1) / BG;
    int64_t r0 = groups * ith / nth * BG, r1 = groups * (ith + 1) / nth * BG;
    if (r1 > p->n) r1 = p->n;
    for (int64_t row = r0; row < r1; row++) {
        int64_t g = row / BG;
        int t = (int)(row % BG);
        for (int64_t b = 0; b < nb; b++) {
            uint8_t *rec = p->oq + (g * nb + b) * QB, *meta = p->os + (g * nb + b) * SB;
            if (fmt == TF_Q8) {
                for (int e = 0; e < 32; e += 4) memcpy(rec + bvec_at(fmt, e) + bpos(t, e), p->q + row * p->k + b * 32 + e, 4);
            } else {
                for (int e = 0; e < 16; e += 4) memcpy(rec + bvec_at(fmt, e) + bpos(t, e), p->q + row * (p->k / 2) + b * 16 + e, 4);
                if (flags & TF_HIGH)
                    for (int e = 0; e < 32; e++) {
                        int bit = (p->qh[(row * nb + b) * 4 + e / 8] >> (e % 8)) & 1;
                        rec[bhigh_at(bpos(t, e))] |= (uint8_t)(bit << (e / 4));
                    }
            }
            for (int pl = 0; pl < S; pl++)
                memcpy(meta + bscale_at(flags, pl, t), p->s + ((row * S + pl) * nb + b) * es, (size_t)es);
        }
    }
}

void tf_bpack(int fmt, int flags, int n, int k, const uint8_t *q, const uint8_t *qh, const uint8_t *s,
              uint8_t *oq, uint8_t *os) {
    bpack_job job = {fmt, flags, n, k, q, qh, s, oq, os};
    tf_pool_run(bpack_rows, &job, (int64_t)n * k >= (1 << 20) ? 0 : 1);
}
