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
