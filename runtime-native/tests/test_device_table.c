/* The device table: a device is chosen by name, or for "auto" as the first row that runs every
 * kernel's backend; an unknown name, or kernels no device runs, are refused by name. The table of
 * this build has the CPU device, which runs the c-native kernels of --target cpu. */
#include <string.h>

#include "device_table.h"
#include "harness.h"

static int has(const char *needle) {
    if (strstr(tessera_last_error(), needle)) return 1;
    fprintf(stderr, "last error \"%s\" lacks \"%s\"\n", tessera_last_error(), needle);
    return 0;
}

static const char *const SPIRV[] = {"spirv", NULL};
static const char *const C_AND_WASM[] = {"c-native", "wasm", NULL};

/* Two rows that are never created: a GPU first, then a CPU, as a build with a Vulkan device would list them. */
static const tsr_device_row ROWS[] = {
    {"vulkan", SPIRV, "vulkan", NULL},
    {"host", C_AND_WASM, "cpu", NULL},
};

static tsr_executable executable_of(tsr_kernel *kernels, int32_t n) {
    tsr_executable exe;
    memset(&exe, 0, sizeof exe);
    exe.kernels = kernels;
    exe.n_kernels = n;
    exe.target_name = "test";
    return exe;
}

static void auto_takes_the_first_row_that_runs_every_kernel(void) {
    tsr_kernel kernels[2] = {{.name = "add", .backend = "c-native"}, {.name = "mul", .backend = "wasm"}};
    const tsr_device_row *row = NULL;
    tsr_executable exe = executable_of(kernels, 2);
    CHECK_EQ_INT(tsr_device_choose(ROWS, 2, &exe, "auto", &row), 0);
    CHECK(row == &ROWS[1]);
    kernels[0].backend = kernels[1].backend = "spirv";
    CHECK_EQ_INT(tsr_device_choose(ROWS, 2, &exe, "auto", &row), 0);
    CHECK(row == &ROWS[0]);
    /* No kernels at all: the device of the target's kind, else the last row (the CPU). */
    exe = executable_of(kernels, 0);
    CHECK_EQ_INT(tsr_device_choose(ROWS, 2, &exe, "auto", &row), 0);
    CHECK(row == &ROWS[1]);
    exe.target_kind = "vulkan";
    CHECK_EQ_INT(tsr_device_choose(ROWS, 2, &exe, "auto", &row), 0);
    CHECK(row == &ROWS[0]);
}

static void a_named_device_is_that_row_if_it_runs_the_kernels(void) {
    tsr_kernel kernels[1] = {{.name = "add", .backend = "wasm"}};
    const tsr_device_row *row = NULL;
    tsr_executable exe = executable_of(kernels, 1);
    CHECK_EQ_INT(tsr_device_choose(ROWS, 2, &exe, "host", &row), 0);
    CHECK(row == &ROWS[1]);
    CHECK_EQ_INT(tsr_device_choose(ROWS, 2, &exe, "vulkan", &row), TESSERA_ERROR_UNSUPPORTED);
    CHECK(row == NULL);
    CHECK(has("kernel 'add' is for backend 'wasm' (target test); the vulkan device does not run it: compile the "
              "model with --target vulkan"));
}

static void an_unknown_name_is_refused_listing_the_table(void) {
    const tsr_device_row *row = NULL;
    tsr_executable exe = executable_of(NULL, 0);
    CHECK_EQ_INT(tsr_device_choose(ROWS, 2, &exe, "metal", &row), TESSERA_ERROR_UNSUPPORTED);
    CHECK(has("device 'metal' is not in this build of libtessera (devices: auto, vulkan, host)"));
    CHECK_EQ_INT(tsr_device_choose(ROWS, 2, &exe, "", &row), TESSERA_ERROR_UNSUPPORTED);
    CHECK(has("device '' is not in this build"));
}

static void kernels_no_device_runs_are_refused_naming_the_targets(void) {
    tsr_kernel kernels[2] = {{.name = "add", .backend = "c-native"}, {.name = "softmax", .backend = "wgsl"}};
    const tsr_device_row *row = NULL;
    tsr_executable exe = executable_of(kernels, 2);
    CHECK_EQ_INT(tsr_device_choose(ROWS, 2, &exe, "auto", &row), TESSERA_ERROR_UNSUPPORTED);
    CHECK(has("kernel 'add' is for backend 'c-native' (target test); no device of this build of libtessera runs it"));
    CHECK_EQ_INT(tsr_device_choose(ROWS, 1, &exe, "auto", &row), TESSERA_ERROR_UNSUPPORTED);
    CHECK(has("compile the model with --target vulkan"));
    CHECK_EQ_INT(tsr_device_choose(ROWS, 2, &exe, "host", &row), TESSERA_ERROR_UNSUPPORTED);
    CHECK(has("kernel 'softmax' is for backend 'wgsl' (target test); the host device does not run it"));
    CHECK_EQ_INT(tsr_device_choose(ROWS, 0, &exe, "auto", &row), TESSERA_ERROR_UNSUPPORTED);
    CHECK(has("no devices"));
}

