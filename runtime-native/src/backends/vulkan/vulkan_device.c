/* The vulkan device (device.h): SPIR-V kernels on a Vulkan 1.1+ GPU, or on Mesa's CPU driver lavapipe.
 * This file opens the loader, makes the instance (with the Khronos validation layer when
 * TESSERA_VULKAN_VALIDATION=1), chooses the physical device, states its features and limits in the
 * executable's names (compiler/target.py), and makes the logical device with the features kernels
 * use. Memory, kernels and commands are in vulkan_memory.c, vulkan_pipelines.c, vulkan_commands.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compile_cache.h"
#include "vulkan_device.h"

#define VALIDATION_ENV "TESSERA_VULKAN_VALIDATION"
#define VALIDATION_LAYER "VK_LAYER_KHRONOS_validation"
#define MAX_PHYSICAL 16

const char *const tsr_vulkan_backends[] = {"spirv", NULL};

int tsr_vk_fail(const tsr_vk_device *d, VkResult r, const char *call) {
    return tsr_error(TESSERA_ERROR_DEVICE, "the vulkan device (%s): %s failed with %s", d->base.description, call,
                     tsr_vk_result_name(r));
}

int tsr_vk_check_messages(tsr_vk_device *d) {
    if (!d->message_pending) return 0;
    d->message_pending = false;
    return tsr_error(TESSERA_ERROR_DEVICE, "the vulkan device (%s): the validation layer reported %llu message%s; "
                     "the first: %s", d->base.description, (unsigned long long)d->counters.validation_messages,
                     d->counters.validation_messages == 1 ? "" : "s", d->first_message);
}

/* Every warning or error of the validation layer goes to stderr and fails the next device op:
 * a test under validation fails on any message. */
static VKAPI_ATTR VkBool32 VKAPI_CALL on_message(VkDebugUtilsMessageSeverityFlagBitsEXT severity,
                                                 VkDebugUtilsMessageTypeFlagsEXT types,
                                                 const VkDebugUtilsMessengerCallbackDataEXT *data, void *user) {
    (void)severity, (void)types;
    tsr_vk_device *d = user;
    const char *text = data && data->pMessage ? data->pMessage : "(no text)";
    fprintf(stderr, "tessera: vulkan validation: %s\n", text);
    if (d->counters.validation_messages++ == 0) snprintf(d->first_message, sizeof d->first_message, "%s", text);
    d->message_pending = true;
    return VK_FALSE; /* the call that caused the message goes on */
}

static bool validation_wanted(void) {
    const char *v = getenv(VALIDATION_ENV);
    return v && v[0] && strcmp(v, "0") != 0;
}

static bool has_layer(tsr_vk_device *d, const char *name) {
    uint32_t n = 0;
    if (d->vk.vkEnumerateInstanceLayerProperties(&n, NULL) != VK_SUCCESS || n == 0) return false;
    VkLayerProperties *layers = tsr_calloc(d->base.alloc, n, sizeof *layers);
    bool found = false;
    if (layers && d->vk.vkEnumerateInstanceLayerProperties(&n, layers) >= 0)
        for (uint32_t i = 0; i < n && !found; i++) found = strcmp(layers[i].layerName, name) == 0;
    tsr_free(d->base.alloc, layers);
    return found;
}

static bool has_instance_extension(tsr_vk_device *d, const char *name) {
    uint32_t n = 0;
    if (d->vk.vkEnumerateInstanceExtensionProperties(NULL, &n, NULL) != VK_SUCCESS || n == 0) return false;
    VkExtensionProperties *ext = tsr_calloc(d->base.alloc, n, sizeof *ext);
    bool found = false;
    if (ext && d->vk.vkEnumerateInstanceExtensionProperties(NULL, &n, ext) >= 0)
        for (uint32_t i = 0; i < n && !found; i++) found = strcmp(ext[i].extensionName, name) == 0;
    tsr_free(d->base.alloc, ext);
    return found;
}

static bool has_device_extension(tsr_vk_device *d, VkPhysicalDevice p, const char *name) {
    uint32_t n = 0;
    if (d->vk.vkEnumerateDeviceExtensionProperties(p, NULL, &n, NULL) != VK_SUCCESS || n == 0) return false;
    VkExtensionProperties *ext = tsr_calloc(d->base.alloc, n, sizeof *ext);
    bool found = false;
    if (ext && d->vk.vkEnumerateDeviceExtensionProperties(p, NULL, &n, ext) >= 0)
        for (uint32_t i = 0; i < n && !found; i++) found = strcmp(ext[i].extensionName, name) == 0;
    tsr_free(d->base.alloc, ext);
    return found;
}

