/* tensor-cache.json and its shards (docs/format.md; written by compiler/vm/executable.py's
 * save_tensor_cache). Every number in the file is checked before it sizes an allocation or an
 * address: a record that lies about its size or offset must fail here, with the record named,
 * and never become a read outside a mapping. */
#include "tensor_cache.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"
#include "sha256.h"

/* The dtypes of the C API, with their bytes per element on the host and in device storage (facts.h). */
#define DTYPE(name, NAME) {#name, TESSERA_##NAME, TSR_DTYPE_BYTES_##NAME##_HOST, TSR_DTYPE_BYTES_##NAME##_DEVICE}
static const struct {
    const char *name;
    tessera_dtype dtype;
    size_t host, storage;
} DTYPES[] = {
    DTYPE(float32, FLOAT32), DTYPE(float16, FLOAT16), DTYPE(int32, INT32), DTYPE(uint32, UINT32),
    DTYPE(int64, INT64),     DTYPE(bool, BOOL),       DTYPE(int8, INT8),   DTYPE(uint8, UINT8),
};
#undef DTYPE

_Static_assert(TESSERA_MAX_NDIM == TSR_MAX_NDIM, "tessera.h's TESSERA_MAX_NDIM is not the format's (facts.h)");

int tsr_dtype_from_name(const char *name, tessera_dtype *out) {
    for (size_t i = 0; name && i < TSR_ARRAY_LEN(DTYPES); i++)
        if (strcmp(name, DTYPES[i].name) == 0) {
            *out = DTYPES[i].dtype;
            return 0;
        }
    return -1;
}

const char *tsr_dtype_name(tessera_dtype dtype) {
    for (size_t i = 0; i < TSR_ARRAY_LEN(DTYPES); i++)
        if (DTYPES[i].dtype == dtype) return DTYPES[i].name;
    return "unknown";
}

size_t tsr_dtype_host_bytes(tessera_dtype dtype) {
    for (size_t i = 0; i < TSR_ARRAY_LEN(DTYPES); i++)
        if (DTYPES[i].dtype == dtype) return DTYPES[i].host;
    return 0;
}

size_t tsr_dtype_storage_bytes(tessera_dtype dtype) {
    for (size_t i = 0; i < TSR_ARRAY_LEN(DTYPES); i++)
        if (DTYPES[i].dtype == dtype) return DTYPES[i].storage;
    return 0;
}

/* The largest byte count a field may state: exact as a JSON number and addressable here. */
static int64_t max_bytes(void) {
    const int64_t exact = ((int64_t)1 << 53) - 1;
    return (uint64_t)SIZE_MAX < (uint64_t)exact ? (int64_t)SIZE_MAX : exact;
}

/* The digest as lowercase hex (the writer's hexdigest() is lowercase; uppercase is accepted). */
static int check_sha256(const char *hex, const char *what, char out[65]) {
    int ok = strlen(hex) == 64;
    for (size_t i = 0; ok && i < 64; i++) {
        char c = hex[i];
        if (c >= 'A' && c <= 'F') c = (char)(c - 'A' + 'a');
        ok = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
        out[i] = c;
    }
    if (!ok) return tsr_error(TESSERA_ERROR_FORMAT, "%s: field 'sha256' is not 64 hex digits", what);
    out[64] = '\0';
    return TESSERA_OK;
}

/* An optional "format" member must name the layout this reader knows. */
static int check_layout(const cJSON *obj, const char *what, const char *want) {
    const char *layout = want;
    int status = tsr_json_opt_string(obj, "format", what, &layout);
    if (!status && strcmp(layout, want) != 0) {
        char q[80];
        tsr_quote(layout, q, sizeof q);
        return tsr_error(TESSERA_ERROR_UNSUPPORTED, "%s: format %s is not '%s', the one this runtime reads", what, q,
                         want);
    }
    return status;
}

