/* The OpenCL entry points the device uses, found at run time in the system's ICD loader: libtessera
 * links against no OpenCL library, so one build runs on machines with and without a driver. */
#ifndef TSR_OPENCL_LOADER_H
#define TSR_OPENCL_LOADER_H

#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>

/* name (without "cl"), return type, parameters: as CL/cl.h declares them for OpenCL 1.2. */
#define TSR_CL_FUNCTIONS(X)                                                                                      \
    X(GetPlatformIDs, cl_int, (cl_uint, cl_platform_id *, cl_uint *))                                            \
    X(GetPlatformInfo, cl_int, (cl_platform_id, cl_platform_info, size_t, void *, size_t *))                     \
    X(GetDeviceIDs, cl_int, (cl_platform_id, cl_device_type, cl_uint, cl_device_id *, cl_uint *))                \
    X(GetDeviceInfo, cl_int, (cl_device_id, cl_device_info, size_t, void *, size_t *))                          \
    X(CreateContext, cl_context,                                                                                 \
      (const cl_context_properties *, cl_uint, const cl_device_id *,                                             \
       void(CL_CALLBACK *)(const char *, const void *, size_t, void *), void *, cl_int *))                      \
    X(ReleaseContext, cl_int, (cl_context))                                                                      \
    X(CreateCommandQueue, cl_command_queue, (cl_context, cl_device_id, cl_command_queue_properties, cl_int *))   \
    X(ReleaseCommandQueue, cl_int, (cl_command_queue))                                                           \
    X(CreateBuffer, cl_mem, (cl_context, cl_mem_flags, size_t, void *, cl_int *))                                \
    X(CreateSubBuffer, cl_mem, (cl_mem, cl_mem_flags, cl_buffer_create_type, const void *, cl_int *))            \
    X(GetMemObjectInfo, cl_int, (cl_mem, cl_mem_info, size_t, void *, size_t *))                                 \
    X(ReleaseMemObject, cl_int, (cl_mem))                                                                        \
    X(EnqueueFillBuffer, cl_int,                                                                                 \
      (cl_command_queue, cl_mem, const void *, size_t, size_t, size_t, cl_uint, const cl_event *, cl_event *))   \
    X(EnqueueWriteBuffer, cl_int,                                                                                \
      (cl_command_queue, cl_mem, cl_bool, size_t, size_t, const void *, cl_uint, const cl_event *, cl_event *))  \
    X(EnqueueReadBuffer, cl_int,                                                                                 \
      (cl_command_queue, cl_mem, cl_bool, size_t, size_t, void *, cl_uint, const cl_event *, cl_event *))        \
    X(CreateProgramWithSource, cl_program, (cl_context, cl_uint, const char **, const size_t *, cl_int *))       \
    X(CreateProgramWithBinary, cl_program,                                                                       \
      (cl_context, cl_uint, const cl_device_id *, const size_t *, const unsigned char **, cl_int *, cl_int *))   \
    X(BuildProgram, cl_int,                                                                                      \
      (cl_program, cl_uint, const cl_device_id *, const char *, void(CL_CALLBACK *)(cl_program, void *), void *)) \
    X(GetProgramInfo, cl_int, (cl_program, cl_program_info, size_t, void *, size_t *))                           \
    X(GetProgramBuildInfo, cl_int, (cl_program, cl_device_id, cl_program_build_info, size_t, void *, size_t *))  \
    X(ReleaseProgram, cl_int, (cl_program))                                                                      \
    X(CreateKernel, cl_kernel, (cl_program, const char *, cl_int *))                                             \
    X(ReleaseKernel, cl_int, (cl_kernel))                                                                        \
    X(SetKernelArg, cl_int, (cl_kernel, cl_uint, size_t, const void *))                                          \
    X(EnqueueNDRangeKernel, cl_int,                                                                              \
      (cl_command_queue, cl_kernel, cl_uint, const size_t *, const size_t *, const size_t *, cl_uint,           \
       const cl_event *, cl_event *))                                                                            \
    X(Flush, cl_int, (cl_command_queue))                                                                         \
    X(Finish, cl_int, (cl_command_queue))

#define TSR_CL_TYPEDEF(name, ret, params) typedef ret(CL_API_CALL *tsr_cl_##name##_fn) params;
TSR_CL_FUNCTIONS(TSR_CL_TYPEDEF)
#undef TSR_CL_TYPEDEF

/* The loader's handle and every entry point (api->Finish(queue) calls clFinish). */
typedef struct tsr_cl_api {
    void *library;
#define TSR_CL_FIELD(name, ret, params) tsr_cl_##name##_fn name;
    TSR_CL_FUNCTIONS(TSR_CL_FIELD)
#undef TSR_CL_FIELD
} tsr_cl_api;

/* The shared-object names tried in order when none are given (Linux's ICD loader). */
extern const char *const tsr_cl_default_libraries[];

/* Opens the first of `libraries` (NULL-ended) that loads and finds every entry point in it.
 * TESSERA_ERROR_UNSUPPORTED naming the libraries tried, or the entry point that is missing. */
int tsr_cl_api_load(tsr_cl_api *api, const char *const *libraries);
/* Forgets the entry points; the library stays loaded (see opencl_loader.c). */
void tsr_cl_api_unload(tsr_cl_api *api);

/* "CL_OUT_OF_RESOURCES" for -5; "CL error -N" (in buf) for a code it does not know. */
const char *tsr_cl_error_name(cl_int code, char *buf, size_t size);

#endif
