/* The vulkan device's command stream. Launches (and staged copies) are recorded, in call order, into
 * one command buffer; read_back and synchronize submit it with one fence and wait, so a decode step
 * is one submission. Vulkan lets a queue's commands overlap, and makes one command's writes visible
 * to a later one only through a barrier: the stream keeps the byte ranges written and read since
 * the last barrier and records one compute->compute memory barrier before a command that reads or
 * writes a range an earlier one wrote, or writes a range an earlier one read (a barrier's first
 * scope is everything earlier in submission order, across submissions too). A submission ends with
 * a barrier to the host, because a fence alone does not make device writes visible to the host.
 *
 * Descriptor sets are cached by (kernel, buffers, offsets, ranges): a static plan binds the same
 * ranges every step, so after the first step no set is allocated or written. */
#include <string.h>

#include "vulkan_device.h"

#define SETS_PER_POOL 256
#define DESCRIPTORS_PER_POOL (SETS_PER_POOL * 16)
#define MAX_CACHED_SETS 8192
#define MAX_BINDINGS 256

int tsr_vk_commands_init(tsr_vk_device *d) {
    VkCommandPoolCreateInfo pool = {.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO,
                                    .flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT,
                                    .queueFamilyIndex = d->queue_family};
    VkResult r = d->vk.vkCreateCommandPool(d->device, &pool, NULL, &d->command_pool);
    if (r != VK_SUCCESS) return tsr_vk_fail(d, r, "vkCreateCommandPool");
    VkCommandBufferAllocateInfo info = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
                                        .commandPool = d->command_pool, .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY,
                                        .commandBufferCount = 1};
    if ((r = d->vk.vkAllocateCommandBuffers(d->device, &info, &d->commands)) != VK_SUCCESS)
        return tsr_vk_fail(d, r, "vkAllocateCommandBuffers");
    VkFenceCreateInfo fence = {.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
    if ((r = d->vk.vkCreateFence(d->device, &fence, NULL, &d->fence)) != VK_SUCCESS)
        return tsr_vk_fail(d, r, "vkCreateFence");
    return 0;
}

static void free_set(tsr_vk_device *d, vk_set_entry *e) {
    d->vk.vkFreeDescriptorSets(d->device, d->pools[e->pool], 1, &e->set);
    tsr_free(d->base.alloc, e);
    d->n_sets--;
}

static void forget_all_sets(tsr_vk_device *d) {
    for (size_t i = 0; i < VK_SET_BUCKETS; i++)
        while (d->sets[i]) {
            vk_set_entry *e = d->sets[i];
            d->sets[i] = e->next;
            free_set(d, e);
        }
}

void tsr_vk_commands_free(tsr_vk_device *d) {
    if (!d->device) return;
    if (d->pools) forget_all_sets(d);
    for (int32_t i = 0; i < d->n_pools; i++) d->vk.vkDestroyDescriptorPool(d->device, d->pools[i], NULL);
    tsr_free(d->base.alloc, d->pools);
    d->pools = NULL;
    d->n_pools = 0;
    if (d->fence) d->vk.vkDestroyFence(d->device, d->fence, NULL);
    if (d->command_pool) d->vk.vkDestroyCommandPool(d->device, d->command_pool, NULL); /* frees its buffer */
    d->fence = VK_NULL_HANDLE;
    d->command_pool = VK_NULL_HANDLE;
}

int tsr_vk_begin(tsr_vk_device *d) {
    if (d->recording) return 0;
    VkCommandBufferBeginInfo info = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
                                     .flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT};
    VkResult r = d->vk.vkBeginCommandBuffer(d->commands, &info);
    if (r != VK_SUCCESS) return tsr_vk_fail(d, r, "vkBeginCommandBuffer");
    d->recording = true;
    d->bound_pipeline = VK_NULL_HANDLE;
    return 0;
}

bool tsr_vk_in_use(const tsr_vk_device *d, const vk_buffer *b) { return d->recording && b->used_in == d->serial; }

static bool overlaps(const vk_range *ranges, int32_t n, uint64_t id, uint64_t begin, uint64_t end) {
    for (int32_t i = 0; i < n; i++)
        if (ranges[i].id == id && ranges[i].begin < end && begin < ranges[i].end) return true;
    return false;
}

bool tsr_vk_hazard(const tsr_vk_device *d, const vk_buffer *b, uint64_t begin, uint64_t end, uint8_t access) {
    if (overlaps(d->written, d->n_written, b->id, begin, end)) return true; /* read after write, write after write */
    return (access & TSR_ACCESS_WRITE) && overlaps(d->read, d->n_read, b->id, begin, end); /* write after read */
}

