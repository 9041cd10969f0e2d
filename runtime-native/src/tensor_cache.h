/* The weights: tensor-cache.json and its shards (docs/format.md). Reading is two steps: parse the
 * JSON text into the shard list and the records, checking everything that does not need the
 * shard bytes (this is what size planning and the fuzzer use); then map each shard read-only,
 * checking its size and SHA-256, and point the records into the mappings. */
#ifndef TSR_TENSOR_CACHE_H
#define TSR_TENSOR_CACHE_H

#include "common.h"
#include "facts.h"
#include "files.h"

#define TSR_TENSOR_CACHE_FORMAT "tessera-tensor-cache"
#define TSR_TENSOR_CACHE_VERSION 1
/* tensor-cache.json itself may be at most this large (a 100k-tensor model needs about 16 MiB). */
#define TSR_TENSOR_CACHE_MAX_JSON ((size_t)TSR_MAX_JSON_BYTES_TENSOR_CACHE)

typedef struct tsr_weight {
    char *name;
    tessera_dtype dtype;
    int32_t ndim;
    int64_t shape[TESSERA_MAX_NDIM];
    int32_t shard;      /* index into the cache's shards */
    size_t byte_offset; /* within the shard, a multiple of the element size */
    size_t nbytes;
    const void *data;   /* inside its shard's mapping; NULL until tsr_tensor_cache_map */
} tsr_weight;

typedef struct tsr_shard {
    char *path;       /* dataPath, a relative name inside the folder (checked) */
    size_t nbytes;
    char sha256[65];  /* lowercase hex */
    tsr_mapped map;   /* set by tsr_tensor_cache_map */
} tsr_shard;

typedef struct tsr_tensor_cache {
    tsr_shard *shards;
    int32_t n_shards;
    tsr_weight *weights; /* in file order */
    int32_t n_weights;
    const tsr_weight **by_name; /* the weights sorted by name, for lookups */
    uint64_t total_bytes;       /* of the shards */
} tsr_tensor_cache;

/* Parses tensor-cache.json text (`size` bytes, need not be NUL-terminated). Checks the format and
 * version (TESSERA_ERROR_VERSION for another version), every dataPath by the path rules, shard
 * sizes and digests as fields, and every record: known dtype, at most TESSERA_MAX_NDIM
 * non-negative dims, dims x element size == nbytes without overflow, byteOffset aligned to the
 * element size, the range inside the shard, no record overlapping another (unless both name the
 * same bytes), unique names. Opens no file. On failure *out is
 * empty and needs no free. */
int tsr_tensor_cache_parse(tsr_alloc *a, const char *json, size_t size, tsr_tensor_cache *out);

/* Maps every shard of a parsed cache from dir and points the weights into the mappings: each
 * shard's size must match (TESSERA_ERROR_CHECKSUM "... truncated", naming the shard) and, unless
 * verify_sha256 is 0, its SHA-256 (TESSERA_ERROR_CHECKSUM "... corrupted", naming the shard). On
 * failure the cache stays as parsed plus whatever was mapped; tsr_tensor_cache_free releases all. */
int tsr_tensor_cache_map(tsr_tensor_cache *c, const char *dir, int verify_sha256);

/* Reads dir/tensor-cache.json, parses and maps it. On failure *out is empty. */
int tsr_tensor_cache_load(tsr_alloc *a, const char *dir, int verify_sha256, tsr_tensor_cache *out);

/* The weight named `name`, or NULL. */
const tsr_weight *tsr_tensor_cache_find(const tsr_tensor_cache *c, const char *name);
void tsr_tensor_cache_free(tsr_alloc *a, tsr_tensor_cache *c);

/* dtype names of the format ("float32", "int64", ...): 0, or -1 for an unknown name. */
int tsr_dtype_from_name(const char *name, tessera_dtype *out);
/* The name of a dtype, or "unknown". */
const char *tsr_dtype_name(tessera_dtype dtype);
/* Bytes per element in a shard and on the host (bool: 1, as numpy stores it); 0 if unknown. */
size_t tsr_dtype_host_bytes(tessera_dtype dtype);
/* Bytes per element in device storage: bool is one uint32 word (docs/format.md); 0 if unknown. */
size_t tsr_dtype_storage_bytes(tessera_dtype dtype);

#endif
