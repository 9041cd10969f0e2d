/* tessera_model_*: load a folder, check it, call its functions. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "device_table.h"
#include "files.h"
#include "host_memory.h"
#include "model.h"
#include "plan_checks.h"

/* executable.json of a real model is a few MB; 256 MiB (facts.h) is far beyond any and keeps a hostile
 * file from asking for more. */
#define MAX_EXECUTABLE_JSON ((size_t)TSR_MAX_JSON_BYTES_EXECUTABLE)

tessera_model_params tessera_model_default_params(void) {
    tessera_model_params p;
    memset(&p, 0, sizeof p);
    p.n_threads = 0;
    p.device = "auto";
    return p;
}

static int32_t online_cpus(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 && n < 1024 ? (int32_t)n : 1;
}

static int read_executable(tsr_alloc *a, const char *dir, tsr_executable *exe) {
    char *json;
    size_t size;
    int rc = tsr_read_file(a, dir, "executable.json", MAX_EXECUTABLE_JSON, &json, &size);
    if (rc) return rc;
    rc = tsr_executable_parse(a, json, size, exe);
    tsr_free(a, json);
    return rc;
}

/* What each device of exe holds (device_memory, up to max entries); the number of devices. The weights a
 * device reads are counted on it (a GPU keeps a copy, the CPU reads the shards in place), the others not. */
static int32_t device_plan(const tsr_executable *exe, const tsr_tensor_cache *index, tessera_device_memory *out,
                           int32_t max, int *rc) {
    int32_t n = exe->n_devices ? exe->n_devices : 1;
    for (int32_t d = 0; d < n && d < max; d++) {
        tessera_device_memory *entry = &out[d];
        memset(entry, 0, sizeof *entry);
        snprintf(entry->device, sizeof entry->device, "%s", exe->n_devices ? exe->devices[d].kind : exe->target_kind);
        for (int32_t c = 0; c < exe->n_constants; c++) {
            bool on_device = exe->constant_devices ? (exe->constant_devices[c] >> d) & 1u : d == 0;
            const tsr_weight *w = on_device ? tsr_tensor_cache_find(index, exe->constants[c]) : NULL;
            if (w) entry->weights += w->nbytes;
        }
        if ((*rc = tsr_plan_bytes(exe, exe->n_devices ? d : -1, &entry->arena, &entry->kv_cache))) return 0;
        entry->total = entry->weights + entry->arena + entry->kv_cache;
    }
    return n;
}

static int read_index(tsr_alloc *a, const char *dir, tsr_tensor_cache *index) {
    char *json;
    size_t size;
    int rc = tsr_read_file(a, dir, "tensor-cache.json", TSR_TENSOR_CACHE_MAX_JSON, &json, &size);
    if (rc) return rc;
    rc = tsr_tensor_cache_parse(a, json, size, index);
    tsr_free(a, json);
    return rc;
}

int32_t tessera_model_plan_devices(const char *dir, tessera_device_memory *out, int32_t max) {
    if (!dir || (max > 0 && !out))
        return tsr_error(TESSERA_ERROR_INVALID_ARGUMENT, "tessera_model_plan_devices: NULL argument");
    tsr_alloc a;
    tsr_alloc_init(&a, NULL);
    tsr_executable exe;
    int rc = read_executable(&a, dir, &exe);
    if (rc) return tsr_error_context(rc, "%s", dir);
    /* The weights' sizes from the index alone: the shards are not read. */
    tsr_tensor_cache index;
    if ((rc = read_index(&a, dir, &index))) {
        tsr_executable_free(&exe);
        return tsr_error_context(rc, "%s", dir);
    }
    int32_t n = device_plan(&exe, &index, out, max, &rc);
    tsr_tensor_cache_free(&a, &index);
    tsr_executable_free(&exe);
    return rc ? rc : n;
}

int tessera_model_plan(const char *dir, tessera_memory *out) {
    if (!dir || !out) return tsr_error(TESSERA_ERROR_INVALID_ARGUMENT, "tessera_model_plan: NULL argument");
    tsr_alloc a;
    tsr_alloc_init(&a, NULL);
    tsr_executable exe;
    int rc = read_executable(&a, dir, &exe);
    if (rc) return tsr_error_context(rc, "%s", dir);
    uint64_t arena, state;
    rc = tsr_plan_bytes(&exe, -1, &arena, &state);
    tsr_executable_free(&exe);
    if (rc) return rc;
    tsr_tensor_cache index;
    if ((rc = read_index(&a, dir, &index))) return rc;
    memset(out, 0, sizeof *out);
    out->weights = index.total_bytes;
    tsr_tensor_cache_free(&a, &index);
    out->arena = arena;
    out->kv_cache = state;
    out->total = out->weights + arena + state;
    return 0;
}