void tsr_vk_barrier(tsr_vk_device *d) {
    const VkPipelineStageFlags stages = VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT;
    VkMemoryBarrier barrier = {.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
                               .srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT,
                               .dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT |
                                                VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT};
    d->vk.vkCmdPipelineBarrier(d->commands, stages, stages, 0, 1, &barrier, 0, NULL, 0, NULL);
    d->n_written = d->n_read = 0;
    d->counters.barriers++;
}

static void add_range(vk_range *ranges, int32_t *n, uint64_t id, uint64_t begin, uint64_t end) {
    /* Extend a range of the same buffer that touches this one; else a new entry. */
    for (int32_t i = 0; i < *n; i++)
        if (ranges[i].id == id && ranges[i].begin <= end && begin <= ranges[i].end) {
            if (begin < ranges[i].begin) ranges[i].begin = begin;
            if (end > ranges[i].end) ranges[i].end = end;
            return;
        }
    ranges[(*n)++] = (vk_range){id, begin, end};
}

void tsr_vk_note(tsr_vk_device *d, vk_buffer *b, uint64_t begin, uint64_t end, uint8_t access) {
    b->used_in = d->serial;
    /* Lists full: a barrier now orders everything so far (never wrong, rarely needed). */
    if (d->n_written >= VK_MAX_RANGES || d->n_read >= VK_MAX_RANGES) tsr_vk_barrier(d);
    if (access & TSR_ACCESS_WRITE) add_range(d->written, &d->n_written, b->id, begin, end);
    if (access & TSR_ACCESS_READ) add_range(d->read, &d->n_read, b->id, begin, end);
}

int tsr_vk_submit_and_wait(tsr_vk_device *d) {
    if (!d->recording) return 0;
    d->recording = false;
    VkMemoryBarrier to_host = {.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
                               .srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT,
                               .dstAccessMask = VK_ACCESS_HOST_READ_BIT};
    d->vk.vkCmdPipelineBarrier(d->commands, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
                               VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &to_host, 0, NULL, 0, NULL);
    VkResult r = d->vk.vkEndCommandBuffer(d->commands);
    const char *call = "vkEndCommandBuffer";
    if (r == VK_SUCCESS) {
        VkSubmitInfo submit = {.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO, .commandBufferCount = 1,
                               .pCommandBuffers = &d->commands};
        call = "vkQueueSubmit";
        r = d->vk.vkQueueSubmit(d->queue, 1, &submit, d->fence);
        d->counters.submits++;
        if (r == VK_SUCCESS) {
            call = "vkWaitForFences";
            r = d->vk.vkWaitForFences(d->device, 1, &d->fence, VK_TRUE, UINT64_MAX);
            VkResult reset = d->vk.vkResetFences(d->device, 1, &d->fence);
            if (r == VK_SUCCESS && reset != VK_SUCCESS) call = "vkResetFences", r = reset;
        }
    }
    d->serial++; /* what this batch touched is no longer pending, even when it failed */
    /* Nor are its writes and reads: the next command buffer starts with empty range lists, so it neither
     * scans nor orders itself after work that has finished (a profiled run submits every launch). */
    d->n_written = d->n_read = 0;
    VkResult reset = d->vk.vkResetCommandBuffer(d->commands, 0);
    if (r == VK_SUCCESS && reset != VK_SUCCESS) call = "vkResetCommandBuffer", r = reset;
    return r == VK_SUCCESS ? 0 : tsr_vk_fail(d, r, call);
}

int tsr_vk_synchronize(tsr_device *base) {
    tsr_vk_device *d = (tsr_vk_device *)base;
    int rc = tsr_vk_check_messages(d);
    if (!rc) rc = tsr_vk_submit_and_wait(d);
    if (!rc) rc = tsr_vk_check_messages(d);
    return rc;
}

static uint64_t mix(uint64_t h, uint64_t v) {
    h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    return h * 0xff51afd7ed558ccdull;
}

static int new_pool(tsr_vk_device *d) {
    if (d->n_pools == d->pools_capacity) {
        int32_t capacity = d->pools_capacity ? d->pools_capacity * 2 : 4;
        VkDescriptorPool *grown = tsr_calloc(d->base.alloc, (size_t)capacity, sizeof *grown);
        if (!grown) return TESSERA_ERROR_OUT_OF_MEMORY;
        if (d->n_pools) memcpy(grown, d->pools, (size_t)d->n_pools * sizeof *grown);
        tsr_free(d->base.alloc, d->pools);
        d->pools = grown;
        d->pools_capacity = capacity;
    }
    VkDescriptorPoolSize size = {.type = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, .descriptorCount = DESCRIPTORS_PER_POOL};
    VkDescriptorPoolCreateInfo info = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO,
                                       .flags = VK_DESCRIPTOR_POOL_CREATE_FREE_DESCRIPTOR_SET_BIT,
                                       .maxSets = SETS_PER_POOL, .poolSizeCount = 1, .pPoolSizes = &size};
    VkResult r = d->vk.vkCreateDescriptorPool(d->device, &info, NULL, &d->pools[d->n_pools]);
    if (r != VK_SUCCESS) return tsr_vk_fail(d, r, "vkCreateDescriptorPool");
    d->n_pools++;
    return 0;
}

