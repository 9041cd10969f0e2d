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
    return tsr_test_failures();
}
