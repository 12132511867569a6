/* The kernels' SIMD paths against their scalar reference, bit for bit, on whatever
 * CPU this runs on (natively, or an ARM build under qemu-aarch64).  One line per case:
 * "<case> <hash of the reference's output bits> same|DIFFER"; exit status 1 when any
 * path differs.  test_native_same_bits.py compares the reference hashes across CPUs:
 * the same reply on x86 and ARM needs the same bits from every kernel. */
#define _POSIX_C_SOURCE 199309L
#include "tf_dot.h"
#include "tf_ops.h"

#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include <string.h>

static uint32_t seed = 12345;
static uint32_t rnd(void) { return (seed = seed * 1664525u + 1013904223u) >> 8; }
static float frnd(void) { return (float)(rnd() % 20001) / 10000.0f - 1.0f; }
static void *zalloc(size_t bytes) { return calloc(bytes + 64, 1); }

static int fails;

/* Run `fn(ctx, out)` on the reference and on every SIMD path this CPU has (an AVX-512
 * machine runs its AVX2 path too); print the case. */
static void compare(const char *name, void (*fn)(void *, float *), void *ctx, size_t floats) {
    float *ref = zalloc(floats * 4), *got = zalloc(floats * 4);
    tf_set_isa(0);
    fn(ctx, ref);
    int bad = 0;
    for (int isa = 1; isa <= 3; isa++) {          /* 1 AVX2, 2 AVX-512 VNNI, 3 NEON: those it takes */
        if (tf_set_isa(isa) != isa) continue;
        fn(ctx, got);
        if (memcmp(ref, got, floats * 4) != 0) {
            fprintf(stderr, "%s: path %d differs\n", name, isa);
            bad = 1;
        }
    }
    uint32_t h = 2166136261u;                       /* FNV-1a of the reference's bytes */
    for (size_t i = 0; i < floats * 4; i++) h = (h ^ ((const uint8_t *)ref)[i]) * 16777619u;
    printf("%s %08x %s\n", name, h, bad ? "DIFFER" : "same");
    fails += bad;
    free(ref);
    free(got);
}

/* ---------------------------------------------------------------- linear */

typedef struct { tf_weight w; tf_acts a; } linear_case;

static void run_linear(void *ctx, float *y) {
    linear_case *c = ctx;
    if (c->w.fmt >= TF_K4) tf_kdot_rows(&c->w, 0, c->w.n, &c->a, y, c->w.n);
    else tf_bdot_rows(&c->w, 0, c->w.n, &c->a, y, c->w.n);
}

static tf_acts make_acts(int rows, int k) {
    tf_acts a = {rows, k, zalloc(rows * k), zalloc(rows * k / 8), zalloc(rows * k / 8), zalloc(rows * k / 8),
                 zalloc(rows * k), zalloc(rows * k / 64 + 4), zalloc(rows * k), zalloc(rows * k / 8)};
    float *x = zalloc(k * 4);
    for (int r = 0; r < rows; r++) {
        for (int i = 0; i < k; i++) x[i] = frnd() * (float)(1 + i % 7);
        tf_quantize_row(x, k, a.q + r * k, a.s + r * k / 32, a.base + r * k / 32, a.xsum + r * k / 32);
        tf_quantize_row_k(x, k, a.qk + r * k, a.sk + r * k / 256, a.bs + r * k / 16, a.qku + r * k);
    }
    free(x);
    return a;
}

static void check_linear(const char *name, tf_weight w) {
    static const int counts[] = {1, 3, 6, 9};      /* every tile shape of up to four rows */
    for (int i = 0; i < 4; i++) {
        int rows = counts[i];
        linear_case c = {w, make_acts(rows, w.k)};
        char label[64];
        snprintf(label, sizeof label, "linear-%s-rows%d", name, rows);
        compare(label, run_linear, &c, (size_t)rows * w.n);
    }
}

/* Q4_0/Q5_0-style blocks (nibbles, fifth bits, d and, with TF_HAS_MIN, m) and Q8 with
 * or without a min; scales fp32, or fp16 with TF_HALF (as GGUF files store them). */