static int create_instance(tsr_vk_device *d) {
    uint32_t version = VK_API_VERSION_1_0;
    if (d->vk.vkEnumerateInstanceVersion) d->vk.vkEnumerateInstanceVersion(&version);
    if (version < VK_API_VERSION_1_1)
        return tsr_error(TESSERA_ERROR_UNSUPPORTED, "the vulkan device needs a Vulkan 1.1 loader; this one is %u.%u",
                         VK_API_VERSION_MAJOR(version), VK_API_VERSION_MINOR(version));
    d->api_version = version < VK_API_VERSION_1_3 ? version : VK_API_VERSION_1_3;
    const char *layers[1], *extensions[2];
    uint32_t n_layers = 0, n_extensions = 0;
    VkInstanceCreateFlags flags = 0;
    VkDebugUtilsMessengerCreateInfoEXT messenger = {
        .sType = VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT,
        .messageSeverity = VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT |
                           VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT,
        .messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT |
                       VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT,
        .pfnUserCallback = on_message,
        .pUserData = d,
    };
    if (d->validation) {
        if (!has_layer(d, VALIDATION_LAYER))
            return tsr_error(TESSERA_ERROR_UNSUPPORTED, "the vulkan device: %s=1 asks for %s, which is not installed "
                             "(Debian: vulkan-validationlayers)", VALIDATION_ENV, VALIDATION_LAYER);
        layers[n_layers++] = VALIDATION_LAYER;
        extensions[n_extensions++] = VK_EXT_DEBUG_UTILS_EXTENSION_NAME;
    }
    /* MoltenVK lists its devices only with portability enumeration. */
    if (has_instance_extension(d, "VK_KHR_portability_enumeration")) {
        extensions[n_extensions++] = "VK_KHR_portability_enumeration";
        flags |= 0x00000001; /* VK_INSTANCE_CREATE_ENUMERATE_PORTABILITY_BIT_KHR */
    }
    VkApplicationInfo app = {.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO, .pApplicationName = "tessera",
                             .pEngineName = "tessera", .apiVersion = d->api_version};
    /* The messenger in pNext also hears what vkCreateInstance and vkDestroyInstance say. */
    VkInstanceCreateInfo info = {.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO,
                                 .pNext = d->validation ? &messenger : NULL, .flags = flags,
                                 .pApplicationInfo = &app, .enabledLayerCount = n_layers,
                                 .ppEnabledLayerNames = layers, .enabledExtensionCount = n_extensions,
                                 .ppEnabledExtensionNames = extensions};
    VkResult r = d->vk.vkCreateInstance(&info, NULL, &d->instance);
    if (r != VK_SUCCESS)
        return tsr_error(TESSERA_ERROR_UNSUPPORTED, "the vulkan device: vkCreateInstance failed with %s: no Vulkan "
                         "driver is installed? (Debian's mesa-vulkan-drivers gives the CPU driver lavapipe)",
                         tsr_vk_result_name(r));
    int rc = tsr_vk_load_instance(&d->vk, d->instance);
    if (rc) return rc;
    if (d->validation) {
        if (!d->vk.vkCreateDebugUtilsMessengerEXT)
            return tsr_error(TESSERA_ERROR_UNSUPPORTED, "the vulkan device: validation asked for, but the loader lacks "
                             "vkCreateDebugUtilsMessengerEXT");
        r = d->vk.vkCreateDebugUtilsMessengerEXT(d->instance, &messenger, NULL, &d->messenger);
        if (r != VK_SUCCESS)
            return tsr_error(TESSERA_ERROR_UNSUPPORTED, "the vulkan device: vkCreateDebugUtilsMessengerEXT failed "
                             "with %s", tsr_vk_result_name(r));
    }
    return 0;
}

/* A queue family with compute, one without graphics first (a dedicated compute queue); -1: none. */
static int32_t compute_family(tsr_vk_device *d, VkPhysicalDevice p) {
    uint32_t n = 0;
    d->vk.vkGetPhysicalDeviceQueueFamilyProperties(p, &n, NULL);
    VkQueueFamilyProperties families[32];
    if (n > 32) n = 32;
    d->vk.vkGetPhysicalDeviceQueueFamilyProperties(p, &n, families);
    int32_t any = -1;
    for (uint32_t i = 0; i < n; i++) {
        if (!(families[i].queueFlags & VK_QUEUE_COMPUTE_BIT) || !families[i].queueCount) continue;
        if (!(families[i].queueFlags & VK_QUEUE_GRAPHICS_BIT)) return (int32_t)i;
        if (any < 0) any = (int32_t)i;
    }
    return any;
}

