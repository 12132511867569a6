/* The K formats (GGUF's Q4_K, Q5_K and Q6_K, repacked in groups of eight
 * outputs; tf_kernels.h): dot products over super-blocks of 256 inputs whose
 * integer part is exact (the "K dot"), so only the per-super-block scaling is
 * fp32.  One scalar reference and SIMD paths that reproduce it bit for bit
 * (AVX2, AVX-512 VNNI, NEON).
 *
 * The grouped layout puts the eight outputs of a group side by side, eight
 * inputs each, in every 64-byte vector: one broadcast of eight activation bytes
 * feeds all eight outputs, each output's exact total lands in its own pair of
 * int32 lanes, and a super-block ends with one fp32 multiply-add per eight
 * outputs instead of horizontal reductions. */
#include "tf_ahead.h"
#include "tf_dot.h"
#include "tf_lanes.h"
#include "tf_ops.h"
#include "tf_pool.h"

#include <math.h>

/* Byte offsets in a group's super-block record: value bits (q) and scales (s).  K4/K5
 * keep their 6-bit codes packed as the file does (K4_META bytes); the kernels read them
 * widened to a byte each (K4_WIDE: kwiden_c, kwide32), one record at a time. */
enum {
    KG_NIB = 0, KG_HIGH = 1024,                     /* nibble plane; K5/K6 high-bit plane */
    K4_BITS = 1024, K5_BITS = 1280, K6_BITS = 1536,
    KG_D = 0, KG_DMIN = 16,                         /* K4, K5: fp16 d, dmin of outputs 0..7 */
    KG_LO = 32, KG_HI = 96, K4_META = 128,          /* K4, K5 stored: low nibbles, high bit pairs */
    KG_SC = 32, KG_MN = 96, K4_WIDE = 160,          /* K4, K5 widened: sc and mn codes a byte each */
    K6_CODE = 16, K6_C = 144, K6_META = 176,       /* K6_C: int32 C[8], each output's sum of code * (q - 32) */
};

static inline int bits_bytes(int fmt) { return fmt == TF_K4 ? K4_BITS : fmt == TF_K5 ? K5_BITS : K6_BITS; }
static inline int meta_bytes(int fmt) { return fmt == TF_K6 ? K6_META : K4_META; }

/* group g's record of super-block j */
static inline const uint8_t *kbits(const tf_weight *w, int64_t g, int64_t j) {
    return w->q + (g * (w->k / 256) + j) * bits_bytes(w->fmt);
}
static inline const uint8_t *kmeta(const tf_weight *w, int64_t g, int64_t j) {
    return (const uint8_t *)w->s + (g * (w->k / 256) + j) * meta_bytes(w->fmt);
}

static inline uint16_t u16_at(const uint8_t *p) {
    uint16_t v;
    memcpy(&v, p, 2);
    return v;
}

/* Where a record keeps things (the one statement of the layout every path reads and
 * the packer writes): the 64-byte vectors of block b's nibbles and high bits at
 * positions 8m..8m+7 (kpos: inputs 4m..4m+3 and 16+4m..16+4m+3), output t's bytes
 * at 8t in each; and the byte of output t's code (K6: of half h) and min code. */
static inline int knib_at(int b, int m) { return KG_NIB + 64 * (4 * (b / 2) + m); }
static inline int khigh_at(int fmt, int b, int m) { return KG_HIGH + 64 * (fmt == TF_K6 ? 4 * (b / 4) + m : m); }
static inline int kcode_at(int fmt, int t, int b, int h) {
    return fmt == TF_K6 ? K6_CODE + 8 * (8 * h + b) + t : KG_SC + 8 * b + t;
}
static inline int kmin_at(int t, int b) { return KG_MN + 16 * (b / 2) + 2 * t + b % 2; }

/* K4/K5's stored codes: widened byte i of the sc codes (KG_SC + i, i < 64) and of the
 * mn codes (KG_MN + i) keep their low four bits in byte KG_LO + i (sc low nibble, mn
 * high) and their top two in byte KG_HI + i % 32, at bits 2(i / 32) (sc) and
 * 4 + 2(i / 32) (mn): 96 bytes for 128 codes, the file's 12 per output. */
static inline void kput_codes(uint8_t *meta, int t, int b, int sc, int mn) {   /* meta zeroed */
    int i = kcode_at(TF_K4, t, b, 0) - KG_SC, m = kmin_at(t, b) - KG_MN;
    meta[KG_LO + i] |= (uint8_t)(sc & 15);
    meta[KG_HI + i % 32] |= (uint8_t)((sc >> 4) << (2 * (i / 32)));
    meta[KG_LO + m] |= (uint8_t)((mn & 15) << 4);
    meta[KG_HI + m % 32] |= (uint8_t)((mn >> 4) << (4 + 2 * (m / 32)));
}

/* A record's scales as the kernels read them: K4/K5 widened into wide (K4_WIDE bytes),
 * K6 as stored. */
static inline const uint8_t *kwiden_c(int F, const uint8_t *meta, uint8_t *wide) {
    if (F == TF_K6) return meta;
    memcpy(wide, meta, KG_LO);
    for (int i = 0; i < 64; i++) {
        int lo = meta[KG_LO + i], hi = meta[KG_HI + i % 32] >> (2 * (i / 32));
        wide[KG_SC + i] = (uint8_t)((lo & 15) | (hi & 3) << 4);
        wide[KG_MN + i] = (uint8_t)((lo >> 4) | (hi >> 4 & 3) << 4);
    }
    return wide;
}

/* Output t's code for inputs 16h..16h+15 of block b (K4/K5: one code per block), from
 * the widened scales. */
static inline int kcode(int fmt, const uint8_t *meta, int t, int b, int h) {
    return fmt == TF_K6 ? (int8_t)meta[kcode_at(fmt, t, b, h)] : meta[kcode_at(fmt, t, b, h)];
}
static inline int kmin_code(const uint8_t *meta, int t, int b) { return meta[kmin_at(t, b)]; }

/* The super-scales D (and Dm = -dmin for K4/K5) of output t, exactly widened from fp16. */
static inline float kscale(const uint8_t *meta, int t) { return tf_h2f(u16_at(meta + KG_D + 2 * t)); }
static inline float kmin_scale(const uint8_t *meta, int t) { return -tf_h2f(u16_at(meta + KG_DMIN + 2 * t)); }

/* Where element e (0..255) of a super-block sits, for activations (qk) and each
 * output's values alike: within each block of 32, position 8m + 4h + i holds
 * element 16h + 4m + i, so the 8 bytes at 8m pair inputs of both 16-input halves. */
