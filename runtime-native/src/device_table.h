/* The devices this build of libtessera has, one row each (devices.c). A new backend is one file
 * under backends/ that implements device.h's interface, plus one row: model.c picks a device from
 * the table by name, or for "auto" the first row that runs every kernel of the executable. */
#ifndef TSR_DEVICE_TABLE_H
#define TSR_DEVICE_TABLE_H

#include "device.h"

typedef struct tsr_device_row {
    const char *name;            /* what tessera_model_params.device names */
    const char *const *backends; /* the kernel backends it runs (executable.json's kernels[].backend), NULL-ended */
    const char *target;          /* the `tessera compile --target` whose kernels it runs, for messages */
    /* Makes the device, or says why the machine has none (no Vulkan loader, no OpenCL platform, no
     * device at options->index): a status with the error set. */
    int (*create)(tsr_alloc *a, const tsr_device_options *options, tsr_device **out);
} tsr_device_row;

/* The table, with its length in *n. */
const tsr_device_row *tsr_device_table(size_t *n);

/* The row of `rows` that runs exe: the one called `name`, or for "auto" the first that runs the
 * backend of every kernel. TESSERA_ERROR_UNSUPPORTED for a name not in the table (the message lists
 * the table's names) or for a kernel whose backend the device (or, for "auto", no device) runs (the
 * message names the kernel, its backend and the targets the table's devices run). */
int tsr_device_choose(const tsr_device_row *rows, size_t n_rows, const tsr_executable *exe, const char *name,
                      const tsr_device_row **out);

/* Splits "vulkan:1" into its name ("vulkan", at most name_size - 1 bytes) and index (1); a name
 * without ":N" has index -1. TESSERA_ERROR_INVALID_ARGUMENT for an index that is not 0 .. 255. */
int tsr_device_parse_name(const char *text, char *name, size_t name_size, int32_t *index);

/* Checks executable.json's required_features and required_limits against what device d offers
 * (device.h); the error names the device, the feature or limit, and both values. */
int tsr_device_check_requirements(const tsr_device *d, const tsr_executable *exe);

#endif
