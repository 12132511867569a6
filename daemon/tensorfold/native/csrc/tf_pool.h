/* A small thread pool: a job is split among n threads by index; the caller
 * runs index 0 itself.  Jobs split outputs only, never a reduction, so the
 * thread count never changes a result's bits. */
#ifndef TF_POOL_H
#define TF_POOL_H

typedef void (*tf_job)(void *ctx, int ith, int nth);

int tf_pool_set_threads(int n);   /* 1..64 threads (the caller and n-1 workers); returns the count */
int tf_pool_threads(void);
/* job(ctx, i, nth) for i in 0..nth-1, nth = min(n, the pool's threads); n <= 0: all of them */
void tf_pool_run(tf_job job, void *ctx, int n);

#endif