static tf_weight block_weight(int fmt, int flags, int n, int k) {
    int nb = k / 32, S = flags & TF_HAS_MIN ? 2 : 1, qrow = fmt == TF_Q8 ? k : k / 2;
    int es = flags & TF_HALF ? 2 : 4;
    uint8_t *q = zalloc((size_t)n * qrow), *qh = zalloc((size_t)n * nb * 4), *s = zalloc((size_t)n * S * nb * es);
    for (size_t i = 0; i < (size_t)n * qrow; i++) q[i] = (uint8_t)rnd();
    for (size_t i = 0; i < (size_t)n * nb * 4; i++) qh[i] = (uint8_t)rnd();
    for (size_t i = 0; i < (size_t)n * S * nb; i++) {
        float f = frnd() * 0.01f;
        uint16_t h = tf_f2h(f);
        if (es == 2) memcpy(s + 2 * i, &h, 2);
        else memcpy(s + 4 * i, &f, 4);
    }
    int groups = (n + 15) / 16, bits = fmt == TF_Q8 ? 512 : (flags & TF_HIGH) ? 320 : 256;
    uint8_t *oq = zalloc((size_t)groups * nb * bits), *os = zalloc((size_t)groups * nb * S * 16 * es);
    tf_bpack(fmt, flags, n, k, q, (flags & TF_HIGH) ? qh : NULL, s, oq, os);
    return (tf_weight){fmt, flags, n, k, oq, os, NULL};
}

/* GGUF Q4_K / Q5_K / Q6_K super-blocks of random bits with finite fp16 scales. */
static tf_weight k_weight(int fmt, int n, int k) {
    int size = fmt == TF_K4 ? 144 : fmt == TF_K5 ? 176 : 210, nsb = k / 256, groups = (n + 7) / 8;
    uint8_t *raw = zalloc((size_t)n * nsb * size);
    for (size_t i = 0; i < (size_t)n * nsb * size; i++) raw[i] = (uint8_t)rnd();
    for (size_t b = 0; b < (size_t)n * nsb; b++) {
        uint16_t d = 0x2E66, dmin = 0x2A00;                              /* about 0.1 and 0.05 */
        memcpy(raw + b * size + (fmt == TF_K6 ? 208 : 0), &d, 2);
        if (fmt != TF_K6) memcpy(raw + b * size + 2, &dmin, 2);
    }
    int bits = fmt == TF_K4 ? 1024 : fmt == TF_K5 ? 1280 : 1536, meta = fmt == TF_K6 ? 176 : 128;
    uint8_t *oq = zalloc((size_t)groups * nsb * bits), *os = zalloc((size_t)groups * nsb * meta);
    tf_kpack(fmt, raw, n, k, oq, os);
    free(raw);
    return (tf_weight){fmt, 0, n, k, oq, os, NULL};
}

/* ---------------------------------------------------------------- attention */

typedef struct { tf_attn t; int by_head; } attend_case;

/* the row's kv heads in one call, or one call a head (each head's bits the same) */
static void run_attend(void *ctx, float *out) {
    const attend_case *c = ctx;
    tf_attn t = c->t;
    float *scratch = zalloc((size_t)tf_attend_scratch(&t, t.pos[0]) * 4);
    t.out = out;
    if (c->by_head)
        for (int h = 0; h < t.kv_heads; h++) tf_attend(&t, 0, h, h + 1, scratch);
    else
        tf_attend(&t, 0, 0, t.kv_heads, scratch);
    free(scratch);
}

