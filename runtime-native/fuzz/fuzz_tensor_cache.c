/* libFuzzer target: arbitrary bytes as tensor-cache.json text. The parser must refuse or accept
 * without a crash, a leak or an out-of-bounds read, and never open a file (parse only). An accepted
 * cache is also checked for the invariants the loader relies on. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tensor_cache.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    tsr_alloc a;
    tsr_alloc_init(&a, NULL);
    /* A copy of exactly `size` bytes, so that ASan sees any read past the end of the text. */
    char *text = malloc(size ? size : 1);
    if (!text) return 0;
    if (size) memcpy(text, data, size);
    tsr_tensor_cache c;
    if (tsr_tensor_cache_parse(&a, text, size, &c) == TESSERA_OK) {
        for (int32_t i = 0; i < c.n_weights; i++) {
            const tsr_weight *w = &c.weights[i];
            const tsr_shard *s = &c.shards[w->shard];
            if (w->shard < 0 || w->shard >= c.n_shards || w->byte_offset > s->nbytes ||
                w->nbytes > s->nbytes - w->byte_offset || tsr_tensor_cache_find(&c, w->name) != w)
                abort();
        }
        tsr_tensor_cache_free(&a, &c);
    }
    free(text);
    return 0;
}