static int parse_record(tsr_alloc *a, const cJSON *rec, const tsr_shard *shard, int32_t shard_index,
                        const char *shard_what, tsr_weight *w) {
    char what[680], q[300];
    snprintf(what, sizeof what, "tensor-cache.json: %s, a record", shard_what);
    const char *name, *dtype_name;
    int status = tsr_json_string(rec, "name", what, &name);
    if (status) return status;
    tsr_quote(name, q, sizeof q);
    snprintf(what, sizeof what, "tensor-cache.json: %s, record %s", shard_what, q);
    const cJSON *shape;
    int64_t nbytes, offset;
    if ((status = tsr_json_string(rec, "dtype", what, &dtype_name)) || (status = check_layout(rec, what, "raw")) ||
        (status = tsr_json_array(rec, "shape", what, &shape)) ||
        (status = tsr_json_int(rec, "nbytes", what, 0, max_bytes(), &nbytes)) ||
        (status = tsr_json_int(rec, "byteOffset", what, 0, max_bytes(), &offset)))
        return status;
    if (tsr_dtype_from_name(dtype_name, &w->dtype) != 0) {
        tsr_quote(dtype_name, q, sizeof q);
        return tsr_error(TESSERA_ERROR_FORMAT, "%s: unknown dtype %s", what, q);
    }
    size_t elem = tsr_dtype_host_bytes(w->dtype), count = 1;
    int ndim = cJSON_GetArraySize(shape);
    if (ndim > TESSERA_MAX_NDIM)
        return tsr_error(TESSERA_ERROR_FORMAT, "%s: %d dimensions, more than %d", what, ndim, TESSERA_MAX_NDIM);
    w->ndim = ndim;
    int i = 0;
    for (const cJSON *dim = shape->child; dim; dim = dim->next, i++) {
        if ((status = tsr_json_int_item(dim, what, 0, max_bytes(), &w->shape[i]))) return status;
        if (!tsr_mul_size(count, (size_t)w->shape[i], &count))
            return tsr_error(TESSERA_ERROR_FORMAT, "%s: the shape's element count overflows", what);
    }
    size_t expect;
    if (!tsr_mul_size(count, elem, &expect))
        return tsr_error(TESSERA_ERROR_FORMAT, "%s: its shape holds more %s bytes than can be addressed", what, dtype_name);
    if (expect != (size_t)nbytes)
        return tsr_error(TESSERA_ERROR_FORMAT, "%s: nbytes is %lld, but its shape of %s needs %zu", what,
                         (long long)nbytes, dtype_name, expect);
    /* Aligned so that the mapped bytes can be read as the element type in place. */
    if ((size_t)offset % elem != 0)
        return tsr_error(TESSERA_ERROR_FORMAT, "%s: byteOffset %lld is not a multiple of %zu, the size of %s", what,
                         (long long)offset, elem, dtype_name);
    if ((size_t)offset > shard->nbytes || (size_t)nbytes > shard->nbytes - (size_t)offset)
        return tsr_error(TESSERA_ERROR_FORMAT, "%s: bytes [%lld, %lld) lie outside the shard's %zu bytes", what,
                         (long long)offset, (long long)(offset + nbytes), shard->nbytes); /* both < 2^53 */
    w->shard = shard_index;
    w->byte_offset = (size_t)offset;
    w->nbytes = (size_t)nbytes;
    w->data = NULL;
    w->name = tsr_strdup(a, name);
    return w->name ? TESSERA_OK : tsr_error_context(TESSERA_ERROR_OUT_OF_MEMORY, "%s", what);
}

static int by_name(const void *x, const void *y) {
    return strcmp((*(const tsr_weight *const *)x)->name, (*(const tsr_weight *const *)y)->name);
}

/* By shard, then first byte, then last byte (records naming the same bytes end up side by side). */
static int by_place(const void *x, const void *y) {
    const tsr_weight *a = *(const tsr_weight *const *)x, *b = *(const tsr_weight *const *)y;
    if (a->shard != b->shard) return a->shard < b->shard ? -1 : 1;
    if (a->byte_offset != b->byte_offset) return a->byte_offset < b->byte_offset ? -1 : 1;
    if (a->nbytes != b->nbytes) return a->nbytes < b->nbytes ? -1 : 1;
    return 0;
}

/* No record holds part of another's bytes (docs/format.md): two may name the very same bytes (a
 * bundle shares them between names), never overlap otherwise. Empty records take no bytes. */
static int check_overlaps(tsr_alloc *a, const tsr_tensor_cache *c) {
    const tsr_weight **order = tsr_calloc(a, (size_t)(c->n_weights ? c->n_weights : 1), sizeof *order);
    if (!order) return tsr_error_context(TESSERA_ERROR_OUT_OF_MEMORY, "tensor-cache.json");
    for (int32_t i = 0; i < c->n_weights; i++) order[i] = &c->weights[i];
    qsort((void *)order, (size_t)c->n_weights, sizeof *order, by_place);
    const tsr_weight *widest = NULL; /* of the records seen in this shard, the one reaching furthest */
    int status = TESSERA_OK;
    for (int32_t i = 0; i < c->n_weights && !status; i++) {
        const tsr_weight *w = order[i];
        if (w->nbytes == 0) continue;
        if (widest && widest->shard != w->shard) widest = NULL;
        if (widest && w->byte_offset < widest->byte_offset + widest->nbytes &&
            !(w->byte_offset == widest->byte_offset && w->nbytes == widest->nbytes)) {
            char q1[300], q2[300];
            tsr_quote(w->name, q1, sizeof q1);
            tsr_quote(widest->name, q2, sizeof q2);
            status = tsr_error(TESSERA_ERROR_FORMAT, "tensor-cache.json: weight shard %d: record %s (bytes %zu to %zu) "
                               "overlaps record %s (bytes %zu to %zu)", w->shard, q1, w->byte_offset,
                               w->byte_offset + w->nbytes, q2, widest->byte_offset, widest->byte_offset + widest->nbytes);
        }
        if (!widest || w->byte_offset + w->nbytes > widest->byte_offset + widest->nbytes) widest = w;
    }
    tsr_free(a, (void *)order);
    return status;
}