/* fp16 keys and values, or (i8) int8 codes with a scale a position and kv head */
static void check_attend(int d, int B, int i8, int KVH, int H) {
    enum { BLOCKS = 12 };
    static const int32_t table[BLOCKS] = {5, 2, 7, 0, 11, 3, 9, 1, 4, 10, 6, 8};
    static const int32_t offset = 0;
    int32_t pos = 300 < BLOCKS * B ? 300 : BLOCKS * B - 1;
    int64_t stride = (int64_t)KVH * d * B, bytes = stride * (i8 ? 1 : 2);
    uint16_t *kc = zalloc(BLOCKS * stride * 2), *vc = zalloc(BLOCKS * stride * 2);
    float *ks = zalloc(BLOCKS * KVH * B * 4), *vs = zalloc(BLOCKS * KVH * B * 4);
    for (int64_t i = 0; i < BLOCKS * stride; i++) {
        if (i8) {
            ((int8_t *)kc)[i] = (int8_t)(rnd() % 255 - 127);
            ((int8_t *)vc)[i] = (int8_t)(rnd() % 255 - 127);
        } else {
            kc[i] = tf_f2h(frnd());
            vc[i] = tf_f2h(frnd());
        }
    }
    for (int i = 0; i < BLOCKS * KVH * B; i++) {
        ks[i] = (frnd() + 1.5f) / 127.0f;
        vs[i] = (frnd() + 1.5f) / 127.0f;
    }
    float *q = zalloc(H * d * 4);
    for (int i = 0; i < H * d; i++) q[i] = frnd() * 0.3f;
    attend_case c = {{q, NULL, 1, H, KVH, d, B, H * d, H * d, &pos, &offset, table, kc, vc, bytes,
                      i8 ? ks : NULL, i8 ? vs : NULL}, 0};
    char label[64], heads[8] = "";                  /* query heads a kv head, named where not three */
    if (H != 3 * KVH) snprintf(heads, sizeof heads, "-g%d", H / KVH);
    for (c.by_head = 0; c.by_head < 2; c.by_head++) {
        snprintf(label, sizeof label, "attend%s-d%d-block%d%s%s", i8 ? "-int8" : "", d, B, heads, c.by_head ? "-by-head" : "");
        compare(label, run_attend, &c, (size_t)H * d);
    }
}

/* ---------------------------------------------------------------- row ops */

enum { N = 1000 };
static float xa[N], xb[N];

static void run_softmax(void *ctx, float *y) {
    (void)ctx;
    memcpy(y, xa, sizeof xa);
    tf_softmax_rows(y, 2, N / 2, N / 2, y + N);      /* the two sums after the rows */
}
static void run_silu_mul(void *ctx, float *y) { (void)ctx; tf_silu_mul(xa, xb, y, N); }
static void run_rms_norm(void *ctx, float *y) { (void)ctx; tf_rms_norm(xa, xb, 1e-5f, N, y); }

int main(void) {
    const int n = 40, k = 512;
    check_linear("q4a", block_weight(TF_Q4A, TF_HAS_MIN, n, k));
    check_linear("q5a", block_weight(TF_Q4A, TF_HIGH | TF_HAS_MIN, n, k));
    check_linear("q4o", block_weight(TF_Q4A, 0, n, k));
    check_linear("q5o", block_weight(TF_Q4A, TF_HIGH, n, k));
    check_linear("q8", block_weight(TF_Q8, 0, n, k));
    check_linear("q8m", block_weight(TF_Q8, TF_HAS_MIN, n, k));
    check_linear("q4a-half", block_weight(TF_Q4A, TF_HAS_MIN | TF_HALF, n, k));
    check_linear("q5a-half", block_weight(TF_Q4A, TF_HIGH | TF_HAS_MIN | TF_HALF, n, k));
    check_linear("q5o-half", block_weight(TF_Q4A, TF_HIGH | TF_HALF, n, k));
    check_linear("q8-half", block_weight(TF_Q8, TF_HALF, n, k));
    check_linear("k4", k_weight(TF_K4, n, k));
    check_linear("k5", k_weight(TF_K5, n, k));
    check_linear("k6", k_weight(TF_K6, n, k));
    for (int i8 = 0; i8 < 2; i8++)
        for (int d = 64; d <= 128; d += 64)
            for (int B = 16; B <= 32; B += 16) {
                check_attend(d, B, i8, 3, 9);               /* three query heads a kv head */
                check_attend(d, B, i8, 2, 12);              /* six (Qwen2.5-1.5B): AVX-512 scores in two passes, values in one */
                check_attend(d, B, i8, 2, 14);              /* seven (Qwen2.5-0.5B): the wide AVX2 form */
                check_attend(d, B, i8, 2, 16);              /* eight: four and four */
            }
    for (int i = 0; i < N; i++) {
        xa[i] = frnd() * 12.0f;
        xb[i] = frnd();
    }
    xa[7] = -95.0f;                 /* exp's clamp at -88 (softmax and SiLU) and at 88 (SiLU) */
    xa[40] = 100.0f;
    xa[600] = NAN;                  /* a NaN passes through exp, in a vector of sixteen */
    compare("softmax", run_softmax, NULL, N + 2);
    compare("silu_mul", run_silu_mul, NULL, N);
    compare("rms_norm", run_rms_norm, NULL, N);
    return fails != 0;
}
