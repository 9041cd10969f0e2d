/* The vulkan device on this machine's driver (Mesa's lavapipe in CI, which `make setup` installs: no
 * skipping): creation and what it states, memory at offsets, kernels launched with barriers only where
 * data flows and descriptor sets cached across steps, the errors of a missing loader and of an index
 * past the devices, the pipeline cache on disk (a corrupt file is rebuilt with one warning), and
 * TESSERA_VULKAN_VALIDATION=1 failing the next op on a validation message. */
#include <dlfcn.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backends/vulkan/vulkan_device.h"
#include "harness.h"
#include "sha256.h"

static int has(const char *needle) {
    if (strstr(tessera_last_error(), needle)) return 1;
    fprintf(stderr, "last error \"%s\" lacks \"%s\"\n", tessera_last_error(), needle);
    return 0;
}

/* out[i] = in[i] + s for i < n: bindings in (0, read) and out (1, write), push constants {s, n},
 * 64 invocations a workgroup. Written as SPIR-V assembly for this test and assembled with
 * `spirv-as --target-env vulkan1.1` (then checked by spirv-val). */
static const uint32_t ADD_SCALAR[] = {
    0x07230203, 0x00010300, 0x00070000, 0x00000026, 0x00000000, 0x00020011, 0x00000001, 0x0003000e, 0x00000000,
    0x00000001, 0x0007000f, 0x00000005, 0x00000001, 0x5f646461, 0x6c616373, 0x00007261, 0x00000002, 0x00060010,
    0x00000001, 0x00000011, 0x00000040, 0x00000001, 0x00000001, 0x00040047, 0x00000002, 0x0000000b, 0x0000001c,
    0x00040047, 0x00000003, 0x00000006, 0x00000004, 0x00050048, 0x00000004, 0x00000000, 0x00000023, 0x00000000,
    0x00030047, 0x00000004, 0x00000002, 0x00040047, 0x00000005, 0x00000022, 0x00000000, 0x00040047, 0x00000005,
    0x00000021, 0x00000000, 0x00030047, 0x00000005, 0x00000018, 0x00040047, 0x00000006, 0x00000022, 0x00000000,
    0x00040047, 0x00000006, 0x00000021, 0x00000001, 0x00050048, 0x00000007, 0x00000000, 0x00000023, 0x00000000,
    0x00050048, 0x00000007, 0x00000001, 0x00000023, 0x00000004, 0x00030047, 0x00000007, 0x00000002, 0x00020013,
    0x00000008, 0x00030021, 0x00000009, 0x00000008, 0x00040015, 0x0000000a, 0x00000020, 0x00000000, 0x00040015,
    0x0000000b, 0x00000020, 0x00000001, 0x00040017, 0x0000000c, 0x0000000a, 0x00000003, 0x00040020, 0x0000000d,
    0x00000001, 0x0000000c, 0x0004003b, 0x0000000d, 0x00000002, 0x00000001, 0x0003001d, 0x00000003, 0x0000000a,
    0x0003001e, 0x00000004, 0x00000003, 0x00040020, 0x0000000e, 0x0000000c, 0x00000004, 0x0004003b, 0x0000000e,
    0x00000005, 0x0000000c, 0x0004003b, 0x0000000e, 0x00000006, 0x0000000c, 0x0004001e, 0x00000007, 0x0000000b,
    0x0000000b, 0x00040020, 0x0000000f, 0x00000009, 0x00000007, 0x0004003b, 0x0000000f, 0x00000010, 0x00000009,
    0x00040020, 0x00000011, 0x00000009, 0x0000000b, 0x00040020, 0x00000012, 0x0000000c, 0x0000000a, 0x0004002b,
    0x0000000b, 0x00000013, 0x00000000, 0x0004002b, 0x0000000b, 0x00000014, 0x00000001, 0x00020014, 0x00000015,
    0x00050036, 0x00000008, 0x00000001, 0x00000000, 0x00000009, 0x000200f8, 0x00000016, 0x0004003d, 0x0000000c,
    0x00000017, 0x00000002, 0x00050051, 0x0000000a, 0x00000018, 0x00000017, 0x00000000, 0x00050041, 0x00000011,
    0x00000019, 0x00000010, 0x00000014, 0x0004003d, 0x0000000b, 0x0000001a, 0x00000019, 0x0004007c, 0x0000000a,
    0x0000001b, 0x0000001a, 0x000500b0, 0x00000015, 0x0000001c, 0x00000018, 0x0000001b, 0x000300f7, 0x0000001d,
    0x00000000, 0x000400fa, 0x0000001c, 0x0000001e, 0x0000001d, 0x000200f8, 0x0000001e, 0x00050041, 0x00000011,
    0x0000001f, 0x00000010, 0x00000013, 0x0004003d, 0x0000000b, 0x00000020, 0x0000001f, 0x0004007c, 0x0000000a,
    0x00000021, 0x00000020, 0x00060041, 0x00000012, 0x00000022, 0x00000005, 0x00000013, 0x00000018, 0x0004003d,
    0x0000000a, 0x00000023, 0x00000022, 0x00050080, 0x0000000a, 0x00000024, 0x00000023, 0x00000021, 0x00060041,
    0x00000012, 0x00000025, 0x00000006, 0x00000013, 0x00000018, 0x0003003e, 0x00000025, 0x00000024, 0x000200f9,
    0x0000001d, 0x000200f8, 0x0000001d, 0x000100fd, 0x00010038
};

