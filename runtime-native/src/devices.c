/* The device table and the choice of a device for an executable (device_table.h). */
#include <stdio.h>
#include <string.h>

#include "device_table.h"

static const tsr_device_row DEVICES[] = {
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
