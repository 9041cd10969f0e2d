/* The Metal device (Apple platforms; CMake option TESSERA_METAL, on by default there): the kernels of
 * backend `metal` (codegen/metal), one .metal source per kernel, compiled by the system's Metal
 * compiler at load. It cannot be built or run on Linux; everything it shares with the other GPU
 * devices (the arguments' layout, the plan and its offsets, launch grids) is exercised through them
 * (docs/native.md, "Metal").
 *
 * Memory: one MTLBuffer per allocation in shared storage (Apple GPUs have unified memory), so an
 * upload or a read back is a memcpy once no command in flight uses the buffer.
 * Commands: launches are encoded, in order, into one compute encoder of one command buffer; Metal
 * tracks hazards between dispatches of a serial encoder on tracked buffers (the default), so no
 * barrier is written here. read_back and synchronize commit the command buffer and wait.
 * Kernel ABI (docs/format.md): [[buffer(i)]] for each binding, then the i32 scalars with setBytes at
 * [[buffer(n_bindings)]]; the grid is threadgroups of the kernel's workgroup_size.
 * Objects live in the C structs as retained pointers (__bridge_retained) and are released in
 * destroy; the file is compiled with ARC. */
#import <Foundation/Foundation.h>
#import <Metal/Metal.h>

#include <stdio.h>
#include <string.h>

#include "device.h"
#include "files.h"

#if !__has_feature(objc_arc)
#error "metal_device.m is compiled with -fobjc-arc"
#endif

#define METAL_BACKEND "metal"
#define METAL_MAX_BINDINGS 31 /* Metal's buffer argument table has 31 entries, one of them the scalars' */

typedef struct metal_kernel {
    void *pipeline; /* id<MTLComputePipelineState>, retained */
    MTLSize threads;
    int32_t n_scalars;
} metal_kernel;

typedef struct metal_device {
    tsr_device base;
    void *device;         /* id<MTLDevice> */
    void *queue;          /* id<MTLCommandQueue> */
    void *commands;       /* id<MTLCommandBuffer> being encoded, or NULL */
    void *encoder;        /* id<MTLComputeCommandEncoder> of `commands`, or NULL */
    metal_kernel *kernels; /* by the executable's kernel index; pipeline NULL for other backends' kernels */
    int32_t n_kernels;
    const char *features[2];
} metal_device;

const char *const tsr_metal_backends[] = {METAL_BACKEND, NULL};

static id<MTLDevice> device_of(metal_device *m) { return (__bridge id<MTLDevice>)m->device; }

/* Ends and commits what is encoded, then waits for it; the error names the GPU's failure. */
static int metal_flush(metal_device *m) {
    if (!m->commands) return 0;
    id<MTLComputeCommandEncoder> encoder = (__bridge_transfer id<MTLComputeCommandEncoder>)m->encoder;
    id<MTLCommandBuffer> commands = (__bridge_transfer id<MTLCommandBuffer>)m->commands;
    m->encoder = m->commands = NULL;
    [encoder endEncoding];
    [commands commit];
    [commands waitUntilCompleted];
    if (commands.status == MTLCommandBufferStatusError)
        return tsr_error(TESSERA_ERROR_DEVICE, "the metal device (%s) failed running the kernels: %s",
                         m->base.description, commands.error.localizedDescription.UTF8String);
    return 0;
}

static int compile_kernel(metal_device *m, const tsr_kernel *k, const char *source, size_t size, metal_kernel *out) {
    if (k->n_bindings + (k->n_scalars > 0) > METAL_MAX_BINDINGS)
        return tsr_error(TESSERA_ERROR_UNSUPPORTED, "kernel '%s' binds %d buffers; the metal device takes at most %d",
                         k->name, (int)k->n_bindings, METAL_MAX_BINDINGS - 1);
    @autoreleasepool {
        NSString *text = [[NSString alloc] initWithBytes:source length:size encoding:NSUTF8StringEncoding];
        NSError *error = nil;
        MTLCompileOptions *options = [MTLCompileOptions new];
        id<MTLLibrary> library = text ? [device_of(m) newLibraryWithSource:text options:options error:&error] : nil;
        if (!library)
            return tsr_error(TESSERA_ERROR_UNSUPPORTED, "kernel '%s' does not compile for the metal device (%s): %s",
                             k->name, m->base.description,
                             error ? error.localizedDescription.UTF8String : "the source is not UTF-8");
        id<MTLFunction> function = [library newFunctionWithName:@(k->entry_point)];
        if (!function)
            return tsr_error(TESSERA_ERROR_FORMAT, "kernel '%s': its module has no function '%s'", k->name,
                             k->entry_point);
        id<MTLComputePipelineState> pipeline = [device_of(m) newComputePipelineStateWithFunction:function error:&error];
        if (!pipeline)
            return tsr_error(TESSERA_ERROR_UNSUPPORTED, "kernel '%s' makes no pipeline on the metal device (%s): %s",
                             k->name, m->base.description, error.localizedDescription.UTF8String);
        NSUInteger threads = (NSUInteger)k->workgroup_size[0] * k->workgroup_size[1] * k->workgroup_size[2];
        if (threads > pipeline.maxTotalThreadsPerThreadgroup)
            return tsr_error(TESSERA_ERROR_UNSUPPORTED, "kernel '%s' runs %lu threads per workgroup; the metal device "
                             "(%s) runs it with at most %lu", k->name, (unsigned long)threads, m->base.description,
                             (unsigned long)pipeline.maxTotalThreadsPerThreadgroup);
        out->pipeline = (__bridge_retained void *)pipeline;
        out->n_scalars = k->n_scalars;
        out->threads = MTLSizeMake((NSUInteger)k->workgroup_size[0], (NSUInteger)k->workgroup_size[1],
                                   (NSUInteger)k->workgroup_size[2]);
    }
    return 0;
}