static int rank_of(VkPhysicalDeviceType type) {
    switch (type) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return 0;
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return 1;
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return 2;
    case VK_PHYSICAL_DEVICE_TYPE_CPU: return 3;
    default: return 4;
    }
}

static int choose_physical(tsr_vk_device *d, int32_t index) {
    VkPhysicalDevice physical[MAX_PHYSICAL];
    uint32_t n = MAX_PHYSICAL;
    VkResult r = d->vk.vkEnumeratePhysicalDevices(d->instance, &n, physical);
    if (r < 0)
        return tsr_error(TESSERA_ERROR_UNSUPPORTED, "the vulkan device: vkEnumeratePhysicalDevices failed with %s",
                         tsr_vk_result_name(r));
    char listed[512] = "";
    size_t used = 0;
    int32_t best = -1, best_rank = 99;
    for (uint32_t i = 0; i < n; i++) {
        VkPhysicalDeviceProperties p;
        d->vk.vkGetPhysicalDeviceProperties(physical[i], &p);
        int32_t family = compute_family(d, physical[i]);
        bool usable = family >= 0 && p.apiVersion >= VK_API_VERSION_1_1;
        int w = snprintf(listed + used, sizeof listed - used, "%s%u: %s%s", i ? ", " : "", i, p.deviceName,
                         usable ? "" : (family < 0 ? " (no compute queue)" : " (Vulkan 1.0)"));
        if (w > 0 && (size_t)w < sizeof listed - used) used += (size_t)w;
        if (index >= 0 ? (int32_t)i == index && usable : usable && rank_of(p.deviceType) < best_rank) {
            best = (int32_t)i;
            best_rank = rank_of(p.deviceType);
        }
    }
    if (n == 0)
        return tsr_error(TESSERA_ERROR_UNSUPPORTED, "the vulkan device: the Vulkan loader lists no physical device "
                         "(Debian's mesa-vulkan-drivers gives the CPU driver lavapipe)");
    if (best < 0 && index >= 0)
        return tsr_error(TESSERA_ERROR_UNSUPPORTED, "the vulkan device: there is no usable device vulkan:%d (Vulkan "
                         "1.1 with a compute queue); the devices here: %s", (int)index, listed);
    if (best < 0)
        return tsr_error(TESSERA_ERROR_UNSUPPORTED, "the vulkan device: no Vulkan 1.1 device with a compute queue (the "
                         "devices here: %s)", listed);
    d->physical = physical[best];
    d->vk.vkGetPhysicalDeviceProperties(d->physical, &d->props);
    d->queue_family = (uint32_t)compute_family(d, d->physical);
    if (d->props.apiVersion < d->api_version) d->api_version = d->props.apiVersion;
    return 0;
}

