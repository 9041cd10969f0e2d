#include "thread_pool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>

/* Spins of a waiting worker before it sleeps on the condition variable; and spins of any waiting
 * thread before it starts yielding its core (with more threads than free cores, a thread that
 * only spins would hold the core the thread it waits for needs). */
#define SPIN_ITERATIONS 50000
#define SPINS_BEFORE_YIELD 2000

typedef struct worker {
    tsr_thread_pool *pool;
    int32_t index;
    pthread_t thread;
} worker;

struct tsr_thread_pool {
    tsr_alloc *alloc;
    int32_t n_threads;
    worker *workers; /* n_threads - 1 */
    /* The current task; `generation` increments to publish a new one. */
    tsr_range_fn fn;
    void *ctx;
    int64_t n;
    atomic_uint_fast64_t generation;
    atomic_int pending; /* workers still running the current task */
    atomic_bool stop;
    pthread_mutex_t mutex;
    pthread_cond_t wake;
};

static void run_chunk(tsr_thread_pool *pool, int32_t index) {
    int64_t n = pool->n, t = pool->n_threads;
    int64_t begin = n * index / t, end = n * (index + 1) / t;
    if (begin < end) pool->fn(pool->ctx, begin, end);
}

static void *worker_main(void *arg) {
    worker *w = arg;
    tsr_thread_pool *pool = w->pool;
    uint_fast64_t seen = 0;
    for (;;) {
        uint_fast64_t now;
        int spins = 0;
        while ((now = atomic_load_explicit(&pool->generation, memory_order_acquire)) == seen &&
               !atomic_load_explicit(&pool->stop, memory_order_acquire)) {
            if (++spins < SPIN_ITERATIONS) {
                if (spins > SPINS_BEFORE_YIELD) sched_yield();
                continue;
            }
            pthread_mutex_lock(&pool->mutex);
            while (atomic_load(&pool->generation) == seen && !atomic_load(&pool->stop))
                pthread_cond_wait(&pool->wake, &pool->mutex);
            pthread_mutex_unlock(&pool->mutex);
        }
        if (atomic_load(&pool->stop)) return NULL;
        seen = now;
        run_chunk(pool, w->index);
        atomic_fetch_sub_explicit(&pool->pending, 1, memory_order_acq_rel);
    }
}

tsr_thread_pool *tsr_thread_pool_new(tsr_alloc *a, int32_t n_threads) {
    if (n_threads < 1) n_threads = 1;
    tsr_thread_pool *pool = tsr_calloc(a, 1, sizeof *pool);
    if (!pool) return NULL;
    pool->alloc = a;
    pool->n_threads = n_threads;
    atomic_init(&pool->generation, 0);
    atomic_init(&pool->pending, 0);
    atomic_init(&pool->stop, false);
    pthread_mutex_init(&pool->mutex, NULL);
    pthread_cond_init(&pool->wake, NULL);
    if (n_threads > 1) {
        pool->workers = tsr_calloc(a, (size_t)n_threads - 1, sizeof(worker));
        if (!pool->workers) {
            tsr_thread_pool_free(pool);
            return NULL;
        }
        for (int32_t i = 1; i < n_threads; i++) {
            worker *w = &pool->workers[i - 1];
            w->pool = pool;
            w->index = i;
            if (pthread_create(&w->thread, NULL, worker_main, w) != 0) {
                pool->n_threads = i; /* the ones started so far are joined by free */
                tsr_thread_pool_free(pool);
                tsr_error(TESSERA_ERROR_OUT_OF_MEMORY, "cannot start thread %d of the CPU thread pool", i);
                return NULL;
            }
        }
    }
    return pool;
}

int32_t tsr_thread_pool_size(const tsr_thread_pool *pool) { return pool->n_threads; }

void tsr_thread_pool_run(tsr_thread_pool *pool, int64_t n, tsr_range_fn fn, void *ctx) {
    if (pool->n_threads == 1 || n < 2) {
        if (n > 0) fn(ctx, 0, n);
        return;
    }
    pool->fn = fn;
    pool->ctx = ctx;
    pool->n = n;
    atomic_store_explicit(&pool->pending, pool->n_threads - 1, memory_order_release);
    pthread_mutex_lock(&pool->mutex);
    atomic_fetch_add_explicit(&pool->generation, 1, memory_order_acq_rel);
    pthread_cond_broadcast(&pool->wake);
    pthread_mutex_unlock(&pool->mutex);
    run_chunk(pool, 0);
    for (int spins = 0; atomic_load_explicit(&pool->pending, memory_order_acquire) > 0; spins++)
        if (spins > SPINS_BEFORE_YIELD) sched_yield();
}

void tsr_thread_pool_free(tsr_thread_pool *pool) {
    if (!pool) return;
    if (pool->workers) {
        pthread_mutex_lock(&pool->mutex);
        atomic_store(&pool->stop, true);
        pthread_cond_broadcast(&pool->wake);
        pthread_mutex_unlock(&pool->mutex);
        for (int32_t i = 1; i < pool->n_threads; i++) pthread_join(pool->workers[i - 1].thread, NULL);
        tsr_free(pool->alloc, pool->workers);
    }
    pthread_mutex_destroy(&pool->mutex);
    pthread_cond_destroy(&pool->wake);
    tsr_free(pool->alloc, pool);
}
