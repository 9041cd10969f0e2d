/* The CPU device: the kernels of backend `c-native` (codegen/c), one shared object per
 * executable, called through one uniform signature (docs/format.md), with each launch's
 * workgroups split over a thread pool. Device memory is host memory. */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "device.h"
#include "files.h"
#include "thread_pool.h"

typedef void (*cpu_kernel_fn)(void *const *buffers, const int32_t *scalars, int32_t nwg_x, int32_t nwg_y,
                              int32_t nwg_z, int64_t wg_begin, int64_t wg_end);

#define CPU_BACKEND "c-native"
#define MAX_BINDINGS 256

typedef struct cpu_device {
    tsr_device base;
    tsr_thread_pool *pool;
    void **libraries; /* dlopen handles, one per module */
    int32_t n_libraries;
    cpu_kernel_fn *kernels;
    int32_t n_kernels;
} cpu_device;

typedef struct launch_task {
    cpu_kernel_fn fn;
    void *const *buffers;
    const int32_t *scalars;
    const int32_t *grid;
} launch_task;

static void run_range(void *ctx, int64_t begin, int64_t end) {
    const launch_task *t = ctx;
    t->fn(t->buffers, t->scalars, t->grid[0], t->grid[1], t->grid[2], begin, end);
}

static int check_module(const tsr_module *m, const char *dir, tsr_alloc *a) {
    char *data;
    size_t size;
    int rc = tsr_read_module(a, dir, m, &data, &size);
    if (!rc) tsr_free(a, data);
    return rc;
}

/* A build for an instruction set this CPU lacks would die of SIGILL in its first kernel: refuse it
 * at load, naming what is missing. ("native" is the build machine's: only its architecture is known.) */