static int parse_tree(tsr_alloc *a, const cJSON *root, size_t json_size, tsr_tensor_cache *c) {
    const char *top = "tensor-cache.json", *format;
    int64_t version;
    const cJSON *shards;
    int status = tsr_json_string(root, "format", top, &format);
    if (status) return status;
    if (strcmp(format, TSR_TENSOR_CACHE_FORMAT) != 0) {
        char q[80];
        tsr_quote(format, q, sizeof q);
        return tsr_error(TESSERA_ERROR_FORMAT, "tensor-cache.json: format is %s, not '%s'", q, TSR_TENSOR_CACHE_FORMAT);
    }
    if ((status = tsr_json_int(root, "version", top, INT64_MIN / 2, INT64_MAX / 2, &version))) return status;
    if (version != TSR_TENSOR_CACHE_VERSION)
        return tsr_error(TESSERA_ERROR_VERSION,
                         "tensor-cache.json is version %lld; this runtime reads version %d (rebuild the model with a "
                         "matching Tessera)", (long long)version, TSR_TENSOR_CACHE_VERSION);
    if ((status = tsr_json_array(root, "records", top, &shards))) return status;

    /* Counts come from arrays cJSON already holds, yet they size our arrays: each element took at
     * least two bytes of text ("{}" or "0,"), so a count above size / 2 means a broken tree. */
    size_t n_shards = (size_t)cJSON_GetArraySize(shards), n_weights = 0;
    if (n_shards > json_size / 2 || n_shards > INT32_MAX)
        return tsr_error(TESSERA_ERROR_FORMAT, "tensor-cache.json: %zu shards cannot fit in %zu bytes", n_shards, json_size);
    for (const cJSON *s = shards->child; s; s = s->next) {
        const cJSON *records;
        if ((status = tsr_json_array(s, "records", "tensor-cache.json: a shard", &records))) return status;
        n_weights += (size_t)cJSON_GetArraySize(records);
        if (n_weights > json_size / 2 || n_weights > INT32_MAX)
            return tsr_error(TESSERA_ERROR_FORMAT, "tensor-cache.json: more records than %zu bytes can hold", json_size);
    }
    c->shards = tsr_calloc(a, n_shards, sizeof *c->shards);
    c->weights = tsr_calloc(a, n_weights, sizeof *c->weights);
    c->by_name = tsr_calloc(a, n_weights, sizeof *c->by_name);
    if (!c->shards || !c->weights || !c->by_name) return tsr_error_context(TESSERA_ERROR_OUT_OF_MEMORY, "tensor-cache.json");

    for (const cJSON *s = shards->child; s; s = s->next) {
        tsr_shard *shard = &c->shards[c->n_shards];
        char what[320], q[300], full[360];
        const char *path, *hex;
        int64_t nbytes;
        const cJSON *records;
        snprintf(what, sizeof what, "tensor-cache.json: shard %d", c->n_shards);
        if ((status = tsr_json_string(s, "dataPath", what, &path))) return status;
        if ((status = tsr_check_relative_path(path, "weight shard"))) return tsr_error_context(status, "tensor-cache.json");
        tsr_quote(path, q, sizeof q);
        snprintf(what, sizeof what, "weight shard %s", q);
        snprintf(full, sizeof full, "tensor-cache.json: %s", what);
        if ((status = check_layout(s, full, "raw-shard")) ||
            (status = tsr_json_int(s, "nbytes", full, 0, max_bytes(), &nbytes)) ||
            (status = tsr_json_string(s, "sha256", full, &hex)) || (status = check_sha256(hex, full, shard->sha256)) ||
            (status = tsr_json_array(s, "records", full, &records)))
            return status;
        shard->nbytes = (size_t)nbytes;
        if (!(shard->path = tsr_strdup(a, path))) return tsr_error_context(TESSERA_ERROR_OUT_OF_MEMORY, "%s", full);
        c->n_shards++; /* counted once it owns its path, so that free releases it */
        c->total_bytes += (uint64_t)nbytes;
        for (const cJSON *rec = records->child; rec; rec = rec->next) {
            tsr_weight *w = &c->weights[c->n_weights];
            if ((status = parse_record(a, rec, shard, c->n_shards - 1, what, w))) return status;
            c->by_name[c->n_weights] = w;
            c->n_weights++;
        }
    }
    if ((status = check_overlaps(a, c))) return status;
    qsort((void *)c->by_name, (size_t)c->n_weights, sizeof *c->by_name, by_name);
    for (int32_t i = 1; i < c->n_weights; i++) {
        if (strcmp(c->by_name[i - 1]->name, c->by_name[i]->name) == 0) {
            char q[300];
            tsr_quote(c->by_name[i]->name, q, sizeof q);
            return tsr_error(TESSERA_ERROR_FORMAT, "tensor-cache.json: two records are named %s", q);
        }
    }
    return TESSERA_OK;
}