/* The CPU row is last ("auto" prefers a GPU), and the one every build has. */
static void this_builds_table_ends_with_the_cpu_device(void) {
    size_t n;
    const tsr_device_row *rows = tsr_device_table(&n);
    CHECK(n >= 1);
    const tsr_device_row *cpu_row = &rows[n - 1];
    CHECK(strcmp(cpu_row->name, "cpu") == 0 && strcmp(cpu_row->target, "cpu") == 0);
    CHECK(strcmp(cpu_row->backends[0], "c-native") == 0 && cpu_row->backends[1] == NULL);
    tsr_kernel kernels[1] = {{.name = "matmul", .backend = "wgsl"}};
    const tsr_device_row *row = NULL;
    tsr_executable exe = executable_of(kernels, 1);
    CHECK_EQ_INT(tsr_device_choose(rows, n, &exe, "auto", &row), TESSERA_ERROR_UNSUPPORTED);
    CHECK(has("kernel 'matmul' is for backend 'wgsl' (target test); no device of this build of libtessera runs it: "
              "compile the model with --target "));
    CHECK(has("--target cpu"));
    /* The row makes a working device. One thread: this test also runs in the AArch64 build under
     * qemu-user, which hangs in a guest's pthread_create (CMakeLists.txt); test_thread_pool starts threads. */
    tsr_alloc a;
    tsr_alloc_init(&a, NULL);
    tsr_device_options options = {.n_threads = 1, .index = -1};
    tsr_device *cpu = NULL;
    CHECK_EQ_INT(cpu_row->create(&a, &options, &cpu), 0);
    CHECK(cpu != NULL && strcmp(cpu->ops->name, "cpu") == 0);
    if (cpu) cpu->ops->destroy(cpu);
    /* "cpu:0" is the CPU; there is no "cpu:1". */
    options.index = 1;
    cpu = NULL;
    CHECK_EQ_INT(cpu_row->create(&a, &options, &cpu), TESSERA_ERROR_UNSUPPORTED);
    CHECK(cpu == NULL && has("device 'cpu:1': there is one cpu device (cpu or cpu:0)"));
}

static void a_device_name_may_give_an_index(void) {
    char name[16];
    int32_t index = 7;
    CHECK_EQ_INT(tsr_device_parse_name("vulkan", name, sizeof name, &index), 0);
    CHECK(strcmp(name, "vulkan") == 0 && index == -1);
    CHECK_EQ_INT(tsr_device_parse_name("vulkan:1", name, sizeof name, &index), 0);
    CHECK(strcmp(name, "vulkan") == 0 && index == 1);
    CHECK_EQ_INT(tsr_device_parse_name("opencl:255", name, sizeof name, &index), 0);
    CHECK(index == 255);
    const char *bad[] = {"vulkan:", "vulkan:x", "vulkan:256", "vulkan:-1", "vulkan:1a", "vulkan:00001"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK_EQ_INT(tsr_device_parse_name(bad[i], name, sizeof name, &index), TESSERA_ERROR_INVALID_ARGUMENT);
        CHECK(has("the index after ':' must be 0 to 255"));
    }
    CHECK_EQ_INT(tsr_device_parse_name("a-device-name-far-too-long", name, sizeof name, &index),
                 TESSERA_ERROR_UNSUPPORTED);
    CHECK(has("the name is too long"));
}

static const tsr_device_ops NAMED_OPS = {.name = "vulkan"};

/* What a device offers against what the executable needs: the first shortfall is named. */
static void requirements_are_checked_against_the_device(void) {
    static const char *const features[] = {"shader-f16", NULL};
    tsr_device d;
    memset(&d, 0, sizeof d);
    d.ops = &NAMED_OPS;
    snprintf(d.description, sizeof d.description, "test GPU");
    tsr_executable exe = executable_of(NULL, 0);
    const char *needed[] = {"subgroup"};
    exe.required_features = needed;
    exe.n_required_features = 1;
    exe.max_invocations = exe.max_storage_buffers = exe.max_workgroup_storage = -1;
    exe.max_buffer_size = exe.max_binding_size = -1;
    /* A device that states nothing (the CPU) takes anything. */
    CHECK_EQ_INT(tsr_device_check_requirements(&d, &exe), 0);
    d.features = features;
    CHECK_EQ_INT(tsr_device_check_requirements(&d, &exe), TESSERA_ERROR_UNSUPPORTED);
    CHECK(has("the vulkan device (test GPU) lacks feature 'subgroup'"));
    needed[0] = "shader-f16";
    CHECK_EQ_INT(tsr_device_check_requirements(&d, &exe), 0);
    d.max_workgroup_storage = 16384;
    exe.max_workgroup_storage = 16384;
    CHECK_EQ_INT(tsr_device_check_requirements(&d, &exe), 0);
    exe.max_workgroup_storage = 32768;
    CHECK_EQ_INT(tsr_device_check_requirements(&d, &exe), TESSERA_ERROR_UNSUPPORTED);
    CHECK(has("has maxComputeWorkgroupStorageSize 16384; the executable needs 32768"));
}

int main(void) {
    auto_takes_the_first_row_that_runs_every_kernel();
    a_named_device_is_that_row_if_it_runs_the_kernels();
    an_unknown_name_is_refused_listing_the_table();
    kernels_no_device_runs_are_refused_naming_the_targets();
    this_builds_table_ends_with_the_cpu_device();
    a_device_name_may_give_an_index();
    requirements_are_checked_against_the_device();
    return tsr_test_failures();
}
