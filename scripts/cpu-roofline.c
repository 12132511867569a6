/* The ceilings one core of this x86-64 CPU sets on the CPU engine's decode step: its
 * clock, how fast it reads memory (one sequential stream, eight interleaved streams,
 * and 8 KB blocks in random order as the paged KV cache lies; and every core at once,
 * the ceiling of a step on all of them), and how many int8 and
 * fp32 multiply-adds it retires a cycle (AVX-512 VNNI vpdpbusd and vfmadd231ps, alone
 * and mixed, to show whether they share a port; vpdpbusd also as the int8 tiles issue it,
 * each with a broadcast of eight activation bytes; and which of the kernels' other steps
 * take vpdpbusd's port).  Built and run by scripts/cpu-roofline. */
#define _GNU_SOURCE
#include <immintrin.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

/* GHz from a chain of dependent one-cycle adds */
static double clock_ghz(void) {
    long x = 0, n = 300000000;
    double t = now();
    for (long i = 0; i < n; i++) __asm__ volatile("add $1,%0\n\tadd $1,%0\n\tadd $1,%0\n\tadd $1,%0" : "+r"(x));
    return 4.0 * n / (now() - t) / 1e9;
}

enum { MB = 1 << 20, SIZE = 256 * MB };

/* acc plus the 64-byte line at p, read as two 32-byte loads */
static inline __m256i add_line(__m256i acc, const char *p) {
    acc = _mm256_add_epi64(acc, _mm256_load_si256((const __m256i *)p));
    return _mm256_add_epi64(acc, _mm256_load_si256((const __m256i *)(p + 32)));
}

/* GB/s reading buf in `streams` interleaved sequential parts, each asked for 1 KB ahead */
static double read_streams(const char *buf, int streams) {
    double best = 0;
    size_t per = SIZE / streams;
    for (int rep = 0; rep < 4; rep++) {
        __m256i acc = _mm256_setzero_si256();
        double t = now();
        for (size_t i = 0; i < per; i += 64)
            for (int s = 0; s < streams; s++) {
                const char *p = buf + s * per + i;
                _mm_prefetch(p + 1024, _MM_HINT_T0);
                acc = add_line(acc, p);
            }
        double gbs = SIZE / (now() - t) / 1e9;
        __asm__ volatile("" : : "x"(acc));
        if (gbs > best) best = gbs;
    }
    return best;
}

/* One thread's part of read_cores: from the first barrier to the second, its lines in
 * order, each asked for 1 KB ahead; on core `cpu` (the script pins the process to core 0). */
typedef struct {
    const char *p;
    size_t n;
    int cpu;
    pthread_barrier_t *bar;
} read_part;
static void *read_part_run(void *arg) {
    read_part *a = arg;
#ifdef __linux__
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(a->cpu, &set);
    pthread_setaffinity_np(pthread_self(), sizeof set, &set);
#endif
    __m256i acc = _mm256_setzero_si256();
    pthread_barrier_wait(a->bar);
    for (size_t i = 0; i < a->n; i += 64) {
        _mm_prefetch(a->p + i + 1024, _MM_HINT_T0);
        acc = add_line(acc, a->p + i);
    }
    __asm__ volatile("" : : "x"(acc));
    pthread_barrier_wait(a->bar);
    return NULL;
}

/* GB/s of n threads, one a core, each reading its own n-th of buf at once */
static double read_cores(const char *buf, int n) {
    enum { MAXT = 64 };
    pthread_t th[MAXT];
    read_part parts[MAXT];
    double best = 0;
    n = n < MAXT ? n : MAXT;
    for (int rep = 0; rep < 4; rep++) {
        pthread_barrier_t bar;
        pthread_barrier_init(&bar, NULL, (unsigned)n + 1);
        for (int i = 0; i < n; i++) {
            parts[i] = (read_part){buf + SIZE / n * i, SIZE / n, i, &bar};
            pthread_create(&th[i], NULL, read_part_run, &parts[i]);
        }
        pthread_barrier_wait(&bar);
        double t = now();
        pthread_barrier_wait(&bar);
        double gbs = (double)(SIZE / n * n) / (now() - t) / 1e9;
        for (int i = 0; i < n; i++) pthread_join(th[i], NULL);
        pthread_barrier_destroy(&bar);
        if (gbs > best) best = gbs;
    }
    return best;
}

