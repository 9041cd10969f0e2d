/* tensor-cache.json: a real one from the compiler, a folder written here (two shards, every
 * dtype), truncated / corrupted / missing shards named in errors, and one broken field at a time. */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"
#include "sha256.h"
#include "tensor_cache.h"

static tsr_test_counts counts;
static tsr_alloc a;

static int has(const char *needle) {
    if (strstr(tessera_last_error(), needle)) return 1;
    fprintf(stderr, "last error \"%s\" lacks \"%s\"\n", tessera_last_error(), needle);
    return 0;
}

static void write_bytes(const char *dir, const char *name, const void *data, size_t size) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    if (!f) return;
    if (size) fwrite(data, 1, size, f);
    fclose(f);
}

/* A shard object with one record (the fields given as JSON text) over `nbytes` bytes. */
static int parse_one(const char *path, const char *record, long nbytes, tsr_tensor_cache *c) {
    char json[2048];
    snprintf(json, sizeof json,
             "{\"format\": \"tessera-tensor-cache\", \"version\": 1, \"records\": [{\"dataPath\": \"%s\", "
             "\"format\": \"raw-shard\", \"nbytes\": %ld, \"sha256\": \"%064d\", \"records\": [%s]}]}",
             path, nbytes, 0, record);
    return tsr_tensor_cache_parse(&a, json, strlen(json), c);
}

static void bad_record(const char *record, int status, const char *needle) {
    tsr_tensor_cache c;
    int s = parse_one("params_shard_0.bin", record, 64, &c);
    if (s != status) fprintf(stderr, "record %s: status %d, want %d (%s)\n", record, s, status, tessera_last_error());
    CHECK(s == status);
    CHECK(has(needle));
    CHECK(c.n_weights == 0 && c.weights == NULL);
}

static void bad_text(const char *json, int status, const char *needle) {
    tsr_tensor_cache c;
    int s = tsr_tensor_cache_parse(&a, json, strlen(json), &c);
    if (s != status) fprintf(stderr, "%s: status %d, want %d (%s)\n", json, s, status, tessera_last_error());
    CHECK(s == status);
    CHECK(has(needle));
}

static void real_cache(void) {
    char *json;
    size_t size;
    CHECK_EQ_INT(tsr_read_file(&a, "data", "llama-tensor-cache.json", TSR_TENSOR_CACHE_MAX_JSON, &json, &size), 0);
    tsr_tensor_cache c;
    CHECK_EQ_INT(tsr_tensor_cache_parse(&a, json, size, &c), 0);
    tsr_free(&a, json);
    CHECK_EQ_INT(c.n_shards, 1);
    CHECK_EQ_INT(c.n_weights, 22);
    CHECK_EQ_INT(c.total_bytes, 53952);
    CHECK(strcmp(c.shards[0].path, "params_shard_0.bin") == 0);
    CHECK(strcmp(c.shards[0].sha256, "a35278ac630772d414d68a878994bf8f47aaed1813726fdc4749ddb0974f478c") == 0);
    const tsr_weight *w = tsr_tensor_cache_find(&c, "model.embed_tokens.weight");
    CHECK(w != NULL);
    if (w) {
        CHECK_EQ_INT(w->dtype, TESSERA_UINT32);
        CHECK_EQ_INT(w->ndim, 2);
        CHECK(w->shape[0] == 96 && w->shape[1] == 17);
        CHECK(w->byte_offset == 64 && w->nbytes == 6528);
        CHECK(w->data == NULL); /* not mapped: parse opens nothing */
    }
    w = tsr_tensor_cache_find(&c, "model.norm.weight");
    CHECK(w && w->byte_offset == 53696);
    CHECK(tsr_tensor_cache_find(&c, "const_21") == &c.weights[0]);
    CHECK(tsr_tensor_cache_find(&c, "nope") == NULL);
    tsr_tensor_cache_free(&a, &c);
}

