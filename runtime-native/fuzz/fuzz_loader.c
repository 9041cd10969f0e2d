/* libFuzzer target over the whole loader: the first byte picks what the rest is.
 *   0: executable.json text (tsr_executable_parse);
 *   1: tensor-cache.json text (tsr_tensor_cache_parse);
 *   2: a folder: tensor-cache.json text, a 0xFF byte, then the bytes of params_shard_0.bin, written
 *      to a scratch folder and loaded with tsr_tensor_cache_load (paths, sizes, SHA-256, mapping).
 * Every input must be refused or accepted without a crash, a leak or an out-of-bounds access. The
 * CI runs it 60 s from fuzz/corpus/loader (make test-native). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "executable.h"
#include "tensor_cache.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char *copy_exact(const uint8_t *data, size_t size) {
    /* Exactly `size` bytes, so that AddressSanitizer sees any read past the end of the text. */
    char *text = malloc(size ? size : 1);
    if (text && size) memcpy(text, data, size);
    return text;
}

static void write_file(const char *dir, const char *name, const uint8_t *data, size_t size) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f) abort();
    if (size && fwrite(data, 1, size, f) != size) abort();
    fclose(f);
}

static void load_folder(const uint8_t *data, size_t size) {
    const uint8_t *split = memchr(data, 0xFF, size);
    size_t json_size = split ? (size_t)(split - data) : size;
    const uint8_t *shard = split ? split + 1 : data + size;
    size_t shard_size = split ? size - json_size - 1 : 0;
    /* One folder per fuzzing process, reused by every input. */
    char dir[64];
    snprintf(dir, sizeof dir, "/tmp/tessera-fuzz-%d", (int)getpid());
    if (access(dir, F_OK) != 0 && mkdir(dir, 0700) != 0) abort();
    write_file(dir, "tensor-cache.json", data, json_size);
    write_file(dir, "params_shard_0.bin", shard, shard_size);
    tsr_alloc a;
    tsr_alloc_init(&a, NULL);
    tsr_tensor_cache c;
    if (tsr_tensor_cache_load(&a, dir, 1, &c) == TESSERA_OK) {
        /* Every weight must read inside its mapping. */
        volatile uint8_t sink = 0;
        for (int32_t i = 0; i < c.n_weights; i++)
            if (c.weights[i].nbytes) sink ^= ((const uint8_t *)c.weights[i].data)[c.weights[i].nbytes - 1];
        (void)sink;
        tsr_tensor_cache_free(&a, &c);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0) return 0;
    uint8_t mode = data[0] % 3;
    data++, size--;
    if (mode == 2) {
        load_folder(data, size);
        return 0;
    }
    char *text = copy_exact(data, size);
    if (!text) return 0;
    tsr_alloc a;
    tsr_alloc_init(&a, NULL);
    if (mode == 0) {
        tsr_executable exe;
        if (tsr_executable_parse(&a, text, size, &exe) == TESSERA_OK) tsr_executable_free(&exe);
    } else {
        tsr_tensor_cache c;
        if (tsr_tensor_cache_parse(&a, text, size, &c) == TESSERA_OK) tsr_tensor_cache_free(&a, &c);
    }
    free(text);
    return 0;
}
