/* The allocator and the thread-local last error. */
#include "common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TSR_ERROR_CAPACITY 2048
static _Thread_local char last_error[TSR_ERROR_CAPACITY];

const char *tessera_last_error(void) { return last_error; }

void tsr_clear_error(void) { last_error[0] = '\0'; }

int tsr_error(int status, const char *fmt, ...) {
    va_list args;
    va_start(args, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, args);
    va_end(args);
    return status;
}

int tsr_error_context(int status, const char *fmt, ...) {
    char previous[TSR_ERROR_CAPACITY];
    memcpy(previous, last_error, sizeof previous);
    va_list args;
    va_start(args, fmt);
    int n = vsnprintf(last_error, sizeof last_error, fmt, args);
    va_end(args);
    /* Appended by hand: a message cut at the buffer's end is fine, and snprintf would warn. */
    size_t used = n < 0 ? 0 : (size_t)n;
    const char *parts[2] = {": ", previous};
    for (int p = 0; p < 2; p++)
        for (const char *c = parts[p]; *c && used + 1 < sizeof last_error; c++) last_error[used++] = *c;
    if (used < sizeof last_error) last_error[used] = '\0';
    return status;
}

const char *tessera_status_name(int status) {
    switch (status) {
    case TESSERA_OK: return "TESSERA_OK";
    case TESSERA_ERROR_INVALID_ARGUMENT: return "TESSERA_ERROR_INVALID_ARGUMENT";
    case TESSERA_ERROR_IO: return "TESSERA_ERROR_IO";
    case TESSERA_ERROR_FORMAT: return "TESSERA_ERROR_FORMAT";
    case TESSERA_ERROR_VERSION: return "TESSERA_ERROR_VERSION";
    case TESSERA_ERROR_CHECKSUM: return "TESSERA_ERROR_CHECKSUM";
    case TESSERA_ERROR_UNSUPPORTED: return "TESSERA_ERROR_UNSUPPORTED";
    case TESSERA_ERROR_OUT_OF_MEMORY: return "TESSERA_ERROR_OUT_OF_MEMORY";
    case TESSERA_ERROR_RUNTIME_CHECK: return "TESSERA_ERROR_RUNTIME_CHECK";
    case TESSERA_ERROR_CONTEXT_FULL: return "TESSERA_ERROR_CONTEXT_FULL";
    case TESSERA_ERROR_LIBRARY: return "TESSERA_ERROR_LIBRARY";
    case TESSERA_ERROR_DEVICE: return "TESSERA_ERROR_DEVICE";
    default: return "TESSERA_ERROR_UNKNOWN";
    }
}

static void *default_alloc(size_t size, void *user) {
    (void)user;
    void *ptr = NULL;
    /* posix_memalign needs a size that is a multiple of the alignment for aligned_alloc; this does not. */
    if (posix_memalign(&ptr, 64, size ? size : 1) != 0) return NULL;
    return ptr;
}

static void default_free(void *ptr, void *user) {
    (void)user;
    free(ptr);
}

void tsr_alloc_init(tsr_alloc *a, const tessera_allocator *user) {
    a->count = 0;
    if (user && user->alloc && user->free) {
        a->base = *user;
    } else {
        a->base.alloc = default_alloc;
        a->base.free = default_free;
        a->base.user = NULL;
    }
}

void *tsr_malloc(tsr_alloc *a, size_t size) {
    void *ptr = a->base.alloc(size ? size : 1, a->base.user);
    if (!ptr) {
        tsr_error(TESSERA_ERROR_OUT_OF_MEMORY, "out of memory allocating %zu bytes", size);
        return NULL;
    }
    a->count++;
    return ptr;
}

void *tsr_calloc(tsr_alloc *a, size_t count, size_t size) {
    size_t total;
    if (!tsr_mul_size(count, size, &total)) {
        tsr_error(TESSERA_ERROR_OUT_OF_MEMORY, "allocation of %zu x %zu bytes overflows", count, size);
        return NULL;
    }
    void *ptr = tsr_malloc(a, total);
    if (ptr) memset(ptr, 0, total);
    return ptr;
}

void tsr_free(tsr_alloc *a, void *ptr) {
    if (ptr) a->base.free(ptr, a->base.user);
}

char *tsr_strdup(tsr_alloc *a, const char *s) {
    size_t n = strlen(s) + 1;
    char *copy = tsr_malloc(a, n);
    if (copy) memcpy(copy, s, n);
    return copy;
}

void tessera_library_error(const char *message) { tsr_error(TESSERA_ERROR_LIBRARY, "%s", message ? message : ""); }

/* A recycled block: a 64-byte header holding its size class (and, while free, the next free
 * block), then the caller's bytes, 64-byte aligned as the parent's are. */
#define RECYCLER_HEADER 64

static void *recycler_alloc(size_t size, void *user) {
    tsr_recycler *r = user;
    int c = 6;
    while (c < TSR_RECYCLER_CLASSES - 1 && ((size_t)1 << c) < size) c++;
    if (((size_t)1 << c) < size) return NULL;
    unsigned char *block = r->free_blocks[c];
    if (block) {
        memcpy(&r->free_blocks[c], block + sizeof(int), sizeof(void *));
    } else {
        block = tsr_malloc(r->parent, RECYCLER_HEADER + ((size_t)1 << c));
        if (!block) return NULL;
        memcpy(block, &c, sizeof c);
    }
    return block + RECYCLER_HEADER;
}

static void recycler_free(void *ptr, void *user) {
    tsr_recycler *r = user;
    unsigned char *block = (unsigned char *)ptr - RECYCLER_HEADER;
    int c;
    memcpy(&c, block, sizeof c);
    memcpy(block + sizeof(int), &r->free_blocks[c], sizeof(void *));
    r->free_blocks[c] = block;
}

void tsr_recycler_init(tsr_recycler *r, tsr_alloc *parent) {
    memset(r, 0, sizeof *r);
    r->parent = parent;
    tessera_allocator base = {recycler_alloc, recycler_free, r};
    tsr_alloc_init(&r->alloc, &base);
}

void tsr_recycler_release(tsr_recycler *r) {
    for (int c = 0; c < TSR_RECYCLER_CLASSES; c++) {
        unsigned char *block = r->free_blocks[c];
        while (block) {
            unsigned char *next;
            memcpy(&next, block + sizeof(int), sizeof next);
            tsr_free(r->parent, block);
            block = next;
        }
        r->free_blocks[c] = NULL;
    }
}