int main(void) {
    tessera_allocator counting = tsr_test_counting_allocator(&counts);
    tsr_alloc_init(&a, &counting);

    /* dtype helpers */
    tessera_dtype d;
    CHECK(tsr_dtype_from_name("float16", &d) == 0 && d == TESSERA_FLOAT16);
    CHECK(tsr_dtype_from_name("bfloat16", &d) == -1);
    CHECK(tsr_dtype_from_name(NULL, &d) == -1);
    CHECK(strcmp(tsr_dtype_name(TESSERA_INT64), "int64") == 0);
    CHECK(strcmp(tsr_dtype_name((tessera_dtype)99), "unknown") == 0);
    CHECK_EQ_INT(tsr_dtype_host_bytes(TESSERA_BOOL), 1);
    CHECK_EQ_INT(tsr_dtype_storage_bytes(TESSERA_BOOL), 4);
    CHECK_EQ_INT(tsr_dtype_host_bytes(TESSERA_INT64), 8);
    CHECK_EQ_INT(tsr_dtype_storage_bytes(TESSERA_FLOAT16), 2);
    CHECK_EQ_INT(tsr_dtype_host_bytes((tessera_dtype)99), 0);

    real_cache();

    /* A folder of two shards: every dtype, a 0-d tensor, an empty one, a shard in a subfolder. */
    char dir[] = "/tmp/tessera-cache-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char sub[600];
    snprintf(sub, sizeof sub, "%s/sub", dir);
    CHECK(mkdir(sub, 0700) == 0);
    uint8_t shard0[48], shard1[20];
    for (size_t i = 0; i < sizeof shard0; i++) shard0[i] = (uint8_t)i;
    for (size_t i = 0; i < sizeof shard1; i++) shard1[i] = (uint8_t)(100 + i);
    write_bytes(dir, "params_shard_0.bin", shard0, sizeof shard0);
    write_bytes(dir, "sub/params_shard_1.bin", shard1, sizeof shard1);
    char hex0[65], hex1[65];
    tsr_sha256_hex(shard0, sizeof shard0, hex0);
    tsr_sha256_hex(shard1, sizeof shard1, hex1);
    char json[4096];
    snprintf(json, sizeof json,
             "{\"format\": \"tessera-tensor-cache\", \"version\": 1, \"records\": ["
             "{\"dataPath\": \"params_shard_0.bin\", \"format\": \"raw-shard\", \"nbytes\": 48, \"sha256\": \"%s\","
             " \"records\": ["
             "{\"name\": \"w\", \"shape\": [2, 3], \"dtype\": \"float32\", \"format\": \"raw\", \"nbytes\": 24, \"byteOffset\": 0},"
             "{\"name\": \"pos\", \"shape\": [2], \"dtype\": \"int64\", \"nbytes\": 16, \"byteOffset\": 24},"
             "{\"name\": \"mask\", \"shape\": [3], \"dtype\": \"bool\", \"nbytes\": 3, \"byteOffset\": 40},"
             "{\"name\": \"none\", \"shape\": [0, 5], \"dtype\": \"uint8\", \"nbytes\": 0, \"byteOffset\": 43},"
             "{\"name\": \"scalar\", \"shape\": [], \"dtype\": \"int8\", \"nbytes\": 1, \"byteOffset\": 43},"
             "{\"name\": \"half\", \"shape\": [2], \"dtype\": \"float16\", \"nbytes\": 4, \"byteOffset\": 44}]},"
             "{\"dataPath\": \"sub/params_shard_1.bin\", \"nbytes\": 20, \"sha256\": \"%s\", \"records\": ["
             "{\"name\": \"ids\", \"shape\": [2, 1, 2], \"dtype\": \"int32\", \"nbytes\": 16, \"byteOffset\": 0},"
             "{\"name\": \"u\", \"shape\": [1], \"dtype\": \"uint32\", \"nbytes\": 4, \"byteOffset\": 16}]}]}",
             hex0, hex1);
    write_bytes(dir, "tensor-cache.json", json, strlen(json));
    tsr_tensor_cache c;
    CHECK_EQ_INT(tsr_tensor_cache_load(&a, dir, 1, &c), 0);
    CHECK_EQ_INT(c.n_shards, 2);
    CHECK_EQ_INT(c.n_weights, 8);
    CHECK_EQ_INT(c.total_bytes, 68);
    const tsr_weight *w = tsr_tensor_cache_find(&c, "pos");
    CHECK(w && w->dtype == TESSERA_INT64 && w->data == (const uint8_t *)c.shards[0].map.data + 24);
    CHECK(w && memcmp(w->data, shard0 + 24, 16) == 0);
    w = tsr_tensor_cache_find(&c, "scalar");
    CHECK(w && w->ndim == 0 && w->nbytes == 1 && *(const uint8_t *)w->data == 43);
    w = tsr_tensor_cache_find(&c, "u");
    CHECK(w && w->shard == 1 && *(const uint8_t *)w->data == 116);
    w = tsr_tensor_cache_find(&c, "ids");
    CHECK(w && w->ndim == 3 && w->shape[2] == 2);
    tsr_tensor_cache_free(&a, &c);
    CHECK(c.shards == NULL && c.n_weights == 0);

    /* A corrupted shard (same size) is named; with verification off it loads. */
    shard1[5] ^= 1;
    write_bytes(dir, "sub/params_shard_1.bin", shard1, sizeof shard1);
    CHECK_EQ_INT(tsr_tensor_cache_load(&a, dir, 1, &c), TESSERA_ERROR_CHECKSUM);
    CHECK(has("weight shard 'sub/params_shard_1.bin' does not match its SHA-256") && has("corrupted"));
    CHECK(c.shards == NULL);
    CHECK_EQ_INT(tsr_tensor_cache_load(&a, dir, 0, &c), 0);
    tsr_tensor_cache_free(&a, &c);
    /* A truncated shard is named, with both sizes. */
    write_bytes(dir, "sub/params_shard_1.bin", shard1, 10);
    CHECK_EQ_INT(tsr_tensor_cache_load(&a, dir, 0, &c), TESSERA_ERROR_CHECKSUM);
    CHECK(has("weight shard 'sub/params_shard_1.bin'") && has("has 10 bytes, expected 20 (truncated)"));
    /* A missing shard. */
    snprintf(sub, sizeof sub, "%s/sub/params_shard_1.bin", dir);
    unlink(sub);
    CHECK_EQ_INT(tsr_tensor_cache_load(&a, dir, 1, &c), TESSERA_ERROR_IO);
    CHECK(has("params_shard_1.bin") && has("No such file"));
    snprintf(sub, sizeof sub, "%s/params_shard_0.bin", dir);
    unlink(sub);
    snprintf(sub, sizeof sub, "%s/tensor-cache.json", dir);
    unlink(sub);
    CHECK_EQ_INT(tsr_tensor_cache_load(&a, dir, 1, &c), TESSERA_ERROR_IO);
    CHECK(has("tensor-cache.json"));
    snprintf(sub, sizeof sub, "%s/sub", dir);
    rmdir(sub);
    rmdir(dir);

    /* One broken thing at a time. */
    const char *ok = "{\"name\": \"x\", \"shape\": [4], \"dtype\": \"float32\", \"nbytes\": 16, \"byteOffset\": 0}";
    CHECK_EQ_INT(parse_one("params_shard_0.bin", ok, 64, &c), 0);
    tsr_tensor_cache_free(&a, &c);
    CHECK_EQ_INT(parse_one("params_shard_0.bin", ok, 15, &c), TESSERA_ERROR_FORMAT);
    CHECK(has("record 'x'") && has("outside the shard"));
    CHECK_EQ_INT(parse_one("../params.bin", ok, 64, &c), TESSERA_ERROR_FORMAT);
    CHECK(has("weight shard path '../params.bin'"));
    CHECK_EQ_INT(parse_one("/etc/passwd", ok, 64, &c), TESSERA_ERROR_FORMAT);
    CHECK_EQ_INT(parse_one("a%2e.bin", ok, 64, &c), TESSERA_ERROR_FORMAT);
    CHECK_EQ_INT(parse_one("C:x.bin", ok, 64, &c), TESSERA_ERROR_FORMAT);
    bad_record("{\"name\": \"x\", \"shape\": [4], \"dtype\": \"complex64\", \"nbytes\": 16, \"byteOffset\": 0}",
               TESSERA_ERROR_FORMAT, "record 'x': unknown dtype 'complex64'");
    bad_record("{\"name\": \"x\", \"shape\": [1,1,1,1,1,1,1,1,1], \"dtype\": \"int8\", \"nbytes\": 1, \"byteOffset\": 0}",
               TESSERA_ERROR_FORMAT, "9 dimensions, more than 8");
    bad_record("{\"name\": \"x\", \"shape\": [-4], \"dtype\": \"int8\", \"nbytes\": 4, \"byteOffset\": 0}",
               TESSERA_ERROR_FORMAT, "outside [0,");
    bad_record("{\"name\": \"x\", \"shape\": [4], \"dtype\": \"float32\", \"nbytes\": 12, \"byteOffset\": 0}",
               TESSERA_ERROR_FORMAT, "nbytes is 12, but its shape of float32 needs 16");
    bad_record("{\"name\": \"x\", \"shape\": [1099511627776, 1099511627776, 1099511627776], \"dtype\": \"int8\","
               " \"nbytes\": 0, \"byteOffset\": 0}", TESSERA_ERROR_FORMAT, "overflows");
    bad_record("{\"name\": \"x\", \"shape\": [4611686018427387], \"dtype\": \"int64\", \"nbytes\": 0, \"byteOffset\": 0}",
               TESSERA_ERROR_FORMAT, "");
    bad_record("{\"name\": \"x\", \"shape\": [4], \"dtype\": \"float32\", \"nbytes\": 16, \"byteOffset\": 2}",
               TESSERA_ERROR_FORMAT, "byteOffset 2 is not a multiple of 4");
    bad_record("{\"name\": \"x\", \"shape\": [4], \"dtype\": \"float32\", \"nbytes\": 16, \"byteOffset\": 52}",
               TESSERA_ERROR_FORMAT, "outside the shard's 64");
    bad_record("{\"name\": \"x\", \"shape\": [4], \"dtype\": \"float32\", \"nbytes\": 16, \"byteOffset\": 9007199254740984}",
               TESSERA_ERROR_FORMAT, "outside the shard");
    bad_record("{\"name\": \"x\", \"shape\": [4], \"dtype\": \"float32\", \"nbytes\": 16, \"byteOffset\": 0.5}",
               TESSERA_ERROR_FORMAT, "not an integer");
    bad_record("{\"name\": \"x\", \"shape\": [4], \"dtype\": \"float32\", \"nbytes\": 16}", TESSERA_ERROR_FORMAT,
               "field 'byteOffset' is missing");
    bad_record("{\"name\": \"x\", \"shape\": 4, \"dtype\": \"float32\", \"nbytes\": 16, \"byteOffset\": 0}",
               TESSERA_ERROR_FORMAT, "field 'shape' is not an array");
    bad_record("{\"name\": \"x\", \"shape\": [4], \"dtype\": \"float32\", \"format\": \"q4\", \"nbytes\": 16, "
               "\"byteOffset\": 0}", TESSERA_ERROR_UNSUPPORTED, "format 'q4'");
    bad_record("{\"name\": 7}", TESSERA_ERROR_FORMAT, "field 'name' is not a string");
    bad_record("[]", TESSERA_ERROR_FORMAT, "a record is not a JSON object");
    bad_record("{\"name\": \"x\\n\", \"shape\": [4], \"dtype\": \"f\", \"nbytes\": 16, \"byteOffset\": 0}",
               TESSERA_ERROR_FORMAT, "record 'x\\x0a'");
    bad_record("{\"name\": \"x\", \"shape\": [4], \"dtype\": \"float32\", \"nbytes\": 16, \"byteOffset\": 0},"
               "{\"name\": \"y\", \"shape\": [4], \"dtype\": \"float32\", \"nbytes\": 16, \"byteOffset\": 16},"
               "{\"name\": \"x\", \"shape\": [4], \"dtype\": \"float32\", \"nbytes\": 16, \"byteOffset\": 32}",
               TESSERA_ERROR_FORMAT, "two records are named 'x'");
    /* Overlapping records are refused; two that name the very same bytes are fine (a bundle shares them). */
    bad_record("{\"name\": \"x\", \"shape\": [4], \"dtype\": \"float32\", \"nbytes\": 16, \"byteOffset\": 0},"
               "{\"name\": \"y\", \"shape\": [4], \"dtype\": \"float32\", \"nbytes\": 16, \"byteOffset\": 8}",
               TESSERA_ERROR_FORMAT, "record 'y' (bytes 8 to 24) overlaps record 'x' (bytes 0 to 16)");
    bad_record("{\"name\": \"big\", \"shape\": [12], \"dtype\": \"float32\", \"nbytes\": 48, \"byteOffset\": 0},"
               "{\"name\": \"empty\", \"shape\": [0], \"dtype\": \"float32\", \"nbytes\": 0, \"byteOffset\": 4},"
               "{\"name\": \"inner\", \"shape\": [2], \"dtype\": \"float32\", \"nbytes\": 8, \"byteOffset\": 16}",
               TESSERA_ERROR_FORMAT, "record 'inner' (bytes 16 to 24) overlaps record 'big'");
    int shared = parse_one("params_shard_0.bin",
                           "{\"name\": \"a\", \"shape\": [4], \"dtype\": \"float32\", \"nbytes\": 16, \"byteOffset\": 16},"
                           "{\"name\": \"b\", \"shape\": [16], \"dtype\": \"uint8\", \"nbytes\": 16, \"byteOffset\": 16},"
                           "{\"name\": \"c\", \"shape\": [4], \"dtype\": \"float32\", \"nbytes\": 16, \"byteOffset\": 32}",
                           64, &c);
    CHECK_EQ_INT(shared, 0);
    tsr_tensor_cache_free(&a, &c);

    bad_text("{\"format\": \"tessera-tensor-cache\", \"version\": 2, \"records\": []}", TESSERA_ERROR_VERSION,
             "version 2; this runtime reads version 1");
    bad_text("{\"format\": \"mlc\", \"version\": 1, \"records\": []}", TESSERA_ERROR_FORMAT, "format is 'mlc'");
    bad_text("{\"format\": \"tessera-tensor-cache\", \"records\": []}", TESSERA_ERROR_FORMAT, "'version' is missing");
    bad_text("{\"format\": \"tessera-tensor-cache\", \"version\": 1}", TESSERA_ERROR_FORMAT, "'records' is missing");
    bad_text("{\"format\": \"tessera-tensor-cache\", \"version\": 1, \"records\": [{}]}", TESSERA_ERROR_FORMAT,
             "field 'records' is missing");
    bad_text("{\"format\": \"tessera-tensor-cache\", \"version\": 1, \"records\": [{\"dataPath\": \"a\", \"nbytes\": 0,"
             " \"sha256\": \"xyz\", \"records\": []}]}", TESSERA_ERROR_FORMAT, "weight shard 'a': field 'sha256'");
    bad_text("{\"format\": \"tessera-tensor-cache\", \"version\": 1, \"records\": [{\"dataPath\": \"a\", \"nbytes\": -1,"
             " \"sha256\": \"\", \"records\": []}]}", TESSERA_ERROR_FORMAT, "'nbytes' is -1");
    bad_text("{\"format\": \"tessera-tensor-cache\", \"version\": 1, \"records\": []} x", TESSERA_ERROR_FORMAT,
             "after the value");
    bad_text("[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["
             "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["
             "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[",
             TESSERA_ERROR_FORMAT, "deeper than 256");
    bad_text("null", TESSERA_ERROR_FORMAT, "not a JSON object");
    /* Empty shards and empty caches are fine. */
    const char *empty = "{\"format\": \"tessera-tensor-cache\", \"version\": 1, \"records\": []}";
    CHECK_EQ_INT(tsr_tensor_cache_parse(&a, empty, strlen(empty), &c), 0);
    CHECK(tsr_tensor_cache_find(&c, "x") == NULL);
    tsr_tensor_cache_free(&a, &c);
    CHECK_EQ_INT(counts.live, 0);
    return tsr_test_failures();
}
