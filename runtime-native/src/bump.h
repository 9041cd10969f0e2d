/* A bump allocator over chunks from the model's allocator: for what is made once and freed at
 * once (a parsed executable), and for a call's scratch values, reset after each call so that a
 * steady loop of calls (decode) allocates nothing. */
#ifndef TSR_BUMP_H
#define TSR_BUMP_H

#include "common.h"

typedef struct tsr_bump_chunk tsr_bump_chunk;

typedef struct tsr_bump {
    tsr_alloc *alloc;
    tsr_bump_chunk *chunks; /* newest first */
    size_t chunk_size;
} tsr_bump;

/* A mark: where the bump stood, to return to it (tsr_bump_reset) and so free what came after. */
typedef struct tsr_bump_mark {
    tsr_bump_chunk *chunk;
    size_t used;
} tsr_bump_mark;

tsr_bump *tsr_bump_new(tsr_alloc *a, size_t chunk_size);
/* 16-byte aligned, zeroed. NULL when out of memory (last error set). */
void *tsr_bump_alloc(tsr_bump *b, size_t size);
void *tsr_bump_array(tsr_bump *b, size_t count, size_t size);
char *tsr_bump_strdup(tsr_bump *b, const char *s);
tsr_bump_mark tsr_bump_get_mark(const tsr_bump *b);
/* Forgets everything allocated after the mark; chunks are kept for reuse. */
void tsr_bump_reset(tsr_bump *b, tsr_bump_mark mark);
void tsr_bump_free(tsr_bump *b);

#endif