/* Compiles the kernels of backend `metal`; a split build's kernels of other devices are left alone. */
static int metal_load_kernels(tsr_device *d, const tsr_executable *exe, const char *dir) {
    metal_device *m = (metal_device *)d;
    m->kernels = tsr_calloc(d->alloc, (size_t)exe->n_kernels + 1, sizeof *m->kernels);
    if (!m->kernels) return TESSERA_ERROR_OUT_OF_MEMORY;
    m->n_kernels = exe->n_kernels;
    for (int32_t i = 0; i < exe->n_kernels; i++) {
        const tsr_kernel *k = &exe->kernels[i];
        if (strcmp(k->backend, METAL_BACKEND) != 0) continue;
        const tsr_module *module = &exe->modules[k->module];
        char *source = NULL;
        size_t size;
        int rc = tsr_read_module(d->alloc, dir, module, &source, &size);
        if (!rc) rc = compile_kernel(m, k, source, size, &m->kernels[i]);
        tsr_free(d->alloc, source);
        if (rc) return rc;
    }
    return 0;
}

static void *metal_allocate(tsr_device *d, size_t size) {
    metal_device *m = (metal_device *)d;
    id<MTLBuffer> buffer = [device_of(m) newBufferWithLength:(size ? size : 4) options:MTLResourceStorageModeShared];
    if (!buffer) {
        tsr_error(TESSERA_ERROR_OUT_OF_MEMORY, "the metal device (%s) cannot allocate %zu bytes", d->description, size);
        return NULL;
    }
    memset(buffer.contents, 0, buffer.length); /* device memory starts zeroed (device.h) */
    return (__bridge_retained void *)buffer;
}

static void metal_release(tsr_device *d, void *base) {
    metal_device *m = (metal_device *)d;
    if (!base) return;
    (void)metal_flush(m); /* nothing in flight may still use it */
    id<MTLBuffer> buffer = (__bridge_transfer id<MTLBuffer>)base;
    (void)buffer; /* released by ARC here */
}

static int metal_upload(tsr_device *d, void *base, size_t offset, const void *src, size_t size) {
    metal_device *m = (metal_device *)d;
    int rc = metal_flush(m); /* the launches encoded so far read the bytes as they were */
    if (rc) return rc;
    id<MTLBuffer> buffer = (__bridge id<MTLBuffer>)base;
    if (size) memcpy((char *)buffer.contents + offset, src, size);
    return 0;
}

static void *metal_adopt_host(tsr_device *d, const void *host, size_t size) {
    void *base = metal_allocate(d, size);
    if (base && metal_upload(d, base, 0, host, size)) {
        metal_release(d, base);
        return NULL;
    }
    return base;
}

static int metal_read_back(tsr_device *d, const void *base, size_t offset, void *dst, size_t size) {
    metal_device *m = (metal_device *)d;
    int rc = metal_flush(m);
    if (rc) return rc;
    id<MTLBuffer> buffer = (__bridge id<MTLBuffer>)(void *)base;
    if (size) memcpy(dst, (const char *)buffer.contents + offset, size);
    return 0;
}

/* Launches run asynchronously: the host must not touch their buffers, so no host pointer. */
static void *metal_host_pointer(tsr_device *d, void *base, size_t offset) {
    (void)d;
    (void)base;
    (void)offset;
    return NULL;
}

