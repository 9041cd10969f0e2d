/* The vulkan device's kernels: each kernel record of backend "spirv" becomes, once at load, a shader
 * module, a descriptor-set layout (its bindings as storage buffers, binding = index), a push-constant
 * range (4 bytes per i32 scalar) and a compute pipeline, through a VkPipelineCache kept on disk in
 * the folder compile_cache.c chose (options->cache_dir or <model>/.tessera-cache/). The cache file is
 * named by the device and driver (vendor, device, driver version, pipelineCacheUUID) and its header is
 * checked here before the driver sees it: a file of another device or a damaged one is rebuilt with one
 * warning, never an error, and the new one replaces it atomically (compile_cache.c's write). */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "compile_cache.h"
#include "files.h"
#include "vulkan_device.h"

#define SPIRV_BACKEND "spirv"
#define SPIRV_MAGIC 0x07230203u
#define MAX_CACHE_BYTES ((size_t)256 << 20)

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static uint32_t word_at(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

void tsr_vk_cache_path(const char *dir, const VkPhysicalDeviceProperties *props, char *out, size_t size) {
    char uuid[2 * VK_UUID_SIZE + 1];
    for (unsigned i = 0; i < VK_UUID_SIZE; i++) snprintf(uuid + 2 * i, 3, "%02x", props->pipelineCacheUUID[i]);
    snprintf(out, size, "%s/vulkan-%04x-%04x-%08x-%s.pipelines", dir, props->vendorID, props->deviceID,
             props->driverVersion, uuid);
}

bool tsr_vk_cache_header_ok(const void *data, size_t size, const VkPhysicalDeviceProperties *props, char *why,
                            size_t why_size) {
    const unsigned char *p = data;
    const size_t header = 16 + VK_UUID_SIZE; /* VkPipelineCacheHeaderVersionOne */
    if (size < header) {
        snprintf(why, why_size, "%zu bytes, shorter than a header", size);
        return false;
    }
    uint32_t length = word_at(p), version = word_at(p + 4), vendor = word_at(p + 8), device = word_at(p + 12);
    if (length < header || length > size) {
        snprintf(why, why_size, "its header claims %u bytes", length);
        return false;
    }
    if (version != VK_PIPELINE_CACHE_HEADER_VERSION_ONE) {
        snprintf(why, why_size, "header version %u", version);
        return false;
    }
    if (vendor != props->vendorID || device != props->deviceID) {
        snprintf(why, why_size, "vendor 0x%x device 0x%x, this is 0x%x 0x%x", vendor, device, props->vendorID,
                 props->deviceID);
        return false;
    }
    if (memcmp(p + 16, props->pipelineCacheUUID, VK_UUID_SIZE) != 0) {
        snprintf(why, why_size, "another driver's pipelineCacheUUID");
        return false;
    }
    return true;
}

/* The cache file's bytes if it is this device's, else NULL (with a warning for a file that is not). */
static void *read_cache(tsr_vk_device *d, const char *path, size_t *size) {
    void *data;
    char why[160] = "";
    if (tsr_compile_cache_read(d->base.alloc, path, MAX_CACHE_BYTES, &data, size, why, sizeof why) == 0) {
        if (!data || tsr_vk_cache_header_ok(data, *size, &d->props, why, sizeof why)) return data; /* NULL: none yet */
        tsr_free(d->base.alloc, data);
    }
    *size = 0;
    fprintf(stderr, "tessera: warning: %s is not a pipeline cache of this device (%s): rebuilding it\n", path, why);
    return NULL;
}

/* Writes the driver's cache data to `path` atomically, unless it equals what was read. No permission:
 * run without a disk cache, silently (the cache only saves time). */
static void save_cache(tsr_vk_device *d, const char *path, const void *old, size_t old_size) {
    size_t size = 0;
    if (d->vk.vkGetPipelineCacheData(d->device, d->cache, &size, NULL) != VK_SUCCESS || size == 0) return;
    void *data = tsr_malloc(d->base.alloc, size);
    if (!data) return;
    if (d->vk.vkGetPipelineCacheData(d->device, d->cache, &size, data) == VK_SUCCESS &&
        !(size == old_size && memcmp(data, old, size) == 0) &&
        tsr_compile_cache_write(path, (const void *const[]){data}, (const size_t[]){size}, 1))
        d->counters.cache_bytes_saved = size;
    tsr_free(d->base.alloc, data);
}

static int create_cache(tsr_vk_device *d, const void *data, size_t size) {
    VkPipelineCacheCreateInfo info = {.sType = VK_STRUCTURE_TYPE_PIPELINE_CACHE_CREATE_INFO, .initialDataSize = size,
                                      .pInitialData = data};
    VkResult r = d->vk.vkCreatePipelineCache(d->device, &info, NULL, &d->cache);
    if (r != VK_SUCCESS && size) { /* a driver may still refuse a header it accepted before: start empty */
        info.initialDataSize = 0;
        info.pInitialData = NULL;
        r = d->vk.vkCreatePipelineCache(d->device, &info, NULL, &d->cache);
    } else if (r == VK_SUCCESS && size) {
        d->counters.cache_loaded = true;
        d->counters.cache_bytes_loaded = size;
    }
    return r == VK_SUCCESS ? 0 : tsr_vk_fail(d, r, "vkCreatePipelineCache");
}

/* Reads module m, checks its size, SHA-256 and that it is SPIR-V whose instructions add up (drivers
 * need not check, and the validation layer aborts the process on an instruction that runs past the
 * end), and makes its shader module. */
static int shader_module(tsr_vk_device *d, const tsr_module *m, const char *dir, VkShaderModule *out) {
    char *data;
    size_t size;
    int rc = tsr_read_module(d->base.alloc, dir, m, &data, &size);
    if (rc) return rc;
    if (size % 4 || size < 20 || word_at((const unsigned char *)data) != SPIRV_MAGIC) {
        rc = tsr_error(TESSERA_ERROR_FORMAT, "module %s is not SPIR-V (%zu bytes, %s)", m->path, size,
                       size % 4 ? "not whole words" : "no magic number");
    } else {
        const unsigned char *words = (const unsigned char *)data;
        size_t n = size / 4;
        for (size_t at = 5; at < n && !rc;) {
            uint32_t count = word_at(words + 4 * at) >> 16;
            if (count == 0 || at + count > n)
                rc = tsr_error(TESSERA_ERROR_FORMAT, "module %s is corrupt SPIR-V: the instruction at word %zu "
                               "claims %u words, %zu remain", m->path, at, count, n - at);
            at += count ? count : 1;
        }
    }
    if (!rc) {
        VkShaderModuleCreateInfo info = {.sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO, .codeSize = size,
                                         .pCode = (const uint32_t *)(const void *)data};
        VkResult r = d->vk.vkCreateShaderModule(d->device, &info, NULL, out);
        if (r != VK_SUCCESS) rc = tsr_vk_fail(d, r, "vkCreateShaderModule");
        else d->counters.shader_modules++;
    }
    tsr_free(d->base.alloc, data);
    return rc;
}

static int create_pipeline(tsr_vk_device *d, const tsr_kernel *kernel, VkShaderModule module, vk_kernel *k) {
    k->name = kernel->name;
    k->n_bindings = kernel->n_bindings;
    k->n_scalars = kernel->n_scalars;
    k->access = kernel->binding_access;
    if ((uint32_t)(4 * kernel->n_scalars) > d->max_push_bytes)
        return tsr_error(TESSERA_ERROR_UNSUPPORTED, "the vulkan device (%s): kernel '%s' has %d scalars; its push "
                         "constants hold %u", d->base.description, kernel->name, (int)kernel->n_scalars,
                         d->max_push_bytes / 4);
    if (kernel->n_bindings > d->base.max_storage_buffers)
        return tsr_error(TESSERA_ERROR_UNSUPPORTED, "the vulkan device (%s): kernel '%s' has %d bindings; it binds "
                         "%lld storage buffers", d->base.description, kernel->name, (int)kernel->n_bindings,
                         (long long)d->base.max_storage_buffers);
    VkDescriptorSetLayoutBinding bindings[256];
    for (int32_t i = 0; i < kernel->n_bindings; i++)
        bindings[i] = (VkDescriptorSetLayoutBinding){.binding = (uint32_t)i,
                                                     .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                                     .descriptorCount = 1, .stageFlags = VK_SHADER_STAGE_COMPUTE_BIT};
    VkDescriptorSetLayoutCreateInfo set_info = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO,
                                                .bindingCount = (uint32_t)kernel->n_bindings, .pBindings = bindings};
    VkResult r = d->vk.vkCreateDescriptorSetLayout(d->device, &set_info, NULL, &k->set_layout);
    if (r != VK_SUCCESS) return tsr_vk_fail(d, r, "vkCreateDescriptorSetLayout");
    VkPushConstantRange push = {.stageFlags = VK_SHADER_STAGE_COMPUTE_BIT, .offset = 0,
                                .size = 4 * (uint32_t)kernel->n_scalars};
    VkPipelineLayoutCreateInfo layout_info = {.sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO,
                                              .setLayoutCount = 1, .pSetLayouts = &k->set_layout,
                                              .pushConstantRangeCount = kernel->n_scalars ? 1 : 0,
                                              .pPushConstantRanges = &push};
    if ((r = d->vk.vkCreatePipelineLayout(d->device, &layout_info, NULL, &k->layout)) != VK_SUCCESS)
        return tsr_vk_fail(d, r, "vkCreatePipelineLayout");
    VkPipelineCreationFeedbackEXT feedback = {0}, stage_feedback = {0};
    VkPipelineCreationFeedbackCreateInfoEXT feedback_info = {
        .sType = VK_STRUCTURE_TYPE_PIPELINE_CREATION_FEEDBACK_CREATE_INFO_EXT, .pPipelineCreationFeedback = &feedback,
        .pipelineStageCreationFeedbackCount = 1, .pPipelineStageCreationFeedbacks = &stage_feedback};
    VkComputePipelineCreateInfo info = {
        .sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO, .pNext = d->feedback ? &feedback_info : NULL,
        .stage = {.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO, .stage = VK_SHADER_STAGE_COMPUTE_BIT,
                  .module = module, .pName = kernel->entry_point},
        .layout = k->layout};
    if ((r = d->vk.vkCreateComputePipelines(d->device, d->cache, 1, &info, NULL, &k->pipeline)) != VK_SUCCESS)
        return tsr_error(TESSERA_ERROR_UNSUPPORTED, "the vulkan device (%s): kernel '%s': the driver could not build "
                         "its pipeline (vkCreateComputePipelines: %s)", d->base.description, kernel->name,
                         tsr_vk_result_name(r));
    d->counters.pipelines++;
    if (feedback.flags & VK_PIPELINE_CREATION_FEEDBACK_VALID_BIT_EXT) {
        d->counters.creation_feedback = true;
        if (feedback.flags & VK_PIPELINE_CREATION_FEEDBACK_APPLICATION_PIPELINE_CACHE_HIT_BIT_EXT)
            d->counters.pipeline_cache_hits++;
    }
    return 0;
}