typedef struct fixture {
    char dir[64], cache[96];
    tsr_module module;
    tsr_kernel kernel;
    uint8_t access[2];
    char sha[65];
    tsr_executable exe;
} fixture;

static void write_bytes(const char *path, const void *data, size_t size) {
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    if (!f) return;
    CHECK(fwrite(data, 1, size, f) == size);
    fclose(f);
}

static size_t read_bytes(const char *path, void *data, size_t size) {
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    size_t n = fread(data, 1, size, f);
    fclose(f);
    return n;
}

static void fixture_init(fixture *fx) {
    memset(fx, 0, sizeof *fx);
    snprintf(fx->dir, sizeof fx->dir, "/tmp/tessera-vulkan-XXXXXX");
    CHECK(mkdtemp(fx->dir) != NULL);
    snprintf(fx->cache, sizeof fx->cache, "%s/cache", fx->dir);
    char path[160];
    snprintf(path, sizeof path, "%s/add.spv", fx->dir);
    write_bytes(path, ADD_SCALAR, sizeof ADD_SCALAR);
    tsr_sha256_hex(ADD_SCALAR, sizeof ADD_SCALAR, fx->sha);
    fx->module = (tsr_module){.path = "add.spv", .backend = "spirv", .sha256 = fx->sha, .nbytes = sizeof ADD_SCALAR};
    fx->access[0] = TSR_ACCESS_READ;
    fx->access[1] = TSR_ACCESS_WRITE;
    fx->kernel = (tsr_kernel){.name = "add_scalar", .backend = "spirv", .entry_point = "add_scalar", .module = 0,
                              .workgroup_size = {64, 1, 1}, .n_bindings = 2, .binding_access = fx->access,
                              .n_scalars = 2};
    fx->exe.target_name = "test";
    fx->exe.modules = &fx->module;
    fx->exe.n_modules = 1;
    fx->exe.kernels = &fx->kernel;
    fx->exe.n_kernels = 1;
}

static void remove_tree(const char *dir) {
    char command[256];
    snprintf(command, sizeof command, "rm -rf '%s'", dir);
    CHECK(system(command) == 0);
}

