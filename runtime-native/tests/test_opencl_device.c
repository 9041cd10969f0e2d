/* The OpenCL device on this machine's driver (PoCL in CI, which `make setup` installs: no skipping):
 * creation and what it states, memory at offsets (the sub-buffer path and its alignment), a kernel
 * launched through views of one buffer, the errors of a missing loader, no platform, an index past the devices,
 * a module that does not build, and the binary cache: written once, read on the next load, and a
 * corrupt or foreign file rebuilt from source with a warning. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "backends/opencl/opencl_device.h"
#include "harness.h"
#include "sha256.h"

static int has(const char *needle) {
    if (strstr(tessera_last_error(), needle)) return 1;
    fprintf(stderr, "last error \"%s\" lacks \"%s\"\n", tessera_last_error(), needle);
    return 0;
}

static const char ADD_ONE[] =
    "__kernel __attribute__((reqd_work_group_size(4, 1, 1)))\n"
    "void k_add_one(__global float* a, __global float* out, int n) {\n"
    "  int i = get_global_id(0);\n"
    "  if (i < n) out[i] = a[i] + 1.0f;\n"
    "}\n";

/* A folder with kernels/000_add_one.cl (or `source`) and the executable that names it. */
typedef struct fixture {
    char dir[64], cache[96];
    char sha[65];
    tsr_module module;
    tsr_kernel kernel;
    tsr_executable exe;
} fixture;

static void write_text(const char *path, const char *text, size_t size) {
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    if (!f) return;
    CHECK(fwrite(text, 1, size, f) == size);
    fclose(f);
}

static void make_fixture(fixture *fx, const char *source) {
    memset(fx, 0, sizeof *fx);
    snprintf(fx->dir, sizeof fx->dir, "/tmp/tessera-opencl-XXXXXX");
    CHECK(mkdtemp(fx->dir) != NULL);
    snprintf(fx->cache, sizeof fx->cache, "%s/cache", fx->dir);
    char path[160];
    snprintf(path, sizeof path, "%s/kernels", fx->dir);
    mkdir(path, 0755);
    snprintf(path, sizeof path, "%s/kernels/000_add_one.cl", fx->dir);
    write_text(path, source, strlen(source));
    tsr_sha256_hex(source, strlen(source), fx->sha);
    fx->module = (tsr_module){"kernels/000_add_one.cl", "opencl", fx->sha, strlen(source)};
    fx->kernel = (tsr_kernel){.name = "add_one", .backend = "opencl", .entry_point = "k_add_one", .module = 0,
                              .workgroup_size = {4, 1, 1}, .n_bindings = 2, .n_scalars = 1};
    fx->exe.modules = &fx->module;
    fx->exe.n_modules = 1;
    fx->exe.kernels = &fx->kernel;
    fx->exe.n_kernels = 1;
    fx->exe.target_name = "opencl";
}

static void remove_fixture(fixture *fx) {
    char command[160];
    snprintf(command, sizeof command, "rm -rf '%s'", fx->dir);
    CHECK(system(command) == 0);
}

static tsr_device *open_device(tsr_alloc *a, int32_t index, const char *cache_dir, const char *model_dir) {
    tsr_device_options options = {.n_threads = 1, .index = index, .cache_dir = cache_dir, .model_dir = model_dir};
    tsr_device *d = NULL;
    int rc = tsr_opencl_device_new(a, &options, &d);
    if (rc) fprintf(stderr, "no OpenCL device: %s\n", tessera_last_error());
    CHECK_EQ_INT(rc, 0);
    return d;
}

static bool offers(const tsr_device *d, const char *feature) {
    for (const char *const *f = d->features; f && *f; f++)
        if (strcmp(*f, feature) == 0) return true;
    return false;
}

static void the_device_says_what_it_is_and_its_limits(tsr_alloc *a) {
    tsr_device *d = open_device(a, -1, NULL, NULL);
    if (!d) return;
    printf("opencl device: %s, alignment %llu\n", d->description, (unsigned long long)d->storage_alignment);
    CHECK(strcmp(d->ops->name, "opencl") == 0);
    CHECK(strlen(d->description) > 4 && strchr(d->description, '('));
    CHECK(offers(d, "shader-f16"));
    CHECK(d->storage_alignment >= 4 && (d->storage_alignment & (d->storage_alignment - 1)) == 0);
    CHECK(d->max_invocations >= 1 && d->max_workgroup_storage > 0 && d->max_buffer_size > 0);
    CHECK(d->max_binding_size == d->max_buffer_size && d->max_workgroups == INT32_MAX);
    CHECK(d->ops->host_pointer(d, NULL, 0) == NULL);
    d->ops->destroy(d);
    /* The first device by index is a device too. */
    d = open_device(a, 0, NULL, NULL);
    if (d) d->ops->destroy(d);
}