/* A set of kernel k's layout, from the newest pool with room, else a new pool. */
static int allocate_set(tsr_vk_device *d, const vk_kernel *k, VkDescriptorSet *set, int32_t *pool) {
    for (int attempt = 0; attempt < 2; attempt++) {
        for (int32_t p = d->n_pools - 1; p >= 0; p--) {
            VkDescriptorSetAllocateInfo info = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO,
                                                .descriptorPool = d->pools[p], .descriptorSetCount = 1,
                                                .pSetLayouts = &k->set_layout};
            VkResult r = d->vk.vkAllocateDescriptorSets(d->device, &info, set);
            if (r == VK_SUCCESS) {
                *pool = p;
                d->counters.descriptor_sets++;
                return 0;
            }
            if (r != VK_ERROR_OUT_OF_POOL_MEMORY && r != VK_ERROR_FRAGMENTED_POOL)
                return tsr_vk_fail(d, r, "vkAllocateDescriptorSets");
        }
        int rc = new_pool(d);
        if (rc) return rc;
    }
    return tsr_error(TESSERA_ERROR_DEVICE, "the vulkan device: kernel '%s' needs more storage buffers than a "
                     "descriptor pool holds", k->name);
}

/* The descriptor set binding exactly these ranges to kernel `kernel`: cached, or allocated and written. */
static int descriptor_set(tsr_vk_device *d, int32_t kernel, int32_t n, vk_buffer *const *buffers,
                          const uint64_t *offsets, const uint64_t *ranges, VkDescriptorSet *out) {
    uint64_t hash = mix(0, (uint64_t)kernel);
    for (int32_t i = 0; i < n; i++) hash = mix(mix(mix(hash, buffers[i]->id), offsets[i]), ranges[i]);
    vk_set_entry **bucket = &d->sets[hash % VK_SET_BUCKETS];
    for (vk_set_entry *e = *bucket; e; e = e->next) {
        if (e->hash != hash || e->kernel != kernel || e->n != n) continue;
        bool same = true;
        for (int32_t i = 0; i < n && same; i++)
            same = e->key[i] == buffers[i]->id && e->key[n + i] == offsets[i] && e->key[2 * n + i] == ranges[i];
        if (same) {
            *out = e->set;
            return 0;
        }
    }
    /* A plan that binds new ranges every step would grow the cache without end: start it afresh, once
     * nothing pending uses its sets. */
    int rc;
    if (d->n_sets >= MAX_CACHED_SETS) {
        if ((rc = tsr_vk_submit_and_wait(d))) return rc;
        forget_all_sets(d);
    }
    const vk_kernel *k = &d->kernels[kernel];
    vk_set_entry *e = tsr_calloc(d->base.alloc, 1, sizeof *e + 3 * (size_t)(n ? n : 1) * sizeof(uint64_t));
    if (!e) return TESSERA_ERROR_OUT_OF_MEMORY;
    if ((rc = allocate_set(d, k, &e->set, &e->pool))) {
        tsr_free(d->base.alloc, e);
        return rc;
    }
    VkDescriptorBufferInfo infos[MAX_BINDINGS];
    VkWriteDescriptorSet writes[MAX_BINDINGS];
    for (int32_t i = 0; i < n; i++) {
        e->key[i] = buffers[i]->id;
        e->key[n + i] = offsets[i];
        e->key[2 * n + i] = ranges[i];
        infos[i] = (VkDescriptorBufferInfo){buffers[i]->buffer, offsets[i], ranges[i]};
        writes[i] = (VkWriteDescriptorSet){.sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET, .dstSet = e->set,
                                           .dstBinding = (uint32_t)i, .descriptorCount = 1,
                                           .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                           .pBufferInfo = &infos[i]};
    }
    if (n) {
        d->vk.vkUpdateDescriptorSets(d->device, (uint32_t)n, writes, 0, NULL);
        d->counters.descriptor_writes++;
    }
    e->hash = hash;
    e->kernel = kernel;
    e->n = n;
    e->next = *bucket;
    *bucket = e;
    d->n_sets++;
    *out = e->set;
    return 0;
}