static tsr_device *open_device(tsr_alloc *a, const char *cache_dir, const char *model_dir) {
    tsr_device_options options = {.n_threads = 1, .index = -1, .cache_dir = cache_dir, .model_dir = model_dir};
    tsr_device *d = NULL;
    int rc = tsr_vulkan_device_new(a, &options, &d);
    if (rc) fprintf(stderr, "tsr_vulkan_device_new: %s\n", tessera_last_error());
    CHECK_EQ_INT(rc, 0);
    return d;
}

static tsr_vulkan_counters counters(const tsr_device *d) {
    tsr_vulkan_counters c;
    memset(&c, 0, sizeof c);
    CHECK(tsr_vulkan_counters_of(d, &c));
    return c;
}

/* Runs fn with stderr going to a file; that file's text (at most size - 1 bytes) into out. */
static void capture_stderr(void (*fn)(void *), void *arg, char *out, size_t size) {
    char path[] = "/tmp/tessera-vulkan-stderr-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    fflush(stderr);
    int saved = dup(2);
    dup2(fd, 2);
    fn(arg);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    close(fd);
    size_t n = read_bytes(path, out, size - 1);
    out[n] = '\0';
    unlink(path);
    fprintf(stderr, "%s", out); /* still shown */
}

static void creation_states_what_the_device_has(tsr_alloc *a) {
    tsr_device *d = open_device(a, NULL, NULL);
    if (!d) return;
    CHECK(strcmp(d->ops->name, "vulkan") == 0);
    CHECK(d->description[0] != '\0' && strcmp(d->description, "not opened") != 0);
    fprintf(stderr, "vulkan device: %s; features:", d->description);
    CHECK(d->features != NULL);
    for (const char *const *f = d->features; f && *f; f++) fprintf(stderr, " %s", *f);
    fprintf(stderr, "\n");
    CHECK(d->storage_alignment >= 4 && (d->storage_alignment & (d->storage_alignment - 1)) == 0);
    CHECK(d->max_workgroups >= 65535);
    CHECK(d->max_invocations >= 128 && d->max_storage_buffers >= 4 && d->max_workgroup_storage >= 16384);
    CHECK(d->max_binding_size >= 1 << 27 && d->max_buffer_size >= d->max_binding_size / 2);
    d->ops->destroy(d);
}

static void memory_round_trips_at_offsets(tsr_alloc *a, bool staged) {
    tsr_device *d = open_device(a, NULL, NULL);
    if (!d) return;
    if (staged) tsr_vk_use_staging(d);
    unsigned char *b = d->ops->allocate(d, 1001);
    CHECK(b != NULL);
    unsigned char bytes[1001];
    memset(bytes, 0xff, sizeof bytes);
    CHECK_EQ_INT(d->ops->read_back(d, b, 0, bytes, sizeof bytes), 0);
    int zeros = 1;
    for (size_t i = 0; i < sizeof bytes; i++) zeros &= bytes[i] == 0;
    CHECK(zeros); /* allocate zeroes */
    const char text[] = "tessera";
    CHECK_EQ_INT(d->ops->upload(d, b, 5, text, 7), 0);
    char got[16] = {0};
    CHECK_EQ_INT(d->ops->read_back(d, b, 3, got, 11), 0);
    CHECK(memcmp(got, "\0\0tessera\0\0", 11) == 0);
    CHECK(d->ops->host_pointer(d, b, 0) == NULL); /* the GPU runs asynchronously */
    CHECK_EQ_INT(d->ops->upload(d, b, 1000, text, 7), TESSERA_ERROR_INVALID_ARGUMENT);
    CHECK(has("overruns"));
    CHECK_EQ_INT(d->ops->read_back(d, b, 1004, got, 1), TESSERA_ERROR_INVALID_ARGUMENT);
    float weights[5] = {1, 2, 3, 4, 5}, back[5] = {0};
    void *w = d->ops->adopt_host(d, weights, sizeof weights);
    CHECK(w != NULL);
    CHECK_EQ_INT(d->ops->read_back(d, w, 4, back, 16), 0);
    CHECK(back[0] == 2 && back[3] == 5);
    d->ops->release(d, b);
    d->ops->destroy(d); /* frees the adopted buffer, which the VM never releases */
}

