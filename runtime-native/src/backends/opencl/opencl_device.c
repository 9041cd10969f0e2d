/* PLACEHOLDER while the opencl backend is written (issue 34): the device table's row exists, the device does not. */
#include "device.h"

const char *const tsr_opencl_backends[] = {"opencl", NULL};

int tsr_opencl_device_new(tsr_alloc *a, const tsr_device_options *options, tsr_device **out) {
    (void)a;
    (void)options;
    *out = NULL;
    return tsr_error(TESSERA_ERROR_UNSUPPORTED, "the opencl device is not built yet");
}
