#include "tf_pool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>

#define TF_MAX_THREADS 64
#define TF_SPIN 20000

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
static inline void relax(void) { _mm_pause(); }
#elif defined(__aarch64__)
static inline void relax(void) { __asm__ __volatile__("yield"); }
#else
static inline void relax(void) {}
#endif

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t run_mu = PTHREAD_MUTEX_INITIALIZER;   /* one job at a time, from any thread */
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static pthread_t workers[TF_MAX_THREADS];
static int started = 0;            /* workers alive (threads - 1) */
static int nthreads = 1;
static atomic_uint generation;
static atomic_int done;
static atomic_int stopping;
static tf_job cur_job;
static void *cur_ctx;
static int cur_nth;

static unsigned start_gen[TF_MAX_THREADS];   /* the job count when worker i was made */

static void *worker(void *arg) {
    int ith = (int)(long)arg;
    unsigned seen = start_gen[ith];             /* read before it ran: a job sent meanwhile is new to it */
    for (;;) {
        unsigned g;
        int spins = 0;
        while ((g = atomic_load_explicit(&generation, memory_order_acquire)) == seen) {
            if (atomic_load(&stopping)) return 0;
            if (++spins < TF_SPIN) { relax(); continue; }
            pthread_mutex_lock(&mu);
            while (atomic_load(&generation) == seen && !atomic_load(&stopping)) pthread_cond_wait(&cv, &mu);
            pthread_mutex_unlock(&mu);
            spins = 0;
        }
        seen = g;
        if (ith < cur_nth) cur_job(cur_ctx, ith, cur_nth);
        atomic_fetch_add_explicit(&done, 1, memory_order_release);
    }
}

static int set_threads(int n);

static void stop_workers(void) {
    if (!started) return;
    pthread_mutex_lock(&mu);
    atomic_store(&stopping, 1);
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
    for (int i = 0; i < started; i++) pthread_join(workers[i], 0);
    started = 0;
    atomic_store(&stopping, 0);
}

int tf_pool_set_threads(int n) {
    pthread_mutex_lock(&run_mu);
    int r = set_threads(n);
    pthread_mutex_unlock(&run_mu);
    return r;
}

static int set_threads(int n) {
    if (n < 1) n = 1;
    if (n > TF_MAX_THREADS) n = TF_MAX_THREADS;
    if (n == nthreads && started == n - 1) return n;
    stop_workers();
    nthreads = n;
    for (int i = 1; i < n; i++) {
        start_gen[i] = atomic_load(&generation);
        if (pthread_create(&workers[i - 1], 0, worker, (void *)(long)i) != 0) { nthreads = i; break; }
        started++;
    }
    return nthreads;
}

int tf_pool_threads(void) { return nthreads; }

void tf_pool_run(tf_job job, void *ctx, int want) {
    pthread_mutex_lock(&run_mu);
    int n = want <= 0 || want > nthreads ? nthreads : want;
    if (n <= 1) { job(ctx, 0, 1); pthread_mutex_unlock(&run_mu); return; }
    cur_job = job;
    cur_ctx = ctx;
    cur_nth = n;
    atomic_store(&done, 0);
    pthread_mutex_lock(&mu);
    atomic_fetch_add_explicit(&generation, 1, memory_order_release);
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
    job(ctx, 0, n);
    while (atomic_load_explicit(&done, memory_order_acquire) < started) relax();
    pthread_mutex_unlock(&run_mu);
}
