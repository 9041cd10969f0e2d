/* The weights: tensor-cache.json and its shards (docs/format.md). Shards are mapped read-only
 * after their size and SHA-256 are checked; each record is checked to lie inside its shard, with a
 * byte count that matches its dtype and shape, before anything uses it. */
#ifndef TSR_TENSOR_CACHE_H
#define TSR_TENSOR_CACHE_H

#include "common.h"
#include "files.h"

typedef struct tsr_weight {
    char *name;
    tessera_dtype dtype;
    int32_t ndim;
    int64_t shape[TESSERA_MAX_NDIM];
    const void *data; /* inside its shard's mapping */
    size_t nbytes;
} tsr_weight;

typedef struct tsr_tensor_cache {
    tsr_mapped *shards;
    int32_t n_shards;
    tsr_weight *weights;
    int32_t n_weights;
    uint64_t total_bytes; /* of the shards */
} tsr_tensor_cache;

/* Reads dir/tensor-cache.json, maps and checks every shard. verify_sha256 = 0 skips the hashes
 * (sizes and ranges are always checked). */
int tsr_tensor_cache_load(tsr_alloc *a, const char *dir, int verify_sha256, tsr_tensor_cache *out);
/* The same from the JSON text alone, without opening shards (size planning, fuzzing): checks
 * everything that does not need the shard bytes. */
int tsr_tensor_cache_parse(tsr_alloc *a, const char *json, size_t size, tsr_tensor_cache *out,
                           char ***shard_paths, size_t **shard_sizes, char ***shard_sha256);
const tsr_weight *tsr_tensor_cache_find(const tsr_tensor_cache *c, const char *name);
void tsr_tensor_cache_free(tsr_alloc *a, tsr_tensor_cache *c);

/* dtype names of the format ("float32", "int64", ...) and element sizes in bytes (bool: 1 as a
 * numpy array; see tsr_dtype_storage_bytes for the device layout). -1 / 0 for an unknown name. */
int tsr_dtype_from_name(const char *name, tessera_dtype *out);
const char *tsr_dtype_name(tessera_dtype dtype);
size_t tsr_dtype_host_bytes(tessera_dtype dtype);
/* Bytes per element in device storage: bool is one uint32 word (docs/format.md). */
size_t tsr_dtype_storage_bytes(tessera_dtype dtype);

#endif
