/* The OpenCL device's internals, shared by its modules (opencl_device.c: the device and its launches;
 * opencl_memory.c: buffers and sub-buffers; opencl_programs.c: programs built once at load, through a
 * binary cache) and read by its tests. */
#ifndef TSR_OPENCL_DEVICE_H
#define TSR_OPENCL_DEVICE_H

#include "device.h"
#include "opencl_loader.h"

/* How the programs of the last load_kernels came to be (tests and the bench read them). */
typedef struct tsr_opencl_stats {
    int32_t programs_from_source; /* compiled from OpenCL C */
    int32_t programs_from_binary; /* loaded from the binary cache */
    int32_t cache_writes;         /* binaries written to the cache */
    double build_seconds;         /* wall time of load_kernels' program builds, both kinds */
    uint64_t sub_buffers;         /* sub-buffers created so far (steady-state launches create none) */
} tsr_opencl_stats;

/* A binding's view of a buffer: (parent, offset, size) -> the cl_mem a kernel argument names, which is
 * the parent itself when the view is the whole buffer. Open addressing; a NULL parent is a free slot. */
typedef struct tsr_cl_view {
    cl_mem parent, memory;
    size_t offset, size;
} tsr_cl_view;

typedef struct tsr_opencl_device {
    tsr_device base;
    tsr_cl_api cl;
    cl_platform_id platform;
    cl_device_id device;
    cl_context context;
    cl_command_queue queue;
    char device_name[128], driver_version[64], platform_version[128];
    bool has_fp16;
    uint64_t base_align; /* bytes */
    size_t max_alloc;
    char *cache_dir;       /* NULL: no binary cache (compile_cache.c: none asked, or it cannot be made) */
    cl_program *programs;  /* one per module of the executable, NULL for a module no kernel uses */
    int32_t n_programs;
    cl_kernel *kernels; /* one per kernel */
    const tsr_kernel *kernel_records;
    int32_t n_kernels;
    /* adopt_host's copies: the storage layer treats a weight as the device's to keep (the CPU serves the
     * shard in place), so the device releases what is left of them when it is destroyed. */
    cl_mem *adopted;
    size_t n_adopted, adopted_capacity;
    tsr_cl_view *views;
    size_t n_views, view_capacity; /* capacity a power of two */
    tsr_opencl_stats stats;
} tsr_opencl_device;

/* tsr_opencl_device_new with the ICD loader looked for under `libraries` (NULL-ended) instead of the
 * system's names: tests make the device of a machine without OpenCL with a name that does not exist. */
int tsr_opencl_device_new_from(tsr_alloc *a, const tsr_device_options *options, const char *const *libraries,
                               tsr_device **out);

/* The counters of an OpenCL device; TESSERA_ERROR_INVALID_ARGUMENT for another kind of device. */
int tsr_opencl_device_stats(const tsr_device *d, tsr_opencl_stats *out);

/* opencl_programs.c: builds (or loads from the cache) the program of every module exe's kernels use and
 * creates their kernels into d->programs and d->kernels. */
int tsr_opencl_build_programs(tsr_opencl_device *d, const tsr_executable *exe, const char *dir);

/* opencl_memory.c: device.h's memory ops over cl_mem bases; the cl_mem a binding of `size` bytes of `parent`
 * from `offset` names (the buffer itself or a cached sub-buffer); and, at destroy, the release of the
 * sub-buffers and weight copies still held. */
void *tsr_opencl_allocate(tsr_device *base, size_t size);
void tsr_opencl_release(tsr_device *base, void *memory);
void *tsr_opencl_adopt_host(tsr_device *base, const void *host, size_t size);
int tsr_opencl_upload(tsr_device *base, void *memory, size_t offset, const void *src, size_t size);
int tsr_opencl_read_back(tsr_device *base, const void *memory, size_t offset, void *dst, size_t size);
void *tsr_opencl_host_pointer(tsr_device *d, void *memory, size_t offset);
int tsr_opencl_view_memory(tsr_opencl_device *d, cl_mem parent, size_t offset, size_t size, cl_mem *out);
void tsr_opencl_release_memory(tsr_opencl_device *d);

/* A TESSERA_ERROR_DEVICE naming the call and the error ("clEnqueueNDRangeKernel: CL_OUT_OF_RESOURCES"). */
int tsr_opencl_fail(const tsr_opencl_device *d, const char *call, cl_int code, const char *what);

#endif
