/* A small thread pool: a job is split among n threads by index; the caller
 * runs index 0 itself.  Jobs split outputs only, never a reduction, so the
 * thread count never changes a result's bits. */
#ifndef TF_POOL_H
#define TF_POOL_H

typedef void (*tf_job)(void *ctx, int ith, int nth);

int tf_pool_set_threads(int n);   /* 1..64; returns the count in force */
int tf_pool_threads(void);
void tf_pool_run(tf_job job, void *ctx);

#endif
