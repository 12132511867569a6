/* Byte-level BPE merges for the tokenizer (tensorfold/checkpoints/bpe.py).
 *
 * The merge table is open addressing over 2^bits slots: key (left << 32 | right), value
 * (rank << 32 | merged id), EMPTY where unused.  A word is merged the way the Hugging Face
 * tokenizers BPE model merges one: a queue ordered by (rank, position), each popped merge
 * applied if its left symbol is still there, has a right neighbour, and that pair still
 * merges into the popped id; each merge queues the pairs it forms with its neighbours.
 * So the ids are the ones that library gives for the same word. */
#include <stdint.h>
#include <stdlib.h>

#define EMPTY UINT64_MAX

static inline uint64_t slot_of(uint64_t key, int bits) {
    return (key * 0x9E3779B97F4A7C15ull) >> (64 - bits);
}

/* Fills the table (keys and vals of 1 << bits slots) with merge i = (left[i], right[i]) ->
 * merged[i] at rank i; a pair listed twice keeps its last rank, as a hash map filled in
 * order does.  Returns 0, or -1 if the table has no free slot left. */
int tf_bpe_table(const uint32_t *left, const uint32_t *right, const uint32_t *merged, int64_t n, int bits,
                 uint64_t *keys, uint64_t *vals) {
    uint64_t mask = (1ull << bits) - 1;
    for (uint64_t i = 0; i <= mask; i++) keys[i] = EMPTY;
    for (int64_t i = 0; i < n; i++) {
        uint64_t key = (uint64_t)left[i] << 32 | right[i], s = slot_of(key, bits), probes = 0;
        while (keys[s] != EMPTY && keys[s] != key) {
            s = (s + 1) & mask;
            if (++probes > mask) return -1;
        }
        keys[s] = key;
        vals[s] = (uint64_t)i << 32 | merged[i];
    }
    return 0;
}

typedef struct {
    const uint64_t *keys, *vals;
    int bits;
} table;

/* the pair's value, or EMPTY if it does not merge */
static inline uint64_t lookup(const table *t, uint32_t a, uint32_t b) {
    uint64_t key = (uint64_t)a << 32 | b, mask = (1ull << t->bits) - 1, s = slot_of(key, t->bits);
    for (; t->keys[s] != EMPTY; s = (s + 1) & mask)
        if (t->keys[s] == key) return t->vals[s];
    return EMPTY;
}

typedef struct {
    uint64_t order;     /* rank << 32 | position: the queue's order */
    uint32_t id;        /* what the pair merged into when queued */
} merge;

static void push(merge *heap, int64_t *size, merge m) {
    int64_t i = (*size)++;
    while (i > 0) {
        int64_t up = (i - 1) / 2;
        if (heap[up].order <= m.order) break;
        heap[i] = heap[up];
        i = up;
    }
    heap[i] = m;
}

static merge pop(merge *heap, int64_t *size) {
    merge top = heap[0], last = heap[--*size];
    int64_t i = 0, n = *size;
    for (;;) {
        int64_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && heap[c + 1].order < heap[c].order) c++;
        if (last.order <= heap[c].order) break;
        heap[i] = heap[c];
        i = c;
    }
    if (n) heap[i] = last;
    return top;
}

static void queue_pair(const table *t, merge *heap, int64_t *size, const uint32_t *sym, int64_t a, int64_t b) {
    uint64_t v = lookup(t, sym[a], sym[b]);
    if (v != EMPTY) push(heap, size, (merge){(v & 0xFFFFFFFF00000000ull) | (uint64_t)a, (uint32_t)v});
}

/* Merges the word sym[0..m) in place; next links the live symbols from sym[0] (-1 after
 * the last), dead ones have next == -2. */
static void merge_word(const table *t, uint32_t *sym, int64_t *prev, int64_t *next, merge *heap, int64_t m) {
    int64_t size = 0;
    for (int64_t i = 0; i < m; i++) {
        prev[i] = i - 1;
        next[i] = i + 1 < m ? i + 1 : -1;
    }
    for (int64_t i = 0; i + 1 < m; i++) queue_pair(t, heap, &size, sym, i, i + 1);
    while (size) {
        merge top = pop(heap, &size);
        int64_t p = (int64_t)(top.order & 0xFFFFFFFFull), r = next[p];
        if (r < 0) continue;                                     /* gone, or the last symbol */
        uint64_t v = lookup(t, sym[p], sym[r]);
        if (v == EMPTY || (uint32_t)v != top.id) continue;       /* a pair that changed since */
        sym[p] = top.id;
        next[p] = next[r];
        next[r] = -2;
        if (next[p] >= 0) prev[next[p]] = p;
        if (prev[p] >= 0) queue_pair(t, heap, &size, sym, prev[p], p);
        if (next[p] >= 0) queue_pair(t, heap, &size, sym, p, next[p]);
    }
}

/* ids[0..n): a text's symbols (the vocabulary's one-byte tokens and added tokens);
 * words[i]: the pre-token symbol i belongs to (a run of equal numbers is one word).
 * Writes each word's merged ids to out (at most n) and returns their count, or -1 if
 * scratch memory could not be had. */
int64_t tf_bpe_merge(const uint64_t *keys, const uint64_t *vals, int bits, const uint32_t *ids,
                     const int64_t *words, int64_t n, uint32_t *out) {
    if (n <= 0) return 0;
    table t = {keys, vals, bits};
    uint32_t *sym = malloc(n * sizeof *sym);
    int64_t *prev = malloc(n * sizeof *prev), *next = malloc(n * sizeof *next);
    merge *heap = malloc(3 * n * sizeof *heap);   /* m - 1 pairs, then at most two per merge */
    int64_t count = -1;
    if (sym && prev && next && heap) {
        count = 0;
        for (int64_t s = 0; s < n;) {
            int64_t e = s + 1;
            while (e < n && words[e] == words[s]) e++;
            int64_t m = e - s;
            for (int64_t i = 0; i < m; i++) sym[i] = ids[s + i];
            merge_word(&t, sym, prev, next, heap, m);
            for (int64_t i = 0; i >= 0; i = next[i]) out[count++] = sym[i];
            s = e;
        }
    }
    free(sym);
    free(prev);
    free(next);
    free(heap);
    return count;
}