static inline int kpos(int e) { return e / 32 * 32 + (e % 16) / 4 * 8 + (e % 32) / 16 * 4 + e % 4; }
/* and the element at position p: kelem(kpos(e)) == e */
static inline int kelem(int p) { return p / 32 * 32 + (p % 8) / 4 * 16 + (p % 32) / 8 * 4 + p % 4; }

/* The integer value (K6: with its -32) of output t's element e (0..255) of a record. */
static int kq_at(int fmt, const uint8_t *q, int t, int e) {
    int p = kpos(e), b = e / 32, m = (p % 32) / 8, at = 8 * t + p % 8;
    int v = q[knib_at(b, m) + at];
    v = b % 2 ? v >> 4 : v & 15;
    if (fmt == TF_K5) v |= ((q[khigh_at(fmt, b, m) + at] >> b) & 1) << 4;
    if (fmt == TF_K6) v = (v | ((q[khigh_at(fmt, b, m) + at] >> (2 * (b % 4))) & 3) << 4) - 32;
    return v;
}

/* K4/K5: the min term's exact integer, sum over blocks of mn_b * bsum_b (bs as in tf_acts). */
static inline int32_t kmin_sum(const uint8_t *meta, int t, const int16_t *bs) {
    int32_t M = 0;
    for (int b = 0; b < 8; b++) M += kmin_code(meta, t, b) * (bs[b] + bs[8 + b]);
    return M;
}

/* ---------------------------------------------------------------- reference */

static void krows_ref(const tf_weight *w, int n0, int n1, const tf_acts *a, float *y, int ldy) {
    int F = w->fmt;
    int64_t k = w->k, nsb = k / 256;
    for (int64_t g = n0 / 8; g * 8 < n1; g++)
        for (int64_t r = 0; r < a->rows; r++) {
            float acc[8];
            for (int t = 0; t < 8; t++) {
                acc[t] = 0.0f;
                for (int64_t j = 0; j < nsb; j++) {
                    uint8_t wide[K4_WIDE];
                    const uint8_t *q = kbits(w, g, j), *meta = kwiden_c(F, kmeta(w, g, j), wide);
                    const int8_t *xq = a->qk + r * k + j * 256;
                    float xs = a->sk[r * nsb + j];
                    int32_t I = 0;
                    for (int e = 0; e < 256; e++)
                        I += kcode(F, meta, t, e / 32, e % 32 / 16) * kq_at(F, q, t, e) * xq[kpos(e)];
                    acc[t] = fmaf((float)I, xs * kscale(meta, t), acc[t]);
                    if (F != TF_K6)
                        acc[t] = fmaf((float)kmin_sum(meta, t, a->bs + (r * nsb + j) * 16), xs * kmin_scale(meta, t), acc[t]);
                }
            }
            tf_store_span(y + r * ldy, 8 * g, 8, n0, n1, acc);
        }
}

/* ---------------------------------------------------------------- x86 */
#ifdef TF_X86

/* Widened bytes 32 half..32 half + 31 of a K4/K5 record's sc codes, or with mn of its mn
 * codes (kwiden_c), from the stored ones: the low nibbles masked or shifted down, each
 * top bit pair moved to bits 4, 5 (16-bit shifts: what crosses into a byte's neighbour
 * is masked off). */
TF_AVX2 TF_INLINE __m256i kwide32(const uint8_t *meta, int mn, int half) {
    const __m256i m15 = _mm256_set1_epi8(15), m48 = _mm256_set1_epi8(0x30);
    __m256i lo = _mm256_loadu_si256((const __m256i *)(meta + KG_LO + 32 * half));
    __m256i h = _mm256_loadu_si256((const __m256i *)(meta + KG_HI));
    lo = mn ? _mm256_srli_epi16(lo, 4) : lo;
    switch (2 * half + 4 * mn) {                    /* the top pair's bits */
    case 0: h = _mm256_slli_epi16(h, 4); break;
    case 2: h = _mm256_slli_epi16(h, 2); break;
    case 6: h = _mm256_srli_epi16(h, 2); break;
    default: break;
    }
    return _mm256_or_si256(_mm256_and_si256(lo, m15), _mm256_and_si256(h, m48));
}

/* A record's scales on x86: as stored, and K4/K5's codes widened up front (upfront) or
 * where they are used.  AVX2 tiles and one-row VNNI tiles widen up front; VNNI tiles of
 * more rows where they use them, since four more live registers spill there (kb, Zen 4,
 * in cache: VNNI 1 row 7.9 us up front, 8.4 where used; 8 rows 39.7 and 38.5; AVX2
 * 3 rows 25.9 and 26.4). */
typedef struct {
    const uint8_t *meta;
    int upfront;
    __m256i sc[2], mn[2];
} kcodes;
TF_AVX2 TF_INLINE kcodes kcodes_of(int F, int upfront, const uint8_t *meta) {
    kcodes c = {meta, F != TF_K6 && upfront, {_mm256_setzero_si256(), _mm256_setzero_si256()},
                {_mm256_setzero_si256(), _mm256_setzero_si256()}};
    _Pragma("GCC unroll 2") for (int h = 0; h < 2 && c.upfront; h++) {
        c.sc[h] = kwide32(meta, 0, h);
        c.mn[h] = kwide32(meta, 1, h);
    }
    return c;
}
/* widened bytes i..i+15 (i a multiple of 16) of the sc codes, or with mn the mn codes */
TF_AVX2 TF_INLINE __m128i kwide16(const kcodes *c, int mn, int i) {
    __m256i v = c->upfront ? (mn ? c->mn : c->sc)[i / 32] : kwide32(c->meta, mn, i / 32);
    return i % 32 ? _mm256_extracti128_si256(v, 1) : _mm256_castsi256_si128(v);
}

/* Vector (b, m) of a record: the eight outputs' values of block b, inputs 8m..8m+7
 * (32 bytes: outputs 4o..4o+3, from byte 32o; F, b, m and o constants). */
TF_AVX2 TF_INLINE __m256i kunpack(int F, const uint8_t *q, int b, int m, int o) {
    const __m256i m4 = _mm256_set1_epi8(15);
    __m256i v = _mm256_loadu_si256((const __m256i *)(q + knib_at(b, m) + 32 * o));
    v = b % 2 ? _mm256_and_si256(_mm256_srli_epi16(v, 4), m4) : _mm256_and_si256(v, m4);
    if (F == TF_K5) {       /* bit b of each high byte to bit 4 (16-bit shifts keep it in its byte) */
        __m256i x = _mm256_loadu_si256((const __m256i *)(q + khigh_at(F, b, m) + 32 * o));
        x = b < 4 ? _mm256_slli_epi16(x, 4 - b) : _mm256_srli_epi16(x, b - 4);
        v = _mm256_or_si256(v, _mm256_and_si256(x, _mm256_set1_epi8(0x10)));
    }
    if (F == TF_K6) {       /* bits 2c, 2c + 1 to bits 4, 5 */
        int c = b % 4;
        __m256i x = _mm256_loadu_si256((const __m256i *)(q + khigh_at(F, b, m) + 32 * o));
        x = c == 0 ? _mm256_slli_epi16(x, 4) : c == 1 ? _mm256_slli_epi16(x, 2) : c == 2 ? x : _mm256_srli_epi16(x, 2);
        v = _mm256_or_si256(v, _mm256_and_si256(x, _mm256_set1_epi8(0x30)));
    }
    return v;
}

