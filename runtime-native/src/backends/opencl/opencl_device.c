/* The OpenCL device: kernels of backend `opencl` (OpenCL C 1.2, codegen/opencl), one context and one
 * in-order command queue on one device: its creation, launches and the ops table. Memory is
 * opencl_memory.c's; programs are built at load (opencl_programs.c). */
#include <stdio.h>
#include <string.h>

#include "compile_cache.h"
#include "opencl_device.h"

#define OPENCL_BACKEND "opencl"
#define MAX_PLATFORMS 16
#define MAX_DEVICES 64

const char *const tsr_opencl_backends[] = {OPENCL_BACKEND, NULL};

/* vload_half/vstore_half are core OpenCL 1.2, so f16 tensors work on every device (computed in float,
 * as codegen/opencl writes them); cl_khr_fp16 is what kernels computing in `half` ask for. */
static const char *const FEATURES_FP16[] = {"shader-f16", "cl_khr_fp16", NULL};
static const char *const FEATURES[] = {"shader-f16", NULL};

int tsr_opencl_fail(const tsr_opencl_device *d, const char *call, cl_int code, const char *what) {
    char buf[32];
    return tsr_error(TESSERA_ERROR_DEVICE, "the opencl device (%s): %s failed with %s%s%s", d->device_name, call,
                     tsr_cl_error_name(code, buf, sizeof buf), what ? " " : "", what ? what : "");
}

/* ---- launches ------------------------------------------------------------------------------- */

static int opencl_launch(tsr_device *base, int32_t kernel, int32_t n_bindings, void *const *bases,
                         const size_t *offsets, const size_t *sizes, const int32_t *scalars, const int32_t grid[3]) {
    tsr_opencl_device *d = (tsr_opencl_device *)base;
    if (kernel < 0 || kernel >= d->n_kernels || !d->kernels[kernel])
        return tsr_error(TESSERA_ERROR_RUNTIME_CHECK, "the opencl device has no kernel %d loaded", (int)kernel);
    const tsr_kernel *record = &d->kernel_records[kernel];
    if (n_bindings != record->n_bindings)
        return tsr_error(TESSERA_ERROR_RUNTIME_CHECK, "kernel '%s' is launched with %d buffers; it takes %d",
                         record->name, (int)n_bindings, (int)record->n_bindings);
    cl_kernel k = d->kernels[kernel];
    cl_int err;
    /* Arguments live on the kernel object: each launch sets all of them, so launches never see stale ones. */
    for (int32_t i = 0; i < n_bindings; i++) {
        cl_mem memory;
        int rc = tsr_opencl_view_memory(d, (cl_mem)bases[i], offsets[i], sizes[i], &memory);
        if (rc) return tsr_error_context(rc, "kernel '%s', binding %d", record->name, (int)i);
        if ((err = d->cl.SetKernelArg(k, (cl_uint)i, sizeof memory, &memory)) != CL_SUCCESS)
            return tsr_opencl_fail(d, "clSetKernelArg", err, record->name);
    }
    for (int32_t i = 0; i < record->n_scalars; i++) {
        cl_int value = scalars[i];
        if ((err = d->cl.SetKernelArg(k, (cl_uint)(n_bindings + i), sizeof value, &value)) != CL_SUCCESS)
            return tsr_opencl_fail(d, "clSetKernelArg", err, record->name);
    }
    size_t global[3], local[3];
    for (int dim = 0; dim < 3; dim++) {
        local[dim] = (size_t)record->workgroup_size[dim];
        global[dim] = (size_t)grid[dim] * local[dim];
    }
    err = d->cl.EnqueueNDRangeKernel(d->queue, k, 3, NULL, global, local, 0, NULL, NULL);
    if (err != CL_SUCCESS) {
        char what[160];
        snprintf(what, sizeof what, "(kernel '%s' over %d x %d x %d workgroups of %zu x %zu x %zu)", record->name,
                 (int)grid[0], (int)grid[1], (int)grid[2], local[0], local[1], local[2]);
        return tsr_opencl_fail(d, "clEnqueueNDRangeKernel", err, what);
    }
    return 0;
}

static int opencl_synchronize(tsr_device *base) {
    tsr_opencl_device *d = (tsr_opencl_device *)base;
    cl_int err = d->cl.Finish(d->queue);
    return err == CL_SUCCESS ? 0 : tsr_opencl_fail(d, "clFinish", err, NULL);
}

