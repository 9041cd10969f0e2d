/* The vulkan device's memory: a buffer is one VkBuffer (storage, transfer source and destination) bound
 * to its own allocation. Where the device has memory that is device-local, host-visible and
 * host-coherent in its main heap (unified memory: lavapipe, integrated GPUs, resizable BAR), buffers
 * live there and stay mapped: an upload is a memcpy once no pending command touches the buffer, a
 * read back a memcpy after the commands that touch it have run. Otherwise buffers are device-local
 * and bytes travel through a host-visible staging buffer, copied in the command stream. */
#include <string.h>

#include "vulkan_device.h"

static size_t align4(size_t n) { return (n + 3) & ~(size_t)3; }

/* A memory type among `allowed` with every flag of one of `wanted` (tried in order), in `heap` when
 * heap >= 0; -1: none. */
static int32_t memory_type(const tsr_vk_device *d, uint32_t allowed, const VkMemoryPropertyFlags *wanted, int n_wanted,
                           int32_t heap) {
    for (int w = 0; w < n_wanted; w++)
        for (uint32_t i = 0; i < d->memory.memoryTypeCount; i++) {
            const VkMemoryType *t = &d->memory.memoryTypes[i];
            if (!(allowed >> i & 1) || (t->propertyFlags & wanted[w]) != wanted[w]) continue;
            if (heap >= 0 && (int32_t)t->heapIndex != heap) continue;
            return (int32_t)i;
        }
    return -1;
}

int tsr_vk_choose_memory(tsr_vk_device *d) {
    d->vk.vkGetPhysicalDeviceMemoryProperties(d->physical, &d->memory);
    /* The largest device-local heap: a discrete GPU's small host-visible window (256 MiB of BAR) is no
     * place for every buffer. */
    int32_t main_heap = -1;
    for (uint32_t h = 0; h < d->memory.memoryHeapCount; h++)
        if ((d->memory.memoryHeaps[h].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT) &&
            (main_heap < 0 || d->memory.memoryHeaps[h].size > d->memory.memoryHeaps[main_heap].size))
            main_heap = (int32_t)h;
    const VkMemoryPropertyFlags host = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
    const VkMemoryPropertyFlags unified[] = {VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT | host};
    const VkMemoryPropertyFlags local[] = {VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT, 0};
    const VkMemoryPropertyFlags upload[] = {host};
    const VkMemoryPropertyFlags readback[] = {host | VK_MEMORY_PROPERTY_HOST_CACHED_BIT, host};
    d->unified_type = main_heap >= 0 ? memory_type(d, ~0u, unified, 1, main_heap) : -1;
    d->device_type = memory_type(d, ~0u, local, 2, -1);
    d->upload_type = memory_type(d, ~0u, upload, 1, -1);
    d->readback_type = memory_type(d, ~0u, readback, 2, -1);
    if (d->unified_type < 0 && (d->device_type < 0 || d->upload_type < 0 || d->readback_type < 0))
        return tsr_error(TESSERA_ERROR_UNSUPPORTED, "the vulkan device (%s) has no host-visible coherent memory",
                         d->base.description);
    return 0;
}

typedef enum { PURPOSE_STORAGE, PURPOSE_UPLOAD, PURPOSE_READBACK } purpose;