/* Features and limits under the executable's names, and the logical device with what kernels use. */
static int open_device(tsr_vk_device *d) {
    bool v12 = d->api_version >= VK_API_VERSION_1_2;
    VkPhysicalDeviceDriverProperties driver = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES};
    VkPhysicalDeviceMaintenance3Properties maintenance3 = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_3_PROPERTIES, .pNext = v12 ? &driver : NULL};
    VkPhysicalDeviceSubgroupProperties subgroup = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES,
                                                   .pNext = &maintenance3};
    VkPhysicalDeviceProperties2 props2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2, .pNext = &subgroup};
    d->vk.vkGetPhysicalDeviceProperties2(d->physical, &props2);

    /* shaderFloat16/int8 and 8-bit storage are core from 1.2: their structs go only to a device that knows them. */
    VkPhysicalDeviceShaderFloat16Int8Features f16 = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_FLOAT16_INT8_FEATURES};
    VkPhysicalDevice8BitStorageFeatures s8 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_8BIT_STORAGE_FEATURES,
                                              .pNext = &f16};
    VkPhysicalDevice16BitStorageFeatures s16 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_16BIT_STORAGE_FEATURES,
                                                .pNext = v12 ? &s8 : NULL};
    VkPhysicalDeviceFeatures2 supported = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, .pNext = &s16};
    d->vk.vkGetPhysicalDeviceFeatures2(d->physical, &supported);

    if (v12)
        snprintf(d->base.description, sizeof d->base.description, "%.80s, %.24s %.40s", d->props.deviceName,
                 driver.driverName, driver.driverInfo);
    else
        snprintf(d->base.description, sizeof d->base.description, "%.80s", d->props.deviceName);

    int n_features = 0;
    if (v12 && f16.shaderFloat16 && s16.storageBuffer16BitAccess) d->feature_names[n_features++] = "shader-f16";
    VkSubgroupFeatureFlags arithmetic = VK_SUBGROUP_FEATURE_BASIC_BIT | VK_SUBGROUP_FEATURE_ARITHMETIC_BIT;
    if ((subgroup.supportedStages & VK_SHADER_STAGE_COMPUTE_BIT) &&
        (subgroup.supportedOperations & arithmetic) == arithmetic)
        d->feature_names[n_features++] = "subgroup";
    /* Kernels never need it; the Python VM's Vulkan device states it alike (profiling reads it). */
    VkQueueFamilyProperties families[32];
    uint32_t n_families = 32;
    d->vk.vkGetPhysicalDeviceQueueFamilyProperties(d->physical, &n_families, families);
    if (d->queue_family < n_families && families[d->queue_family].timestampValidBits)
        d->feature_names[n_features++] = "timestamp-query";
    d->feature_names[n_features] = NULL;
    d->base.features = d->feature_names;

    const VkPhysicalDeviceLimits *l = &d->props.limits;
    d->base.max_invocations = l->maxComputeWorkGroupInvocations;
    d->base.max_storage_buffers = l->maxPerStageDescriptorStorageBuffers;
    d->base.max_workgroup_storage = l->maxComputeSharedMemorySize;
    d->base.max_binding_size = l->maxStorageBufferRange;
    /* One buffer is one allocation, so the largest allocation bounds a buffer. */
    d->max_allocation = maintenance3.maxMemoryAllocationSize ? maintenance3.maxMemoryAllocationSize : UINT32_MAX;
    d->base.max_buffer_size = (int64_t)(d->max_allocation > INT64_MAX ? INT64_MAX : d->max_allocation);
    d->base.storage_alignment = l->minStorageBufferOffsetAlignment > 4 ? l->minStorageBufferOffsetAlignment : 4;
    uint32_t most = l->maxComputeWorkGroupCount[0];
    for (int i = 1; i < 3; i++) most = l->maxComputeWorkGroupCount[i] < most ? l->maxComputeWorkGroupCount[i] : most;
    d->base.max_workgroups = most;
    d->max_push_bytes = l->maxPushConstantsSize;

    /* Enable what kernels may use and nothing more (robustBufferAccess and the like cost speed). */
    VkPhysicalDeviceShaderFloat16Int8Features want_f16 = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_FLOAT16_INT8_FEATURES, .shaderFloat16 = f16.shaderFloat16,
        .shaderInt8 = f16.shaderInt8};
    VkPhysicalDevice8BitStorageFeatures want_s8 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_8BIT_STORAGE_FEATURES,
                                                   .pNext = &want_f16,
                                                   .storageBuffer8BitAccess = s8.storageBuffer8BitAccess};
    VkPhysicalDevice16BitStorageFeatures want_s16 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_16BIT_STORAGE_FEATURES,
                                                     .pNext = v12 ? &want_s8 : NULL,
                                                     .storageBuffer16BitAccess = s16.storageBuffer16BitAccess};
    VkPhysicalDeviceFeatures2 want = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, .pNext = &want_s16};
    want.features.shaderInt64 = supported.features.shaderInt64;
    want.features.shaderInt16 = supported.features.shaderInt16;

    /* Creation feedback says whether a pipeline came from the cache (core in 1.3). */
    const char *extensions[1];
    uint32_t n_extensions = 0;
    if (d->api_version >= VK_API_VERSION_1_3) {
        d->feedback = true;
    } else if (has_device_extension(d, d->physical, VK_EXT_PIPELINE_CREATION_FEEDBACK_EXTENSION_NAME)) {
        extensions[n_extensions++] = VK_EXT_PIPELINE_CREATION_FEEDBACK_EXTENSION_NAME;
        d->feedback = true;
    }
    float priority = 1.0f;
    VkDeviceQueueCreateInfo queue = {.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO,
                                     .queueFamilyIndex = d->queue_family, .queueCount = 1,
                                     .pQueuePriorities = &priority};
    VkDeviceCreateInfo info = {.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO, .pNext = &want, .queueCreateInfoCount = 1,
                               .pQueueCreateInfos = &queue, .enabledExtensionCount = n_extensions,
                               .ppEnabledExtensionNames = extensions};
    VkResult r = d->vk.vkCreateDevice(d->physical, &info, NULL, &d->device);
    if (r != VK_SUCCESS)
        return tsr_error(TESSERA_ERROR_UNSUPPORTED, "the vulkan device (%s): vkCreateDevice failed with %s",
                         d->base.description, tsr_vk_result_name(r));
    int rc = tsr_vk_load_device(&d->vk, d->device);
    if (rc) { /* the table is part filled: destroy lets the device be, so it goes here */
        PFN_vkVoidFunction destroy = d->vk.vkGetDeviceProcAddr(d->device, "vkDestroyDevice");
        if (destroy) ((PFN_vkDestroyDevice)destroy)(d->device, NULL);
        d->device = VK_NULL_HANDLE;
        return rc;
    }
    d->vk.vkGetDeviceQueue(d->device, d->queue_family, 0, &d->queue);
    return 0;
}

