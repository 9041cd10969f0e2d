#include "harness.h"

#include <stdlib.h>

/* One test program is one process: the count of failures is its only state. */
static int failures;

int tsr_test_failures(void) {
    if (failures == 0) printf("ok\n");
    return failures ? 1 : 0;
}

void tsr_test_fail(const char *file, int line, const char *what) {
    failures++;
    fprintf(stderr, "%s:%d: check failed: %s\n", file, line, what);
}

static void *count_alloc(size_t size, void *user) {
    tsr_test_counts *counts = user;
    void *p = NULL;
    if (posix_memalign(&p, 64, size ? size : 1) != 0) return NULL;
    counts->live++;
    counts->total++;
    return p;
}

static void count_free(void *p, void *user) {
    tsr_test_counts *counts = user;
    if (p) counts->live--;
    free(p);
}

tessera_allocator tsr_test_counting_allocator(tsr_test_counts *counts) {
    tessera_allocator a = {count_alloc, count_free, counts};
    return a;
}
