/* The OpenCL device's programs: every module its kernels use, checked against executable.json (size and
 * SHA-256) and built once at load; the built binary is kept in a cache folder, so that the next load of
 * the same model on the same device and driver skips the OpenCL C compiler.
 *
 * A cache file is "TSRCLBN1", the payload's size (8 bytes, little-endian), the payload's SHA-256 (32
 * bytes) and the payload: what clGetProgramInfo(CL_PROGRAM_BINARIES) gave. Its name is the SHA-256 of
 * everything that makes the binary (device name, driver and platform versions, build options, module
 * digest), so that another driver or module never meets it. A file that fails any check, or that the
 * driver refuses, is rebuilt from source with a warning: a cache is never a reason to fail a load. */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "compile_cache.h"
#include "files.h"
#include "opencl_device.h"
#include "sha256.h"

#define BUILD_OPTIONS "-cl-std=CL1.2"
#define CACHE_MAGIC "TSRCLBN1"
#define CACHE_HEADER (8 + 8 + 32)
#define MAX_CACHED_BYTES ((size_t)1 << 30)
#define LOG_LINES 8

static double now_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}


/* <cache_dir>/opencl-<key>.bin for the module with digest `module_sha256` on this device. */
static void cache_path(const tsr_opencl_device *d, const char *module_sha256, char *path, size_t size) {
    tsr_sha256 h;
    tsr_sha256_init(&h);
    const char *parts[] = {"tessera opencl program cache 1", d->device_name, d->driver_version, d->platform_version,
                           BUILD_OPTIONS, module_sha256};
    for (size_t i = 0; i < TSR_ARRAY_LEN(parts); i++) tsr_sha256_update(&h, parts[i], strlen(parts[i]) + 1);
    uint8_t digest[32];
    char hex[65];
    tsr_sha256_final(&h, digest);
    tsr_sha256_digest_hex(digest, hex);
    snprintf(path, size, "%s/opencl-%s.bin", d->cache_dir, hex);
}

static void warn(const char *path, const char *why) {
    fprintf(stderr, "tessera: warning: %s is not a usable cached OpenCL program (%s): rebuilding it\n", path, why);
}

/* A cache file whole into *file (from a) and its payload's place in it, or a reason it is not one;
 * *file NULL and no reason when the file does not exist. compile_cache.c reads the file (no symlink,
 * FIFO or oversized file); its format is checked here. */
static const char *read_cached(tsr_alloc *a, const char *path, void **file, const unsigned char **payload,
                               size_t *size, char *why, size_t why_size) {
    *payload = NULL;
    *size = 0;
    size_t file_size;
    if (tsr_compile_cache_read(a, path, CACHE_HEADER + MAX_CACHED_BYTES, file, &file_size, why, why_size) != 0)
        return why;
    if (!*file) return NULL; /* nothing cached yet */
    const unsigned char *header = *file;
    const char *problem = NULL;
    uint64_t length = 0;
    if (file_size < CACHE_HEADER || memcmp(header, CACHE_MAGIC, 8) != 0) problem = "no cache header";
    if (!problem) {
        for (int i = 0; i < 8; i++) length |= (uint64_t)header[8 + i] << (8 * i);
        if (length == 0 || length > MAX_CACHED_BYTES || file_size != CACHE_HEADER + length) problem = "truncated";
    }
    if (!problem) {
        uint8_t digest[32];
        tsr_sha256 h;
        tsr_sha256_init(&h);
        tsr_sha256_update(&h, header + CACHE_HEADER, (size_t)length);
        tsr_sha256_final(&h, digest);
        if (memcmp(digest, header + 16, 32) != 0) problem = "its checksum does not match: corrupted";
    }
    if (problem) {
        tsr_free(a, *file);
        *file = NULL;
        return problem;
    }
    *payload = header + CACHE_HEADER;
    *size = (size_t)length;
    return NULL;
}

/* Writes the binary of a built program to path atomically (compile_cache.c), so that a reader never
 * sees half a file. Quiet on failure: the cache is an optimisation. */