static int metal_launch(tsr_device *d, int32_t kernel, int32_t n_bindings, void *const *bases, const size_t *offsets,
                        const size_t *sizes, const int32_t *scalars, const int32_t grid[3]) {
    (void)sizes; /* Metal binds a buffer from an offset to its end */
    metal_device *m = (metal_device *)d;
    const metal_kernel *k = &m->kernels[kernel];
    if (!m->commands) {
        id<MTLCommandBuffer> commands = [(__bridge id<MTLCommandQueue>)m->queue commandBuffer];
        id<MTLComputeCommandEncoder> encoder = [commands computeCommandEncoderWithDispatchType:MTLDispatchTypeSerial];
        if (!commands || !encoder)
            return tsr_error(TESSERA_ERROR_DEVICE, "the metal device (%s) gives no command buffer", d->description);
        m->commands = (__bridge_retained void *)commands;
        m->encoder = (__bridge_retained void *)encoder;
    }
    id<MTLComputeCommandEncoder> encoder = (__bridge id<MTLComputeCommandEncoder>)m->encoder;
    [encoder setComputePipelineState:(__bridge id<MTLComputePipelineState>)k->pipeline];
    for (int32_t i = 0; i < n_bindings; i++)
        [encoder setBuffer:(__bridge id<MTLBuffer>)bases[i] offset:offsets[i] atIndex:(NSUInteger)i];
    if (k->n_scalars > 0)
        [encoder setBytes:scalars length:(NSUInteger)k->n_scalars * sizeof(int32_t) atIndex:(NSUInteger)n_bindings];
    [encoder dispatchThreadgroups:MTLSizeMake((NSUInteger)grid[0], (NSUInteger)grid[1], (NSUInteger)grid[2])
            threadsPerThreadgroup:k->threads];
    return 0;
}

static int metal_synchronize(tsr_device *d) { return metal_flush((metal_device *)d); }

static void metal_destroy(tsr_device *d) {
    metal_device *m = (metal_device *)d;
    (void)metal_flush(m);
    for (int32_t i = 0; m->kernels && i < m->n_kernels; i++)
        if (m->kernels[i].pipeline) (void)(__bridge_transfer id<MTLComputePipelineState>)m->kernels[i].pipeline;
    tsr_free(d->alloc, m->kernels);
    if (m->queue) (void)(__bridge_transfer id<MTLCommandQueue>)m->queue;
    if (m->device) (void)(__bridge_transfer id<MTLDevice>)m->device;
    tsr_free(d->alloc, m);
}

static const tsr_device_ops METAL_OPS = {
    .name = "metal",
    .load_kernels = metal_load_kernels,
    .allocate = metal_allocate,
    .release = metal_release,
    .adopt_host = metal_adopt_host,
    .upload = metal_upload,
    .read_back = metal_read_back,
    .host_pointer = metal_host_pointer,
    .launch = metal_launch,
    .synchronize = metal_synchronize,
    .destroy = metal_destroy,
};

/* The system's GPU, or on a Mac with several the one options->index names (MTLCopyAllDevices order). */
static id<MTLDevice> pick_device(int32_t index) {
#if TARGET_OS_OSX
    NSArray<id<MTLDevice>> *all = MTLCopyAllDevices();
    if (index >= 0) return (NSUInteger)index < all.count ? all[(NSUInteger)index] : nil;
#else
    if (index > 0) return nil;
#endif
    return MTLCreateSystemDefaultDevice();
}

int tsr_metal_device_new(tsr_alloc *a, const tsr_device_options *options, tsr_device **out) {
    *out = NULL;
    id<MTLDevice> device = pick_device(options->index);
    if (!device && options->index >= 0)
        return tsr_error(TESSERA_ERROR_UNSUPPORTED, "the metal device %d is not on this machine", (int)options->index);
    if (!device) return tsr_error(TESSERA_ERROR_UNSUPPORTED, "this machine has no Metal device");
    metal_device *m = tsr_calloc(a, 1, sizeof *m);
    if (!m) return TESSERA_ERROR_OUT_OF_MEMORY;
    m->base.ops = &METAL_OPS;
    m->base.alloc = a;
    snprintf(m->base.description, sizeof m->base.description, "%s", device.name.UTF8String);
    /* Vector loads and stores need 256-byte offsets (codegen/metal); threadgroup counts are 32-bit. */
    m->base.storage_alignment = 256;
    m->base.max_workgroups = INT32_MAX;
    m->features[0] = "shader-f16"; /* every Metal GPU computes in half */
    m->base.features = m->features;
    m->base.max_invocations = (int64_t)device.maxThreadsPerThreadgroup.width;
    m->base.max_storage_buffers = METAL_MAX_BINDINGS - 1;
    m->base.max_workgroup_storage = (int64_t)device.maxThreadgroupMemoryLength;
    m->base.max_buffer_size = m->base.max_binding_size = (int64_t)device.maxBufferLength;
    id<MTLCommandQueue> queue = [device newCommandQueue];
    if (!queue) {
        tsr_free(a, m);
        return tsr_error(TESSERA_ERROR_DEVICE, "the metal device (%s) gives no command queue", device.name.UTF8String);
    }
    m->device = (__bridge_retained void *)device;
    m->queue = (__bridge_retained void *)queue;
    *out = &m->base;
    return 0;
}
