/* Chunks are kept after a reset (a spare list would be one more list; keeping the chain and
 * walking forward again is enough) so repeated calls reuse the same memory. */
#include "bump.h"

#include <string.h>

struct tsr_bump_chunk {
    tsr_bump_chunk *next; /* older */
    tsr_bump_chunk *newer;
    size_t size, used;
    _Alignas(16) unsigned char data[];
};

tsr_bump *tsr_bump_new(tsr_alloc *a, size_t chunk_size) {
    tsr_bump *b = tsr_calloc(a, 1, sizeof *b);
    if (!b) return NULL;
    b->alloc = a;
    b->chunk_size = chunk_size < 1024 ? 1024 : chunk_size;
    return b;
}

static tsr_bump_chunk *new_chunk(tsr_bump *b, size_t size) {
    size_t total;
    if (!tsr_add_size(sizeof(tsr_bump_chunk), size, &total)) {
        tsr_error(TESSERA_ERROR_OUT_OF_MEMORY, "allocation of %zu bytes overflows", size);
        return NULL;
    }
    tsr_bump_chunk *c = tsr_malloc(b->alloc, total);
    if (!c) return NULL;
    c->next = c->newer = NULL;
    c->size = size;
    c->used = 0;
    return c;
}

void *tsr_bump_alloc(tsr_bump *b, size_t size) {
    size_t need = (size + 15) & ~(size_t)15;
    if (need < size) {
        tsr_error(TESSERA_ERROR_OUT_OF_MEMORY, "allocation of %zu bytes overflows", size);
        return NULL;
    }
    tsr_bump_chunk *c = b->chunks;
    /* After a reset, newer chunks are still linked: reuse them before allocating. */
    while (c && c->size - c->used < need && c->newer && c->newer->size >= need) {
        c = c->newer;
        c->used = 0;
        b->chunks = c;
    }
    if (!c || c->size - c->used < need) {
        size_t size_of_chunk = need > b->chunk_size ? need : b->chunk_size;
        tsr_bump_chunk *fresh = new_chunk(b, size_of_chunk);
        if (!fresh) return NULL;
        /* Splice it in after c; chunks newer than c that were too small stay after it. */
        fresh->next = c;
        if (c) {
            fresh->newer = c->newer;
            if (c->newer) c->newer->next = fresh;
            c->newer = fresh;
        }
        b->chunks = c = fresh;
    }
    void *p = c->data + c->used;
    c->used += need;
    memset(p, 0, need);
    return p;
}

void *tsr_bump_array(tsr_bump *b, size_t count, size_t size) {
    size_t total;
    if (!tsr_mul_size(count, size, &total)) {
        tsr_error(TESSERA_ERROR_OUT_OF_MEMORY, "allocation of %zu x %zu bytes overflows", count, size);
        return NULL;
    }
    return tsr_bump_alloc(b, total);
}

char *tsr_bump_strdup(tsr_bump *b, const char *s) {
    size_t n = strlen(s) + 1;
    char *copy = tsr_bump_alloc(b, n);
    if (copy) memcpy(copy, s, n);
    return copy;
}

tsr_bump_mark tsr_bump_get_mark(const tsr_bump *b) {
    tsr_bump_mark m = {b->chunks, b->chunks ? b->chunks->used : 0};
    return m;
}

void tsr_bump_reset(tsr_bump *b, tsr_bump_mark mark) {
    if (!mark.chunk) {
        /* Back to empty: rewind to the oldest chunk. */
        tsr_bump_chunk *c = b->chunks;
        while (c && c->next) c = c->next;
        if (c) c->used = 0;
        b->chunks = c;
        return;
    }
    b->chunks = mark.chunk;
    mark.chunk->used = mark.used;
}

void tsr_bump_free(tsr_bump *b) {
    if (!b) return;
    tsr_bump_chunk *c = b->chunks;
    while (c && c->newer) c = c->newer;
    while (c) {
        tsr_bump_chunk *older = c->next;
        tsr_free(b->alloc, c);
        c = older;
    }
    tsr_free(b->alloc, b);
}
