/* The next layer's keys and values, asked for while this layer's linears run.
 *
 * Where a layer's attention reads its KV from memory (several rows, each its own
 * sequence's blocks) on one thread, it waits on those reads, while the linears before it
 * leave the core's misses in flight mostly unused.  So the forward lists the blocks the
 * next layer's attention will read (tf_ahead_plan), and the linear tiles ask for their
 * lines into L2 a few at a time among their own steps, spread over the layer's rest; the
 * attention then finds them in the cache.  Only the memory traffic moves: no result
 * depends on it. */
#ifndef TF_AHEAD_H
#define TF_AHEAD_H

#include <stdint.h>

typedef struct {
    const char *p;
    int64_t n;
} tf_span;

/* The walk: the span being read (p..end), the spans left (next..last), and the lines
 * asked for at each tile step (0: nothing to do). */
typedef struct {
    const char *p, *end;
    int next, last, rate;
} tf_ahead;

extern tf_ahead tf_ahead_walk;
extern const tf_span *tf_ahead_spans;

/* Whether a forward walks the next layer's KV at all (tf_model.c): by default on AMD
 * CPUs only, where it was measured to help, and off elsewhere (tf_ahead.c);
 * tf_set_kv_ahead(-1) restores that default.  Either way the same bits. */
int tf_kv_ahead(void);
int tf_kv_ahead_default(void);
void tf_set_kv_ahead(int on);

/* spans[0..n), spread over about `steps` tile steps; tf_ahead_clear ends the walk. */
void tf_ahead_plan(const tf_span *spans, int n, int64_t steps);
void tf_ahead_clear(void);

/* A tile that walks (on: its first pass with enough rows) keeps a copy of the walk in
 * registers, `kv`, steps it with TF_AHEAD_STEP and writes it back with TF_AHEAD_PUT. */
#define TF_AHEAD_TAKE(on)                                                                          \
    tf_ahead kv = tf_ahead_walk;                                                                    \
    const int kv_on = (on) && kv.rate > 0
#define TF_AHEAD_STEP()                                                                            \
    do {                                                                                            \
        if (kv_on) tf_ahead_step(&kv);                                                              \
    } while (0)
#define TF_AHEAD_PUT()                                                                             \
    do {                                                                                            \
        if (kv_on) tf_ahead_walk = kv;                                                              \
    } while (0)

/* One tile step: the walk's next `rate` lines. */
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