static void memory_is_zeroed_and_copies_at_offsets(tsr_alloc *a) {
    tsr_device *d = open_device(a, -1, NULL, NULL);
    if (!d) return;
    void *buffer = d->ops->allocate(d, 1000);
    CHECK(buffer != NULL);
    unsigned char bytes[1000];
    memset(bytes, 0xAB, sizeof bytes);
    CHECK_EQ_INT(d->ops->read_back(d, buffer, 0, bytes, sizeof bytes), 0);
    int nonzero = 0;
    for (size_t i = 0; i < sizeof bytes; i++) nonzero += bytes[i] != 0;
    CHECK_EQ_INT(nonzero, 0);
    const char text[] = "tessera";
    CHECK_EQ_INT(d->ops->upload(d, buffer, 333, text, sizeof text), 0);
    char back[sizeof text + 2] = {0};
    CHECK_EQ_INT(d->ops->read_back(d, buffer, 332, back, sizeof back), 0);
    CHECK(back[0] == 0 && memcmp(back + 1, text, sizeof text) == 0 && back[sizeof text + 1] == 0);
    /* adopt_host copies the host bytes; an empty allocation is still a buffer. */
    float weights[3] = {1.5f, -2.0f, 3.25f}, got[3];
    void *adopted = d->ops->adopt_host(d, weights, sizeof weights);
    CHECK(adopted != NULL);
    CHECK_EQ_INT(d->ops->read_back(d, adopted, 0, got, sizeof got), 0);
    CHECK(memcmp(weights, got, sizeof got) == 0);
    void *empty = d->ops->allocate(d, 0);
    CHECK(empty != NULL);
    CHECK_EQ_INT(d->ops->synchronize(d), 0);
    d->ops->release(d, empty);
    d->ops->release(d, adopted);
    d->ops->release(d, buffer);
    d->ops->destroy(d);
}

/* out[i] = a[i] + 1 with a and out views of one buffer: out a sub-buffer at the alignment. */
static void kernels_run_on_views_of_one_buffer(tsr_alloc *a) {
    fixture fx;
    make_fixture(&fx, ADD_ONE);
    tsr_device *d = open_device(a, -1, NULL, NULL);
    if (!d) return remove_fixture(&fx);
    CHECK_EQ_INT(d->ops->load_kernels(d, &fx.exe, fx.dir), 0);
    size_t align = (size_t)d->storage_alignment, n = 10;
    void *buffer = d->ops->allocate(d, align + 64);
    float in[10];
    for (size_t i = 0; i < n; i++) in[i] = (float)i * 0.5f;
    CHECK_EQ_INT(d->ops->upload(d, buffer, 0, in, sizeof in), 0);
    void *bases[2] = {buffer, buffer};
    size_t offsets[2] = {0, align}, sizes[2] = {sizeof in, sizeof in};
    int32_t scalars[1] = {(int32_t)n}, grid[3] = {3, 1, 1};
    tsr_opencl_stats before, after;
    CHECK_EQ_INT(tsr_opencl_device_stats(d, &before), 0);
    CHECK_EQ_INT(d->ops->launch(d, 0, 2, bases, offsets, sizes, scalars, grid), 0);
    CHECK_EQ_INT(d->ops->launch(d, 0, 2, bases, offsets, sizes, scalars, grid), 0);
    CHECK_EQ_INT(tsr_opencl_device_stats(d, &after), 0);
    /* Two sub-buffers (neither view is the whole buffer), made by the first launch only. */
    CHECK_EQ_INT(after.sub_buffers - before.sub_buffers, 2);
    float out[10];
    CHECK_EQ_INT(d->ops->read_back(d, buffer, align, out, sizeof out), 0);
    for (size_t i = 0; i < n; i++) CHECK(out[i] == in[i] + 1.0f);
    /* The whole buffer binds as itself. */
    size_t whole[2] = {align + 64, align + 64}, zero[2] = {0, 0};
    CHECK_EQ_INT(d->ops->launch(d, 0, 2, bases, zero, whole, scalars, grid), 0);
    CHECK_EQ_INT(tsr_opencl_device_stats(d, &before), 0);
    CHECK_EQ_INT(before.sub_buffers, after.sub_buffers);
    /* A view off the alignment, or past the buffer, is refused by name. */
    if (align > 4) {
        size_t odd[2] = {0, 4};
        CHECK_EQ_INT(d->ops->launch(d, 0, 2, bases, odd, sizes, scalars, grid), TESSERA_ERROR_RUNTIME_CHECK);
        CHECK(has("base address alignment"));
    }
    size_t past[2] = {0, align + 32};
    CHECK_EQ_INT(d->ops->launch(d, 0, 2, bases, past, sizes, scalars, grid), TESSERA_ERROR_RUNTIME_CHECK);
    CHECK(has("overruns its buffer"));
    CHECK_EQ_INT(d->ops->launch(d, 0, 1, bases, offsets, sizes, scalars, grid), TESSERA_ERROR_RUNTIME_CHECK);
    CHECK(has("kernel 'add_one' is launched with 1 buffers; it takes 2"));
    /* A launch the driver refuses (a workgroup the kernel's reqd_work_group_size forbids) names the call. */
    fx.kernel.workgroup_size[0] = 8;
    CHECK_EQ_INT(d->ops->launch(d, 0, 2, bases, offsets, sizes, scalars, grid), TESSERA_ERROR_DEVICE);
    CHECK(has("clEnqueueNDRangeKernel failed with CL_INVALID_WORK_GROUP_SIZE (kernel 'add_one' over 3 x 1 x 1 "
              "workgroups of 8 x 1 x 1)"));
    CHECK_EQ_INT(d->ops->synchronize(d), 0);
    d->ops->release(d, buffer);
    d->ops->destroy(d);
    remove_fixture(&fx);
}