static void an_index_picks_a_device_and_one_past_them_is_refused(tsr_alloc *a) {
    tsr_device_options first = {.n_threads = 1, .index = 0};
    tsr_device *zero = NULL;
    CHECK_EQ_INT(tsr_vulkan_device_new(a, &first, &zero), 0);
    if (zero) zero->ops->destroy(zero);
    tsr_device_options options = {.n_threads = 1, .index = 200};
    tsr_device *d = (tsr_device *)1;
    CHECK_EQ_INT(tsr_vulkan_device_new(a, &options, &d), TESSERA_ERROR_UNSUPPORTED);
    CHECK(d == NULL);
    CHECK(has("vulkan:200"));
    CHECK(has("0: ")); /* the devices there are */
}

static void a_missing_loader_is_named(tsr_alloc *a) {
    static const char *const NONE[] = {"libvulkan-not-here.so.9", "libvulkan-nor-here.so", NULL};
    tsr_device_options options = {.n_threads = 1, .index = -1};
    tsr_device *d = (tsr_device *)1;
    CHECK_EQ_INT(tsr_vulkan_device_new_with(a, &options, NONE, &d), TESSERA_ERROR_UNSUPPORTED);
    CHECK(d == NULL);
    CHECK(has("vulkan device"));
    CHECK(has("Vulkan loader"));
    CHECK(has("libvulkan-not-here.so.9, libvulkan-nor-here.so"));
}

static void launch(tsr_device *d, void *in, void *out, int32_t s, int32_t n) {
    void *bases[2] = {in, out};
    size_t offsets[2] = {0, 0}, sizes[2] = {(size_t)n * 4, (size_t)n * 4};
    int32_t scalars[2] = {s, n}, grid[3] = {(n + 63) / 64, 1, 1};
    CHECK_EQ_INT(d->ops->launch(d, 0, 2, bases, offsets, sizes, scalars, grid), 0);
}

