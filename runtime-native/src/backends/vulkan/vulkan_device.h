/* The vulkan device's internals, shared by its modules: vulkan_device.c (instance, physical device,
 * features, validation), vulkan_memory.c (buffers), vulkan_pipelines.c (kernels, pipeline cache on
 * disk), vulkan_commands.c (recording, barriers, descriptor sets, submission). Tests and the bench
 * read the counters through tsr_vulkan_counters. */
#ifndef TSR_VULKAN_DEVICE_H
#define TSR_VULKAN_DEVICE_H

#include "device.h"
#include "vulkan_loader.h"

/* What the device has done, for tests and the bench. */
typedef struct tsr_vulkan_counters {
    uint64_t shader_modules, pipelines;   /* created (at load) */
    double pipeline_seconds;              /* spent creating shader modules and pipelines */
    uint64_t pipeline_cache_hits;         /* pipelines the driver says came from the cache (creation feedback) */
    bool creation_feedback;               /* whether the driver reported feedback at all */
    bool cache_loaded;                    /* whether a valid cache file was handed to the driver */
    uint64_t cache_bytes_loaded, cache_bytes_saved;
    uint64_t descriptor_sets, descriptor_writes; /* allocated, and vkUpdateDescriptorSets calls */
    uint64_t dispatches, barriers, submits;
    uint64_t validation_messages;
    bool unified_memory; /* buffers are device-local, host-visible and mapped */
} tsr_vulkan_counters;

typedef struct vk_buffer {
    VkBuffer buffer;
    VkDeviceMemory memory;
    size_t size;      /* bytes, a multiple of 4 */
    void *mapped;     /* NULL unless unified memory */
    uint64_t id;      /* never reused: descriptor sets are cached by it */
    uint64_t used_in; /* the batch (serial) of the last command that touched it */
    struct vk_buffer *prev, *next;
} vk_buffer;

typedef struct vk_kernel {
    const char *name;
    VkDescriptorSetLayout set_layout;
    VkPipelineLayout layout;
    VkPipeline pipeline;
    int32_t n_bindings, n_scalars;
    const uint8_t *access; /* TSR_ACCESS_* per binding (executable.h) */
} vk_kernel;

/* A written or read byte range of one buffer since the last barrier. */
typedef struct vk_range {
    uint64_t id, begin, end;
} vk_range;

typedef struct vk_set_entry {
    struct vk_set_entry *next;
    uint64_t hash;
    int32_t kernel, n, pool;
    VkDescriptorSet set;
    uint64_t key[]; /* n ids, n offsets, n ranges */
} vk_set_entry;

#define VK_SET_BUCKETS 1024
#define VK_MAX_RANGES 512

typedef struct tsr_vk_device {
    tsr_device base;
    tsr_vk_fns vk;
    VkInstance instance;
    VkDebugUtilsMessengerEXT messenger;
    VkPhysicalDevice physical;
    VkPhysicalDeviceProperties props;
    uint32_t api_version; /* min of the instance's and the device's */
    uint32_t queue_family;
    VkDevice device;
    VkQueue queue;
    uint32_t max_push_bytes;
    bool feedback; /* VK_EXT_pipeline_creation_feedback (core in 1.3) */
    const char *feature_names[4];

    /* memory (vulkan_memory.c) */
    VkPhysicalDeviceMemoryProperties memory;
    int32_t unified_type, device_type, upload_type, readback_type; /* -1: none */
    uint64_t max_allocation;
    vk_buffer *buffers; /* every live buffer: destroy frees what the VM never releases (adopted weights) */
    uint64_t next_id;

    /* kernels (vulkan_pipelines.c) */
    vk_kernel *kernels;
    int32_t n_kernels;
    VkPipelineCache cache;
    char *cache_dir; /* NULL: no disk cache (compile_cache.c) */

    /* commands (vulkan_commands.c) */
    VkCommandPool command_pool;
    VkCommandBuffer commands;
    VkFence fence;
    bool recording;
    uint64_t serial; /* the batch being recorded; every earlier one has completed */
    VkPipeline bound_pipeline;
    vk_range written[VK_MAX_RANGES], read[VK_MAX_RANGES];
    int32_t n_written, n_read;
    vk_set_entry *sets[VK_SET_BUCKETS];
    size_t n_sets;
    VkDescriptorPool *pools;
    int32_t n_pools, pools_capacity;

    /* validation (vulkan_device.c) */
    bool validation;
    bool message_pending;
    char first_message[400];

    tsr_vulkan_counters counters;
} tsr_vk_device;

