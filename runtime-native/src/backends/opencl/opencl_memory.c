/* The OpenCL device's memory: a base is a cl_mem, zeroed when made; a binding that views part of a buffer
 * is a sub-buffer, made once per (buffer, offset, size) and kept in an open-addressing table, so a steady
 * loop of launches makes none. */
#include <stdio.h>
#include <string.h>

#include "opencl_device.h"

/* ---- sub-buffers ---------------------------------------------------------------------------- */

static size_t view_slot(const tsr_opencl_device *d, cl_mem parent, size_t offset, size_t size) {
    uint64_t h = (uint64_t)(uintptr_t)parent * 0x9E3779B97F4A7C15ull;
    h ^= ((uint64_t)offset + 0x632BE59BD9B4E019ull) * 0xBF58476D1CE4E5B9ull;
    h ^= ((uint64_t)size + 0x2545F4914F6CDD1Dull) * 0x94D049BB133111EBull;
    h ^= h >> 31;
    size_t mask = d->view_capacity - 1, i = (size_t)h & mask;
    while (d->views[i].parent &&
           !(d->views[i].parent == parent && d->views[i].offset == offset && d->views[i].size == size))
        i = (i + 1) & mask;
    return i;
}

/* Rehashes the views into a table of `capacity` slots, leaving out those of `dropped` (released). */
static int rehash_views(tsr_opencl_device *d, size_t capacity, cl_mem dropped) {
    tsr_cl_view *old = d->views;
    size_t old_capacity = d->view_capacity;
    tsr_cl_view *fresh = tsr_calloc(d->base.alloc, capacity, sizeof *fresh);
    if (!fresh) return TESSERA_ERROR_OUT_OF_MEMORY;
    d->views = fresh;
    d->view_capacity = capacity;
    d->n_views = 0;
    for (size_t i = 0; i < old_capacity; i++) {
        tsr_cl_view *v = &old[i];
        if (!v->parent) continue;
        if (v->parent == dropped) {
            if (v->memory != v->parent) d->cl.ReleaseMemObject(v->memory);
            continue;
        }
        d->views[view_slot(d, v->parent, v->offset, v->size)] = *v;
        d->n_views++;
    }
    tsr_free(d->base.alloc, old);
    return 0;
}

int tsr_opencl_view_memory(tsr_opencl_device *d, cl_mem parent, size_t offset, size_t size, cl_mem *out) {
    tsr_cl_view *v = &d->views[view_slot(d, parent, offset, size)];
    if (v->parent) {
        *out = v->memory;
        return 0;
    }
    size_t whole = 0;
    cl_int err = d->cl.GetMemObjectInfo(parent, CL_MEM_SIZE, sizeof whole, &whole, NULL);
    if (err != CL_SUCCESS) return tsr_opencl_fail(d, "clGetMemObjectInfo", err, "(a binding's buffer)");
    cl_mem memory = parent;
    if (size && (offset > whole || size > whole - offset))
        return tsr_error(TESSERA_ERROR_RUNTIME_CHECK, "the opencl device: a binding of %zu bytes at offset %zu "
                         "overruns its buffer of %zu bytes", size, offset, whole);
    /* An empty tensor's binding is the buffer itself: the kernel touches none of it, and OpenCL has no empty
     * sub-buffer. */
    if (size && !(offset == 0 && size == whole)) {
        if (offset % d->base_align)
            return tsr_error(TESSERA_ERROR_RUNTIME_CHECK, "the opencl device (%s): a binding at offset %zu is not a "
                             "multiple of the device's %llu-byte base address alignment (recompile the model for this "
                             "device)", d->device_name, offset, (unsigned long long)d->base_align);
        cl_buffer_region region = {offset, size};
        memory = d->cl.CreateSubBuffer(parent, CL_MEM_READ_WRITE, CL_BUFFER_CREATE_TYPE_REGION, &region, &err);
        if (err != CL_SUCCESS) return tsr_opencl_fail(d, "clCreateSubBuffer", err, "(a binding's view of a buffer)");
        d->stats.sub_buffers++;
    }
    /* At most half full, so that probes stay short. */
    if (2 * (d->n_views + 1) > d->view_capacity) {
        int rc = rehash_views(d, d->view_capacity * 2, NULL);
        if (rc) {
            if (memory != parent) d->cl.ReleaseMemObject(memory);
            return rc;
        }
    }
    d->views[view_slot(d, parent, offset, size)] = (tsr_cl_view){parent, memory, offset, size};
    d->n_views++;
    *out = memory;
    return 0;
}

/* ---- memory --------------------------------------------------------------------------------- */

