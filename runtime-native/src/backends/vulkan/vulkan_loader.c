/* Opening libvulkan at run time and filling the device's function table (vulkan_loader.h). */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "common.h"
#include "vulkan_loader.h"

/* dlsym's data pointer converts to a function pointer (POSIX); memcpy keeps -Wpedantic quiet. */
static void store(void *slot, PFN_vkVoidFunction fn) { memcpy(slot, &fn, sizeof fn); }

static int missing(const char *name) {
    return tsr_error(TESSERA_ERROR_UNSUPPORTED, "the vulkan device: the Vulkan loader lacks %s (a loader older than "
                     "Vulkan 1.1? Debian: libvulkan1)", name);
}

int tsr_vk_open_loader(tsr_vk_fns *f, const char *const *libraries) {
    memset(f, 0, sizeof *f);
    char tried[256] = "", why[256] = "";
    size_t used = 0;
    for (const char *const *name = libraries; *name && !f->library; name++) {
        f->library = dlopen(*name, RTLD_NOW | RTLD_LOCAL);
        int w = snprintf(tried + used, sizeof tried - used, "%s%s", used ? ", " : "", *name);
        if (w > 0 && (size_t)w < sizeof tried - used) used += (size_t)w;
        if (!f->library) {
            const char *error = dlerror();
            snprintf(why, sizeof why, "%s", error ? error : "not found");
        }
    }
    if (!f->library)
        return tsr_error(TESSERA_ERROR_UNSUPPORTED, "the vulkan device needs the Vulkan loader, which this machine "
                         "lacks (tried %s: %s); Debian: libvulkan1 and a driver such as mesa-vulkan-drivers", tried,
                         why);
    void *symbol = dlsym(f->library, "vkGetInstanceProcAddr");
    if (!symbol) {
        tsr_vk_close_loader(f);
        return missing("vkGetInstanceProcAddr");
    }
    memcpy(&f->vkGetInstanceProcAddr, &symbol, sizeof symbol);
#define TSR_VK_GET_GLOBAL(n)                                                \
    store(&f->n, f->vkGetInstanceProcAddr(VK_NULL_HANDLE, #n));             \
    if (!f->n) {                                                            \
        tsr_vk_close_loader(f);                                             \
        return missing(#n);                                                 \
    }
    TSR_VK_GLOBAL(TSR_VK_GET_GLOBAL)
    store(&f->vkEnumerateInstanceVersion, f->vkGetInstanceProcAddr(VK_NULL_HANDLE, "vkEnumerateInstanceVersion"));
    return 0;
}

int tsr_vk_load_instance(tsr_vk_fns *f, VkInstance instance) {
#define TSR_VK_GET_INSTANCE(n)                                              \
    store(&f->n, f->vkGetInstanceProcAddr(instance, #n));                   \
    if (!f->n) return missing(#n);
    TSR_VK_INSTANCE(TSR_VK_GET_INSTANCE)
    store(&f->vkCreateDebugUtilsMessengerEXT, f->vkGetInstanceProcAddr(instance, "vkCreateDebugUtilsMessengerEXT"));
    store(&f->vkDestroyDebugUtilsMessengerEXT, f->vkGetInstanceProcAddr(instance, "vkDestroyDebugUtilsMessengerEXT"));
    return 0;
}

int tsr_vk_load_device(tsr_vk_fns *f, VkDevice device) {
#define TSR_VK_GET_DEVICE(n)                                                \
    store(&f->n, f->vkGetDeviceProcAddr(device, #n));                       \
    if (!f->n) return missing(#n);
    TSR_VK_DEVICE(TSR_VK_GET_DEVICE)
    return 0;
}

void tsr_vk_close_loader(tsr_vk_fns *f) {
    if (f->library) dlclose(f->library);
    f->library = NULL;
}

const char *tsr_vk_result_name(VkResult r) {
    switch (r) {
    case VK_SUCCESS: return "VK_SUCCESS";
    case VK_TIMEOUT: return "VK_TIMEOUT";
    case VK_ERROR_OUT_OF_HOST_MEMORY: return "VK_ERROR_OUT_OF_HOST_MEMORY";
    case VK_ERROR_OUT_OF_DEVICE_MEMORY: return "VK_ERROR_OUT_OF_DEVICE_MEMORY";
    case VK_ERROR_INITIALIZATION_FAILED: return "VK_ERROR_INITIALIZATION_FAILED";
    case VK_ERROR_DEVICE_LOST: return "VK_ERROR_DEVICE_LOST";
    case VK_ERROR_MEMORY_MAP_FAILED: return "VK_ERROR_MEMORY_MAP_FAILED";
    case VK_ERROR_LAYER_NOT_PRESENT: return "VK_ERROR_LAYER_NOT_PRESENT";
    case VK_ERROR_EXTENSION_NOT_PRESENT: return "VK_ERROR_EXTENSION_NOT_PRESENT";
    case VK_ERROR_FEATURE_NOT_PRESENT: return "VK_ERROR_FEATURE_NOT_PRESENT";
    case VK_ERROR_INCOMPATIBLE_DRIVER: return "VK_ERROR_INCOMPATIBLE_DRIVER";
    case VK_ERROR_TOO_MANY_OBJECTS: return "VK_ERROR_TOO_MANY_OBJECTS";
    case VK_ERROR_FRAGMENTED_POOL: return "VK_ERROR_FRAGMENTED_POOL";
    case VK_ERROR_OUT_OF_POOL_MEMORY: return "VK_ERROR_OUT_OF_POOL_MEMORY";
    case VK_ERROR_INVALID_SHADER_NV: return "VK_ERROR_INVALID_SHADER_NV";
    default: return "VkResult";
    }
}