static void kernels_run_in_order_with_barriers_only_where_data_flows(tsr_alloc *a, bool staged) {
    fixture fx;
    fixture_init(&fx);
    tsr_device *d = open_device(a, NULL, NULL); /* no disk cache */
    if (!d) return;
    if (staged) tsr_vk_use_staging(d);
    CHECK_EQ_INT(d->ops->load_kernels(d, &fx.exe, fx.dir), 0);
    tsr_vulkan_counters c = counters(d);
    CHECK_EQ_INT(c.shader_modules, 1);
    CHECK_EQ_INT(c.pipelines, 1);
    enum { N = 100 };
    uint32_t values[N], got[N];
    for (int i = 0; i < N; i++) values[i] = (uint32_t)i;
    void *x = d->ops->allocate(d, N * 4), *y = d->ops->allocate(d, N * 4), *z = d->ops->allocate(d, N * 4),
         *w = d->ops->allocate(d, N * 4);
    CHECK_EQ_INT(d->ops->upload(d, x, 0, values, sizeof values), 0);
    for (int step = 0; step < 3; step++) {
        tsr_vulkan_counters before = counters(d);
        launch(d, x, y, 1, N);  /* y = x + 1 */
        launch(d, y, z, 1, N);  /* z = y + 1: reads what the first wrote */
        launch(d, x, w, 10, N); /* w = x + 10: independent of both */
        CHECK_EQ_INT(d->ops->read_back(d, z, 0, got, sizeof got), 0);
        CHECK(got[0] == 2 && got[N - 1] == N + 1);
        CHECK_EQ_INT(d->ops->read_back(d, w, 0, got, sizeof got), 0);
        CHECK(got[7] == 17);
        tsr_vulkan_counters after = counters(d);
        CHECK_EQ_INT(after.dispatches - before.dispatches, 3);
        /* Staged: each read back is a copy submitted on its own. Mapped: the second finds nothing pending. */
        CHECK_EQ_INT(after.submits - before.submits, staged ? 2 : 1);
        /* Every step: y -> z only. The last step's read of y finished with its submission, so the new write
         * of y needs no barrier. (Staged copies add their own: the copy of z after the launch that wrote it,
         * and so on.) */
        if (!staged) CHECK_EQ_INT(after.barriers - before.barriers, 1);
        /* The same ranges every step: sets are allocated and written in the first step only. */
        CHECK_EQ_INT(after.descriptor_sets, 3);
        CHECK_EQ_INT(after.descriptor_writes, 3);
    }
    /* An upload into a buffer a pending launch reads waits for that launch: order is kept. */
    launch(d, x, y, 5, N);
    uint32_t zeros[N] = {0};
    CHECK_EQ_INT(d->ops->upload(d, x, 0, zeros, sizeof zeros), 0);
    CHECK_EQ_INT(d->ops->read_back(d, y, 0, got, sizeof got), 0);
    CHECK(got[3] == 8);
    /* A grid with no workgroups runs nothing; a kernel that does not exist is refused. */
    int32_t empty[3] = {0, 1, 1}, scalars[2] = {0, 0};
    void *bases[2] = {x, y};
    size_t offsets[2] = {0, 0}, sizes[2] = {4, 4};
    CHECK_EQ_INT(d->ops->launch(d, 0, 2, bases, offsets, sizes, scalars, empty), 0);
    CHECK_EQ_INT(d->ops->launch(d, 3, 2, bases, offsets, sizes, scalars, empty), TESSERA_ERROR_INVALID_ARGUMENT);
    /* A released buffer's sets go with it: a new buffer binds a new set. */
    d->ops->release(d, w);
    w = d->ops->allocate(d, N * 4);
    launch(d, x, w, 1, N);
    CHECK_EQ_INT(d->ops->synchronize(d), 0);
    CHECK_EQ_INT(counters(d).descriptor_sets, 4);
    d->ops->release(d, x);
    d->ops->release(d, y);
    d->ops->release(d, z);
    d->ops->release(d, w);
    d->ops->destroy(d);
    remove_tree(fx.dir);
}

static void cache_header_is_checked(tsr_alloc *a) {
    tsr_device *d = open_device(a, NULL, NULL);
    if (!d) return;
    const VkPhysicalDeviceProperties *props = &((tsr_vk_device *)d)->props;
    unsigned char header[48] = {0};
    uint32_t fields[4] = {32, VK_PIPELINE_CACHE_HEADER_VERSION_ONE, props->vendorID, props->deviceID};
    memcpy(header, fields, sizeof fields);
    memcpy(header + 16, props->pipelineCacheUUID, VK_UUID_SIZE);
    char why[160];
    CHECK(tsr_vk_cache_header_ok(header, 48, props, why, sizeof why));
    CHECK(!tsr_vk_cache_header_ok(header, 20, props, why, sizeof why) && strstr(why, "shorter"));
    header[4] = 2; /* header version */
    CHECK(!tsr_vk_cache_header_ok(header, 48, props, why, sizeof why) && strstr(why, "version 2"));
    header[4] = 1;
    header[8] ^= 1; /* vendor */
    CHECK(!tsr_vk_cache_header_ok(header, 48, props, why, sizeof why) && strstr(why, "vendor"));
    header[8] ^= 1;
    header[20] ^= 1; /* UUID */
    CHECK(!tsr_vk_cache_header_ok(header, 48, props, why, sizeof why) && strstr(why, "UUID"));
    header[20] ^= 1;
    header[0] = 64; /* longer than the data */
    CHECK(!tsr_vk_cache_header_ok(header, 48, props, why, sizeof why));
    d->ops->destroy(d);
}

