/* tessera_model_params.memory_limit: tessera_model_load plans the model and refuses, before it allocates
 * anything, one whose plan exceeds the limit, with TESSERA_ERROR_OUT_OF_MEMORY and a message giving both.
 * The model is a plain CPU executable (no kernels: main calls the runtime's own unique builtins) with one
 * float32[16] weight, so its plan is 64 bytes of weights. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "host_memory.h"
#include "sha256.h"
#include "tessera.h"

static const char *const EXECUTABLE =
    "{\"format\": \"tessera-executable\", \"version\": 3,"
    " \"target\": {\"kind\": \"cpu\", \"name\": \"cpu-generic\", \"backend\": \"c-native\", \"features\": []},"
    " \"constants\": [\"bias\"], \"libraries\": [\"tessera.builtin.unique_size\", \"tessera.builtin.unique\"],"
    " \"required_features\": [], \"required_limits\": {}, \"modules\": [], \"kernels\": [],"
    " \"functions\": {\"main\": {"
    "  \"params\": [{\"name\": \"x\", \"register\": 0, \"state\": false, \"sinfo\": {\"kind\": \"tensor\","
    "   \"dtype\": \"float32\", \"ndim\": 1, \"shape\": [\"n\"]}}],"
    "  \"symbols\": {\"n\": {\"upper_bound\": null}, \"m\": {\"upper_bound\": null}}, \"registers\": 3,"
    "  \"tensors\": {}, \"locations\": {}, \"memory\": {\"static\": false, \"buffers\": [], \"storages\": []},"
    "  \"code\": ["
    "   {\"op\": \"match\", \"reg\": 0, \"what\": \"argument 'x' of main\", \"text\": \"R.Tensor((n,))\","
    "    \"sinfo\": {\"kind\": \"tensor\", \"dtype\": \"float32\", \"ndim\": 1, \"shape\": [\"n\"]}},"
    "   {\"op\": \"call_builtin\", \"name\": \"tessera.builtin.unique_size\", \"args\": [0], \"outs\": [],"
    "    \"scalars\": [], \"dst\": 1},"
    "   {\"op\": \"match\", \"reg\": 1, \"what\": \"the unique count\", \"text\": \"R.Prim(value=m)\","
    "    \"sinfo\": {\"kind\": \"prim\", \"dtype\": \"int64\", \"value\": \"m\"}},"
    "   {\"op\": \"alloc_tensor\", \"dst\": 2, \"shape\": [\"m\"], \"dtype\": \"float32\"},"
    "   {\"op\": \"call_builtin\", \"name\": \"tessera.builtin.unique\", \"args\": [0], \"outs\": [2],"
    "    \"scalars\": [], \"dst\": null},"
    "   {\"op\": \"ret\", \"src\": 2}]}}}";

static void write_bytes(const char *dir, const char *name, const void *data, size_t size) {
    char path[600];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    if (!f) return;
    CHECK(fwrite(data, 1, size, f) == size);
    fclose(f);
}

static void make_folder(char *dir) {
    CHECK(mkdtemp(dir) != NULL);
    write_bytes(dir, "executable.json", EXECUTABLE, strlen(EXECUTABLE));
    float shard[16] = {0};
    write_bytes(dir, "params_shard_0.bin", shard, sizeof shard);
    char hex[65], json[1024];
    tsr_sha256_hex(shard, sizeof shard, hex);
    snprintf(json, sizeof json,
             "{\"format\": \"tessera-tensor-cache\", \"version\": 1, \"records\": [{\"dataPath\": "
             "\"params_shard_0.bin\", \"format\": \"raw-shard\", \"nbytes\": 64, \"sha256\": \"%s\", \"records\": "
             "[{\"name\": \"bias\", \"shape\": [16], \"dtype\": \"float32\", \"format\": \"raw\", \"nbytes\": 64, "
             "\"byteOffset\": 0}]}]}", hex);
    write_bytes(dir, "tensor-cache.json", json, strlen(json));
}

static void remove_folder(const char *dir) {
    const char *names[] = {"executable.json", "params_shard_0.bin", "tensor-cache.json", ".tessera-cache"};
    char path[600];
    for (size_t i = 0; i < 4; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        remove(path);
    }
    remove(dir);
}

static tessera_model *load_with_limit(const char *dir, uint64_t limit, tsr_test_counts *counts) {
    tessera_model_params params = tessera_model_default_params();
    params.n_threads = 1;
    params.device = "cpu";
    params.memory_limit = limit;
    params.allocator = tsr_test_counting_allocator(counts);
    return tessera_model_load(dir, &params);
}

static void the_default_is_what_the_machine_has(void) {
    tessera_model_params params = tessera_model_default_params();
    CHECK(params.memory_limit == 0);
}

/* 1 byte: refused with the plan and the limit in the message, and every allocation of the attempt returned. */
static void a_limit_below_the_plan_is_refused(const char *dir) {
    tsr_test_counts counts = {0, 0};
    tessera_model *m = load_with_limit(dir, 1, &counts);
    CHECK(m == NULL);
    const char *message = tessera_last_error();
    CHECK(strstr(message, "model needs 64 bytes (weights 64 bytes, arena 0 bytes, KV cache 0 bytes)") != NULL);
    CHECK(strstr(message, "but only 1 bytes is available (memory_limit)") != NULL);
    CHECK(strstr(message, "pass a larger memory_limit") != NULL);
    CHECK(strstr(message, dir) != NULL);
    CHECK_EQ_INT(counts.live, 0);
    /* The number refused is the plan's, which tessera_model_plan_devices reports before a load. */
    tessera_device_memory devices[2];
    CHECK_EQ_INT(tessera_model_plan_devices(dir, devices, 2), 1);
    CHECK_EQ_INT(devices[0].total, 64);
}

static void a_limit_at_the_plan_loads(const char *dir) {
    tsr_test_counts counts = {0, 0};
    tessera_model *m = load_with_limit(dir, 64, &counts);
    CHECK(m != NULL);
    if (!m) fprintf(stderr, "load: %s\n", tessera_last_error());
    tessera_model_free(m);
    CHECK_EQ_INT(counts.live, 0);
}

static void no_limit_loads(const char *dir) {
    tsr_test_counts counts = {0, 0};
    tessera_model *m = load_with_limit(dir, UINT64_MAX, &counts);
    CHECK(m != NULL);
    tessera_model_free(m);
    /* 0: what the machine has (a few MiB of it are always available to a test), or no check at all. */
    m = load_with_limit(dir, 0, &counts);
    CHECK(m != NULL);
    tessera_model_free(m);
    CHECK_EQ_INT(counts.live, 0);
}

/* Linux (this test's hosts, and Android) always has MemAvailable; its number is plausible. */
static void the_host_reports_available_memory(void) {
    uint64_t bytes = 0;
    const char *source = NULL;
#if defined(__linux__)
    CHECK(tsr_host_available_memory(&bytes, &source));
    CHECK(source != NULL && strcmp(source, "MemAvailable") == 0);
    CHECK(bytes > 1024u * 1024u);
#else
    if (tsr_host_available_memory(&bytes, &source)) CHECK(bytes > 0 && source != NULL);
#endif
}

int main(void) {
    char dir[] = "/tmp/tessera-memory-limit-XXXXXX";
    make_folder(dir);
    the_default_is_what_the_machine_has();
    a_limit_below_the_plan_is_refused(dir);
    a_limit_at_the_plan_loads(dir);
    no_limit_loads(dir);
    the_host_reports_available_memory();
    remove_folder(dir);
    return tsr_test_failures();
}