/* Block b's codes for the lane pairs (2t, 2t + 1), the block's two 16-input halves
 * (K4/K5: one code, twice), as 16 bytes. */
TF_AVX2 TF_INLINE __m128i kblock_codes(int F, const kcodes *kc, int b) {
    if (F == TF_K6)
        return _mm_unpacklo_epi8(_mm_loadl_epi64((const __m128i *)(kc->meta + kcode_at(F, 0, b, 0))),
                                 _mm_loadl_epi64((const __m128i *)(kc->meta + kcode_at(F, 0, b, 1))));
    __m128i c = kwide16(kc, 0, kcode_at(F, 0, b & ~1, 0) - KG_SC);
    return b % 2 ? _mm_unpackhi_epi8(c, c) : _mm_unpacklo_epi8(c, c);
}

/* Eight activation bytes of a row, in every lane pair. */
TF_AVX2 TF_INLINE int64_t x8(const int8_t *p) {
    int64_t v;
    memcpy(&v, p, 8);
    return v;
}

/* x8 broadcast straight from memory, each use its own load: a broadcast load costs
 * only a load port, while one the compiler shares between the output halves stays
 * live across the record and spills. */
typedef int64_t tf_i64_alias __attribute__((may_alias));
TF_AVX2 TF_INLINE __m256i x8_avx2(const int8_t *p) {
#if defined(__GNUC__)
    __m256i v;
    __asm__ volatile("vpbroadcastq %1, %0" : "=x"(v) : "m"(*(const tf_i64_alias *)p));
    return v;
#else
    return _mm256_set1_epi64x(x8(p));
#endif
}

/* The fp32 steps of the K dot for one row of a group: I (lane t: output t's exact
 * total, before K6's -32 term), the code pairs for K6's -32 term or K4/K5's min term,
 * into acc.  MADD(M, P, D) adds the int16 pair products of P and D to M (exact). */
#define TF_KFINISH(NAME, ATTR, MADD)                                                                 \
ATTR TF_INLINE __m256 NAME(int F, int M6, __m256i I, const __m256i *pairs, const int16_t *bs, float xs,   \
                           __m256 dv, __m256 dm, __m256 acc) {                                      \
    __m256 x = _mm256_set1_ps(xs);                                                                  \
    if (F == TF_K6 && !M6) return _mm256_fmadd_ps(_mm256_cvtepi32_ps(I), _mm256_mul_ps(x, dv), acc); \
    __m256i M = _mm256_setzero_si256();                                                             \
    /* K6: dword i of bs, the sums of 16 inputs 2i, 2i + 1 ([h * 8 + b]), by code pair i.  K4/K5:  \
     * dword p of the block sums (the halves added: |sum| <= 32 * 127), by min pair p (blocks    \
     * 2p, 2p + 1); the same exact integer as the halves one by one, in half the products. */    \
    if (F == TF_K6)                                                                                 \
        _Pragma("GCC unroll 8") for (int i = 0; i < 8; i++) {                                       \
            int32_t d;                                                                              \
            memcpy(&d, bs + 2 * i, 4);                                                              \
            M = MADD(M, pairs[i], _mm256_set1_epi32(d));                                            \
        }                                                                                           \
    else {                                                                                          \
        __m256i b32 = _mm256_castsi128_si256(_mm_add_epi16(_mm_loadu_si128((const __m128i *)bs),   \
                                                           _mm_loadu_si128((const __m128i *)(bs + 8)))); \
        _Pragma("GCC unroll 4") for (int p = 0; p < 4; p++)                                         \
            M = MADD(M, pairs[p], _mm256_permutevar8x32_epi32(b32, _mm256_set1_epi32(p)));          \
    }                                                                                               \
    if (F == TF_K6) I = _mm256_sub_epi32(I, _mm256_slli_epi32(M, 5));                               \
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(I), _mm256_mul_ps(x, dv), acc);                        \
    if (F != TF_K6) acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(M), _mm256_mul_ps(x, dm), acc);        \
    return acc;                                                                                     \
}
#define TF_MADD_AVX2(M, P, D) _mm256_add_epi32(M, _mm256_madd_epi16(P, D))
TF_KFINISH(kfinish_avx2, TF_AVX2, TF_MADD_AVX2)
TF_KFINISH(kfinish_vnni, TF_VNNI, _mm256_dpwssd_epi32)

/* A record's super-scales and the int16 code pairs kfinish takes. */
TF_AVX2 TF_INLINE void kscales8(int F, int M6, const kcodes *kc, __m256 *dv, __m256 *dm, __m256i *pairs) {
    const uint8_t *meta = kc->meta;
    *dv = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(meta + KG_D)));
    *dm = _mm256_setzero_ps();
    if (F == TF_K6 && !M6) return;
    if (F == TF_K6) {
        _Pragma("GCC unroll 8") for (int i = 0; i < 8; i++) {
            const uint8_t *cp = meta + kcode_at(F, 0, 2 * i % 8, 2 * i / 8);   /* codes 2i, 2i + 1 of [h][b] */
            pairs[i] = _mm256_cvtepi8_epi16(_mm_unpacklo_epi8(_mm_loadl_epi64((const __m128i *)cp),
                                                              _mm_loadl_epi64((const __m128i *)(cp + 8))));
        }
    } else {
        *dm = _mm256_sub_ps(_mm256_setzero_ps(), _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(meta + KG_DMIN))));
        _Pragma("GCC unroll 4") for (int p = 0; p < 4; p++)
            pairs[p] = _mm256_cvtepu8_epi16(kwide16(kc, 1, kmin_at(0, 2 * p) - KG_MN));
    }
}