void *tsr_opencl_allocate(tsr_device *base, size_t size) {
    tsr_opencl_device *d = (tsr_opencl_device *)base;
    size_t bytes = size ? size : 4;
    cl_int err;
    cl_mem memory = d->cl.CreateBuffer(d->context, CL_MEM_READ_WRITE, bytes, NULL, &err);
    if (err != CL_SUCCESS) {
        char what[64];
        snprintf(what, sizeof what, "(a buffer of %zu bytes)", bytes);
        tsr_opencl_fail(d, "clCreateBuffer", err, what);
        return NULL;
    }
    /* Fresh memory reads as zeros on every device (the storage layer assumes it); OpenCL promises nothing. */
    const cl_uchar zero = 0;
    err = d->cl.EnqueueFillBuffer(d->queue, memory, &zero, 1, 0, bytes, 0, NULL, NULL);
    if (err != CL_SUCCESS) {
        d->cl.ReleaseMemObject(memory);
        tsr_opencl_fail(d, "clEnqueueFillBuffer", err, "(zeroing a new buffer)");
        return NULL;
    }
    return memory;
}

void tsr_opencl_release(tsr_device *base, void *memory) {
    tsr_opencl_device *d = (tsr_opencl_device *)base;
    if (!memory) return;
    for (size_t i = 0; i < d->n_adopted; i++)
        if (d->adopted[i] == memory) {
            d->adopted[i] = d->adopted[--d->n_adopted];
            break;
        }
    bool viewed = false;
    for (size_t i = 0; i < d->view_capacity && !viewed; i++) viewed = d->views[i].parent == memory;
    /* Releases happen when a model is freed, not per call: a rehash per released buffer is cheap enough. If
     * it cannot allocate, the sub-buffers stay in the table (and are released with the device). */
    if (!viewed || rehash_views(d, d->view_capacity, memory) == 0) d->cl.ReleaseMemObject(memory);
}

static cl_mem copy_of_host(tsr_opencl_device *d, const void *host, size_t size) {
    cl_int err;
    /* COPY_HOST_PTR: the weights are copied when the buffer is made; the mapped shard can go afterwards. */
    cl_mem memory = d->cl.CreateBuffer(d->context, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, size, (void *)host, &err);
    if (err != CL_SUCCESS) {
        char what[64];
        snprintf(what, sizeof what, "(a weight of %zu bytes)", size);
        tsr_opencl_fail(d, "clCreateBuffer", err, what);
        return NULL;
    }
    return memory;
}

void *tsr_opencl_adopt_host(tsr_device *base, const void *host, size_t size) {
    tsr_opencl_device *d = (tsr_opencl_device *)base;
    if (d->n_adopted == d->adopted_capacity) {
        size_t capacity = d->adopted_capacity ? 2 * d->adopted_capacity : 64;
        cl_mem *grown = tsr_calloc(base->alloc, capacity, sizeof *grown);
        if (!grown) return NULL;
        if (d->n_adopted) memcpy(grown, d->adopted, d->n_adopted * sizeof *grown);
        tsr_free(base->alloc, d->adopted);
        d->adopted = grown;
        d->adopted_capacity = capacity;
    }
    cl_mem memory = size ? copy_of_host(d, host, size) : tsr_opencl_allocate(base, 0);
    if (memory) d->adopted[d->n_adopted++] = memory;
    return memory;
}

int tsr_opencl_upload(tsr_device *base, void *memory, size_t offset, const void *src, size_t size) {
    tsr_opencl_device *d = (tsr_opencl_device *)base;
    if (!size) return 0;
    /* Blocking: the caller's bytes may be reused as soon as this returns. */
    cl_int err = d->cl.EnqueueWriteBuffer(d->queue, memory, CL_TRUE, offset, size, src, 0, NULL, NULL);
    return err == CL_SUCCESS ? 0 : tsr_opencl_fail(d, "clEnqueueWriteBuffer", err, NULL);
}

int tsr_opencl_read_back(tsr_device *base, const void *memory, size_t offset, void *dst, size_t size) {
    tsr_opencl_device *d = (tsr_opencl_device *)base;
    if (!size) return 0;
    /* Blocking, and after every launch before it on the in-order queue. */
    cl_int err = d->cl.EnqueueReadBuffer(d->queue, (cl_mem)memory, CL_TRUE, offset, size, dst, 0, NULL, NULL);
    return err == CL_SUCCESS ? 0 : tsr_opencl_fail(d, "clEnqueueReadBuffer", err, NULL);
}

void *tsr_opencl_host_pointer(tsr_device *d, void *memory, size_t offset) {
    (void)d, (void)memory, (void)offset;
    return NULL;
}

void tsr_opencl_release_memory(tsr_opencl_device *d) {
    for (size_t i = 0; i < d->view_capacity; i++)
        if (d->views[i].parent && d->views[i].memory != d->views[i].parent) d->cl.ReleaseMemObject(d->views[i].memory);
    for (size_t i = 0; i < d->n_adopted; i++) d->cl.ReleaseMemObject(d->adopted[i]);
    tsr_free(d->base.alloc, d->views);
    tsr_free(d->base.alloc, d->adopted);
    d->views = NULL;
    d->adopted = NULL;
    d->view_capacity = d->n_views = d->n_adopted = d->adopted_capacity = 0;
}