/* n bytes for people: "612 MiB" from 1 MiB up (rounded up, so a plan never reads as less than it is), else
 * "4096 bytes". */
static void format_bytes(char *out, size_t size, uint64_t n) {
    const uint64_t mib = 1024u * 1024u;
    if (n >= mib) snprintf(out, size, "%llu MiB", (unsigned long long)((n + mib - 1) / mib));
    else snprintf(out, size, "%llu bytes", (unsigned long long)n);
}

/* The check of tessera_model_params.memory_limit, made once executable.json is read and before the devices,
 * weights and arenas are allocated: the plan's total over every device (what tessera_model_plan_devices
 * reports) against the limit, or against what the machine has available now when the limit is 0. When that
 * cannot be read, or the plan itself fails (the load then reports the same file's problem in its order),
 * nothing is checked. */
static int check_memory_limit(tessera_model *m, const char *dir, uint64_t limit) {
    if (limit == UINT64_MAX) return 0;
    const char *source = "memory_limit";
    if (limit == 0 && !tsr_host_available_memory(&limit, &source)) return 0;
    tsr_tensor_cache index;
    if (read_index(&m->alloc, dir, &index)) return 0;
    tessera_device_memory devices[TSR_MAX_DEVICES];
    int rc = 0;
    int32_t n = device_plan(&m->exe, &index, devices, TSR_MAX_DEVICES, &rc);
    tsr_tensor_cache_free(&m->alloc, &index);
    if (rc) return 0;
    tessera_device_memory sum = {.device = ""};
    for (int32_t d = 0; d < n && d < TSR_MAX_DEVICES; d++) {
        sum.weights += devices[d].weights;
        sum.arena += devices[d].arena;
        sum.kv_cache += devices[d].kv_cache;
        sum.total += devices[d].total;
    }
    if (sum.total <= limit) return 0;
    char total[32], weights[32], arena[32], kv[32], available[32];
    format_bytes(total, sizeof total, sum.total);
    format_bytes(weights, sizeof weights, sum.weights);
    format_bytes(arena, sizeof arena, sum.arena);
    format_bytes(kv, sizeof kv, sum.kv_cache);
    format_bytes(available, sizeof available, limit);
    return tsr_error(TESSERA_ERROR_OUT_OF_MEMORY, "model needs %s (weights %s, arena %s, KV cache %s) but only %s is "
                     "available (%s); free memory or pass a larger memory_limit", total, weights, arena, kv, available,
                     source);
}

/* The device of the table (device_table.h) that params name and that runs m's kernels, made with
 * its options; m->device_choice says which and why. */
static int open_device(tessera_model *m, const tessera_model_params *params) {
    const char *wanted = params->device ? params->device : "auto";
    char name[32];
    int32_t index;
    int rc = tsr_device_parse_name(wanted, name, sizeof name, &index);
    if (rc) return rc;
    size_t n_rows;
    const tsr_device_row *rows = tsr_device_table(&n_rows), *row;
    if ((rc = tsr_device_choose(rows, n_rows, &m->exe, name, &row))) return tsr_error_context(rc, "%s", m->dir);
    tsr_device_options options = {.n_threads = m->n_threads, .index = index, .cache_dir = params->cache_dir,
                                  .model_dir = m->dir};
    if ((rc = row->create(&m->alloc, &options, &m->device))) return tsr_error_context(rc, "%s", m->dir);
    m->devices[0] = m->device;
    m->n_devices = 1;
    char label[48];
    if (index >= 0) snprintf(label, sizeof label, "%s:%d", row->name, (int)index);
    else snprintf(label, sizeof label, "%s", row->name);
    snprintf(m->device_choice, sizeof m->device_choice, "%s (%s): %s: the kernels are %s (target %s)", label,
             m->device->description, strcmp(name, "auto") == 0 ? "auto" : "asked for",
             m->exe.n_kernels ? m->exe.kernels[0].backend : "none", m->exe.target_name);
    return 0;
}