/* GB/s reading 8 KB blocks in a random order, each block's lines asked for two blocks ahead */
static double read_blocks(const char *buf) {
    enum { BS = 8192, AHEAD = 2 };
    int nb = SIZE / BS, *order = malloc(sizeof(int) * nb);
    for (int i = 0; i < nb; i++) order[i] = i;
    srand(1);
    for (int i = nb - 1; i > 0; i--) {
        int j = rand() % (i + 1), t = order[i];
        order[i] = order[j], order[j] = t;
    }
    double best = 0;
    for (int rep = 0; rep < 4; rep++) {
        __m256i acc = _mm256_setzero_si256();
        double t = now();
        for (int b = 0; b < nb; b++) {
            const char *p = buf + (size_t)order[b] * BS, *pf = b + AHEAD < nb ? buf + (size_t)order[b + AHEAD] * BS : NULL;
            for (int i = 0; i < BS; i += 64) {
                if (pf) _mm_prefetch(pf + i, _MM_HINT_T1);
                acc = add_line(acc, p + i);
            }
        }
        double gbs = SIZE / (now() - t) / 1e9;
        __asm__ volatile("" : : "x"(acc));
        if (gbs > best) best = gbs;
    }
    free(order);
    return best;
}

/* cycles for one pass of `body` (eight independent chains of each instruction it names) */
#define CYCLES(ghz, body)                                                                          \
    ({                                                                                             \
        long n_ = 50000000;                                                                        \
        double t_ = now();                                                                         \
        for (long i_ = 0; i_ < n_; i_++) { body }                                                  \
        (now() - t_) / n_ * (ghz) * 1e9;                                                           \
    })
#define DPB(a, b) __asm__("vpdpbusd %1,%2,%0" : "+v"(a) : "v"(b), "v"(w))
#define DP(a) DPB(a, v)
#define FM(a) __asm__("vfmadd231ps %1,%2,%0" : "+v"(a) : "v"(x), "v"(y))
/* vpdpbusd as the int8 tiles issue it: its other operand eight activation bytes of a row,
 * broadcast from memory (row r at 64r + 8i: rows of one L1-resident chunk) */
#define DB(a, r, i)                                                                                \
    do {                                                                                           \
        __m512i b_;                                                                                \
        __asm__ volatile("vpbroadcastq %1,%0" : "=v"(b_) : "m"(xs[8 * (r) + (i)]));                \
        DPB(a, b_);                                                                                \
    } while (0)
#define DB8(i) DB(a0, 0, i); DB(a1, 1, i); DB(a2, 2, i); DB(a3, 3, i); DB(a4, 4, i); DB(a5, 5, i); DB(a6, 6, i); DB(a7, 7, i);