/* Group g's value bits of super-block j.  Records run in memory in the order a pass
 * reads them (a group's super-blocks, then the next group's), so on a group's first pass
 * over a chunk of rows a record further on is prefetched: its scales here, and through
 * *pf (else NULL) its bits a line at a time among the vector steps (kprefetch), not in
 * one burst.  A tile of up to KFAR_ROWS rows waits on memory, not on its arithmetic:
 * its bits go to L2 KFAR records on, as a core keeps more L2 misses in flight than L1
 * ones (Qwen2.5-Coder-1.5B Q4_K_M on a Zen 4 core, 1 row: 50.7-50.8 ms a step with L1
 * two on, 46.4-48.8 now; 2 rows 59 -> 50; 4 rows 73 -> 65).  A Q6_K record, more
 * arithmetic a byte on one row, goes KFAR6 records on (tf_linear alone, 1 row, builds
 * alternated in one process: the 1.5B's Q6_K head 11.9 -> 9.4 ms on one thread, 8.0 ->
 * 6.2 on two; 8960 x 1536 0.61 -> 0.53; 10 to 32 on alike; Q4_K records stay six on,
 * 16 on slowed them 7%).  An 8-row VNNI tile is
 * bound by its arithmetic and takes its bits into L1 KNEAR records on (L2 six on: the
 * 0.5B's 8-row step 3-4% slower); it also takes them into L2 KFAR8 records on (the
 * 1.5B's Q6_K head, 151936 x 1536, 8 rows: 13.2-14.9 ms -> 12.6; its 8-row step
 * 100.3-101.3 -> 98.3-99.4 ms, and 98.7-99.9 with 8 on).  (Before these, the same
 * super-block four groups on in one burst: the 0.5B's 8-row step took 45-46 ms; 42 with
 * L1 two on.) */
enum { KNEAR = 2, KFAR = 6, KFAR6 = 16, KFAR_ROWS = 4, KFAR8 = 16 };
static inline int kfar(int RT) { return RT <= KFAR_ROWS; }
TF_AVX2 TF_INLINE const uint8_t *krecord(const tf_weight *w, int64_t g, int64_t j, int ahead, int RT, int F,
                                         const uint8_t **pf) {
    const uint8_t *q = kbits(w, g, j);
    int on = !kfar(RT) ? KNEAR : F == TF_K6 ? KFAR6 : KFAR;
    *pf = NULL;
    if (ahead) {
        *pf = q + on * bits_bytes(F);
        prefetch_span(kmeta(w, g, j) + on * meta_bytes(F), meta_bytes(F));
    }
    return q;
}
/* line `line` of the record at pf (a vector step's share of krecord's prefetch) */
TF_AVX2 TF_INLINE void kprefetch(int F, int RT, const uint8_t *pf, int line) {
    if (!pf || 64 * line >= bits_bytes(F)) return;
    if (kfar(RT)) _mm_prefetch((const char *)pf + 64 * line, _MM_HINT_T1);
    else {
        _mm_prefetch((const char *)pf + 64 * line, _MM_HINT_T0);
        _mm_prefetch((const char *)pf + (KFAR8 - KNEAR) * bits_bytes(F) + 64 * line, _MM_HINT_T1);
    }
}

/* AVX2, one super-block: each 32-byte half (4 outputs x 8 inputs) times the row's
 * eight bytes broadcast (maddubs), a few vectors' pair sums added in int16 (at most
 * 4 * 2 * 31 * 127 for K4/K5, 2 * 2 * 63 * 127 for K6), madd with the codes as int16
 * pairs, summed exactly in int32 lane pairs; I[r] lane t: output t's total.  One half
 * at a time over all eight blocks, so a half's totals and pair sums stay in registers. */
TF_AVX2 TF_INLINE void ktotals_avx2(int F, const uint8_t *q, const uint8_t *pf, const kcodes *kc, const int8_t *xq,
                                    const uint8_t *xu, int64_t k, int RT, __m256i *I) {
    (void)xu;
    __m256i tot[2][8];              /* RT <= 4 (shapes past the row tile are never called) */
    const int STEP = F == TF_K6 ? 2 : 4;
    _Pragma("GCC unroll 2") for (int o = 0; o < 2; o++) {
        _Pragma("GCC unroll 4") for (int r = 0; r < RT; r++) tot[o][r] = _mm256_setzero_si256();
        _Pragma("GCC unroll 8") for (int b = 0; b < 8; b++) {
            __m128i c = kblock_codes(F, kc, b);
            __m256i c16 = F == TF_K6 ? _mm256_cvtepi8_epi32(o ? _mm_srli_si128(c, 8) : c)
                                     : _mm256_cvtepu8_epi32(o ? _mm_srli_si128(c, 8) : c);
            c16 = _mm256_blend_epi16(c16, _mm256_slli_epi32(c16, 16), 0xAA);
            _Pragma("GCC unroll 2") for (int m0 = 0; m0 < 4; m0 += STEP) {
                __m256i wv[4];
                _Pragma("GCC unroll 4") for (int m = m0; m < m0 + STEP; m++) {
                    if (o == 0) kprefetch(F, RT, pf, 4 * b + m);
                    wv[m - m0] = kunpack(F, q, b, m, o);
                }
                _Pragma("GCC unroll 4") for (int r = 0; r < RT; r++) {
                    const int8_t *x = xq + r * k + 32 * b;
                    __m256i p16 = _mm256_maddubs_epi16(wv[0], x8_avx2(x + 8 * m0));
                    _Pragma("GCC unroll 3") for (int m = m0 + 1; m < m0 + STEP; m++)
                        p16 = _mm256_add_epi16(p16, _mm256_maddubs_epi16(wv[m - m0], x8_avx2(x + 8 * m)));
                    tot[o][r] = _mm256_add_epi32(tot[o][r], _mm256_madd_epi16(p16, c16));
                    TF_IN_REGISTER(tot[o][r]);
                }
            }
        }
    }
    _Pragma("GCC unroll 4") for (int r = 0; r < RT; r++)
        I[r] = _mm256_permute4x64_epi64(_mm256_hadd_epi32(tot[0][r], tot[1][r]), 0xD8);
}

/* Vector (b, m) of a record whole: the eight outputs' values of block b, inputs 8m..8m+7. */
TF_VNNI TF_INLINE __m512i kunpack512(int F, const uint8_t *q, int b, int m) {
    const __m512i m4 = _mm512_set1_epi8(15);
    __m512i v = _mm512_loadu_si512((const void *)(q + knib_at(b, m)));
    v = b % 2 ? _mm512_and_si512(_mm512_srli_epi16(v, 4), m4) : _mm512_and_si512(v, m4);
    if (F == TF_K5) {
        __m512i x = _mm512_loadu_si512((const void *)(q + khigh_at(F, b, m)));
        x = b < 4 ? _mm512_slli_epi16(x, 4 - b) : _mm512_srli_epi16(x, b - 4);
        v = _mm512_or_si512(v, _mm512_and_si512(x, _mm512_set1_epi8(0x10)));
    }
    if (F == TF_K6) {
        int c = b % 4;
        __m512i x = _mm512_loadu_si512((const void *)(q + khigh_at(F, b, m)));
        x = c == 0 ? _mm512_slli_epi16(x, 4) : c == 1 ? _mm512_slli_epi16(x, 2) : c == 2 ? x : _mm512_srli_epi16(x, 2);
        v = _mm512_or_si512(v, _mm512_and_si512(x, _mm512_set1_epi8(0x30)));
    }
    return v;
}