static void errors_name_what_is_missing(tsr_alloc *a) {
    tsr_device_options options = {.n_threads = 1, .index = 200};
    tsr_device *d = (tsr_device *)1;
    CHECK_EQ_INT(tsr_opencl_device_new(a, &options, &d), TESSERA_ERROR_UNSUPPORTED);
    CHECK(d == NULL);
    CHECK(has("there is no opencl:200; this machine has "));
    CHECK(has("opencl:0 is "));
    static const char *const MISSING[] = {"libOpenCL-missing.so.1", "libOpenCL-missing.so", NULL};
    options.index = -1;
    CHECK_EQ_INT(tsr_opencl_device_new_from(a, &options, MISSING, &d), TESSERA_ERROR_UNSUPPORTED);
    CHECK(has("the opencl device needs an OpenCL ICD loader; none of libOpenCL-missing.so.1, libOpenCL-missing.so"));
    tsr_opencl_stats stats;
    CHECK_EQ_INT(tsr_opencl_device_stats(NULL, &stats), TESSERA_ERROR_INVALID_ARGUMENT);
}

static void a_bad_module_is_refused_by_name(tsr_alloc *a) {
    fixture fx;
    make_fixture(&fx, "__kernel void k_add_one(__global float* a) { a[0] = undeclared_name; }\n");
    tsr_device *d = open_device(a, -1, NULL, NULL);
    if (d) {
        CHECK_EQ_INT(d->ops->load_kernels(d, &fx.exe, fx.dir), TESSERA_ERROR_UNSUPPORTED);
        CHECK(has("could not build kernel 'add_one' (kernels/000_add_one.cl): CL_BUILD_PROGRAM_FAILURE: "));
        CHECK(has("undeclared_name"));
        CHECK(strchr(tessera_last_error(), '\n') == NULL);
        d->ops->destroy(d);
    }
    remove_fixture(&fx);
    /* A module that is not what executable.json says is refused before OpenCL sees it. */
    make_fixture(&fx, ADD_ONE);
    char first = fx.sha[0];
    fx.sha[0] = first == '0' ? '1' : '0';
    if ((d = open_device(a, -1, NULL, NULL))) {
        CHECK_EQ_INT(d->ops->load_kernels(d, &fx.exe, fx.dir), TESSERA_ERROR_CHECKSUM);
        CHECK(has("kernel 'add_one': module kernels/000_add_one.cl does not match its SHA-256"));
        d->ops->destroy(d);
    }
    fx.sha[0] = first;
    fx.kernel.entry_point = "k_elsewhere";
    if ((d = open_device(a, -1, NULL, NULL))) {
        CHECK_EQ_INT(d->ops->load_kernels(d, &fx.exe, fx.dir), TESSERA_ERROR_FORMAT);
        CHECK(has("kernel 'add_one': module kernels/000_add_one.cl has no entry point 'k_elsewhere'"));
        d->ops->destroy(d);
    }
    remove_fixture(&fx);
}