static int opencl_load_kernels(tsr_device *base, const tsr_executable *exe, const char *dir) {
    return tsr_opencl_build_programs((tsr_opencl_device *)base, exe, dir);
}

static void opencl_destroy(tsr_device *base) {
    tsr_opencl_device *d = (tsr_opencl_device *)base;
    tsr_alloc *a = base->alloc;
    if (d->queue) d->cl.Finish(d->queue);
    for (int32_t k = 0; k < d->n_kernels; k++)
        if (d->kernels[k]) d->cl.ReleaseKernel(d->kernels[k]);
    for (int32_t p = 0; p < d->n_programs; p++)
        if (d->programs[p]) d->cl.ReleaseProgram(d->programs[p]);
    tsr_opencl_release_memory(d);
    if (d->queue) d->cl.ReleaseCommandQueue(d->queue);
    if (d->context) d->cl.ReleaseContext(d->context);
    tsr_cl_api_unload(&d->cl);
    tsr_free(a, d->kernels);
    tsr_free(a, d->programs);
    tsr_free(a, d->cache_dir);
    tsr_free(a, d);
}

static void opencl_compile_stats(const tsr_device *device, tessera_compile_stats *out) {
    const tsr_opencl_stats *stats = &((const tsr_opencl_device *)device)->stats;
    out->kernels = (uint32_t)(stats->programs_from_source + stats->programs_from_binary);
    out->compiled = (uint32_t)stats->programs_from_source;
    out->from_cache = (uint32_t)stats->programs_from_binary;
    out->seconds = stats->build_seconds;
}

static const tsr_device_ops OPENCL_OPS = {
    .name = "opencl",
    .load_kernels = opencl_load_kernels,
    .allocate = tsr_opencl_allocate,
    .release = tsr_opencl_release,
    .adopt_host = tsr_opencl_adopt_host,
    .upload = tsr_opencl_upload,
    .read_back = tsr_opencl_read_back,
    .host_pointer = tsr_opencl_host_pointer,
    .launch = opencl_launch,
    .synchronize = opencl_synchronize,
    .destroy = opencl_destroy,
    .compile_stats = opencl_compile_stats,
};

int tsr_opencl_device_stats(const tsr_device *d, tsr_opencl_stats *out) {
    if (!d || d->ops != &OPENCL_OPS)
        return tsr_error(TESSERA_ERROR_INVALID_ARGUMENT, "tsr_opencl_device_stats: not an opencl device");
    *out = ((const tsr_opencl_device *)d)->stats;
    return 0;
}

/* ---- creation ------------------------------------------------------------------------------- */

/* A string property into buf (cut to fit, trailing spaces dropped: drivers pad names). */
static void device_string(tsr_opencl_device *d, cl_device_id device, cl_device_info what, char *buf, size_t size) {
    buf[0] = '\0';
    size_t needed = 0;
    if (d->cl.GetDeviceInfo(device, what, 0, NULL, &needed) == CL_SUCCESS && needed <= size)
        d->cl.GetDeviceInfo(device, what, size, buf, NULL);
    else if (needed > size) {
        /* Too long for buf: a name is never this long, the extension list may be; callers size for it. */
        buf[0] = '\0';
    }
    buf[size - 1] = '\0';
    for (size_t n = strlen(buf); n && buf[n - 1] == ' '; n--) buf[n - 1] = '\0';
}

static void platform_string(tsr_opencl_device *d, cl_platform_id platform, cl_platform_info what, char *buf,
                            size_t size) {
    buf[0] = '\0';
    size_t needed = 0;
    if (d->cl.GetPlatformInfo(platform, what, 0, NULL, &needed) == CL_SUCCESS && needed <= size)
        d->cl.GetPlatformInfo(platform, what, size, buf, NULL);
    buf[size - 1] = '\0';
    for (size_t n = strlen(buf); n && buf[n - 1] == ' '; n--) buf[n - 1] = '\0';
}

/* Whether the space-separated list `extensions` has `name`. */
static bool has_extension(const char *extensions, const char *name) {
    size_t n = strlen(name);
    for (const char *p = strstr(extensions, name); p; p = strstr(p + 1, name))
        if ((p == extensions || p[-1] == ' ') && (p[n] == ' ' || p[n] == '\0')) return true;
    return false;
}