static bool write_cached(tsr_opencl_device *d, cl_program program, const char *path) {
    size_t length = 0;
    if (d->cl.GetProgramInfo(program, CL_PROGRAM_BINARY_SIZES, sizeof length, &length, NULL) != CL_SUCCESS ||
        length == 0 || length > MAX_CACHED_BYTES)
        return false;
    unsigned char *binary = tsr_malloc(d->base.alloc, length);
    if (!binary) return false;
    bool ok = d->cl.GetProgramInfo(program, CL_PROGRAM_BINARIES, sizeof binary, &binary, NULL) == CL_SUCCESS;
    unsigned char header[CACHE_HEADER];
    memcpy(header, CACHE_MAGIC, 8);
    for (int i = 0; i < 8; i++) header[8 + i] = (unsigned char)((uint64_t)length >> (8 * i));
    tsr_sha256 h;
    tsr_sha256_init(&h);
    tsr_sha256_update(&h, binary, length);
    tsr_sha256_final(&h, header + 16);
    ok = ok && tsr_compile_cache_write(path, (const void *const[]){header, binary}, (const size_t[]){sizeof header,
                                       length}, 2);
    tsr_free(d->base.alloc, binary);
    return ok;
}

/* The build log's first lines on one line ("a | b | c"), for an error message. */
static void build_log(tsr_opencl_device *d, cl_program program, char *out, size_t size) {
    out[0] = '\0';
    size_t length = 0;
    if (d->cl.GetProgramBuildInfo(program, d->device, CL_PROGRAM_BUILD_LOG, 0, NULL, &length) != CL_SUCCESS ||
        length == 0)
        return;
    char *log = tsr_malloc(d->base.alloc, length + 1);
    if (!log) return;
    if (d->cl.GetProgramBuildInfo(program, d->device, CL_PROGRAM_BUILD_LOG, length, log, NULL) == CL_SUCCESS) {
        log[length] = '\0';
        size_t used = 0;
        int lines = 0;
        for (char *line = log, *end; line && *line && lines < LOG_LINES && used + 1 < size; line = end) {
            end = strchr(line, '\n');
            if (end) *end++ = '\0';
            if (!*line) continue;
            int w = snprintf(out + used, size - used, "%s%s", lines ? " | " : "", line);
            if (w < 0) break;
            used += (size_t)w;
            lines++;
        }
        for (char *c = out; *c; c++)
            if ((unsigned char)*c < ' ') *c = ' ';
    }
    tsr_free(d->base.alloc, log);
}

static int build_source(tsr_opencl_device *d, const char *source, size_t size, const tsr_module *m,
                        const char *kernel_name, cl_program *out) {
    cl_int err;
    const char *sources[1] = {source};
    cl_program program = d->cl.CreateProgramWithSource(d->context, 1, sources, &size, &err);
    if (err != CL_SUCCESS) return tsr_opencl_fail(d, "clCreateProgramWithSource", err, m->path);
    err = d->cl.BuildProgram(program, 1, &d->device, BUILD_OPTIONS, NULL, NULL);
    if (err != CL_SUCCESS) {
        char log[1024], name[32];
        build_log(d, program, log, sizeof log);
        d->cl.ReleaseProgram(program);
        return tsr_error(TESSERA_ERROR_UNSUPPORTED, "the opencl device (%s) could not build kernel '%s' (%s): %s: %s",
                         d->device_name, kernel_name, m->path, tsr_cl_error_name(err, name, sizeof name),
                         log[0] ? log : "no build log");
    }
    *out = program;
    return 0;
}

/* The program from a cached binary, or NULL (with a warning when the file exists but does not serve). */
static cl_program load_cached(tsr_opencl_device *d, const char *path) {
    void *file;
    const unsigned char *binary;
    size_t length;
    char reason[160];
    const char *why = read_cached(d->base.alloc, path, &file, &binary, &length, reason, sizeof reason);
    if (!file) {
        if (why) warn(path, why);
        return NULL;
    }
    cl_int status = CL_SUCCESS, err;
    const unsigned char *binaries[1] = {binary};
    cl_program program = d->cl.CreateProgramWithBinary(d->context, 1, &d->device, &length, binaries, &status, &err);
    char name[32];
    if (err == CL_SUCCESS && status == CL_SUCCESS) {
        err = d->cl.BuildProgram(program, 1, &d->device, BUILD_OPTIONS, NULL, NULL);
        if (err != CL_SUCCESS) {
            d->cl.ReleaseProgram(program);
            program = NULL;
        }
    } else {
        if (err == CL_SUCCESS) {
            d->cl.ReleaseProgram(program);
            err = status; /* the program was made, but not of a binary the device takes */
        }
        program = NULL;
    }
    tsr_free(d->base.alloc, file);
    if (!program) {
        char why_driver[96];
        snprintf(why_driver, sizeof why_driver, "the driver refuses it: %s", tsr_cl_error_name(err, name, sizeof name));
        warn(path, why_driver);
    }
    return program;
}