typedef struct load_args {
    tsr_alloc *a;
    fixture *fx;
    const char *cache_dir, *model_dir;
    tsr_vulkan_counters counters;
} load_args;

static void load_once(void *arg) {
    load_args *l = arg;
    tsr_device *d = open_device(l->a, l->cache_dir, l->model_dir);
    if (!d) return;
    CHECK_EQ_INT(d->ops->load_kernels(d, &l->fx->exe, l->fx->dir), 0);
    l->counters = counters(d);
    d->ops->destroy(d);
}

static void pipeline_cache_on_disk(tsr_alloc *a) {
    fixture fx;
    fixture_init(&fx);
    load_args l = {a, &fx, fx.cache, fx.dir, {0}};
    char out[2048];
    capture_stderr(load_once, &l, out, sizeof out); /* the first load writes the cache file */
    CHECK(strstr(out, "warning") == NULL);
    tsr_device *probe = open_device(a, NULL, NULL);
    if (!probe) return;
    char path[2400];
    tsr_vk_cache_path(fx.cache, &((tsr_vk_device *)probe)->props, path, sizeof path);
    unsigned char data[1 << 16];
    size_t n = read_bytes(path, data, sizeof data);
    char why[160] = "";
    CHECK(n >= 32 && tsr_vk_cache_header_ok(data, n, &((tsr_vk_device *)probe)->props, why, sizeof why));
    CHECK_EQ_INT(l.counters.cache_bytes_saved, n);
    fprintf(stderr, "pipeline cache: %zu bytes; first load %.3f ms\n", n, 1e3 * l.counters.pipeline_seconds);

    capture_stderr(load_once, &l, out, sizeof out); /* the second reads it, and warns of nothing */
    CHECK(l.counters.cache_loaded);
    CHECK(strstr(out, "warning") == NULL);
    fprintf(stderr, "second load %.3f ms, %llu of %llu pipelines from the cache (%s)\n",
            1e3 * l.counters.pipeline_seconds, (unsigned long long)l.counters.pipeline_cache_hits,
            (unsigned long long)l.counters.pipelines,
            l.counters.creation_feedback ? "creation feedback" : "no creation feedback");

    write_bytes(path, "not a pipeline cache at all, but some 48 bytes.", 48);
    capture_stderr(load_once, &l, out, sizeof out); /* a corrupt file: one warning, rebuilt */
    CHECK(strstr(out, "tessera: warning: ") && strstr(out, path) && strstr(out, "is not a pipeline cache of this "
                                                                         "device (") && strstr(out, "rebuilding it"));
    CHECK(!l.counters.cache_loaded);
    n = read_bytes(path, data, sizeof data);
    CHECK(tsr_vk_cache_header_ok(data, n, &((tsr_vk_device *)probe)->props, why, sizeof why));

    /* Without cache_dir: <model>/.tessera-cache. A folder that cannot be made: no disk cache, no error. */
    load_args beside = {a, &fx, NULL, fx.dir, {0}};
    load_once(&beside);
    tsr_vk_cache_path(fx.dir, &((tsr_vk_device *)probe)->props, path, sizeof path);
    char expected[2400];
    snprintf(expected, sizeof expected, "%s/.tessera-cache", fx.dir);
    tsr_vk_cache_path(expected, &((tsr_vk_device *)probe)->props, path, sizeof path);
    struct stat st;
    CHECK(stat(path, &st) == 0);
    load_args nowhere = {a, &fx, "/proc/no/such/folder", fx.dir, {0}};
    capture_stderr(load_once, &nowhere, out, sizeof out);
    CHECK_EQ_INT(nowhere.counters.pipelines, 1);
    CHECK_EQ_INT(nowhere.counters.cache_bytes_saved, 0);
    probe->ops->destroy(probe);
    remove_tree(fx.dir);
}