int tsr_vk_load_kernels(tsr_device *base, const tsr_executable *exe, const char *dir) {
    tsr_vk_device *d = (tsr_vk_device *)base;
    if (d->kernels) return tsr_error(TESSERA_ERROR_INVALID_ARGUMENT, "the vulkan device: kernels are already loaded");
    /* A split build (exe->n_devices > 0) gives each device every kernel, by its index: this one makes
     * pipelines for its own (spirv) and leaves the others' slots empty; the VM never launches them here. */
    for (int32_t k = 0; k < exe->n_kernels && !exe->n_devices; k++)
        if (strcmp(exe->kernels[k].backend, SPIRV_BACKEND) != 0)
            return tsr_error(TESSERA_ERROR_UNSUPPORTED, "kernel '%s' is for backend '%s' (target %s); the vulkan "
                             "device runs backend '%s': compile the model with --target vulkan", exe->kernels[k].name,
                             exe->kernels[k].backend, exe->target_name, SPIRV_BACKEND);
    d->kernels = tsr_calloc(d->base.alloc, (size_t)(exe->n_kernels ? exe->n_kernels : 1), sizeof *d->kernels);
    VkShaderModule *modules = tsr_calloc(d->base.alloc, (size_t)(exe->n_modules ? exe->n_modules : 1),
                                         sizeof *modules);
    if (!d->kernels || !modules) {
        tsr_free(d->base.alloc, modules);
        return TESSERA_ERROR_OUT_OF_MEMORY;
    }
    d->n_kernels = exe->n_kernels;

    char path[TSR_COMPILE_CACHE_PATH] = "";
    void *old = NULL;
    size_t old_size = 0;
    if (d->cache_dir) {
        tsr_vk_cache_path(d->cache_dir, &d->props, path, sizeof path);
        old = read_cache(d, path, &old_size);
    }
    int rc = create_cache(d, old, old_size);
    double start = now();
    for (int32_t k = 0; k < exe->n_kernels && !rc; k++) {
        const tsr_kernel *kernel = &exe->kernels[k];
        if (strcmp(kernel->backend, SPIRV_BACKEND) != 0) continue; /* another device's, in a split build */
        if (!modules[kernel->module])
            rc = shader_module(d, &exe->modules[kernel->module], dir, &modules[kernel->module]);
        if (!rc) rc = create_pipeline(d, kernel, modules[kernel->module], &d->kernels[k]);
    }
    d->counters.pipeline_seconds += now() - start;
    /* A pipeline keeps what it needs of its module. */
    for (int32_t m = 0; m < exe->n_modules; m++)
        if (modules[m]) d->vk.vkDestroyShaderModule(d->device, modules[m], NULL);
    tsr_free(d->base.alloc, modules);
    if (!rc && path[0]) save_cache(d, path, old, old_size);
    tsr_free(d->base.alloc, old);
    if (!rc) rc = tsr_vk_check_messages(d);
    return rc;
}

void tsr_vk_free_kernels(tsr_vk_device *d) {
    for (int32_t k = 0; k < d->n_kernels; k++) {
        vk_kernel *kernel = &d->kernels[k];
        if (kernel->pipeline) d->vk.vkDestroyPipeline(d->device, kernel->pipeline, NULL);
        if (kernel->layout) d->vk.vkDestroyPipelineLayout(d->device, kernel->layout, NULL);
        if (kernel->set_layout) d->vk.vkDestroyDescriptorSetLayout(d->device, kernel->set_layout, NULL);
    }
    tsr_free(d->base.alloc, d->kernels);
    d->kernels = NULL;
    d->n_kernels = 0;
    if (d->cache) d->vk.vkDestroyPipelineCache(d->device, d->cache, NULL);
    d->cache = VK_NULL_HANDLE;
}