/* The program of module m, from the cache or its source; kernel_name names it in errors. */
static int module_program(tsr_opencl_device *d, const tsr_module *m, const char *dir, const char *kernel_name,
                          cl_program *out) {
    char *source;
    size_t size;
    int rc = tsr_read_module(d->base.alloc, dir, m, &source, &size); /* NUL-terminated */
    if (rc) return tsr_error_context(rc, "kernel '%s'", kernel_name);
    char path[TSR_COMPILE_CACHE_PATH];
    *out = NULL;
    if (d->cache_dir) {
        cache_path(d, m->sha256, path, sizeof path);
        if ((*out = load_cached(d, path))) d->stats.programs_from_binary++;
    }
    if (!*out) {
        rc = build_source(d, source, size, m, kernel_name, out);
        if (!rc) {
            d->stats.programs_from_source++;
            if (d->cache_dir && write_cached(d, *out, path)) d->stats.cache_writes++;
        }
    }
    tsr_free(d->base.alloc, source);
    return rc;
}

int tsr_opencl_build_programs(tsr_opencl_device *d, const tsr_executable *exe, const char *dir) {
    /* A split build (exe->n_devices > 0) gives each device every kernel, by its index: this one builds its
     * own (opencl) and leaves the others' slots empty; the VM never launches them here. */
    for (int32_t k = 0; k < exe->n_kernels && !exe->n_devices; k++)
        if (strcmp(exe->kernels[k].backend, "opencl") != 0)
            return tsr_error(TESSERA_ERROR_UNSUPPORTED, "kernel '%s' is for backend '%s' (target %s); the opencl "
                             "device runs backend 'opencl': compile the model with --target opencl",
                             exe->kernels[k].name, exe->kernels[k].backend, exe->target_name);
    if (d->programs || d->kernels)
        return tsr_error(TESSERA_ERROR_INVALID_ARGUMENT, "the opencl device has kernels loaded already");
    tsr_alloc *a = d->base.alloc;
    d->programs = tsr_calloc(a, (size_t)(exe->n_modules ? exe->n_modules : 1), sizeof(cl_program));
    d->kernels = tsr_calloc(a, (size_t)(exe->n_kernels ? exe->n_kernels : 1), sizeof(cl_kernel));
    if (!d->programs || !d->kernels) return TESSERA_ERROR_OUT_OF_MEMORY;
    d->n_programs = exe->n_modules;
    d->n_kernels = exe->n_kernels;
    d->kernel_records = exe->kernels;
    d->stats.programs_from_source = d->stats.programs_from_binary = d->stats.cache_writes = 0;
    double start = now_seconds();
    int rc = 0;
    for (int32_t k = 0; k < exe->n_kernels && !rc; k++) {
        const tsr_kernel *kernel = &exe->kernels[k];
        if (strcmp(kernel->backend, "opencl") != 0) continue; /* another device's, in a split build */
        if (kernel->module < 0 || kernel->module >= exe->n_modules)
            return tsr_error(TESSERA_ERROR_FORMAT, "kernel '%s' names module %d of %d", kernel->name,
                             (int)kernel->module, (int)exe->n_modules);
        cl_program *program = &d->programs[kernel->module];
        if (!*program && (rc = module_program(d, &exe->modules[kernel->module], dir, kernel->name, program))) break;
        cl_int err;
        d->kernels[k] = d->cl.CreateKernel(*program, kernel->entry_point, &err);
        if (err == CL_INVALID_KERNEL_NAME)
            rc = tsr_error(TESSERA_ERROR_FORMAT, "kernel '%s': module %s has no entry point '%s'", kernel->name,
                           exe->modules[kernel->module].path, kernel->entry_point);
        else if (err != CL_SUCCESS)
            rc = tsr_opencl_fail(d, "clCreateKernel", err, kernel->name);
        if (rc) d->kernels[k] = NULL;
    }
    d->stats.build_seconds = now_seconds() - start;
    return rc;
}
