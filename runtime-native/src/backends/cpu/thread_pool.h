/* A fixed pool of worker threads that runs one parallel-for at a time. The caller takes part, so
 * n_threads = 1 starts no thread. Workers spin briefly between tasks (a decode step is hundreds of
 * short launches, and waking a sleeping thread costs more than a small kernel), then sleep. */
#ifndef TSR_THREAD_POOL_H
#define TSR_THREAD_POOL_H

#include "common.h"

typedef struct tsr_thread_pool tsr_thread_pool;

/* Runs items [begin, end) of one task; `worker` is 0 for the caller. */
typedef void (*tsr_range_fn)(void *ctx, int64_t begin, int64_t end);

tsr_thread_pool *tsr_thread_pool_new(tsr_alloc *a, int32_t n_threads);
int32_t tsr_thread_pool_size(const tsr_thread_pool *pool);
/* Splits [0, n) into contiguous chunks, one per thread, and returns when all are done. */
void tsr_thread_pool_run(tsr_thread_pool *pool, int64_t n, tsr_range_fn fn, void *ctx);
void tsr_thread_pool_free(tsr_thread_pool *pool);

#endif