/* Every device of every platform, in that order (what an index counts). */
static int list_devices(tsr_opencl_device *d, cl_platform_id *platform_of, cl_device_id *devices, cl_uint *n_devices) {
    cl_platform_id platforms[MAX_PLATFORMS];
    cl_uint n_platforms = 0;
    cl_int err = d->cl.GetPlatformIDs(MAX_PLATFORMS, platforms, &n_platforms);
    /* The ICD loader answers CL_PLATFORM_NOT_FOUND_KHR (-1001) when no driver is installed. */
    if (err != CL_SUCCESS || n_platforms == 0) {
        char buf[32];
        return tsr_error(TESSERA_ERROR_UNSUPPORTED, "the opencl device needs an OpenCL platform; the ICD loader finds "
                         "none (%s; Debian: pocl-opencl-icd for the CPU, or the GPU vendor's driver)",
                         err == CL_SUCCESS ? "no platforms" : tsr_cl_error_name(err, buf, sizeof buf));
    }
    if (n_platforms > MAX_PLATFORMS) n_platforms = MAX_PLATFORMS;
    *n_devices = 0;
    for (cl_uint p = 0; p < n_platforms && *n_devices < MAX_DEVICES; p++) {
        cl_uint n = 0;
        if (d->cl.GetDeviceIDs(platforms[p], CL_DEVICE_TYPE_ALL, MAX_DEVICES - *n_devices, devices + *n_devices, &n) !=
            CL_SUCCESS)
            continue; /* CL_DEVICE_NOT_FOUND: a platform without devices */
        if (n > MAX_DEVICES - *n_devices) n = MAX_DEVICES - *n_devices;
        for (cl_uint i = 0; i < n; i++) platform_of[*n_devices + i] = platforms[p];
        *n_devices += n;
    }
    if (*n_devices == 0)
        return tsr_error(TESSERA_ERROR_UNSUPPORTED, "the opencl device needs an OpenCL device; the %u platform%s found "
                         "have none", (unsigned)n_platforms, n_platforms == 1 ? "" : "s");
    return 0;
}

static int pick_device(tsr_opencl_device *d, int32_t index) {
    cl_platform_id platform_of[MAX_DEVICES];
    cl_device_id devices[MAX_DEVICES];
    cl_uint n = 0;
    int rc = list_devices(d, platform_of, devices, &n);
    if (rc) return rc;
    cl_uint chosen = 0;
    if (index >= 0 && (cl_uint)index >= n) {
        char names[512] = "";
        size_t used = 0;
        for (cl_uint i = 0; i < n && used < sizeof names; i++) {
            char name[96], platform[64];
            device_string(d, devices[i], CL_DEVICE_NAME, name, sizeof name);
            platform_string(d, platform_of[i], CL_PLATFORM_NAME, platform, sizeof platform);
            int w = snprintf(names + used, sizeof names - used, "%sopencl:%u is %s (%s)", i ? "; " : "", (unsigned)i,
                             name, platform);
            if (w > 0) used += (size_t)w;
        }
        return tsr_error(TESSERA_ERROR_UNSUPPORTED, "there is no opencl:%d; this machine has %u OpenCL device%s: %s",
                         (int)index, (unsigned)n, n == 1 ? "" : "s", names);
    }
    if (index >= 0) {
        chosen = (cl_uint)index;
    } else {
        /* A GPU before anything else (PoCL's CPU device is a fallback, not a choice). */
        for (cl_uint i = n; i-- > 0;) {
            cl_device_type type = 0;
            if (d->cl.GetDeviceInfo(devices[i], CL_DEVICE_TYPE, sizeof type, &type, NULL) == CL_SUCCESS &&
                (type & CL_DEVICE_TYPE_GPU))
                chosen = i;
        }
    }
    d->device = devices[chosen];
    d->platform = platform_of[chosen];
    return 0;
}

#define DEVICE_INFO(what, var) d->cl.GetDeviceInfo(d->device, what, sizeof(var), &(var), NULL)