/* K4 blocks b, b + 1's codes as (code, code) int16 pairs, in each 128-bit lane L those of
 * outputs 2L, 2L + 1 of block b, then of block b + 1 (the order of two blocks' sums packed
 * by vpackssdw; the two blocks' codes are 16 bytes in a row, kcode_at). */
TF_VNNI TF_INLINE __m512i kpair_codes(const kcodes *kc, int b) {
    __m128i c = kwide16(kc, 0, kcode_at(TF_K4, 0, b, 0) - KG_SC);
    return _mm512_cvtepu8_epi16(_mm256_set_m128i(
        _mm_shuffle_epi8(c, _mm_setr_epi8(4, 4, 5, 5, 12, 12, 13, 13, 6, 6, 7, 7, 14, 14, 15, 15)),
        _mm_shuffle_epi8(c, _mm_setr_epi8(0, 0, 1, 1, 8, 8, 9, 9, 2, 2, 3, 3, 10, 10, 11, 11))));
}

/* AVX-512 VNNI, one super-block: dpbusd sums per block, one multiply by the codes per
 * block (K4 on more than one row: per two blocks), the lane pairs added at the end;
 * I[r] lane t: output t's total.  K6 takes its values less 32 as the signed side and
 * the activations plus 128 (xu) as the unsigned one, then takes back 128 * C, the
 * record's sum of code * (q - 32): its I is final. */
TF_VNNI TF_INLINE void ktotals_vnni(int F, const uint8_t *q, const uint8_t *pf, const kcodes *kc, const int8_t *xq,
                                    const uint8_t *xu, int64_t k, int RT, __m256i *I) {
    const int KPAIR = F == TF_K4 && RT > 1;
    /* K6 on more than four rows (K6PIN): each block loads its vectors anew, and each row's
     * total takes its block's product at once and stays in a register.  Else GCC keeps
     * blocks' value vectors for later blocks and defers products, and spills eight totals
     * to the stack (52 zmm spill accesses a super-block; 8 rows, one thread, builds
     * alternated: the 1.5B's Q6_K head 12.82 -> 12.26 ms, 8960 x 1536 0.773 -> 0.743,
     * 1536 x 8960 0.791 -> 0.759). */
    const int K6PIN = F == TF_K6 && RT > 4;
    __m512i tot[8], s[8], se[8];    /* se: KPAIR's even block sums */
    const int8_t *xr[8];            /* each row's bytes of the super-block, opaque to GCC: else it
                                       keeps 256 row-and-offset sums on the stack, a load and an add
                                       before each broadcast (8 rows: 3% slower) */
    _Pragma("GCC unroll 8") for (int r = 0; r < RT; r++) {
        tot[r] = _mm512_setzero_si512();
        xr[r] = (F == TF_K6 ? (const int8_t *)xu : xq) + r * k;
        __asm__("" : "+r"(xr[r]));
    }
    _Pragma("GCC unroll 8") for (int b = 0; b < 8; b++) {
        if (K6PIN) __asm__("" : "+r"(q));
        _Pragma("GCC unroll 8") for (int r = 0; r < RT; r++) s[r] = _mm512_setzero_si512();
        _Pragma("GCC unroll 4") for (int m = 0; m < 4; m++) {
            kprefetch(F, RT, pf, 4 * b + m);
            __m512i wv = kunpack512(F, q, b, m);
            if (F == TF_K6) {
                wv = _mm512_sub_epi8(wv, _mm512_set1_epi8(32));
                _Pragma("GCC unroll 8") for (int r = 0; r < RT; r++)
                    s[r] = _mm512_dpbusd_epi32(s[r], _mm512_set1_epi64(x8(xr[r] + 32 * b + 8 * m)), wv);
            } else
                _Pragma("GCC unroll 8") for (int r = 0; r < RT; r++)
                    s[r] = _mm512_dpbusd_epi32(s[r], wv, _mm512_set1_epi64(x8(xr[r] + 32 * b + 8 * m)));
        }
        /* K4: each lane of s sums 16 products of a nibble and an int8 (|s| <= 16 * 15 * 127
         * < 2^15), so it is an exact int16.  One row: c32's lanes are (code, 0) int16 pairs,
         * one dpwssd a block.  More rows (KPAIR): two blocks' sums packed to int16, in each
         * 128-bit lane L dwords (output 2L, 2L + 1) of the even block then of the odd (each
         * the output's two halves), and one dpwssd by (code, code) pairs in that order adds
         * both (Zen 4, 8 rows: 6% faster; one row 7% slower in cache, the code shuffles not
         * shared).  K5 and K6 sums can pass 2^15: multiplied in int32. */
        if (KPAIR && b % 2 == 0) {
            _Pragma("GCC unroll 8") for (int r = 0; r < RT; r++) se[r] = s[r];
        } else if (KPAIR) {
            __m512i cc = kpair_codes(kc, b - 1);
            _Pragma("GCC unroll 8") for (int r = 0; r < RT; r++)
                tot[r] = _mm512_dpwssd_epi32(tot[r], _mm512_packs_epi32(se[r], s[r]), cc);
        } else {
            __m128i c = kblock_codes(F, kc, b);
            __m512i c32 = F == TF_K6 ? _mm512_cvtepi8_epi32(c) : _mm512_cvtepu8_epi32(c);
            _Pragma("GCC unroll 8") for (int r = 0; r < RT; r++) {
                tot[r] = F == TF_K4 ? _mm512_dpwssd_epi32(tot[r], s[r], c32)
                                    : _mm512_add_epi32(tot[r], _mm512_mullo_epi32(s[r], c32));
                if (K6PIN) TF_IN_REGISTER(tot[r]);
            }
        }
    }
    __m256i c128 = _mm256_setzero_si256();
    if (F == TF_K6) c128 = _mm256_slli_epi32(_mm256_loadu_si256((const __m256i *)(kc->meta + K6_C)), 7);
    /* KPAIR: dwords 0, 1 of each 128-bit lane plus dwords 2, 3, gathered; else lane pair
     * (2t, 2t + 1) -> lane t, the low half of each 64-bit lane's sum */
    const __m512i pick = _mm512_setr_epi32(0, 1, 4, 5, 8, 9, 12, 13, 0, 1, 4, 5, 8, 9, 12, 13);
    _Pragma("GCC unroll 8") for (int r = 0; r < RT; r++)
        I[r] = KPAIR ? _mm512_castsi512_si256(_mm512_permutexvar_epi32(pick, _mm512_add_epi32(tot[r], _mm512_bsrli_epi128(tot[r], 8))))
                     : _mm256_sub_epi32(_mm512_cvtepi64_epi32(_mm512_add_epi64(tot[r], _mm512_srli_epi64(tot[r], 32))), c128);
}