void tsr_vk_forget_sets(tsr_vk_device *d, uint64_t id) {
    for (size_t i = 0; i < VK_SET_BUCKETS; i++)
        for (vk_set_entry **at = &d->sets[i]; *at;) {
            vk_set_entry *e = *at;
            bool names = false;
            for (int32_t j = 0; j < e->n && !names; j++) names = e->key[j] == id;
            if (!names) {
                at = &e->next;
                continue;
            }
            *at = e->next;
            free_set(d, e);
        }
}

int tsr_vk_launch(tsr_device *base, int32_t kernel, int32_t n_bindings, void *const *bases, const size_t *offsets,
                  const size_t *sizes, const int32_t *scalars, const int32_t grid[3]) {
    tsr_vk_device *d = (tsr_vk_device *)base;
    int rc = tsr_vk_check_messages(d);
    if (rc) return rc;
    if (kernel < 0 || kernel >= d->n_kernels)
        return tsr_error(TESSERA_ERROR_INVALID_ARGUMENT, "the vulkan device: no kernel %d (loaded: %d)", (int)kernel,
                         (int)d->n_kernels);
    const vk_kernel *k = &d->kernels[kernel];
    if (n_bindings != k->n_bindings)
        return tsr_error(TESSERA_ERROR_INVALID_ARGUMENT, "the vulkan device: kernel '%s' has %d bindings, given %d",
                         k->name, (int)k->n_bindings, (int)n_bindings);
    for (int i = 0; i < 3; i++) {
        if (grid[i] <= 0) return 0; /* nothing to run */
        if (grid[i] > d->base.max_workgroups)
            return tsr_error(TESSERA_ERROR_UNSUPPORTED, "the vulkan device (%s): kernel '%s': %d workgroups along %c "
                             "exceed its %lld", d->base.description, k->name, (int)grid[i], "xyz"[i],
                             (long long)d->base.max_workgroups);
    }
    vk_buffer *buffers[MAX_BINDINGS];
    uint64_t offs[MAX_BINDINGS], ranges[MAX_BINDINGS];
    for (int32_t i = 0; i < n_bindings; i++) {
        vk_buffer *b = bases[i];
        if (!b || offsets[i] >= b->size || offsets[i] % d->base.storage_alignment)
            return tsr_error(TESSERA_ERROR_INVALID_ARGUMENT, "the vulkan device: kernel '%s', binding %d: offset %zu "
                             "is past the end of its buffer (%zu bytes) or not a multiple of %llu", k->name, (int)i,
                             offsets[i], b ? b->size : 0, (unsigned long long)d->base.storage_alignment);
        uint64_t range = (sizes[i] + 3) & ~(uint64_t)3;
        if (range == 0) range = 4;
        if (range > b->size - offsets[i]) range = b->size - offsets[i];
        if ((int64_t)range > d->base.max_binding_size)
            return tsr_error(TESSERA_ERROR_UNSUPPORTED, "the vulkan device (%s): kernel '%s', binding %d: %llu bytes "
                             "exceed its maxStorageBufferRange (%lld)", d->base.description, k->name, (int)i,
                             (unsigned long long)range, (long long)d->base.max_binding_size);
        buffers[i] = b;
        offs[i] = offsets[i];
        ranges[i] = range;
    }
    if ((rc = tsr_vk_begin(d))) return rc;
    VkDescriptorSet set = VK_NULL_HANDLE;
    if ((rc = descriptor_set(d, kernel, n_bindings, buffers, offs, ranges, &set))) return rc;
    /* descriptor_set may have submitted (a full cache): begin again if so. */
    if ((rc = tsr_vk_begin(d))) return rc;
    bool barrier = false;
    for (int32_t i = 0; i < n_bindings && !barrier; i++)
        barrier = tsr_vk_hazard(d, buffers[i], offs[i], offs[i] + ranges[i], k->access[i]);
    if (barrier) tsr_vk_barrier(d);
    const VkPipelineBindPoint point = VK_PIPELINE_BIND_POINT_COMPUTE;
    if (d->bound_pipeline != k->pipeline) {
        d->vk.vkCmdBindPipeline(d->commands, point, k->pipeline);
        d->bound_pipeline = k->pipeline;
    }
    if (n_bindings) d->vk.vkCmdBindDescriptorSets(d->commands, point, k->layout, 0, 1, &set, 0, NULL);
    if (k->n_scalars)
        d->vk.vkCmdPushConstants(d->commands, k->layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, 4 * (uint32_t)k->n_scalars,
                                 scalars);
    d->vk.vkCmdDispatch(d->commands, (uint32_t)grid[0], (uint32_t)grid[1], (uint32_t)grid[2]);
    d->counters.dispatches++;
    for (int32_t i = 0; i < n_bindings; i++) tsr_vk_note(d, buffers[i], offs[i], offs[i] + ranges[i], k->access[i]);
    return 0;
}