static vk_buffer *create_buffer(tsr_vk_device *d, size_t size, purpose why) {
    size = align4(size ? size : 4); /* Vulkan forbids empty buffers; kernels read 4-byte words */
    if (size > d->max_allocation) {
        tsr_error(TESSERA_ERROR_OUT_OF_MEMORY, "the vulkan device (%s): a buffer of %zu bytes exceeds its largest "
                  "allocation (%llu bytes)", d->base.description, size, (unsigned long long)d->max_allocation);
        return NULL;
    }
    vk_buffer *b = tsr_calloc(d->base.alloc, 1, sizeof *b);
    if (!b) return NULL;
    b->size = size;
    b->id = ++d->next_id;
    VkBufferUsageFlags usage = VK_BUFFER_USAGE_TRANSFER_DST_BIT; /* a read back's staging */
    if (why == PURPOSE_UPLOAD) usage = VK_BUFFER_USAGE_TRANSFER_SRC_BIT;
    if (why == PURPOSE_STORAGE)
        usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
                VK_BUFFER_USAGE_TRANSFER_DST_BIT;
    VkBufferCreateInfo info = {.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO, .size = size, .usage = usage,
                               .sharingMode = VK_SHARING_MODE_EXCLUSIVE};
    VkResult r = d->vk.vkCreateBuffer(d->device, &info, NULL, &b->buffer);
    const char *call = "vkCreateBuffer";
    if (r == VK_SUCCESS) {
        VkMemoryRequirements needs;
        d->vk.vkGetBufferMemoryRequirements(d->device, b->buffer, &needs);
        int32_t type = why == PURPOSE_UPLOAD ? d->upload_type : why == PURPOSE_READBACK ? d->readback_type
                       : d->unified_type >= 0 ? d->unified_type : d->device_type;
        /* The buffer's own requirements may rule the chosen type out: any host-visible type then. */
        if (type < 0 || !(needs.memoryTypeBits >> type & 1)) {
            const VkMemoryPropertyFlags host[] = {VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT |
                                                  VK_MEMORY_PROPERTY_HOST_COHERENT_BIT};
            const VkMemoryPropertyFlags any[] = {0};
            type = why == PURPOSE_STORAGE && d->unified_type < 0 ? memory_type(d, needs.memoryTypeBits, any, 1, -1)
                                                                 : memory_type(d, needs.memoryTypeBits, host, 1, -1);
        }
        VkMemoryAllocateInfo alloc = {.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO, .allocationSize = needs.size,
                                      .memoryTypeIndex = type < 0 ? 0 : (uint32_t)type};
        call = "vkAllocateMemory";
        r = type < 0 ? VK_ERROR_OUT_OF_DEVICE_MEMORY : d->vk.vkAllocateMemory(d->device, &alloc, NULL, &b->memory);
        if (r == VK_SUCCESS) {
            call = "vkBindBufferMemory";
            r = d->vk.vkBindBufferMemory(d->device, b->buffer, b->memory, 0);
        }
        bool host_visible = why != PURPOSE_STORAGE || d->unified_type >= 0;
        if (r == VK_SUCCESS && host_visible) {
            call = "vkMapMemory";
            r = d->vk.vkMapMemory(d->device, b->memory, 0, VK_WHOLE_SIZE, 0, &b->mapped);
        }
    }
    if (r != VK_SUCCESS) {
        tsr_error(TESSERA_ERROR_DEVICE, "the vulkan device (%s): %s for a buffer of %zu bytes failed with %s",
                  d->base.description, call, size, tsr_vk_result_name(r));
        if (b->memory) d->vk.vkFreeMemory(d->device, b->memory, NULL);
        if (b->buffer) d->vk.vkDestroyBuffer(d->device, b->buffer, NULL);
        tsr_free(d->base.alloc, b);
        return NULL;
    }
    if (why == PURPOSE_STORAGE) {
        b->next = d->buffers;
        if (d->buffers) d->buffers->prev = b;
        d->buffers = b;
    }
    return b;
}

static void destroy_buffer(tsr_vk_device *d, vk_buffer *b) {
    if (b->mapped) d->vk.vkUnmapMemory(d->device, b->memory);
    d->vk.vkDestroyBuffer(d->device, b->buffer, NULL);
    d->vk.vkFreeMemory(d->device, b->memory, NULL);
    tsr_free(d->base.alloc, b);
}

/* Copies between a staging buffer and b in the command stream, then runs it and waits. */
static int staged_copy(tsr_vk_device *d, vk_buffer *from, size_t from_offset, vk_buffer *to, size_t to_offset,
                       size_t size, vk_buffer *device_side, size_t device_offset, uint8_t access) {
    int rc = tsr_vk_begin(d);
    if (rc) return rc;
    uint64_t begin = device_offset, end = device_offset + align4(size);
    if (tsr_vk_hazard(d, device_side, begin, end, access)) tsr_vk_barrier(d);
    VkBufferCopy region = {.srcOffset = from_offset, .dstOffset = to_offset, .size = size};
    d->vk.vkCmdCopyBuffer(d->commands, from->buffer, to->buffer, 1, &region);
    tsr_vk_note(d, device_side, begin, end, access);
    return tsr_vk_submit_and_wait(d);
}

void tsr_vk_use_staging(tsr_device *base) {
    tsr_vk_device *d = (tsr_vk_device *)base;
    d->unified_type = -1;
    d->counters.unified_memory = false;
}

void *tsr_vk_allocate(tsr_device *base, size_t size) {
    tsr_vk_device *d = (tsr_vk_device *)base;
    vk_buffer *b = create_buffer(d, size, PURPOSE_STORAGE);
    if (!b) return NULL;
    if (b->mapped) {
        memset(b->mapped, 0, b->size); /* fresh memory holds whatever was there before */
        return b;
    }
    if (tsr_vk_begin(d) == 0) {
        d->vk.vkCmdFillBuffer(d->commands, b->buffer, 0, VK_WHOLE_SIZE, 0);
        tsr_vk_note(d, b, 0, b->size, TSR_ACCESS_WRITE);
        return b;
    }
    tsr_vk_release(base, b);
    return NULL;
}