static bool row_runs(const tsr_device_row *row, const char *backend) {
    for (const char *const *b = row->backends; *b; b++)
        if (strcmp(*b, backend) == 0) return true;
    return false;
}

/* A split build (format version 4): one device per entry of its `devices`, each the table's row of its
 * kind (the CPU's kind is "cpu"), which must run the backends of that device's kernels. params->device
 * may name the GPU ("vulkan", "vulkan:1") or be "auto"; naming a kind the build does not use is refused. */
static int open_split_devices(tessera_model *m, const tessera_model_params *params) {
    const tsr_executable *exe = &m->exe;
    const char *wanted = params->device ? params->device : "auto";
    char name[32];
    int32_t index;
    int rc = tsr_device_parse_name(wanted, name, sizeof name, &index);
    if (rc) return rc;
    bool is_auto = strcmp(name, "auto") == 0, named = is_auto;
    char kinds[160] = "";
    size_t used = 0;
    for (int32_t d = 0; d < exe->n_devices; d++) {
        named |= strcmp(exe->devices[d].kind, name) == 0 && strcmp(name, "cpu") != 0;
        int w = snprintf(kinds + used, sizeof kinds - used, "%s%s", d ? " + " : "", exe->devices[d].vdevice);
        if (w > 0 && (size_t)w < sizeof kinds - used) used += (size_t)w;
    }
    if (!named)
        return tsr_error(TESSERA_ERROR_UNSUPPORTED, "device '%s' was asked for, but the build is split across %s "
                         "(tessera compile --gpu-layers): name its GPU device or \"auto\"", wanted, kinds);
    size_t n_rows;
    const tsr_device_row *rows = tsr_device_table(&n_rows);
    char labels[TSR_MAX_DEVICES][48];
    for (int32_t d = 0; d < exe->n_devices; d++) {
        const tsr_exe_device *want = &exe->devices[d];
        const tsr_device_row *row = NULL;
        for (size_t r = 0; r < n_rows && !row; r++)
            if (strcmp(rows[r].name, want->kind) == 0) row = &rows[r];
        bool native_kind = strcmp(want->kind, "vulkan") == 0 || strcmp(want->kind, "opencl") == 0 ||
                           strcmp(want->kind, "metal") == 0;
        if (!row && native_kind)
            return tsr_error(TESSERA_ERROR_UNSUPPORTED, "the split build's device %d (%s) is a %s device, which this "
                             "build of libtessera lacks: build it with its CMake option (docs/native.md), or compile "
                             "the model for --target cpu", (int)d, want->vdevice, want->kind);
        if (!row)
            return tsr_error(TESSERA_ERROR_UNSUPPORTED, "the split build's device %d (%s) is a %s device, which "
                             "runtime-native does not have: split for it with a vulkan or opencl target beside the CPU "
                             "(tessera compile --target vulkan --gpu-layers N), or run this one in the Python VM or a "
                             "browser", (int)d, want->vdevice, want->kind);
        for (int32_t k = 0; k < exe->n_kernels; k++)
            if (exe->kernels[k].device == d && !row_runs(row, exe->kernels[k].backend))
                return tsr_error(TESSERA_ERROR_UNSUPPORTED, "kernel '%s' of the split build's device %d (%s) is for "
                                 "backend '%s'; the %s device does not run it", exe->kernels[k].name, (int)d,
                                 want->vdevice, exe->kernels[k].backend, row->name);
        bool chosen = !is_auto && strcmp(row->name, name) == 0;
        tsr_device_options options = {.n_threads = m->n_threads, .index = chosen ? index : -1,
                                      .cache_dir = params->cache_dir, .model_dir = m->dir};
        if ((rc = row->create(&m->alloc, &options, &m->devices[d]))) return rc;
        m->n_devices = d + 1;
        if (options.index >= 0) snprintf(labels[d], sizeof labels[d], "%s:%d", row->name, (int)options.index);
        else snprintf(labels[d], sizeof labels[d], "%s", row->name);
    }
    m->device = m->devices[0];
    used = 0;
    m->device_choice[0] = '\0';
    for (int32_t d = 0; d < m->n_devices; d++) {
        int w = snprintf(m->device_choice + used, sizeof m->device_choice - used, "%s%s (%s)", d ? " + " : "",
                         labels[d], m->devices[d]->description);
        if (w > 0 && (size_t)w < sizeof m->device_choice - used) used += (size_t)w;
    }
    snprintf(m->device_choice + used, sizeof m->device_choice - used, ": %s: split build (tessera compile "
             "--gpu-layers) of target %s, %s", is_auto ? "auto" : "asked for", exe->target_name, kinds);
    return 0;
}

