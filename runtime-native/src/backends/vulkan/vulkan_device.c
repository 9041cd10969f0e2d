/* PLACEHOLDER while the vulkan backend is written (issue 34): the device table's row exists, the device does not. */
#include "device.h"

const char *const tsr_vulkan_backends[] = {"spirv", NULL};

int tsr_vulkan_device_new(tsr_alloc *a, const tsr_device_options *options, tsr_device **out) {
    (void)a;
    (void)options;
    *out = NULL;
    return tsr_error(TESSERA_ERROR_UNSUPPORTED, "the vulkan device is not built yet");
}