void tsr_vk_release(tsr_device *base, void *buffer) {
    tsr_vk_device *d = (tsr_vk_device *)base;
    vk_buffer *b = buffer;
    if (!b) return;
    /* A pending command may still read it: run them first (a failure is the device's, seen by the next op). */
    if (tsr_vk_in_use(d, b)) (void)tsr_vk_submit_and_wait(d);
    tsr_vk_forget_sets(d, b->id);
    if (b->prev) b->prev->next = b->next;
    else d->buffers = b->next;
    if (b->next) b->next->prev = b->prev;
    destroy_buffer(d, b);
}

void tsr_vk_free_buffers(tsr_vk_device *d) {
    while (d->buffers) {
        vk_buffer *b = d->buffers;
        d->buffers = b->next;
        destroy_buffer(d, b);
    }
}

static int check_range(const vk_buffer *b, size_t offset, size_t size, const char *what) {
    if (!b || offset > b->size || size > b->size - offset)
        return tsr_error(TESSERA_ERROR_INVALID_ARGUMENT, "the vulkan device: %s of %zu bytes at offset %zu overruns a "
                         "buffer of %zu bytes", what, size, offset, b ? b->size : 0);
    return 0;
}

int tsr_vk_upload(tsr_device *base, void *buffer, size_t offset, const void *src, size_t size) {
    tsr_vk_device *d = (tsr_vk_device *)base;
    vk_buffer *b = buffer;
    int rc = tsr_vk_check_messages(d);
    if (rc || (rc = check_range(b, offset, size, "an upload"))) return rc;
    if (size == 0) return 0;
    /* Commands recorded before this upload must see the old bytes: run them first. */
    if (tsr_vk_in_use(d, b) && (rc = tsr_vk_submit_and_wait(d))) return rc;
    if (b->mapped) {
        memcpy((char *)b->mapped + offset, src, size);
        return 0;
    }
    /* vkCmdCopyBuffer copies whole words only where offsets are aligned: copy the words around the bytes. */
    size_t first = offset & ~(size_t)3, span = align4(offset + size) - first;
    vk_buffer *staging = create_buffer(d, span, PURPOSE_UPLOAD);
    if (!staging) return TESSERA_ERROR_DEVICE;
    if (first != offset || span != size) {
        if ((rc = staged_copy(d, b, first, staging, 0, span, b, first, TSR_ACCESS_READ))) goto done;
    }
    memcpy((char *)staging->mapped + (offset - first), src, size);
    rc = staged_copy(d, staging, 0, b, first, span, b, first, TSR_ACCESS_WRITE);
done:
    destroy_buffer(d, staging);
    return rc;
}

int tsr_vk_read_back(tsr_device *base, const void *buffer, size_t offset, void *dst, size_t size) {
    tsr_vk_device *d = (tsr_vk_device *)base;
    vk_buffer *b = (vk_buffer *)buffer;
    int rc = tsr_vk_check_messages(d);
    if (rc || (rc = check_range(b, offset, size, "a read back"))) return rc;
    if (size == 0) return 0;
    if (b->mapped) {
        if (tsr_vk_in_use(d, b) && (rc = tsr_vk_submit_and_wait(d))) return rc;
        if ((rc = tsr_vk_check_messages(d))) return rc;
        memcpy(dst, (const char *)b->mapped + offset, size);
        return 0;
    }
    size_t first = offset & ~(size_t)3, span = align4(offset + size) - first;
    vk_buffer *staging = create_buffer(d, span, PURPOSE_READBACK);
    if (!staging) return TESSERA_ERROR_DEVICE;
    rc = staged_copy(d, b, first, staging, 0, span, b, first, TSR_ACCESS_READ);
    if (!rc) rc = tsr_vk_check_messages(d);
    if (!rc) memcpy(dst, (const char *)staging->mapped + (offset - first), size);
    destroy_buffer(d, staging);
    return rc;
}

void *tsr_vk_adopt_host(tsr_device *base, const void *host, size_t size) {
    vk_buffer *b = tsr_vk_allocate(base, size);
    if (b && size && tsr_vk_upload(base, b, 0, host, size)) {
        tsr_vk_release(base, b);
        return NULL;
    }
    return b;
}

/* The GPU runs asynchronously: the VM goes through upload and read_back. */
void *tsr_vk_host_pointer(tsr_device *base, void *buffer, size_t offset) {
    (void)base, (void)buffer, (void)offset;
    return NULL;
}