/* Each device's share of the checks at load: its required features and limits, and its arena and grids
 * against its alignment and workgroups; then its own kernels (the view keeps every kernel's index). */
static int check_and_load(tessera_model *m, const char *dir) {
    int32_t n = m->exe.n_devices ? m->exe.n_devices : 1;
    for (int32_t d = 0; d < n; d++) {
        tsr_device *device = m->devices[d];
        tsr_executable view = tsr_executable_device_view(&m->exe, m->exe.n_devices ? d : -1);
        char name[96];
        if (m->exe.n_devices)
            snprintf(name, sizeof name, "%s device (%s)", device->ops->name, m->exe.devices[d].vdevice);
        else
            snprintf(name, sizeof name, "%s device", device->ops->name);
        int rc = tsr_device_check_requirements(device, &view);
        if (!rc)
            rc = tsr_check_device_fit_on(&m->alloc, &m->exe, m->exe.n_devices ? d : -1, name, device->storage_alignment,
                                         device->max_workgroups);
        if (rc) return rc;
    }
    for (int32_t d = 0; d < n; d++) {
        tsr_executable view = tsr_executable_device_view(&m->exe, m->exe.n_devices ? d : -1);
        int rc = m->devices[d]->ops->load_kernels(m->devices[d], &view, dir);
        if (rc) return rc;
    }
    return 0;
}

int tessera_model_compile_stats(const tessera_model *m, tessera_compile_stats *out) {
    if (!m || !out) return tsr_error(TESSERA_ERROR_INVALID_ARGUMENT, "tessera_model_compile_stats: NULL argument");
    memset(out, 0, sizeof *out);
    for (int32_t i = 0; i < m->n_devices; i++) {
        const tsr_device *d = m->devices[i];
        if (!d || !d->ops->compile_stats) continue;
        tessera_compile_stats one;
        memset(&one, 0, sizeof one);
        d->ops->compile_stats(d, &one);
        out->kernels += one.kernels;
        out->compiled += one.compiled;
        out->from_cache += one.from_cache;
        out->shader_modules += one.shader_modules;
        out->seconds += one.seconds;
    }
    return 0;
}

const char *tessera_model_device(const tessera_model *m) { return m ? m->device_choice : ""; }

tessera_model *tessera_model_load(const char *dir, const tessera_model_params *params) {
    tessera_model_params defaults = tessera_model_default_params();
    if (!params) params = &defaults;
    if (!dir) {
        tsr_error(TESSERA_ERROR_INVALID_ARGUMENT, "tessera_model_load: dir is NULL");
        return NULL;
    }
    if (params->n_threads < 0 || params->n_threads > 1024) {
        tsr_error(TESSERA_ERROR_INVALID_ARGUMENT, "n_threads %d is out of range (0 for all CPUs, up to 1024)",
                  params->n_threads);
        return NULL;
    }
    tsr_alloc a;
    tsr_alloc_init(&a, &params->allocator);
    tessera_model *m = tsr_calloc(&a, 1, sizeof *m);
    if (!m) return NULL;
    m->alloc = a;
    m->n_threads = params->n_threads ? params->n_threads : online_cpus();
    int rc = 0;
    m->dir = tsr_strdup(&m->alloc, dir);
    if (!m->dir) rc = TESSERA_ERROR_OUT_OF_MEMORY;
    if (!rc && (rc = read_executable(&m->alloc, dir, &m->exe))) tsr_error_context(rc, "%s", dir);
    if (!rc && (rc = check_memory_limit(m, dir, params->memory_limit))) tsr_error_context(rc, "%s", dir);
    /* The device before the weights: a build no device here runs is refused without reading them. */
    if (!rc) {
        rc = m->exe.n_devices ? open_split_devices(m, params) : open_device(m, params);
        if (rc && m->exe.n_devices) tsr_error_context(rc, "%s", dir);
    }
    if (!rc && (rc = tsr_tensor_cache_load(&m->alloc, dir, 1, &m->weights))) tsr_error_context(rc, "%s", dir);
    if (!rc && (rc = check_and_load(m, dir))) tsr_error_context(rc, "%s", dir);
    if (!rc) {
        rc = tsr_vm_init_devices(&m->vm, &m->alloc, &m->exe, m->devices, m->n_devices, &m->weights, params->libraries,
                                 params->n_libraries);
        m->vm_ready = true;
        if (rc) tsr_error_context(rc, "%s", dir);
    }
    if (!rc) rc = tsr_chat_attach(m);
    if (rc) {
        tessera_model_free(m);
        return NULL;
    }
    return m;
}