/* Loads the fixture on a fresh device with cache folder `cache` (model folder fx->dir), runs it once
 * (out = a + 1 on 4 floats) and returns its counters; stderr goes to `log` meanwhile. */
static tsr_opencl_stats load_once(tsr_alloc *a, const fixture *fx, const char *cache, const char *log) {
    tsr_opencl_stats stats = {0};
    fflush(stderr);
    int saved = dup(2);
    FILE *to = freopen(log, "w", stderr);
    CHECK(to != NULL);
    tsr_device *d = open_device(a, -1, cache, fx->dir);
    if (d) {
        CHECK_EQ_INT(d->ops->load_kernels(d, &fx->exe, fx->dir), 0);
        void *in = d->ops->adopt_host(d, (const float[4]){1, 2, 3, 4}, 16), *out = d->ops->allocate(d, 16);
        void *bases[2] = {in, out};
        size_t offsets[2] = {0, 0}, sizes[2] = {16, 16};
        int32_t scalars[1] = {4}, grid[3] = {1, 1, 1};
        float got[4] = {0};
        CHECK_EQ_INT(d->ops->launch(d, 0, 2, bases, offsets, sizes, scalars, grid), 0);
        CHECK_EQ_INT(d->ops->read_back(d, out, 0, got, sizeof got), 0);
        CHECK(got[0] == 2 && got[3] == 5);
        CHECK_EQ_INT(tsr_opencl_device_stats(d, &stats), 0);
        d->ops->release(d, in);
        d->ops->release(d, out);
        d->ops->destroy(d);
    }
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    clearerr(stderr);
    return stats;
}

static bool file_has(const char *path, const char *needle) {
    char text[2048] = {0};
    FILE *f = fopen(path, "r");
    if (!f) return false;
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = '\0';
    if (strstr(text, needle)) return true;
    fprintf(stderr, "%s: \"%s\" lacks \"%s\"\n", path, text, needle);
    return false;
}

/* The one cache file in folder into path; false if there is not exactly one. */
static bool cached_file(const char *folder, char *path, size_t size) {
    char command[256];
    snprintf(command, sizeof command, "ls %s/opencl-*.bin 2>/dev/null", folder);
    FILE *p = popen(command, "r");
    if (!p) return false;
    int lines = 0;
    char line[512];
    while (fgets(line, sizeof line, p)) {
        line[strcspn(line, "\n")] = '\0';
        if (lines++ == 0) snprintf(path, size, "%s", line);
    }
    pclose(p);
    return lines == 1;
}

