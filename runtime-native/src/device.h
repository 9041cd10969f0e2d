/* A device runs kernels of the backends it supports (docs/architecture.md: program, storage, devices).
 * Memory is addressed as (base, offset): on the CPU a base is host memory; a GPU backend's base
 * is its buffer handle, and the storage layer never touches bytes except through these calls. */
#ifndef TSR_DEVICE_H
#define TSR_DEVICE_H

#include "common.h"
#include "executable.h"

typedef struct tsr_device tsr_device;

typedef struct tsr_device_ops {
    const char *name;
    /* Loads the kernels of exe from its folder (checks each module's size and SHA-256), or says
     * which backend it cannot run. */
    int (*load_kernels)(tsr_device *d, const tsr_executable *exe, const char *dir);
    /* Device memory of `size` bytes, zeroed; and its release. */
    void *(*allocate)(tsr_device *d, size_t size);
    void (*release)(tsr_device *d, void *base);
    /* Memory the device may read in place (weights mapped from a shard), or a device copy of it. */
    void *(*adopt_host)(tsr_device *d, const void *host, size_t size);
    int (*upload)(tsr_device *d, void *base, size_t offset, const void *src, size_t size);
    int (*read_back)(tsr_device *d, const void *base, size_t offset, void *dst, size_t size);
    /* Host pointer to device memory when the device shares the host's memory (the CPU), else NULL. */
    void *(*host_pointer)(tsr_device *d, void *base, size_t offset);
    /* Runs kernel `kernel` over grid[0] x grid[1] x grid[2] workgroups. Binding i is sizes[i] bytes of
     * bases[i] from offsets[i] (a GPU binds exactly that range). A device that runs asynchronously only
     * records the launch: it runs by the next read_back or synchronize, in launch order. */
    int (*launch)(tsr_device *d, int32_t kernel, int32_t n_bindings, void *const *bases, const size_t *offsets,
                  const size_t *sizes, const int32_t *scalars, const int32_t grid[3]);
    int (*synchronize)(tsr_device *d);
    void (*destroy)(tsr_device *d);
    /* What load_kernels compiled and what it took from the on-disk cache (tessera_model_compile_stats);
     * NULL for a device that compiles nothing at load (the CPU). */
    void (*compile_stats)(const tsr_device *d, tessera_compile_stats *out);
} tsr_device_ops;

struct tsr_device {
    const tsr_device_ops *ops;
    tsr_alloc *alloc;
    /* What the device asks of an executable's plan (plan_checks.h), checked at load: each storage's offset
     * a multiple of `storage_alignment` bytes, at most `max_workgroups` along each grid dimension; 0 where
     * the device states none. */
    uint64_t storage_alignment;
    int64_t max_workgroups;
    /* What the device offers, checked against executable.json's required_features and required_limits
     * at load (tsr_device_check_requirements, device_table.h); NULL / 0 where it states none (the CPU).
     * `features` uses the executable's names ("shader-f16", "subgroup"), NULL-ended. */
    const char *const *features;
    int64_t max_invocations, max_storage_buffers, max_workgroup_storage, max_buffer_size, max_binding_size;
    /* What the device is, for people: "llvmpipe (LLVM 15.0.6, 256 bits)"; set by its create. */
    char description[160];
};

/* What a device is made with (tessera_model_params, checked by model.c). */
typedef struct tsr_device_options {
    int32_t n_threads;     /* host threads for the device's work, at least 1 */
    int32_t index;         /* which device of its kind ("vulkan:1" is 1); -1: the backend's own choice */
    const char *cache_dir; /* where a backend keeps compiled pipelines/programs; NULL: beside the model */
    const char *model_dir; /* the executable's folder */
} tsr_device_options;

/* The CPU device (backends/cpu): kernels from one shared object, workgroups over n_threads. */
extern const char *const tsr_cpu_backends[]; /* the kernel backends it runs, NULL-ended */
int tsr_cpu_device_new(tsr_alloc *a, const tsr_device_options *options, tsr_device **out);

/* The GPU devices, each compiled in by its CMake option (TESSERA_VULKAN, TESSERA_OPENCL, TESSERA_METAL):
 * backends/vulkan (SPIR-V kernels), backends/opencl (OpenCL C), backends/metal (MSL, Apple only). */
extern const char *const tsr_vulkan_backends[];
int tsr_vulkan_device_new(tsr_alloc *a, const tsr_device_options *options, tsr_device **out);
extern const char *const tsr_opencl_backends[];
int tsr_opencl_device_new(tsr_alloc *a, const tsr_device_options *options, tsr_device **out);
extern const char *const tsr_metal_backends[];
int tsr_metal_device_new(tsr_alloc *a, const tsr_device_options *options, tsr_device **out);

#endif
