/* The allocator counts its allocations; the last error is per thread and takes context. */
#include <string.h>

#include "common.h"
#include "harness.h"

int main(void) {
    tsr_alloc a;
    tsr_alloc_init(&a, NULL);
    void *p = tsr_malloc(&a, 100);
    CHECK(p != NULL);
    CHECK(((uintptr_t)p % 64) == 0);
    CHECK_EQ_INT(a.count, 1);
    tsr_free(&a, p);
    CHECK(tsr_calloc(&a, SIZE_MAX / 2, 4) == NULL);
    CHECK(strstr(tessera_last_error(), "overflows") != NULL);
    tsr_error(TESSERA_ERROR_IO, "cannot open %s", "x.bin");
    tsr_error_context(TESSERA_ERROR_IO, "loading %s", "dir");
    CHECK(strcmp(tessera_last_error(), "loading dir: cannot open x.bin") == 0);
    CHECK(strcmp(tessera_status_name(TESSERA_ERROR_FORMAT), "TESSERA_ERROR_FORMAT") == 0);
    /* The recycler asks its parent once per size class; freed blocks come back on the next take. */
    tsr_alloc parent;
    tsr_alloc_init(&parent, NULL);
    tsr_recycler r;
    tsr_recycler_init(&r, &parent);
    for (int round = 0; round < 3; round++) {
        void *small = tsr_malloc(&r.alloc, 100), *large = tsr_malloc(&r.alloc, 5000);
        CHECK(small && large && ((uintptr_t)small % 64) == 0 && ((uintptr_t)large % 64) == 0);
        memset(small, 1, 100);
        memset(large, 2, 5000);
        tsr_free(&r.alloc, small);
        tsr_free(&r.alloc, large);
    }
    CHECK_EQ_INT(parent.count, 2);
    tsr_recycler_release(&r);
    return tsr_test_failures();
}