static void validation_messages_fail_the_next_op(tsr_alloc *a) {
    setenv("TESSERA_VULKAN_VALIDATION", "1", 1);
    tsr_device *d = open_device(a, NULL, NULL);
    if (d) {
        tsr_vk_device *vk = (tsr_vk_device *)d;
        CHECK_EQ_INT(d->ops->synchronize(d), 0); /* a clean device says nothing */
        /* A buffer with no usage breaks a valid-usage rule: the layer speaks. */
        VkBufferCreateInfo info = {.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO, .size = 16, .usage = 0,
                                   .sharingMode = VK_SHARING_MODE_EXCLUSIVE};
        VkBuffer buffer = VK_NULL_HANDLE;
        if (vk->vk.vkCreateBuffer(vk->device, &info, NULL, &buffer) == VK_SUCCESS)
            vk->vk.vkDestroyBuffer(vk->device, buffer, NULL);
        CHECK(counters(d).validation_messages >= 1);
        CHECK_EQ_INT(d->ops->synchronize(d), TESSERA_ERROR_DEVICE);
        CHECK(has("validation layer reported"));
        CHECK(has("VkBufferCreateInfo"));
        CHECK_EQ_INT(d->ops->synchronize(d), 0); /* reported once */
        d->ops->destroy(d);
    }
    /* A layer that is not there, when asked for, is named. */
    char saved[1024] = "";
    if (getenv("VK_LAYER_PATH")) snprintf(saved, sizeof saved, "%s", getenv("VK_LAYER_PATH"));
    setenv("VK_LAYER_PATH", "/nonexistent-layers", 1); /* the loader looks for explicit layers only there */
    tsr_device_options options = {.n_threads = 1, .index = -1};
    tsr_device *none = NULL;
    CHECK_EQ_INT(tsr_vulkan_device_new(a, &options, &none), TESSERA_ERROR_UNSUPPORTED);
    CHECK(has("VK_LAYER_KHRONOS_validation"));
    if (saved[0]) setenv("VK_LAYER_PATH", saved, 1);
    else unsetenv("VK_LAYER_PATH");
    unsetenv("TESSERA_VULKAN_VALIDATION");
}

/* Under LeakSanitizer: Mesa's lavapipe leaks 128 bytes per instance (a realloc in libvulkan_lvp.so, Mesa
 * 22.3), not ours. The loader unloads the driver with its instance, so LSan could not name the frame:
 * main holds one more reference to the driver, and its leaks are suppressed by its name. */
const char *__lsan_default_suppressions(void);
const char *__lsan_default_suppressions(void) { return "leak:libvulkan_lvp.so\n"; }

int main(void) {
    void *lavapipe = dlopen("libvulkan_lvp.so", RTLD_NOW | RTLD_LOCAL); /* NULL on another driver: fine */
    /* Mesa prints a harmless warning without it. */
    if (!getenv("XDG_RUNTIME_DIR")) setenv("XDG_RUNTIME_DIR", "/tmp", 0);
    unsetenv("TESSERA_VULKAN_VALIDATION");
    tsr_test_counts counts = {0, 0};
    tessera_allocator allocator = tsr_test_counting_allocator(&counts);
    tsr_alloc a;
    tsr_alloc_init(&a, &allocator);
    creation_states_what_the_device_has(&a);
    memory_round_trips_at_offsets(&a, false);
    memory_round_trips_at_offsets(&a, true);
    an_index_picks_a_device_and_one_past_them_is_refused(&a);
    a_missing_loader_is_named(&a);
    kernels_run_in_order_with_barriers_only_where_data_flows(&a, false);
    kernels_run_in_order_with_barriers_only_where_data_flows(&a, true);
    cache_header_is_checked(&a);
    pipeline_cache_on_disk(&a);
    validation_messages_fail_the_next_op(&a);
    CHECK_EQ_INT(counts.live, 0); /* every allocation of every device returned */
    (void)lavapipe; /* kept until exit, when LSan reports */
    return tsr_test_failures();
}
