/* tf_ahead.h's walks: one per pool thread. */
#include "tf_ahead.h"

tf_ahead tf_ahead_of[TF_MAX_THREADS];
const tf_span *tf_ahead_spans;

void tf_ahead_plan(const tf_span *spans, int n, int threads, int64_t steps) {
    tf_ahead_clear();
    if (n <= 0 || steps <= 0) return;
    threads = threads < 1 ? 1 : threads > TF_MAX_THREADS ? TF_MAX_THREADS : threads;
    tf_ahead_spans = spans;
    int64_t per = steps / threads + 1;
    for (int t = 0; t < threads; t++) {
        int lo = (int)((int64_t)n * t / threads), hi = (int)((int64_t)n * (t + 1) / threads);
        int64_t lines = 0;
        for (int i = lo; i < hi; i++) lines += (spans[i].n + 63) / 64;
        tf_ahead a = {0, 0, lo, hi, (int)((lines + per - 1) / per)};
        tf_ahead_of[t] = a;
    }
}

void tf_ahead_clear(void) {
    for (int t = 0; t < TF_MAX_THREADS; t++) tf_ahead_of[t].rate = 0;
}