static int check_instruction_set(const char *isa) {
    bool x86 = strncmp(isa, "x86-64", 6) == 0, arm = strncmp(isa, "armv", 4) == 0;
#if defined(__x86_64__)
    if (arm) return tsr_error(TESSERA_ERROR_UNSUPPORTED, "the kernels were built for %s (AArch64); this CPU is x86-64: "
                              "recompile with --target cpu", isa);
    __builtin_cpu_init();
    const char *missing = NULL;
    if ((strcmp(isa, "x86-64-v3") == 0 || strcmp(isa, "x86-64-v4") == 0) &&
        !(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("bmi2")))
        missing = "AVX2, FMA and BMI2";
    else if (strcmp(isa, "x86-64-v4") == 0 &&
             !(__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vl")))
        missing = "AVX-512 (F, BW, VL)";
    if (missing)
        return tsr_error(TESSERA_ERROR_UNSUPPORTED, "the kernels were built for %s, which needs %s; this CPU lacks them: "
                         "recompile with --cpu for an older instruction set (or --target cpu for this machine)", isa,
                         missing);
#elif defined(__aarch64__)
    if (x86) return tsr_error(TESSERA_ERROR_UNSUPPORTED, "the kernels were built for %s (x86-64); this CPU is AArch64: "
                              "recompile with --target cpu --cpu armv8.2-a", isa);
#endif
    (void)x86, (void)arm;
    return 0;
}

static int cpu_load_kernels(tsr_device *d, const tsr_executable *exe, const char *dir) {
    cpu_device *cpu = (cpu_device *)d;
    int isa_rc = check_instruction_set(exe->target_cpu);
    if (isa_rc) return isa_rc;
    /* A split build (exe->n_devices > 0) gives each device every kernel, by its index: this one loads its
     * own (c-native) and their modules, and leaves the others' slots empty; the VM never launches them here. */
    for (int32_t k = 0; k < exe->n_kernels && !exe->n_devices; k++) {
        const char *backend = exe->kernels[k].backend;
        if (strcmp(backend, CPU_BACKEND) != 0)
            return tsr_error(TESSERA_ERROR_UNSUPPORTED, "kernel '%s' is for backend '%s' (target %s); this runtime's "
                             "CPU device runs backend '%s': compile the model with --target cpu",
                             exe->kernels[k].name, backend, exe->target_name, CPU_BACKEND);
    }
    cpu->libraries = tsr_calloc(d->alloc, (size_t)(exe->n_modules ? exe->n_modules : 1), sizeof(void *));
    cpu->kernels = tsr_calloc(d->alloc, (size_t)(exe->n_kernels ? exe->n_kernels : 1), sizeof(cpu_kernel_fn));
    if (!cpu->libraries || !cpu->kernels) return TESSERA_ERROR_OUT_OF_MEMORY;
    cpu->n_libraries = exe->n_modules;
    cpu->n_kernels = exe->n_kernels;
    for (int32_t m = 0; m < exe->n_modules; m++) {
        const tsr_module *module = &exe->modules[m];
        bool mine = !exe->n_devices;
        for (int32_t k = 0; k < exe->n_kernels && !mine; k++)
            mine = exe->kernels[k].module == m && strcmp(exe->kernels[k].backend, CPU_BACKEND) == 0;
        if (!mine) continue;
        int rc = check_module(module, dir, d->alloc);
        if (rc) return rc;
        char path[4096];
        if ((rc = tsr_resolve_inside(dir, module->path, path, sizeof path))) return rc;
        /* RTLD_LOCAL: two models' kernels never resolve to each other's symbols. */
        cpu->libraries[m] = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        if (!cpu->libraries[m]) {
            const char *why = dlerror();
            return tsr_error(TESSERA_ERROR_UNSUPPORTED, "cannot load the kernels %s: %s (built for another CPU? "
                             "recompile with --target cpu on this machine, or --cpu for its ISA)",
                             module->path, why ? why : "unknown error");
        }
    }
    for (int32_t k = 0; k < exe->n_kernels; k++) {
        const tsr_kernel *kernel = &exe->kernels[k];
        if (strcmp(kernel->backend, CPU_BACKEND) != 0) continue; /* another device's, in a split build */
        if (kernel->n_bindings > MAX_BINDINGS) return tsr_error(TESSERA_ERROR_UNSUPPORTED, "kernel '%s' has too many bindings", kernel->name);
        void *sym = dlsym(cpu->libraries[kernel->module], kernel->entry_point);
        if (!sym)
            return tsr_error(TESSERA_ERROR_FORMAT, "kernel '%s': module %s has no entry point '%s'", kernel->name,
                             exe->modules[kernel->module].path, kernel->entry_point);
        /* POSIX guarantees a data pointer from dlsym converts to a function pointer. */
        memcpy(&cpu->kernels[k], &sym, sizeof sym);
    }
    return 0;
}

static void *cpu_allocate(tsr_device *d, size_t size) { return tsr_calloc(d->alloc, 1, size ? size : 4); }
static void cpu_release(tsr_device *d, void *base) { tsr_free(d->alloc, base); }
static void *cpu_adopt_host(tsr_device *d, const void *host, size_t size) {
    (void)d, (void)size;
    return (void *)host; /* kernels only read weights: the read-only mapping serves in place */
}
static int cpu_upload(tsr_device *d, void *base, size_t offset, const void *src, size_t size) {
    (void)d;
    if (size) memcpy((char *)base + offset, src, size);
    return 0;
}
static int cpu_read_back(tsr_device *d, const void *base, size_t offset, void *dst, size_t size) {
    (void)d;
    if (size) memcpy(dst, (const char *)base + offset, size);
    return 0;
}
static void *cpu_host_pointer(tsr_device *d, void *base, size_t offset) {
    (void)d;
    return (char *)base + offset;
}

static int cpu_launch(tsr_device *d, int32_t kernel, int32_t n_bindings, void *const *bases, const size_t *offsets,
                      const size_t *sizes, const int32_t *scalars, const int32_t grid[3]) {
    (void)sizes;
    cpu_device *cpu = (cpu_device *)d;
    void *buffers[MAX_BINDINGS];
    /* n_bindings was checked at load against the kernel's ABI (at most MAX_BINDINGS). */
    for (int32_t i = 0; i < n_bindings; i++) buffers[i] = (char *)bases[i] + offsets[i];
    launch_task task = {cpu->kernels[kernel], buffers, scalars, grid};
    int64_t total = (int64_t)grid[0] * grid[1] * grid[2];
    tsr_thread_pool_run(cpu->pool, total, run_range, &task);
    return 0;
}

static int cpu_synchronize(tsr_device *d) {
    (void)d;
    return 0;
}

static void cpu_destroy(tsr_device *d) {
    cpu_device *cpu = (cpu_device *)d;
    tsr_thread_pool_free(cpu->pool);
    for (int32_t m = 0; m < cpu->n_libraries; m++)
        if (cpu->libraries[m]) dlclose(cpu->libraries[m]);
    tsr_free(d->alloc, cpu->libraries);
    tsr_free(d->alloc, cpu->kernels);
    tsr_free(d->alloc, cpu);
}

static const tsr_device_ops CPU_OPS = {
    .name = "cpu",
    .load_kernels = cpu_load_kernels,
    .allocate = cpu_allocate,
    .release = cpu_release,
    .adopt_host = cpu_adopt_host,
    .upload = cpu_upload,
    .read_back = cpu_read_back,
    .host_pointer = cpu_host_pointer,
    .launch = cpu_launch,
    .synchronize = cpu_synchronize,
    .destroy = cpu_destroy,
};

const char *const tsr_cpu_backends[] = {CPU_BACKEND, NULL};

int tsr_cpu_device_new(tsr_alloc *a, const tsr_device_options *options, tsr_device **out) {
    *out = NULL;
    if (options->index > 0) /* its threads are the machine's; there is no second CPU device to pick */
        return tsr_error(TESSERA_ERROR_UNSUPPORTED, "device 'cpu:%d': there is one cpu device (cpu or cpu:0)",
                         (int)options->index);
    cpu_device *cpu = tsr_calloc(a, 1, sizeof *cpu);
    if (!cpu) return TESSERA_ERROR_OUT_OF_MEMORY;
    cpu->base.ops = &CPU_OPS;
    cpu->base.alloc = a;
    /* Kernels read and write words, and take their grid as int32_t counts. */
    cpu->base.storage_alignment = 4;
    cpu->base.max_workgroups = INT32_MAX;
    snprintf(cpu->base.description, sizeof cpu->base.description, "this CPU, %d thread%s", (int)options->n_threads,
             options->n_threads == 1 ? "" : "s");
    cpu->pool = tsr_thread_pool_new(a, options->n_threads);
    if (!cpu->pool) {
        tsr_free(a, cpu);
        return TESSERA_ERROR_OUT_OF_MEMORY;
    }
    *out = &cpu->base;
    return 0;
}