/* A tile of RT rows x one group, one super-block at a time: the ISA's exact totals
 * (TOTALS), then the K dot's fp32 steps; rows stored whole groups at a time. */
#define TF_KTILE(NAME, ATTR, TOTALS, FINISH, M6, UPFRONT)                                                 \
ATTR TF_INLINE void NAME(const tf_weight *w, int64_t g, const tf_acts *a, int r0, int RT,            \
                         float *y, int ldy, int n0, int n1, int ahead, int F) {                     \
    int64_t k = w->k, nsb = k / 256;                                                                \
    __m256 acc[8];                                                                                  \
    _Pragma("GCC unroll 8") for (int r = 0; r < RT; r++) acc[r] = _mm256_setzero_ps();              \
    TF_AHEAD_TAKE(ahead && RT >= KFAR_ROWS);            /* the next layer's KV (tf_ahead.h) */      \
    for (int64_t j = 0; j < nsb; j++) {                                                             \
        kcodes kc = kcodes_of(F, UPFRONT, kmeta(w, g, j));                                          \
        __m256i I[8], pairs[8];                                                                     \
        const uint8_t *pf, *q = krecord(w, g, j, ahead, RT, F, &pf);                                \
        TF_AHEAD_STEP();                                                                            \
        TOTALS(F, q, pf, &kc, a->qk + (int64_t)r0 * k + j * 256,                                   \
               F == TF_K6 ? a->qku + (int64_t)r0 * k + j * 256 : NULL, k, RT, I);                  \
        __m256 dv, dm;                                                                              \
        kscales8(F, M6, &kc, &dv, &dm, pairs);                                                      \
        _Pragma("GCC unroll 8") for (int r = 0; r < RT; r++) {                                      \
            int64_t row = r0 + r;                                                                   \
            acc[r] = FINISH(F, M6, I[r], pairs, a->bs + (row * nsb + j) * 16, a->sk[row * nsb + j], dv, dm, acc[r]); \
        }                                                                                           \
    }                                                                                               \
    TF_AHEAD_PUT();                                                                                 \
    _Pragma("GCC unroll 8") for (int r = 0; r < RT; r++) tf_store8(y + (int64_t)(r0 + r) * ldy, 8 * g, n0, n1, acc[r]); \
}
TF_KTILE(ktile_avx2, TF_AVX2, ktotals_avx2, kfinish_avx2, 1, 1)
TF_KTILE(ktile_vnni, TF_VNNI, ktotals_vnni, kfinish_vnni, 0, RT == 1)

#define TF_KSHAPE(NAME, ATTR, f, F, RT)                                                              \
ATTR __attribute__((noinline)) static void NAME##_##f##_##RT(                                       \
        const tf_weight *w, int64_t g, const tf_acts *a, int r, float *y, int ldy, int n0, int n1, int ahead) { \
    NAME(w, g, a, r, RT, y, ldy, n0, n1, ahead, F);                                                 \
}
/* Shapes: a group by RMAX rows, and by each smaller count for the last rows (tf_tiles). */
#define TF_KFORMAT(NAME, ATTR, f, F, RMAX)                                                           \
TF_KSHAPE(NAME, ATTR, f, F, 1) TF_KSHAPE(NAME, ATTR, f, F, 2) TF_KSHAPE(NAME, ATTR, f, F, 3)         \
TF_KSHAPE(NAME, ATTR, f, F, 4) TF_KSHAPE(NAME, ATTR, f, F, 5) TF_KSHAPE(NAME, ATTR, f, F, 6)         \
TF_KSHAPE(NAME, ATTR, f, F, 7) TF_KSHAPE(NAME, ATTR, f, F, 8)                                        \
ATTR static void NAME##_##f(const tf_weight *w, int n0, int n1, const tf_acts *a, float *y, int ldy) { \
    static const tf_tile_fn shapes[9] = {0, NAME##_##f##_1, NAME##_##f##_2, NAME##_##f##_3, NAME##_##f##_4, \
                                         NAME##_##f##_5, NAME##_##f##_6, NAME##_##f##_7, NAME##_##f##_8}; \
    tf_tiles(shapes, 8, RMAX, w, n0, n1, a, y, ldy);                                                \
}
#define TF_KKERNELS(NAME, ATTR, R4, R5, R6)                                                          \
TF_KFORMAT(NAME, ATTR, k4, TF_K4, R4)                                                                \
TF_KFORMAT(NAME, ATTR, k5, TF_K5, R5)                                                                \
TF_KFORMAT(NAME, ATTR, k6, TF_K6, R6)                                                                \
ATTR static void NAME##_rows(const tf_weight *w, int n0, int n1, const tf_acts *a, float *y, int ldy) { \
    if (w->fmt == TF_K4) NAME##_k4(w, n0, n1, a, y, ldy);                                           \
    else if (w->fmt == TF_K5) NAME##_k5(w, n0, n1, a, y, ldy);                                      \
    else NAME##_k6(w, n0, n1, a, y, ldy);                                                           \
}
/* Rows per tile (K4, K5, K6).  AVX2 (sixteen registers): four.  VNNI (32): eight for K4
 * and K6, measured on Qwen2.5-Coder-1.5B Q4_K_M, eight rows: the Q6_K head 8% faster,
 * the rest the same as four; K5, unmeasured, stays at four. */
TF_KKERNELS(ktile_avx2, TF_AVX2, 4, 4, 4)
TF_KKERNELS(ktile_vnni, TF_VNNI, 8, 4, 8)
#endif