static void programs_come_from_the_binary_cache(tsr_alloc *a) {
    fixture fx;
    make_fixture(&fx, ADD_ONE);
    char log[160], file[512], default_cache[160];
    snprintf(log, sizeof log, "%s/stderr.txt", fx.dir);
    tsr_opencl_stats first = load_once(a, &fx, fx.cache, log);
    CHECK_EQ_INT(first.programs_from_source, 1);
    CHECK_EQ_INT(first.programs_from_binary, 0);
    CHECK_EQ_INT(first.cache_writes, 1);
    CHECK(cached_file(fx.cache, file, sizeof file));
    tsr_opencl_stats second = load_once(a, &fx, fx.cache, log);
    CHECK_EQ_INT(second.programs_from_source, 0);
    CHECK_EQ_INT(second.programs_from_binary, 1);
    printf("program build: %.4f s from source, %.4f s from the cache\n", first.build_seconds, second.build_seconds);
    struct stat st;
    CHECK(stat(log, &st) == 0 && st.st_size == 0);
    /* A corrupt file (one byte of its payload flipped): a warning, the program rebuilt and the file rewritten. */
    FILE *f = fopen(file, "r+b");
    CHECK(f != NULL);
    if (f) {
        CHECK(fseek(f, 60, SEEK_SET) == 0);
        int c = fgetc(f);
        CHECK(fseek(f, 60, SEEK_SET) == 0);
        fputc(c ^ 0xFF, f);
        fclose(f);
    }
    tsr_opencl_stats corrupt = load_once(a, &fx, fx.cache, log);
    CHECK_EQ_INT(corrupt.programs_from_source, 1);
    CHECK_EQ_INT(corrupt.programs_from_binary, 0);
    CHECK_EQ_INT(corrupt.cache_writes, 1);
    CHECK(file_has(log, "tessera: warning: "));
    CHECK(file_has(log, "corrupted): rebuilding it"));
    /* A foreign file with a sound header (what another driver could have left): the driver refuses it. */
    char garbage[48 + 64];
    memset(garbage, 0x5A, sizeof garbage);
    memcpy(garbage, "TSRCLBN1", 8);
    for (int i = 0; i < 8; i++) garbage[8 + i] = (char)(i == 0 ? 64 : 0);
    tsr_sha256 h;
    tsr_sha256_init(&h);
    tsr_sha256_update(&h, garbage + 48, 64);
    tsr_sha256_final(&h, (uint8_t *)garbage + 16);
    write_text(file, garbage, sizeof garbage);
    tsr_opencl_stats foreign = load_once(a, &fx, fx.cache, log);
    CHECK_EQ_INT(foreign.programs_from_source, 1);
    CHECK(file_has(log, "the driver refuses it"));
    CHECK(file_has(log, "rebuilding it"));
    /* A truncated file, then the rewritten one serves again. */
    write_text(file, "TSRCLBN1", 8);
    CHECK_EQ_INT(load_once(a, &fx, fx.cache, log).programs_from_source, 1);
    CHECK(file_has(log, "rebuilding it"));
    CHECK_EQ_INT(load_once(a, &fx, fx.cache, log).programs_from_binary, 1);
    /* No cache folder given: one beside the model. */
    snprintf(default_cache, sizeof default_cache, "%s/.tessera-cache", fx.dir);
    CHECK_EQ_INT(load_once(a, &fx, NULL, log).cache_writes, 1);
    CHECK(cached_file(default_cache, file, sizeof file));
    /* A cache folder that cannot be made: built from source, quietly. */
    snprintf(default_cache, sizeof default_cache, "%s/kernels/000_add_one.cl/cache", fx.dir);
    tsr_opencl_stats unwritable = load_once(a, &fx, default_cache, log);
    CHECK_EQ_INT(unwritable.programs_from_source, 1);
    CHECK_EQ_INT(unwritable.cache_writes, 0);
    CHECK(stat(log, &st) == 0 && st.st_size == 0);
    remove_fixture(&fx);
}

/* A machine whose ICD loader finds no driver: OCL_ICD_VENDORS (read by the loader once per process, at
 * its first call) points at an empty folder, in a child process so that the parent's loader is untouched. */
static void no_platform_is_one_line(void) {
    fflush(NULL);
    pid_t child = fork();
    if (child == 0) {
        char empty[64];
        snprintf(empty, sizeof empty, "/tmp/tessera-no-icd-XXXXXX");
        if (!mkdtemp(empty)) _exit(2);
        setenv("OCL_ICD_VENDORS", empty, 1);
        tsr_alloc a;
        tsr_alloc_init(&a, NULL);
        tsr_device_options options = {.n_threads = 1, .index = -1};
        tsr_device *d = NULL;
        int rc = tsr_opencl_device_new(&a, &options, &d);
        rmdir(empty);
        bool ok = rc == TESSERA_ERROR_UNSUPPORTED && has("the opencl device needs an OpenCL platform; the ICD loader "
                                                         "finds none (CL_PLATFORM_NOT_FOUND_KHR;");
        if (d) d->ops->destroy(d);
        _exit(ok ? 0 : 1);
    }
    int status = 0;
    CHECK(child > 0 && waitpid(child, &status, 0) == child);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

int main(void) {
    tsr_test_counts counts = {0};
    tessera_allocator user = tsr_test_counting_allocator(&counts);
    tsr_alloc a;
    tsr_alloc_init(&a, &user);
    no_platform_is_one_line();
    the_device_says_what_it_is_and_its_limits(&a);
    memory_is_zeroed_and_copies_at_offsets(&a);
    kernels_run_on_views_of_one_buffer(&a);
    errors_name_what_is_missing(&a);
    a_bad_module_is_refused_by_name(&a);
    programs_come_from_the_binary_cache(&a);
    CHECK_EQ_INT(counts.live, 0);
    return tsr_test_failures();
}
