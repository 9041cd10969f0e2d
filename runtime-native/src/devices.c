/* The device table and the choice of a device for an executable (device_table.h). */
#include <stdio.h>
#include <string.h>

#include "device_table.h"

/* In the order "auto" prefers them: a GPU before the CPU, Vulkan (the wider and usually faster
 * compute path) before OpenCL. Each backend is a CMake option (docs/native.md). */
static const tsr_device_row DEVICES[] = {
#if TESSERA_WITH_METAL
    {"metal", tsr_metal_backends, "metal", tsr_metal_device_new},
#endif
#if TESSERA_WITH_VULKAN
    {"vulkan", tsr_vulkan_backends, "vulkan", tsr_vulkan_device_new},
#endif
#if TESSERA_WITH_OPENCL
    {"opencl", tsr_opencl_backends, "opencl", tsr_opencl_device_new},
#endif
    {"cpu", tsr_cpu_backends, "cpu", tsr_cpu_device_new},
};

const tsr_device_row *tsr_device_table(size_t *n) {
    *n = sizeof DEVICES / sizeof DEVICES[0];
    return DEVICES;
}

static bool runs_backend(const tsr_device_row *row, const char *backend) {
    for (const char *const *b = row->backends; *b; b++)
        if (strcmp(*b, backend) == 0) return true;
    return false;
}

/* The first kernel of exe whose backend the row does not run, or -1. */
static int32_t first_foreign_kernel(const tsr_device_row *row, const tsr_executable *exe) {
    for (int32_t k = 0; k < exe->n_kernels; k++)
        if (!runs_backend(row, exe->kernels[k].backend)) return k;
    return -1;
}

/* "a, b" from each row's name (or target), cut short with "..." when it does not fit. */
static void list_rows(const tsr_device_row *rows, size_t n_rows, bool targets, char *out, size_t size) {
    size_t used = 0;
    out[0] = '\0';
    for (size_t i = 0; i < n_rows && used < size; i++) {
        int w = snprintf(out + used, size - used, "%s%s%s", i ? (targets ? " or " : ", ") : "",
                         targets ? "--target " : "", targets ? rows[i].target : rows[i].name);
        if (w < 0) break;
        used += (size_t)w;
    }
    if (used >= size && size > 4) memcpy(out + size - 4, "...", 4);
}

static int cannot_run(const tsr_device_row *rows, size_t n_rows, const tsr_device_row *named, const tsr_executable *exe,
                      int32_t kernel) {
    char targets[256];
    list_rows(named ? named : rows, named ? 1 : n_rows, true, targets, sizeof targets);
    const tsr_kernel *k = &exe->kernels[kernel];
    if (named)
        return tsr_error(TESSERA_ERROR_UNSUPPORTED, "kernel '%s' is for backend '%s' (target %s); the %s device does "
                         "not run it: compile the model with %s", k->name, k->backend, exe->target_name, named->name,
                         targets);
    return tsr_error(TESSERA_ERROR_UNSUPPORTED, "kernel '%s' is for backend '%s' (target %s); no device of this build "
                     "of libtessera runs it: compile the model with %s", k->name, k->backend, exe->target_name,
                     targets);
}

int tsr_device_choose(const tsr_device_row *rows, size_t n_rows, const tsr_executable *exe, const char *name,
                      const tsr_device_row **out) {
    *out = NULL;
    if (strcmp(name, "auto") == 0) {
        /* An executable without kernels runs on any device: the one of its target's kind, else the last
         * (the CPU, which every build has), so that no GPU is opened for nothing. */
        if (exe->n_kernels == 0 && n_rows) {
            *out = &rows[n_rows - 1];
            for (size_t i = 0; i < n_rows; i++)
                if (exe->target_kind && strcmp(rows[i].name, exe->target_kind) == 0) *out = &rows[i];
            return 0;
        }
        for (size_t i = 0; i < n_rows; i++)
            if (first_foreign_kernel(&rows[i], exe) < 0) {
                *out = &rows[i];
                return 0;
            }
        /* Name the first kernel the first device cannot run: with one device, the exact reason. */
        return n_rows ? cannot_run(rows, n_rows, NULL, exe, first_foreign_kernel(&rows[0], exe))
                      : tsr_error(TESSERA_ERROR_UNSUPPORTED, "this build of libtessera has no devices");
    }
    for (size_t i = 0; i < n_rows; i++) {
        if (strcmp(rows[i].name, name) != 0) continue;
        int32_t kernel = first_foreign_kernel(&rows[i], exe);
        if (kernel >= 0) return cannot_run(rows, n_rows, &rows[i], exe, kernel);
        *out = &rows[i];
        return 0;
    }
    char names[256];
    list_rows(rows, n_rows, false, names, sizeof names);
    return tsr_error(TESSERA_ERROR_UNSUPPORTED, "device '%s' is not in this build of libtessera (devices: auto, %s)",
                     name, names);
}

int tsr_device_parse_name(const char *text, char *name, size_t name_size, int32_t *index) {
    *index = -1;
    const char *colon = strchr(text, ':');
    size_t length = colon ? (size_t)(colon - text) : strlen(text);
    if (length >= name_size)
        return tsr_error(TESSERA_ERROR_UNSUPPORTED, "device '%.40s...' is not in this build of libtessera (the name is "
                         "too long)", text);
    memcpy(name, text, length);
    name[length] = '\0';
    if (!colon) return 0;
    const char *digits = colon + 1;
    int32_t value = 0;
    size_t n = 0;
    for (; digits[n] >= '0' && digits[n] <= '9' && n < 4; n++) value = value * 10 + (digits[n] - '0');
    if (n == 0 || digits[n] != '\0' || value > 255)
        return tsr_error(TESSERA_ERROR_INVALID_ARGUMENT, "device '%s': the index after ':' must be 0 to 255 "
                         "(\"vulkan:1\" is the second Vulkan device)", text);
    *index = value;
    return 0;
}

static bool offers(const tsr_device *d, const char *feature) {
    for (const char *const *f = d->features; f && *f; f++)
        if (strcmp(*f, feature) == 0) return true;
    return false;
}

int tsr_device_check_requirements(const tsr_device *d, const tsr_executable *exe) {
    if (d->features)
        for (int32_t i = 0; i < exe->n_required_features; i++)
            if (!offers(d, exe->required_features[i]))
                return tsr_error(TESSERA_ERROR_UNSUPPORTED, "the %s device (%s) lacks feature '%s', which the kernels "
                                 "need: compile the model for this device (tessera compile --target %s picks what it "
                                 "has)", d->ops->name, d->description, exe->required_features[i], d->ops->name);
    const struct { const char *name; int64_t needed, offered; } limits[] = {
        {"maxComputeInvocationsPerWorkgroup", exe->max_invocations, d->max_invocations},
        {"maxStorageBuffersPerShaderStage", exe->max_storage_buffers, d->max_storage_buffers},
        {"maxComputeWorkgroupStorageSize", exe->max_workgroup_storage, d->max_workgroup_storage},
        {"maxBufferSize", exe->max_buffer_size, d->max_buffer_size},
        {"maxStorageBufferBindingSize", exe->max_binding_size, d->max_binding_size},
    };
    for (size_t i = 0; i < sizeof limits / sizeof limits[0]; i++)
        if (limits[i].offered > 0 && limits[i].needed > limits[i].offered)
            return tsr_error(TESSERA_ERROR_UNSUPPORTED, "the %s device (%s) has %s %lld; the executable needs %lld: "
                             "compile the model for this device", d->ops->name, d->description, limits[i].name,
                             (long long)limits[i].offered, (long long)limits[i].needed);
    return 0;
}