__attribute__((target("avx512f,avx512vnni"))) static void vnni(double ghz) {
    __m512i a0 = _mm512_set1_epi32(0), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
    __m512i v = _mm512_set1_epi8(3), w = _mm512_set1_epi8(5);
    __m512 f0 = _mm512_set1_ps(0), f1 = f0, f2 = f0, f3 = f0, f4 = f0, f5 = f0, f6 = f0, f7 = f0;
    __m512 x = _mm512_set1_ps(0.5f), y = _mm512_set1_ps(1.0f);
    double d = CYCLES(ghz, DP(a0); DP(a1); DP(a2); DP(a3); DP(a4); DP(a5); DP(a6); DP(a7););
    double f = CYCLES(ghz, FM(f0); FM(f1); FM(f2); FM(f3); FM(f4); FM(f5); FM(f6); FM(f7););
    double m = CYCLES(ghz, DP(a0); DP(a1); DP(a2); DP(a3); DP(a4); DP(a5); DP(a6); DP(a7);
                           FM(f0); FM(f1); FM(f2); FM(f3); FM(f4); FM(f5); FM(f6); FM(f7););
    static int64_t xs[64];
    double b = CYCLES(ghz, DB8(0) DB8(1) DB8(2) DB8(3) DB8(4) DB8(5) DB8(6) DB8(7)) / 8;
    __asm__ volatile("" : : "v"(a0), "v"(a1), "v"(a2), "v"(a3), "v"(a4), "v"(a5), "v"(a6), "v"(a7));
    __asm__ volatile("" : : "v"(f0), "v"(f1), "v"(f2), "v"(f3), "v"(f4), "v"(f5), "v"(f6), "v"(f7));
    printf("zmm vpdpbusd: %.2f a cycle (%.0f int8 MAC a cycle, %.0f GMAC/s)\n", 8 / d, 8 / d * 64, 8 / d * 64 * ghz);
    printf("zmm vpdpbusd, a 64-bit broadcast from memory each: %.2f a cycle (%.0f int8 MAC a cycle)\n", 8 / b,
           8 / b * 64);
    printf("zmm vfmadd231ps: %.2f a cycle (%.0f fp32 FMA a cycle)\n", 8 / f, 8 / f * 16);
    printf("8 of each, mixed: %.1f cycles (%s)\n", m, m > 1.5 * (d > f ? d : f) ? "one port: they add up" : "they overlap");
}

/* Which instructions take vpdpbusd's port: six vpdpbusd chains and two of the instruction
 * (its AT&T operands: %0 its own register, %1 a constant), cycles an iteration: about 6
 * where it issues beside them, 8 or more where it takes their port. */
#define ONE(a, op) __asm__(op : "+v"(a) : "v"(c))
#define BESIDE(mn, operands)                                                                       \
    printf(" %s %.2f", #mn,                                                                        \
           CYCLES(ghz, DP(a0); DP(a1); DP(a2); DP(a3); DP(a4); DP(a5); ONE(a6, #mn " " operands);    \
                  ONE(a7, #mn " " operands);))
__attribute__((target("avx512f,avx512vnni,avx512bw"))) static void ports(double ghz) {
    __m512i a0 = _mm512_set1_epi32(0), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
    __m512i v = _mm512_set1_epi8(3), w = _mm512_set1_epi8(5), c = _mm512_set1_epi32(7);
    printf("beside 6 zmm vpdpbusd, 2 of each (cycles; 6: its own port, 8: vpdpbusd's):");
    BESIDE(vmulps, "%1,%0,%0");
    BESIDE(vpmaddwd, "%1,%0,%0");
    BESIDE(vpdpwssd, "%1,%1,%0");
    BESIDE(vpmulld, "%1,%0,%0");
    BESIDE(vcvtdq2ps, "%1,%0");
    BESIDE(vcvtph2ps, "%t1,%0");
    BESIDE(vpaddd, "%1,%0,%0");
    BESIDE(vpermd, "%0,%1,%0");
    printf("\n");
    __asm__ volatile("" : : "v"(a0), "v"(a1), "v"(a2), "v"(a3), "v"(a4), "v"(a5), "v"(a6), "v"(a7));
}

int main(void) {
    double ghz = clock_ghz();
    printf("clock: %.2f GHz\n", ghz);
    char *buf = aligned_alloc(2 * MB, SIZE);
    if (!buf) return 1;
#ifdef MADV_HUGEPAGE
    madvise(buf, SIZE, MADV_HUGEPAGE);                  /* as the engine maps its weights and KV */
#endif
    memset(buf, 1, SIZE);
    printf("read, 1 stream: %.1f GB/s\n", read_streams(buf, 1));
    printf("read, 8 streams: %.1f GB/s\n", read_streams(buf, 8));
    printf("read, 8 KB blocks in random order: %.1f GB/s\n", read_blocks(buf));
    int cores = (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (cores > 1) printf("read, %d cores at once (one stream each): %.1f GB/s\n", cores, read_cores(buf, cores));
    free(buf);
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512vnni")) {
        vnni(ghz);
        ports(ghz);
    } else
        printf("no AVX-512 VNNI: the int8 peak is not probed here\n");
    return 0;
}