static int read_limits(tsr_opencl_device *d) {
    size_t max_group = 0, max_parameter = 0;
    cl_ulong local_bytes = 0, max_alloc = 0;
    cl_uint align_bits = 0;
    cl_int err = DEVICE_INFO(CL_DEVICE_MAX_WORK_GROUP_SIZE, max_group);
    if (err == CL_SUCCESS) err = DEVICE_INFO(CL_DEVICE_LOCAL_MEM_SIZE, local_bytes);
    if (err == CL_SUCCESS) err = DEVICE_INFO(CL_DEVICE_MAX_MEM_ALLOC_SIZE, max_alloc);
    if (err == CL_SUCCESS) err = DEVICE_INFO(CL_DEVICE_MEM_BASE_ADDR_ALIGN, align_bits);
    if (err == CL_SUCCESS) err = DEVICE_INFO(CL_DEVICE_MAX_PARAMETER_SIZE, max_parameter);
    if (err != CL_SUCCESS) return tsr_opencl_fail(d, "clGetDeviceInfo", err, "(its limits)");
    tsr_device *b = &d->base;
    b->max_invocations = (int64_t)max_group;
    b->max_workgroup_storage = (int64_t)local_bytes;
    b->max_buffer_size = b->max_binding_size = (int64_t)max_alloc;
    /* No binding slots: a kernel's argument bytes (a pointer per buffer) are the bound. */
    b->max_storage_buffers = (int64_t)(max_parameter / 8);
    /* Stated in bits; sub-buffer origins must be multiples of it. Kernels read words: at least 4 bytes. */
    d->base_align = align_bits / 8 >= 4 ? align_bits / 8 : 4;
    b->storage_alignment = d->base_align;
    /* global = grid * workgroup_size is a size_t: an int32 grid times the workgroup size fits in 64 bits. */
    b->max_workgroups = INT32_MAX;
    d->max_alloc = (size_t)max_alloc;
    return 0;
}

int tsr_opencl_device_new_from(tsr_alloc *a, const tsr_device_options *options, const char *const *libraries,
                               tsr_device **out) {
    *out = NULL;
    tsr_opencl_device *d = tsr_calloc(a, 1, sizeof *d);
    if (!d) return TESSERA_ERROR_OUT_OF_MEMORY;
    d->base.ops = &OPENCL_OPS;
    d->base.alloc = a;
    snprintf(d->device_name, sizeof d->device_name, "no device yet");
    int rc = tsr_cl_api_load(&d->cl, libraries);
    if (!rc) rc = pick_device(d, options->index);
    if (rc) {
        tsr_cl_api_unload(&d->cl);
        tsr_free(a, d);
        return rc;
    }
    char platform_name[64], device_version[96], extensions[8192];
    device_string(d, d->device, CL_DEVICE_NAME, d->device_name, sizeof d->device_name);
    device_string(d, d->device, CL_DRIVER_VERSION, d->driver_version, sizeof d->driver_version);
    device_string(d, d->device, CL_DEVICE_VERSION, device_version, sizeof device_version);
    device_string(d, d->device, CL_DEVICE_EXTENSIONS, extensions, sizeof extensions);
    platform_string(d, d->platform, CL_PLATFORM_NAME, platform_name, sizeof platform_name);
    platform_string(d, d->platform, CL_PLATFORM_VERSION, d->platform_version, sizeof d->platform_version);
    /* Cut to fit: PoCL's version strings run long, and the name comes first. */
    if (snprintf(d->base.description, sizeof d->base.description, "%s (%s, %s)", d->device_name, platform_name,
                 device_version) >= (int)sizeof d->base.description)
        memcpy(d->base.description + sizeof d->base.description - 5, "...)", 5);
    d->has_fp16 = has_extension(extensions, "cl_khr_fp16");
    d->base.features = d->has_fp16 ? FEATURES_FP16 : FEATURES;
    rc = read_limits(d);
    cl_int err = CL_SUCCESS;
    if (!rc) {
        d->context = d->cl.CreateContext(NULL, 1, &d->device, NULL, NULL, &err);
        if (err != CL_SUCCESS) rc = tsr_opencl_fail(d, "clCreateContext", err, NULL);
    }
    if (!rc) {
        /* In order: launches, copies and reads run as the VM issued them, with no events to track. */
        d->queue = d->cl.CreateCommandQueue(d->context, d->device, 0, &err);
        if (err != CL_SUCCESS) rc = tsr_opencl_fail(d, "clCreateCommandQueue", err, NULL);
    }
    if (!rc) {
        d->view_capacity = 64;
        d->views = tsr_calloc(a, d->view_capacity, sizeof *d->views);
        if (!d->views) rc = TESSERA_ERROR_OUT_OF_MEMORY;
    }
    if (rc) {
        opencl_destroy(&d->base);
        return rc;
    }
    d->cache_dir = tsr_compile_cache_folder(a, options);
    *out = &d->base;
    return 0;
}

int tsr_opencl_device_new(tsr_alloc *a, const tsr_device_options *options, tsr_device **out) {
    return tsr_opencl_device_new_from(a, options, tsr_cl_default_libraries, out);
}
