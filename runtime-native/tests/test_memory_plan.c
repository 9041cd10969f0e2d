/* tessera_model_plan_devices: what each device of a model needs, from executable.json and
 * tensor-cache.json alone (nothing loaded or allocated). A split build (data/vm/split.json: a Vulkan
 * device beside the CPU, the weight `bias` read on both) has two entries; the weight counts on each. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "sha256.h"
#include "tessera.h"

static void write_bytes(const char *dir, const char *name, const void *data, size_t size) {
    char path[600];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    if (!f) return;
    CHECK(fwrite(data, 1, size, f) == size);
    fclose(f);
}

static char *read_text(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *text = malloc(1 << 16);
    *size = text ? fread(text, 1, (1 << 16) - 1, f) : 0;
    fclose(f);
    return text;
}

/* A folder holding `executable` (a test fixture) and a tensor cache of one float32[16] weight `bias`. */
static void make_folder(char *dir, const char *executable) {
    CHECK(mkdtemp(dir) != NULL);
    size_t size = 0;
    char *text = read_text(executable, &size);
    CHECK(text != NULL);
    if (!text) return;
    write_bytes(dir, "executable.json", text, size);
    free(text);
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
    const char *names[] = {"executable.json", "params_shard_0.bin", "tensor-cache.json"};
    char path[600];
    for (size_t i = 0; i < 3; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        remove(path);
    }
    remove(dir);
}

static void a_split_build_is_planned_per_device(void) {
    char dir[] = "/tmp/tessera-plan-XXXXXX";
    make_folder(dir, "data/vm/split.json");
    tessera_device_memory devices[4];
    memset(devices, 0xff, sizeof devices);
    CHECK_EQ_INT(tessera_model_plan_devices(dir, devices, 4), 2);
    CHECK(strcmp(devices[0].device, "vulkan") == 0);
    CHECK(strcmp(devices[1].device, "cpu") == 0);
    /* main's arena buffers are 256 bytes on the GPU and 512 on the CPU; no state. */
    CHECK_EQ_INT(devices[0].arena, 256);
    CHECK_EQ_INT(devices[1].arena, 512);
    CHECK_EQ_INT(devices[0].weights, 64);
    CHECK_EQ_INT(devices[1].weights, 64);
    CHECK_EQ_INT(devices[0].kv_cache + devices[1].kv_cache, 0);
    CHECK_EQ_INT(devices[0].total, 320);
    CHECK_EQ_INT(devices[1].total, 576);
    /* The whole model's plan is the devices' arenas together, the weights once. */
    tessera_memory all;
    CHECK_EQ_INT(tessera_model_plan(dir, &all), 0);
    CHECK_EQ_INT(all.arena, devices[0].arena + devices[1].arena);
    CHECK_EQ_INT(all.weights, 64);
    /* A short array gets what fits; the count is still the model's. */
    CHECK_EQ_INT(tessera_model_plan_devices(dir, devices, 1), 2);
    CHECK_EQ_INT(tessera_model_plan_devices(dir, NULL, 0), 2);
    remove_folder(dir);
}

static void a_build_of_one_device_has_one_entry(void) {
    char dir[] = "/tmp/tessera-plan-XXXXXX";
    make_folder(dir, "data/executable/gemm.json");
    tessera_device_memory device;
    CHECK_EQ_INT(tessera_model_plan_devices(dir, &device, 1), 1);
    tessera_memory all;
    CHECK_EQ_INT(tessera_model_plan(dir, &all), 0);
    CHECK_EQ_INT(device.arena, all.arena);
    CHECK_EQ_INT(device.kv_cache, all.kv_cache);
    remove_folder(dir);
}

static void bad_arguments_are_refused(void) {
    tessera_device_memory device;
    CHECK_EQ_INT(tessera_model_plan_devices(NULL, &device, 1), TESSERA_ERROR_INVALID_ARGUMENT);
    CHECK_EQ_INT(tessera_model_plan_devices("/tmp", NULL, 1), TESSERA_ERROR_INVALID_ARGUMENT);
    CHECK(tessera_model_plan_devices("/nonexistent-tessera-folder", &device, 1) < 0);
    CHECK_EQ_INT(tessera_model_memory_devices(NULL, &device, 1), TESSERA_ERROR_INVALID_ARGUMENT);
}

int main(void) {
    a_split_build_is_planned_per_device();
    a_build_of_one_device_has_one_entry();
    bad_arguments_are_refused();
    return tsr_test_failures();
}