static void vk_destroy(tsr_device *base) {
    tsr_vk_device *d = (tsr_vk_device *)base;
    if (d->device) {
        (void)tsr_vk_submit_and_wait(d);
        d->vk.vkDeviceWaitIdle(d->device);
        tsr_vk_commands_free(d); /* descriptor sets before the buffers they name */
        tsr_vk_free_buffers(d);
        tsr_vk_free_kernels(d);
        d->vk.vkDestroyDevice(d->device, NULL);
    }
    if (d->messenger) d->vk.vkDestroyDebugUtilsMessengerEXT(d->instance, d->messenger, NULL);
    if (d->instance) { /* from the loader itself when the instance's table could not be filled */
        PFN_vkVoidFunction destroy = d->vk.vkGetInstanceProcAddr(d->instance, "vkDestroyInstance");
        if (destroy) ((PFN_vkDestroyInstance)destroy)(d->instance, NULL);
    }
    tsr_vk_close_loader(&d->vk);
    tsr_free(base->alloc, d->cache_dir);
    tsr_free(base->alloc, d);
}

/* A pipeline counts as from the cache only when the driver says so (creation feedback): a cache file
 * the driver keeps nothing in (lavapipe's) saves no compile, and is not reported as if it did. */
static void vk_compile_stats(const tsr_device *device, tessera_compile_stats *out) {
    const tsr_vulkan_counters *c = &((const tsr_vk_device *)device)->counters;
    out->kernels = (uint32_t)c->pipelines;
    out->from_cache = (uint32_t)c->pipeline_cache_hits;
    out->compiled = (uint32_t)(c->pipelines - c->pipeline_cache_hits);
    out->shader_modules = (uint32_t)c->shader_modules;
    out->seconds = c->pipeline_seconds;
}

static const tsr_device_ops VULKAN_OPS = {
    .name = "vulkan",
    .load_kernels = tsr_vk_load_kernels,
    .allocate = tsr_vk_allocate,
    .release = tsr_vk_release,
    .adopt_host = tsr_vk_adopt_host,
    .upload = tsr_vk_upload,
    .read_back = tsr_vk_read_back,
    .host_pointer = tsr_vk_host_pointer,
    .launch = tsr_vk_launch,
    .synchronize = tsr_vk_synchronize,
    .destroy = vk_destroy,
    .compile_stats = vk_compile_stats,
};

int tsr_vulkan_device_new_with(tsr_alloc *a, const tsr_device_options *options, const char *const *libraries,
                               tsr_device **out) {
    *out = NULL;
    tsr_vk_device *d = tsr_calloc(a, 1, sizeof *d);
    if (!d) return TESSERA_ERROR_OUT_OF_MEMORY;
    d->base.ops = &VULKAN_OPS;
    d->base.alloc = a;
    snprintf(d->base.description, sizeof d->base.description, "not opened");
    d->validation = validation_wanted();
    d->serial = 1;
    int rc = tsr_vk_open_loader(&d->vk, libraries);
    if (!rc) rc = create_instance(d);
    if (!rc) rc = choose_physical(d, options->index);
    if (!rc) rc = open_device(d);
    if (!rc) rc = tsr_vk_choose_memory(d);
    if (!rc) rc = tsr_vk_commands_init(d);
    if (!rc) rc = tsr_vk_check_messages(d);
    if (rc) {
        vk_destroy(&d->base);
        return rc;
    }
    d->counters.unified_memory = d->unified_type >= 0;
    d->cache_dir = tsr_compile_cache_folder(a, options); /* once the device opened: a failed one makes no folder */
    *out = &d->base;
    return 0;
}

int tsr_vulkan_device_new(tsr_alloc *a, const tsr_device_options *options, tsr_device **out) {
    static const char *const LOADERS[] = {"libvulkan.so.1", "libvulkan.so", NULL};
    return tsr_vulkan_device_new_with(a, options, LOADERS, out);
}

bool tsr_vulkan_counters_of(const tsr_device *d, tsr_vulkan_counters *out) {
    if (!d || d->ops != &VULKAN_OPS) return false;
    *out = ((const tsr_vk_device *)d)->counters;
    return true;
}
