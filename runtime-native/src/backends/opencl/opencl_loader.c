/* Finds the OpenCL entry points in the ICD loader at run time (opencl_loader.h). */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "common.h"
#include "opencl_loader.h"

/* Linux's Khronos ICD loader ("libOpenCL.so" alone is the development symlink, present only with
 * ocl-icd-opencl-dev). Android has no standard place: vendors ship the library under their own paths
 * (/system/vendor/lib64/libOpenCL.so, /vendor/lib64/egl/libGLES_mali.so, ...); a phone build would
 * list those here, after the standard names. */
const char *const tsr_cl_default_libraries[] = {"libOpenCL.so.1", "libOpenCL.so", NULL};

int tsr_cl_api_load(tsr_cl_api *api, const char *const *libraries) {
    memset(api, 0, sizeof *api);
    char tried[512] = "";
    size_t used = 0;
    for (const char *const *name = libraries; *name && !api->library; name++) {
        /* RTLD_LOCAL: the loader's symbols stay out of the process's namespace. */
        api->library = dlopen(*name, RTLD_NOW | RTLD_LOCAL);
        if (!api->library && used < sizeof tried) {
            int w = snprintf(tried + used, sizeof tried - used, "%s%s", used ? ", " : "", *name);
            if (w > 0) used += (size_t)w;
        }
    }
    if (!api->library)
        return tsr_error(TESSERA_ERROR_UNSUPPORTED, "the opencl device needs an OpenCL ICD loader; none of %s could "
                         "be opened (Debian: ocl-icd-libopencl1 and a driver such as pocl-opencl-icd)", tried);
    void *symbol;
    /* POSIX guarantees a data pointer from dlsym converts to a function pointer. */
#define TSR_CL_LOOKUP(name, ret, params)                                                                         \
    symbol = dlsym(api->library, "cl" #name);                                                                    \
    if (!symbol) {                                                                                               \
        tsr_cl_api_unload(api);                                                                                  \
        return tsr_error(TESSERA_ERROR_UNSUPPORTED, "the opencl device needs OpenCL 1.2; the ICD loader lacks %s", \
                         "cl" #name);                                                                            \
    }                                                                                                            \
    memcpy(&api->name, &symbol, sizeof symbol);
    TSR_CL_FUNCTIONS(TSR_CL_LOOKUP)
#undef TSR_CL_LOOKUP
    return 0;
}

void tsr_cl_api_unload(tsr_cl_api *api) {
    /* No dlclose: the ICD loader keeps its platform list, and the drivers it opened their threads and
     * atexit handlers, for the whole process; unloading them under that state is unsafe (and LeakSanitizer
     * then sees the lists as leaked). dlopen counts references, so the next device opens nothing new. */
    memset(api, 0, sizeof *api);
}

static const struct {
    cl_int code;
    const char *name;
} ERROR_NAMES[] = {
    {CL_DEVICE_NOT_FOUND, "CL_DEVICE_NOT_FOUND"},
    {CL_DEVICE_NOT_AVAILABLE, "CL_DEVICE_NOT_AVAILABLE"},
    {CL_COMPILER_NOT_AVAILABLE, "CL_COMPILER_NOT_AVAILABLE"},
    {CL_MEM_OBJECT_ALLOCATION_FAILURE, "CL_MEM_OBJECT_ALLOCATION_FAILURE"},
    {CL_OUT_OF_RESOURCES, "CL_OUT_OF_RESOURCES"},
    {CL_OUT_OF_HOST_MEMORY, "CL_OUT_OF_HOST_MEMORY"},
    {CL_PROFILING_INFO_NOT_AVAILABLE, "CL_PROFILING_INFO_NOT_AVAILABLE"},
    {CL_MEM_COPY_OVERLAP, "CL_MEM_COPY_OVERLAP"},
    {CL_IMAGE_FORMAT_MISMATCH, "CL_IMAGE_FORMAT_MISMATCH"},
    {CL_IMAGE_FORMAT_NOT_SUPPORTED, "CL_IMAGE_FORMAT_NOT_SUPPORTED"},
    {CL_BUILD_PROGRAM_FAILURE, "CL_BUILD_PROGRAM_FAILURE"},
    {CL_MAP_FAILURE, "CL_MAP_FAILURE"},
    {CL_MISALIGNED_SUB_BUFFER_OFFSET, "CL_MISALIGNED_SUB_BUFFER_OFFSET"},
    {CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST, "CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST"},
    {CL_COMPILE_PROGRAM_FAILURE, "CL_COMPILE_PROGRAM_FAILURE"},
    {CL_LINKER_NOT_AVAILABLE, "CL_LINKER_NOT_AVAILABLE"},
    {CL_LINK_PROGRAM_FAILURE, "CL_LINK_PROGRAM_FAILURE"},
    {CL_DEVICE_PARTITION_FAILED, "CL_DEVICE_PARTITION_FAILED"},
    {CL_KERNEL_ARG_INFO_NOT_AVAILABLE, "CL_KERNEL_ARG_INFO_NOT_AVAILABLE"},
    {CL_INVALID_VALUE, "CL_INVALID_VALUE"},
    {CL_INVALID_DEVICE_TYPE, "CL_INVALID_DEVICE_TYPE"},
    {CL_INVALID_PLATFORM, "CL_INVALID_PLATFORM"},
    {CL_INVALID_DEVICE, "CL_INVALID_DEVICE"},
    {CL_INVALID_CONTEXT, "CL_INVALID_CONTEXT"},
    {CL_INVALID_QUEUE_PROPERTIES, "CL_INVALID_QUEUE_PROPERTIES"},
    {CL_INVALID_COMMAND_QUEUE, "CL_INVALID_COMMAND_QUEUE"},
    {CL_INVALID_HOST_PTR, "CL_INVALID_HOST_PTR"},
    {CL_INVALID_MEM_OBJECT, "CL_INVALID_MEM_OBJECT"},
    {CL_INVALID_IMAGE_FORMAT_DESCRIPTOR, "CL_INVALID_IMAGE_FORMAT_DESCRIPTOR"},
    {CL_INVALID_IMAGE_SIZE, "CL_INVALID_IMAGE_SIZE"},
    {CL_INVALID_SAMPLER, "CL_INVALID_SAMPLER"},
    {CL_INVALID_BINARY, "CL_INVALID_BINARY"},
    {CL_INVALID_BUILD_OPTIONS, "CL_INVALID_BUILD_OPTIONS"},
    {CL_INVALID_PROGRAM, "CL_INVALID_PROGRAM"},
    {CL_INVALID_PROGRAM_EXECUTABLE, "CL_INVALID_PROGRAM_EXECUTABLE"},
    {CL_INVALID_KERNEL_NAME, "CL_INVALID_KERNEL_NAME"},
    {CL_INVALID_KERNEL_DEFINITION, "CL_INVALID_KERNEL_DEFINITION"},
    {CL_INVALID_KERNEL, "CL_INVALID_KERNEL"},
    {CL_INVALID_ARG_INDEX, "CL_INVALID_ARG_INDEX"},
    {CL_INVALID_ARG_VALUE, "CL_INVALID_ARG_VALUE"},
    {CL_INVALID_ARG_SIZE, "CL_INVALID_ARG_SIZE"},
    {CL_INVALID_KERNEL_ARGS, "CL_INVALID_KERNEL_ARGS"},
    {CL_INVALID_WORK_DIMENSION, "CL_INVALID_WORK_DIMENSION"},
    {CL_INVALID_WORK_GROUP_SIZE, "CL_INVALID_WORK_GROUP_SIZE"},
    {CL_INVALID_WORK_ITEM_SIZE, "CL_INVALID_WORK_ITEM_SIZE"},
    {CL_INVALID_GLOBAL_OFFSET, "CL_INVALID_GLOBAL_OFFSET"},
    {CL_INVALID_EVENT_WAIT_LIST, "CL_INVALID_EVENT_WAIT_LIST"},
    {CL_INVALID_EVENT, "CL_INVALID_EVENT"},
    {CL_INVALID_OPERATION, "CL_INVALID_OPERATION"},
    {CL_INVALID_GL_OBJECT, "CL_INVALID_GL_OBJECT"},
    {CL_INVALID_BUFFER_SIZE, "CL_INVALID_BUFFER_SIZE"},
    {CL_INVALID_MIP_LEVEL, "CL_INVALID_MIP_LEVEL"},
    {CL_INVALID_GLOBAL_WORK_SIZE, "CL_INVALID_GLOBAL_WORK_SIZE"},
    {CL_INVALID_PROPERTY, "CL_INVALID_PROPERTY"},
    {CL_INVALID_IMAGE_DESCRIPTOR, "CL_INVALID_IMAGE_DESCRIPTOR"},
    {CL_INVALID_COMPILER_OPTIONS, "CL_INVALID_COMPILER_OPTIONS"},
    {CL_INVALID_LINKER_OPTIONS, "CL_INVALID_LINKER_OPTIONS"},
    {CL_INVALID_DEVICE_PARTITION_COUNT, "CL_INVALID_DEVICE_PARTITION_COUNT"},
    /* cl_khr_icd's: what the ICD loader answers when it finds no driver. */
    {-1001, "CL_PLATFORM_NOT_FOUND_KHR"},
};

const char *tsr_cl_error_name(cl_int code, char *buf, size_t size) {
    for (size_t i = 0; i < TSR_ARRAY_LEN(ERROR_NAMES); i++)
        if (ERROR_NAMES[i].code == code) return ERROR_NAMES[i].name;
    snprintf(buf, size, "CL error %d", (int)code);
    return buf;
}
