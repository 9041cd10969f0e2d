/* Internal helpers every part of libtessera shares: the allocator, the thread's last error,
 * and checked arithmetic on sizes read from files. */
#ifndef TSR_COMMON_H
#define TSR_COMMON_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tessera.h"

/* The model's allocator plus a count of its allocations (tests assert decode makes none). */
typedef struct tsr_alloc {
    tessera_allocator base;
    uint64_t count;
} tsr_alloc;

void tsr_alloc_init(tsr_alloc *a, const tessera_allocator *user);
/* 64-byte aligned; NULL (with the last error set) when out of memory. */
void *tsr_malloc(tsr_alloc *a, size_t size);
void *tsr_calloc(tsr_alloc *a, size_t count, size_t size);
void tsr_free(tsr_alloc *a, void *ptr);
char *tsr_strdup(tsr_alloc *a, const char *s);

/* An allocator that keeps what is freed for reuse: freed blocks go to a free list per power-of-two
 * size class and the next allocation of that class takes one back, so a component that allocates
 * and frees the same sizes on every call (the tokenizer's work buffers) asks `parent` only the first
 * time. `alloc` is what the component is given; tsr_recycler_release returns everything cached. */
#define TSR_RECYCLER_CLASSES 48
typedef struct tsr_recycler {
    tsr_alloc alloc;
    tsr_alloc *parent;
    void *free_blocks[TSR_RECYCLER_CLASSES];
} tsr_recycler;

void tsr_recycler_init(tsr_recycler *r, tsr_alloc *parent);
void tsr_recycler_release(tsr_recycler *r);

/* Sets this thread's last error and returns status (so: `return tsr_error(TESSERA_ERROR_IO, ...)`). */
int tsr_error(int status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Prefixes the current last error with context: "loading x: <previous message>". */
int tsr_error_context(int status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void tsr_clear_error(void);

/* a + b and a * b for sizes from files: false on overflow. */
static inline bool tsr_add_size(size_t a, size_t b, size_t *out) { return !__builtin_add_overflow(a, b, out); }
static inline bool tsr_mul_size(size_t a, size_t b, size_t *out) { return !__builtin_mul_overflow(a, b, out); }

#define TSR_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

#endif