int tsr_tensor_cache_parse(tsr_alloc *a, const char *json, size_t size, tsr_tensor_cache *out) {
    memset(out, 0, sizeof *out);
    if (size > TSR_TENSOR_CACHE_MAX_JSON)
        return tsr_error(TESSERA_ERROR_FORMAT, "tensor-cache.json has %zu bytes, more than %zu", size,
                         TSR_TENSOR_CACHE_MAX_JSON);
    cJSON *root = tsr_json_parse(json, size, "tensor-cache.json");
    if (!root) return json ? TESSERA_ERROR_FORMAT : TESSERA_ERROR_INVALID_ARGUMENT; /* the error is set */
    int status = parse_tree(a, root, size, out);
    cJSON_Delete(root); /* names and paths were copied */
    if (status) tsr_tensor_cache_free(a, out);
    return status;
}

int tsr_tensor_cache_map(tsr_tensor_cache *c, const char *dir, int verify_sha256) {
    for (int32_t i = 0; i < c->n_shards; i++) {
        tsr_shard *shard = &c->shards[i];
        char q[300];
        tsr_quote(shard->path, q, sizeof q);
        if (!shard->map.data) {
            int status = tsr_map_file(dir, shard->path, shard->nbytes, &shard->map);
            if (status) return tsr_error_context(status, "weight shard %s", q);
        }
        if (verify_sha256) {
            tsr_sha256 h;
            uint8_t digest[32];
            char hex[65];
            tsr_sha256_init(&h);
            tsr_sha256_update(&h, shard->map.data ? shard->map.data : "", shard->map.size);
            tsr_sha256_final(&h, digest);
            tsr_sha256_digest_hex(digest, hex);
            if (strcmp(hex, shard->sha256) != 0)
                return tsr_error(TESSERA_ERROR_CHECKSUM,
                                 "weight shard %s does not match its SHA-256 in tensor-cache.json (corrupted): %s, "
                                 "expected %s", q, hex, shard->sha256);
        }
    }
    for (int32_t i = 0; i < c->n_weights; i++) {
        tsr_weight *w = &c->weights[i];
        const uint8_t *base = c->shards[w->shard].map.data;
        w->data = base ? base + w->byte_offset : NULL;
    }
    return TESSERA_OK;
}

int tsr_tensor_cache_load(tsr_alloc *a, const char *dir, int verify_sha256, tsr_tensor_cache *out) {
    memset(out, 0, sizeof *out);
    char *json;
    size_t size;
    int status = tsr_read_file(a, dir, "tensor-cache.json", TSR_TENSOR_CACHE_MAX_JSON, &json, &size);
    if (status) return status;
    status = tsr_tensor_cache_parse(a, json, size, out);
    tsr_free(a, json);
    if (!status) status = tsr_tensor_cache_map(out, dir, verify_sha256);
    if (status) tsr_tensor_cache_free(a, out);
    return status;
}

const tsr_weight *tsr_tensor_cache_find(const tsr_tensor_cache *c, const char *name) {
    tsr_weight key = {.name = (char *)name};
    const tsr_weight *pkey = &key;
    const tsr_weight **hit = bsearch(&pkey, c->by_name, (size_t)c->n_weights, sizeof *c->by_name, by_name);
    return hit ? *hit : NULL;
}

void tsr_tensor_cache_free(tsr_alloc *a, tsr_tensor_cache *c) {
    for (int32_t i = 0; i < c->n_shards; i++) {
        tsr_unmap_file(&c->shards[i].map);
        tsr_free(a, c->shards[i].path);
    }
    for (int32_t i = 0; i < c->n_weights; i++) tsr_free(a, c->weights[i].name);
    tsr_free(a, c->shards);
    tsr_free(a, c->weights);
    tsr_free(a, (void *)c->by_name);
    memset(c, 0, sizeof *c);
}
