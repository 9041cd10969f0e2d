/* A tiny test harness: CHECK records a failure with its line and goes on; a test's main returns
 * tsr_test_failures() so that ctest sees the result. */
#ifndef TSR_TEST_HARNESS_H
#define TSR_TEST_HARNESS_H

#include <stdio.h>

#include "tessera.h"

int tsr_test_failures(void);
void tsr_test_fail(const char *file, int line, const char *what);

#define CHECK(cond) ((cond) ? (void)0 : tsr_test_fail(__FILE__, __LINE__, #cond))
#define CHECK_EQ_INT(a, b)                                                                              \
    do {                                                                                                \
        long long _a = (long long)(a), _b = (long long)(b);                                             \
        if (_a != _b) {                                                                                 \
            char _m[256];                                                                               \
            snprintf(_m, sizeof _m, "%s == %s (%lld != %lld)", #a, #b, _a, _b);                          \
            tsr_test_fail(__FILE__, __LINE__, _m);                                                      \
        }                                                                                               \
    } while (0)

/* Allocations made and not yet freed through an allocator from tsr_test_counting_allocator. */
typedef struct tsr_test_counts {
    long live, total;
} tsr_test_counts;

/* An allocator (64-byte aligned, as the library's default) counting into *counts: tests check that
 * every allocation is returned, or that a steady loop makes none. */
tessera_allocator tsr_test_counting_allocator(tsr_test_counts *counts);

#endif
