/* tf_ahead.h's walk. */
#include "tf_ahead.h"

tf_ahead tf_ahead_walk;
const tf_span *tf_ahead_spans;

void tf_ahead_plan(const tf_span *spans, int n, int64_t steps) {
    tf_ahead_clear();
    if (n <= 0 || steps <= 0) return;
    int64_t lines = 0;
    for (int i = 0; i < n; i++) lines += (spans[i].n + 63) / 64;
    tf_ahead_spans = spans;
    tf_ahead a = {0, 0, 0, n, (int)((lines + steps - 1) / steps)};
    tf_ahead_walk = a;
}

void tf_ahead_clear(void) { tf_ahead_walk.rate = 0; }

/* On by default where measured to help: a Zen 4 core (one thread, 8 rows of 512
 * positions) took SmolLM2's step from 14.25-14.83 ms to 13.28-13.67, the 0.5B's 3% and
 * the 1.5B's 1.5% shorter (tf_model.c).  An Intel Ice Lake core (12 GB/s from DRAM
 * against the Zen 4's 31.6), 8 streams of the bench's prompt on one thread, builds
 * alternated in separate processes: SmolLM2 279 -> 302 tokens/s without it (medians of
 * 18 rounds each), the 1.5B 49.7 -> 57.2 (4 rounds each). */
static int kv_ahead = -1;

int tf_kv_ahead_default(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    return __builtin_cpu_is("amd") ? 1 : 0;
#else
    return 0;
#endif
}

int tf_kv_ahead(void) {
    if (kv_ahead < 0) kv_ahead = tf_kv_ahead_default();
    return kv_ahead;
}

void tf_set_kv_ahead(int on) { kv_ahead = on < 0 ? tf_kv_ahead_default() : on != 0; }
