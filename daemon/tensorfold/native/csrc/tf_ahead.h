/* The next layer's keys and values, asked for while this layer's MLP runs.
 *
 * Where a layer's attention reads its KV from memory (several rows, each its own
 * sequence's blocks), it waits on those reads while the MLP before it leaves the memory
 * bus half idle.  So the forward lists the blocks the next layer's attention will read
 * (tf_ahead_plan), and the linear tiles of the MLP ask for their lines into L2 a few at a
 * time among their own steps, spread over the whole MLP; the attention then finds them
 * in the cache.  Each thread walks its own share of the list.  Only the memory traffic
 * moves: no result depends on it. */
#ifndef TF_AHEAD_H
#define TF_AHEAD_H

#include <stdint.h>

#include "tf_pool.h"

typedef struct {
    const char *p;
    int64_t n;
} tf_span;

/* A thread's walk: the span being read (p..end), the spans left (next..last), and the
 * lines it asks for at each step of a tile (0: nothing to do). */
typedef struct {
    const char *p, *end;
    int next, last, rate;
} tf_ahead;

extern tf_ahead tf_ahead_of[TF_MAX_THREADS];
extern const tf_span *tf_ahead_spans;

/* Spans spans[0..n) for `threads` threads, each thread's lines spread over about
 * `steps` tile steps of its own; tf_ahead_clear ends the walk. */
void tf_ahead_plan(const tf_span *spans, int n, int threads, int64_t steps);
void tf_ahead_clear(void);

/* One tile step: the next `rate` lines of this thread's walk. */
static inline __attribute__((always_inline)) void tf_ahead_step(tf_ahead *a) {
    for (int i = 0; i < a->rate; i++) {
        if (a->p >= a->end) {
            if (a->next >= a->last) {
                a->rate = 0;
                return;
            }
            a->p = tf_ahead_spans[a->next].p;
            a->end = a->p + tf_ahead_spans[a->next].n;
            a->next++;
        }
        __builtin_prefetch(a->p, 0, 2);
        a->p += 64;
    }
}

#endif