/* The device, with the Vulkan loader looked for under `libraries` (NULL-ended) instead of
 * libvulkan.so.1 / libvulkan.so: tests make the no-loader path happen. */
int tsr_vulkan_device_new_with(tsr_alloc *a, const tsr_device_options *options, const char *const *libraries,
                               tsr_device **out);
/* The counters of a device made by tsr_vulkan_device_new; false for another device. */
bool tsr_vulkan_counters_of(const tsr_device *d, tsr_vulkan_counters *out);
/* For tests: buffers made from now on are device-local and unmapped, their bytes staged through the
 * command stream, as on a discrete GPU (lavapipe's memory is all unified). */
void tsr_vk_use_staging(tsr_device *d);
/* Whether `data` (`size` bytes) is a pipeline cache of the device with these properties; when not,
 * `why` says what differs ("its header says vendor 0x10de"). */
bool tsr_vk_cache_header_ok(const void *data, size_t size, const VkPhysicalDeviceProperties *props, char *why,
                            size_t why_size);
/* The cache file's path for the device with these properties under folder `dir`. */
void tsr_vk_cache_path(const char *dir, const VkPhysicalDeviceProperties *props, char *out, size_t size);

/* Errors: a failed Vulkan call while running (TESSERA_ERROR_DEVICE), naming the call. */
int tsr_vk_fail(const tsr_vk_device *d, VkResult r, const char *call);
/* TESSERA_ERROR_DEVICE when the validation layer spoke since the last check (naming its first message). */
int tsr_vk_check_messages(tsr_vk_device *d);

/* vulkan_memory.c */
void *tsr_vk_allocate(tsr_device *base, size_t size);
void tsr_vk_release(tsr_device *base, void *buffer);
void *tsr_vk_adopt_host(tsr_device *base, const void *host, size_t size);
int tsr_vk_upload(tsr_device *base, void *buffer, size_t offset, const void *src, size_t size);
int tsr_vk_read_back(tsr_device *base, const void *buffer, size_t offset, void *dst, size_t size);
void *tsr_vk_host_pointer(tsr_device *base, void *buffer, size_t offset);
int tsr_vk_choose_memory(tsr_vk_device *d);
void tsr_vk_free_buffers(tsr_vk_device *d);

/* vulkan_pipelines.c */
int tsr_vk_load_kernels(tsr_device *base, const tsr_executable *exe, const char *dir);
void tsr_vk_free_kernels(tsr_vk_device *d);

/* vulkan_commands.c */
int tsr_vk_commands_init(tsr_vk_device *d);
void tsr_vk_commands_free(tsr_vk_device *d);
int tsr_vk_launch(tsr_device *base, int32_t kernel, int32_t n_bindings, void *const *bases, const size_t *offsets,
                  const size_t *sizes, const int32_t *scalars, const int32_t grid[3]);
int tsr_vk_synchronize(tsr_device *base);
/* The command buffer being recorded (begun if none is). */
int tsr_vk_begin(tsr_vk_device *d);
/* Submits what is recorded, if anything, and waits for it. */
int tsr_vk_submit_and_wait(tsr_vk_device *d);
/* Ordering by data flow: whether a command touching [begin, end) of b (TSR_ACCESS_* bits) needs a
 * barrier after the commands recorded since the last one; the barrier (which forgets them); and
 * noting the command's access once it is recorded. */
bool tsr_vk_hazard(const tsr_vk_device *d, const vk_buffer *b, uint64_t begin, uint64_t end, uint8_t access);
void tsr_vk_barrier(tsr_vk_device *d);
void tsr_vk_note(tsr_vk_device *d, vk_buffer *b, uint64_t begin, uint64_t end, uint8_t access);
/* Whether a pending (recorded, not yet run) command touches b. */
bool tsr_vk_in_use(const tsr_vk_device *d, const vk_buffer *b);
/* Forgets the cached descriptor sets that name buffer `id` (it is being destroyed; nothing pending uses it). */
void tsr_vk_forget_sets(tsr_vk_device *d, uint64_t id);

#endif