int tessera_model_memory(const tessera_model *m, tessera_memory *out) {
    if (!m || !out) return tsr_error(TESSERA_ERROR_INVALID_ARGUMENT, "tessera_model_memory: NULL argument");
    memset(out, 0, sizeof *out);
    out->weights = m->weights.total_bytes;
    uint64_t arena, state;
    int rc = tsr_plan_bytes(&m->exe, -1, &arena, &state);
    if (rc) return rc;
    out->arena = arena;
    out->kv_cache = state;
    out->total = out->weights + arena + state;
    return 0;
}

int32_t tessera_model_memory_devices(const tessera_model *m, tessera_device_memory *out, int32_t max) {
    if (!m || (max > 0 && !out))
        return tsr_error(TESSERA_ERROR_INVALID_ARGUMENT, "tessera_model_memory_devices: NULL argument");
    int rc = 0;
    int32_t n = device_plan(&m->exe, &m->weights, out, max, &rc);
    return rc ? rc : n;
}

uint64_t tessera_model_allocation_count(const tessera_model *m) { return m ? m->alloc.count : 0; }

int tessera_model_call(tessera_model *m, const char *name, const tessera_value *args, size_t n_args,
                       const tessera_tensor **outputs, size_t *n_outputs) {
    if (!m || !name || (n_args && !args) || !outputs || !n_outputs)
        return tsr_error(TESSERA_ERROR_INVALID_ARGUMENT, "tessera_model_call: NULL argument");
    int rc = tsr_vm_call(&m->vm, name, args, n_args);
    if (rc) return rc;
    *outputs = m->vm.outputs;
    *n_outputs = (size_t)m->vm.n_outputs;
    return 0;
}

void tessera_model_reset_state(tessera_model *m) {
    if (m && m->vm_ready) (void)tsr_vm_reset_state(&m->vm); /* a failure is the device's, seen by the next call */
}

void tessera_model_free(tessera_model *m) {
    if (!m) return;
    tsr_alloc a = m->alloc;
    tsr_free_sessions(m);
    tsr_chat_detach(m);
    if (m->vm_ready) tsr_vm_free(&m->vm);
    for (int32_t d = 0; d < m->n_devices; d++) m->devices[d]->ops->destroy(m->devices[d]);
    tsr_tensor_cache_free(&m->alloc, &m->weights);
    if (m->exe.mem) tsr_executable_free(&m->exe);
    tsr_free(&m->alloc, m->dir);
    tsr_free(&a, m);
}

int tessera_model_set_profiling(tessera_model *m, int enable) {
    if (!m) return tsr_error(TESSERA_ERROR_INVALID_ARGUMENT, "tessera_model_set_profiling: the model is NULL");
    m->vm.profiling = enable != 0;
    if (enable) {
        memset(m->vm.kernel_launches, 0, (size_t)m->exe.n_kernels * sizeof(uint64_t));
        memset(m->vm.kernel_seconds, 0, (size_t)m->exe.n_kernels * sizeof(double));
    }
    return 0;
}

int32_t tessera_model_kernel_profile(const tessera_model *m, tessera_kernel_profile *out, int32_t max) {
    if (!m || (max > 0 && !out))
        return tsr_error(TESSERA_ERROR_INVALID_ARGUMENT, "tessera_model_kernel_profile: NULL argument");
    for (int32_t k = 0; k < m->exe.n_kernels && k < max; k++) {
        out[k].kernel = m->exe.kernels[k].name;
        out[k].launches = m->vm.kernel_launches[k];
        out[k].seconds = m->vm.kernel_seconds[k];
    }
    return m->exe.n_kernels;
}