/* ---------------------------------------------------------------- NEON */
#ifdef TF_NEON
/* kwiden_c in vectors (byte shifts: nothing crosses between bytes). */
static inline const uint8_t *kwiden_neon(int F, const uint8_t *meta, uint8_t *wide) {
    if (F == TF_K6) return meta;
    const uint8x16_t m15 = vdupq_n_u8(15), m48 = vdupq_n_u8(0x30);
    vst1q_u8(wide, vld1q_u8(meta));
    vst1q_u8(wide + 16, vld1q_u8(meta + 16));
    for (int c = 0; c < 32; c += 16) {
        uint8x16_t h = vld1q_u8(meta + KG_HI + c), l0 = vld1q_u8(meta + KG_LO + c), l1 = vld1q_u8(meta + KG_LO + 32 + c);
        vst1q_u8(wide + KG_SC + c, vorrq_u8(vandq_u8(l0, m15), vandq_u8(vshlq_n_u8(h, 4), m48)));
        vst1q_u8(wide + KG_SC + 32 + c, vorrq_u8(vandq_u8(l1, m15), vandq_u8(vshlq_n_u8(h, 2), m48)));
        vst1q_u8(wide + KG_MN + c, vorrq_u8(vshrq_n_u8(l0, 4), vandq_u8(h, m48)));
        vst1q_u8(wide + KG_MN + 32 + c, vorrq_u8(vshrq_n_u8(l1, 4), vandq_u8(vshrq_n_u8(h, 2), m48)));
    }
    return wide;
}
/* Outputs 2o, 2o + 1's values of block b, inputs 8m..8m+7 (0..63, so valid as int8). */
static inline int8x16_t kunpack_neon(int F, const uint8_t *q, int b, int m, int o) {
    uint8x16_t v = vld1q_u8(q + knib_at(b, m) + 16 * o);
    v = b % 2 ? vshrq_n_u8(v, 4) : vandq_u8(v, vdupq_n_u8(15));
    if (F == TF_K5) {
        uint8x16_t x = vandq_u8(vshlq_u8(vld1q_u8(q + khigh_at(F, b, m) + 16 * o), vdupq_n_s8((int8_t)-b)), vdupq_n_u8(1));
        v = vorrq_u8(v, vshlq_n_u8(x, 4));
    }
    if (F == TF_K6) {
        uint8x16_t x = vld1q_u8(q + khigh_at(F, b, m) + 16 * o);
        x = vandq_u8(vshlq_u8(x, vdupq_n_s8((int8_t)(-2 * (b % 4)))), vdupq_n_u8(3));
        v = vorrq_u8(v, vshlq_n_u8(x, 4));
    }
    return vreinterpretq_s8_u8(v);
}

/* Group g by RT rows from r0: each super-block's vectors unpacked once for the rows
 * (outputs 2o, 2o + 1 in lanes (t, half)), the exact totals by dot4 and the codes,
 * then the K dot's fp32 steps output by output. */
static inline __attribute__((always_inline)) void ktile_neon(const tf_weight *w, int64_t g, const tf_acts *a, int r0,
                                                             int RT, float *y, int ldy, int n0, int n1) {
    int F = w->fmt;
    int64_t k = w->k, nsb = k / 256;
    float acc[4][8] = {{0}};
    for (int64_t j = 0; j < nsb; j++) {
        uint8_t wide[K4_WIDE];
        const uint8_t *q = kbits(w, g, j), *meta = kwiden_neon(F, kmeta(w, g, j), wide);
        int32_t I[4][8];
        for (int o = 0; o < 4; o++) {
            int32x4_t tot[4];
            for (int r = 0; r < RT; r++) tot[r] = vdupq_n_s32(0);
            for (int b = 0; b < 8; b++) {
                int8x16_t v[4];
                for (int m = 0; m < 4; m++) v[m] = kunpack_neon(F, q, b, m, o);
                int32_t cd[4] = {kcode(F, meta, 2 * o, b, 0), kcode(F, meta, 2 * o, b, 1),
                                 kcode(F, meta, 2 * o + 1, b, 0), kcode(F, meta, 2 * o + 1, b, 1)};
                int32x4_t c = vld1q_s32(cd);
                for (int r = 0; r < RT; r++) {
                    const int8_t *xq = a->qk + (int64_t)(r0 + r) * k + j * 256 + 32 * b;
                    int32x4_t sum = vdupq_n_s32(0);
                    for (int m = 0; m < 4; m++) {
                        int64_t x;
                        memcpy(&x, xq + 8 * m, 8);
                        sum = dot4(sum, v[m], vreinterpretq_s8_s64(vdupq_n_s64(x)));
                    }
                    tot[r] = vmlaq_s32(tot[r], sum, c);
                }
            }
            for (int r = 0; r < RT; r++) {
                I[r][2 * o] = vgetq_lane_s32(tot[r], 0) + vgetq_lane_s32(tot[r], 1);
                I[r][2 * o + 1] = vgetq_lane_s32(tot[r], 2) + vgetq_lane_s32(tot[r], 3);
            }
        }
        for (int r = 0; r < RT; r++) {
            int64_t row = r0 + r;
            const int16_t *bs = a->bs + (row * nsb + j) * 16;
            float xs = a->sk[row * nsb + j];
            for (int t = 0; t < 8; t++) {
                if (F == TF_K6) {
                    int32_t off = 0;
                    for (int i = 0; i < 16; i++) off += kcode(F, meta, t, i % 8, i / 8) * bs[i];
                    I[r][t] -= 32 * off;
                }
                acc[r][t] = fmaf((float)I[r][t], xs * kscale(meta, t), acc[r][t]);
                if (F != TF_K6) acc[r][t] = fmaf((float)kmin_sum(meta, t, bs), xs * kmin_scale(meta, t), acc[r][t]);
            }
        }
    }
    for (int r = 0; r < RT; r++) tf_store_span(y + (int64_t)(r0 + r) * ldy, 8 * g, 8, n0, n1, acc[r]);
}
#define TF_KSHAPE_NEON(RT)                                                                           \
static void ktile_neon_##RT(const tf_weight *w, int64_t g, const tf_acts *a, int r, float *y, int ldy, \
                            int n0, int n1, int first) {                                            \
    (void)first;                                                                                    \
    ktile_neon(w, g, a, r, RT, y, ldy, n0, n1);                                                     \
}
TF_KSHAPE_NEON(1) TF_KSHAPE_NEON(2) TF_KSHAPE_NEON(3) TF_KSHAPE_NEON(4)

static void krows_neon(const tf_weight *w, int n0, int n1, const tf_acts *a, float *y, int ldy) {
    static const tf_tile_fn shapes[5] = {0, ktile_neon_1, ktile_neon_2, ktile_neon_3, ktile_neon_4};
    tf_tiles(shapes, 8, 4, w, n0, n1, a, y, ldy);
}
#endif

/* ---------------------------------------------------------------- dispatch */

void tf_kdot_rows(const tf_weight *w, int n0, int n1, const tf_acts *a, float *y, int ldy) {
    TF_BY_ISA(krows_ref, ktile_avx2_rows, ktile_vnni_rows, krows_neon, (w, n0, n1, a, y, ldy));
}

