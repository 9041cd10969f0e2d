/* The CPU thread pool: every index of [0, n) is run exactly once, by contiguous chunks, for
 * pools of 1, 2, 3 and 8 threads (more than this machine's cores: workers then sleep and wake);
 * many short tasks in a row (the decode pattern); create/free cycles. The test's own shared
 * state is atomic counters per index and per task, so it is race-free by construction. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/thread_pool.h"
#include "harness.h"

typedef struct cover {
    atomic_int *hits;      /* per index */
    atomic_long calls;     /* chunks run */
    atomic_long items;     /* indices run */
    atomic_int bad_range;  /* a chunk outside [0, n) or empty */
    int64_t n;
} cover;

static void count_range(void *ctx, int64_t begin, int64_t end) {
    cover *c = ctx;
    if (begin < 0 || end > c->n || begin >= end) atomic_fetch_add(&c->bad_range, 1);
    for (int64_t i = begin; i < end && i >= 0 && i < c->n; i++) atomic_fetch_add_explicit(&c->hits[i], 1, memory_order_relaxed);
    atomic_fetch_add(&c->calls, 1);
    atomic_fetch_add(&c->items, end - begin);
}

static void coverage(tsr_thread_pool *pool, int64_t n) {
    cover c;
    c.n = n;
    c.hits = calloc((size_t)(n ? n : 1), sizeof(atomic_int));
    for (int64_t i = 0; i < n; i++) atomic_init(&c.hits[i], 0);
    atomic_init(&c.calls, 0);
    atomic_init(&c.items, 0);
    atomic_init(&c.bad_range, 0);
    tsr_thread_pool_run(pool, n, count_range, &c);
    /* run returns only when every chunk is done: the counts are final here */
    long once = 0;
    for (int64_t i = 0; i < n; i++) once += atomic_load(&c.hits[i]) == 1;
    if (once != n) fprintf(stderr, "pool of %d, n = %lld: %ld of the indices ran exactly once\n",
                           tsr_thread_pool_size(pool), (long long)n, once);
    CHECK_EQ_INT(once, n);
    CHECK_EQ_INT(atomic_load(&c.items), n);
    CHECK_EQ_INT(atomic_load(&c.bad_range), 0);
    /* at most one chunk per thread; none at all for an empty range */
    CHECK(atomic_load(&c.calls) <= tsr_thread_pool_size(pool));
    if (n == 0) CHECK_EQ_INT(atomic_load(&c.calls), 0);
    free(c.hits);
}

/* The decode pattern: many small tasks back to back; each must see all of its items done
 * before the next begins (task k's chunks add to slot k only). */
typedef struct many {
    atomic_long sums[64];
    int64_t task;
} many;

static void add_task(void *ctx, int64_t begin, int64_t end) {
    many *m = ctx;
    for (int64_t i = begin; i < end; i++) atomic_fetch_add_explicit(&m->sums[m->task % 64], i + 1, memory_order_relaxed);
}

static void decode_pattern(tsr_thread_pool *pool, int64_t tasks) {
    static many m;
    for (int i = 0; i < 64; i++) atomic_init(&m.sums[i], 0);
    long wrong = 0;
    for (int64_t k = 0; k < tasks; k++) {
        m.task = k; /* written between runs only: run publishes it to the workers */
        int64_t n = 1 + k % 17;
        atomic_store(&m.sums[k % 64], 0);
        tsr_thread_pool_run(pool, n, add_task, &m);
        wrong += atomic_load(&m.sums[k % 64]) != n * (n + 1) / 2;
    }
    CHECK_EQ_INT(wrong, 0);
}

int main(void) {
    tsr_alloc a;
    tsr_alloc_init(&a, NULL);
    const int32_t sizes[] = {1, 2, 3, 8};
    const int64_t ranges[] = {0, 1, 2, 7, 1000, 100003};
    for (size_t s = 0; s < TSR_ARRAY_LEN(sizes); s++) {
        tsr_thread_pool *pool = tsr_thread_pool_new(&a, sizes[s]);
        CHECK(pool != NULL);
        if (!pool) continue;
        CHECK_EQ_INT(tsr_thread_pool_size(pool), sizes[s]);
        for (size_t r = 0; r < TSR_ARRAY_LEN(ranges); r++) coverage(pool, ranges[r]);
        /* 1,000 back-to-back tasks where the pool fits a 2-core machine; an oversubscribed pool
         * waits for descheduled workers (a scheduler slice per task, more under qemu-user and
         * beside other tests in CI), so it gets fewer */
        decode_pattern(pool, sizes[s] <= 2 ? 1000 : 100);
        /* the same pool again after the burst */
        coverage(pool, 100003);
        tsr_thread_pool_free(pool);
    }
    /* 0 or negative threads: one (the caller) */
    tsr_thread_pool *single = tsr_thread_pool_new(&a, 0);
    CHECK(single && tsr_thread_pool_size(single) == 1);
    if (single) coverage(single, 1000);
    tsr_thread_pool_free(single);
    /* create/free cycles, some with a run, some without (workers stopped while asleep or spinning) */
    for (int cycle = 0; cycle < 20; cycle++) {
        tsr_thread_pool *pool = tsr_thread_pool_new(&a, 2 + cycle % 3);
        CHECK(pool != NULL);
        if (!pool) continue;
        if (cycle % 2) coverage(pool, 1 + cycle * 31);
        tsr_thread_pool_free(pool);
    }
    tsr_thread_pool_free(NULL);
    return tsr_test_failures();
}