/* One output row as fp32: q * (D * code) (+ Dm * mcode), as quant.dequantize computes it. */
void tf_kdequant_row(const tf_weight *w, int n, float *out) {
    int F = w->fmt, t = n % 8;
    for (int64_t j = 0; j < w->k / 256; j++) {
        uint8_t wide[K4_WIDE];
        const uint8_t *q = kbits(w, n / 8, j), *meta = kwiden_c(F, kmeta(w, n / 8, j), wide);
        float D = kscale(meta, t), Dm = F == TF_K6 ? 0.0f : kmin_scale(meta, t);
        for (int e = 0; e < 256; e++) {
            float v = (float)kq_at(F, q, t, e) * (D * (float)kcode(F, meta, t, e / 32, e % 32 / 16));
            if (F != TF_K6) v = v + Dm * (float)kmin_code(meta, t, e / 32);
            out[j * 256 + e] = v;
        }
    }
}

/* ---------------------------------------------------------------- repacking */

/* Block b's scale and min codes from Q4_K/Q5_K's 12 bytes of 6-bit codes. */
static void file_codes(const uint8_t *s, int b, int *sc, int *mn) {
    if (b < 4) {
        *sc = s[b] & 63;
        *mn = s[b + 4] & 63;
    } else {
        *sc = (s[b + 4] & 15) | ((s[b - 4] >> 6) << 4);
        *mn = (s[b + 4] >> 4) | ((s[b] >> 6) << 4);
    }
}

/* One output's super-block: its values (unsigned; K6 before its -32) from the file's
 * block `blk`, into record qo / so at output t.  F a constant: GCC widens the loops. */
TF_INLINE void kpack_one(int F, const uint8_t *blk, int t, uint8_t *qo, uint8_t *so) {
    uint8_t v[8][32];
    for (int b = 0; b < 8; b++)
        for (int e = 0; e < 32; e++) {
            if (F == TF_K6) {
                int h = b / 4, c = b % 4;
                v[b][e] = (uint8_t)(((blk[64 * h + 32 * (c & 1) + e] >> (4 * (c / 2))) & 15)
                                    | ((blk[128 + 32 * h + e] >> (2 * c)) & 3) << 4);
            } else {
                const uint8_t *qs = blk + (F == TF_K5 ? 48 : 16);
                v[b][e] = (uint8_t)((qs[32 * (b / 2) + e] >> (4 * (b % 2))) & 15);
                if (F == TF_K5) v[b][e] |= (uint8_t)(((blk[16 + e] >> b) & 1) << 4);
            }
        }
    /* each plane byte once, from the element its position holds */
    for (int m = 0; m < 4; m++)
        for (int i = 0; i < 8; i++) {
            int e = kelem(8 * m + i), at = 8 * t + i;
            for (int b = 0; b < 8; b += 2)
                qo[knib_at(b, m) + at] = (uint8_t)((v[b][e] & 15) | (v[b + 1][e] & 15) << 4);
            if (F == TF_K5) {
                int hb = 0;
                for (int b = 0; b < 8; b++) hb |= (v[b][e] >> 4) << b;
                qo[khigh_at(F, 0, m) + at] = (uint8_t)hb;
            }
            if (F == TF_K6)
                for (int b = 0; b < 8; b += 4)
                    qo[khigh_at(F, b, m) + at] = (uint8_t)((v[b][e] >> 4) | (v[b + 1][e] >> 4) << 2
                                                           | (v[b + 2][e] >> 4) << 4 | (v[b + 3][e] >> 4) << 6);
        }
    for (int b = 0; b < 8; b++) {
        if (F == TF_K6) {
            so[kcode_at(F, t, b, 0)] = blk[192 + 2 * b];
            so[kcode_at(F, t, b, 1)] = blk[192 + 2 * b + 1];
        } else {
            int sc, mn;
            file_codes(blk + 4, b, &sc, &mn);
            kput_codes(so, t, b, sc, mn);
        }
    }
    if (F == TF_K6) {
        int32_t C = 0;
        for (int b = 0; b < 8; b++)
            for (int h = 0; h < 2; h++) {
                int32_t part = 0;
                for (int e = 16 * h; e < 16 * h + 16; e++) part += v[b][e] - 32;
                C += (int8_t)blk[192 + 2 * b + h] * part;
            }
        memcpy(so + K6_C + 4 * t, &C, 4);
        memcpy(so + KG_D + 2 * t, blk + 208, 2);
    } else {
        memcpy(so + KG_D + 2 * t, blk, 2);
        memcpy(so + KG_DMIN + 2 * t, blk + 2, 2);
    }
}

typedef struct {
    int fmt, n, k;
    const uint8_t *raw;
    uint8_t *q, *s;
} kpack_job;

TF_INLINE void kpack_span(int F, const kpack_job *p, int64_t r0, int64_t r1) {
    int64_t nsb = p->k / 256, QB = bits_bytes(F), MB = meta_bytes(F);
    int TS = F == TF_K4 ? 144 : F == TF_K5 ? 176 : 210;
    for (int64_t row = r0; row < r1; row++)
        for (int64_t j = 0; j < nsb; j++) {
            int64_t g = row / 8;
            kpack_one(F, p->raw + (row * nsb + j) * TS, (int)(row % 8), p->q + (g * nsb + j) * QB,
                      p->s + (g * nsb + j) * MB);
        }
}

/* The rows of groups [ith/nth, (ith+1)/nth) of the whole: threads never share a record. */
static void kpack_rows(void *ctx, int ith, int nth) {
    const kpack_job *p = ctx;
    int64_t groups = (p->n + 7) / 8;
    int64_t r0 = groups * ith / nth * 8, r1 = groups * (ith + 1) / nth * 8;
    if (r1 > p->n) r1 = p->n;
    if (p->fmt == TF_K4) kpack_span(TF_K4, p, r0, r1);
    else if (p->fmt == TF_K5) kpack_span(TF_K5, p, r0, r1);
    else kpack_span(TF_K6, p, r0, r1);
}

/* The grouped records of n outputs from GGUF's Q4_K (144-byte), Q5_K (176) or Q6_K
 * (210) super-blocks, raw [n][k/256]; q and s zeroed, ceil(n/8) groups long (the
 * outputs past n stay zero).  Large weights are split among the pool's threads. */
void tf_kpack(int fmt, const uint8_t *raw, int n, int k, uint8_t *q, uint8_t *s) {
    kpack_job job = {fmt, n, k, raw, q, s};
    tf_pool_run(kpack_rows, &job, (int64_t)n * k >= (1 << 20) ? 0 : 1);
}
