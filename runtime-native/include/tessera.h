/* tessera.h: the C API of libtessera, the native Tessera runtime.
 *
 * A model is a folder that `tessera compile MODEL --target cpu -o DIR` wrote (docs/format.md,
 * docs/native.md): executable.json, the kernels, tensor-cache.json with its shards, tokenizer.json
 * and chat-config.json. Load it once, open sessions on it, chat.
 *
 *   tessera_model_params mp = tessera_model_default_params();
 *   tessera_model *model = tessera_model_load("smollm2-cpu", &mp);
 *   if (!model) { fprintf(stderr, "%s\n", tessera_last_error()); return 1; }
 *   tessera_session *s = tessera_session_new(model);
 *   tessera_message msgs[] = {{"user", "What is the capital of France?"}};
 *   tessera_sampling_params sp = tessera_sampling_default_params();
 *   tessera_chat_completion(s, msgs, 1, &sp, print_piece, NULL, NULL);
 *   tessera_session_free(s);
 *   tessera_model_free(model);
 *
 * Conventions: handles are opaque; there is no global state (two models in one process are
 * independent; a model may be used by one thread at a time, and so may each session). Functions
 * that return int return 0 (TESSERA_OK) on success and a negative tessera_status on failure;
 * functions that return a pointer return NULL on failure. After any failure,
 * tessera_last_error() gives a message that names the problem, valid until the calling thread's
 * next call into the library.
 */
#ifndef TESSERA_H
#define TESSERA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define TESSERA_API __declspec(dllexport)
#else
#define TESSERA_API __attribute__((visibility("default")))
#endif

#define TESSERA_VERSION_MAJOR 0
#define TESSERA_VERSION_MINOR 1
/* The executable format version this library reads (docs/format.md). */
#define TESSERA_FORMAT_VERSION 3
/* The version of an executable split across devices (docs/format.md, "Devices"; tessera compile --gpu-layers):
 * read too, one device opened per entry of its `devices` (a GPU beside the CPU). */
#define TESSERA_SPLIT_FORMAT_VERSION 4

typedef enum tessera_status {
    TESSERA_OK = 0,
    TESSERA_ERROR_INVALID_ARGUMENT = -1, /* a NULL handle, a bad parameter value */
    TESSERA_ERROR_IO = -2,               /* a file is missing, unreadable, or not a regular file */
    TESSERA_ERROR_FORMAT = -3,           /* a file breaks its format: bad JSON, a field out of range, a bad path */
    TESSERA_ERROR_VERSION = -4,          /* a format version this library does not read */
    TESSERA_ERROR_CHECKSUM = -5,         /* a file's size or SHA-256 differs from what its index says */
    TESSERA_ERROR_UNSUPPORTED = -6,      /* an executable for another device kind, an unknown instruction */
    TESSERA_ERROR_OUT_OF_MEMORY = -7,
    TESSERA_ERROR_RUNTIME_CHECK = -8,    /* a shape that violates a match, a bound exceeded */
    TESSERA_ERROR_CONTEXT_FULL = -9,     /* the prompt (with room for one reply token) exceeds the context */
    TESSERA_ERROR_LIBRARY = -10,         /* a registered library function failed, or one is missing */
    TESSERA_ERROR_DEVICE = -11,          /* the device failed while running (lost, out of device memory) */
} tessera_status;

/* The message of this thread's last failure ("" if none). */
TESSERA_API const char *tessera_last_error(void);
/* The name of a status code ("TESSERA_ERROR_FORMAT"). */
TESSERA_API const char *tessera_status_name(int status);

/* ---- memory ------------------------------------------------------------------------------ */

/* Every byte the library allocates goes through this allocator (NULL members: malloc/free).
 * alloc returns memory aligned to at least 64 bytes, or NULL. */
typedef struct tessera_allocator {
    void *(*alloc)(size_t size, void *user);
    void (*free)(void *ptr, void *user);
    void *user;
} tessera_allocator;

/* ---- libraries: host functions the executable calls (call_builtin) ----------------------- */

typedef enum tessera_dtype {
    TESSERA_FLOAT32 = 0, TESSERA_FLOAT16 = 1, TESSERA_INT32 = 2, TESSERA_UINT32 = 3,
    TESSERA_INT64 = 4, TESSERA_BOOL = 5, TESSERA_INT8 = 6, TESSERA_UINT8 = 7,
} tessera_dtype;

#define TESSERA_MAX_NDIM 8

/* A tensor as the host sees it: row-major data in numpy's layout (bool is one byte per element). */
typedef struct tessera_tensor {
    void *data;
    tessera_dtype dtype;
    int32_t ndim;
    int64_t shape[TESSERA_MAX_NDIM];
} tessera_tensor;

/* A value passed to a function or a library: a tensor, an integer (a prim value), or a tuple of
 * values. Tensors are in numpy's layout (bool one byte per element). */
typedef struct tessera_value {
    enum { TESSERA_VALUE_TENSOR = 0, TESSERA_VALUE_INT = 1, TESSERA_VALUE_TUPLE = 2 } kind;
    tessera_tensor tensor;
    int64_t value;
    const struct tessera_value *items; /* TESSERA_VALUE_TUPLE */
    size_t n_items;
} tessera_value;

/* A library function in destination-passing style: the values of the call's args, then the
 * tensors of its outs to fill, then its integer scalars. Return 0, or non-zero on failure (the
 * runtime reports it with the function's name). *result may be set to an integer result. */
typedef int (*tessera_library_fn)(const tessera_value *args, size_t n_args, tessera_tensor *outs,
                                   size_t n_outs, const int64_t *scalars, size_t n_scalars,
                                   int64_t *result, void *user);

/* A library function may call this before returning non-zero: the runtime's error then says why. */
TESSERA_API void tessera_library_error(const char *message);

typedef struct tessera_library {
    const char *name; /* as the executable calls it, e.g. "tessera.test.double" */
    tessera_library_fn fn;
    void *user;
} tessera_library;

/* ---- models ------------------------------------------------------------------------------ */

typedef struct tessera_model tessera_model;
typedef struct tessera_session tessera_session;

typedef struct tessera_model_params {
    int32_t n_threads;          /* 0: the number of online CPUs */
    /* "auto" (the fastest device of this build that runs the kernels and that this machine has), or a
     * device's name: "vulkan", "opencl", "metal", "cpu", with ":N" for the N-th device of its kind. A build
     * split across devices (--gpu-layers) opens each device it lists; this names its GPU, or is "auto". */
    const char *device;
    tessera_allocator allocator;
    const tessera_library *libraries; /* registered before loading; the executable's names must all be here */
    size_t n_libraries;
    /* Where GPU devices keep compiled pipelines (Vulkan's pipeline cache, OpenCL program binaries), so a
     * second load compiles no shader; NULL: a .tessera-cache folder in the model's folder (when writable). */
    const char *cache_dir;
    /* Bytes the model may take, checked once executable.json is read, before the device, weights and arenas
     * are allocated: if the plan's total over every device (tessera_model_plan_devices) exceeds it, the load
     * fails with TESSERA_ERROR_OUT_OF_MEMORY and a message naming both. 0 (the default): what this machine has available now (MemAvailable from /proc/meminfo on
     * Linux and Android, os_proc_available_memory() on iOS, hw.memsize on other Apple systems); where that
     * cannot be read, the check is skipped. UINT64_MAX: no check. */
    uint64_t memory_limit;
} tessera_model_params;

typedef struct tessera_memory {
    uint64_t weights;  /* bytes of the tensor cache's weights */
    uint64_t arena;    /* bytes of the functions' planned arenas */
    uint64_t kv_cache; /* bytes of the state tensors (the KV cache) */
    uint64_t total;
} tessera_memory;

TESSERA_API tessera_model_params tessera_model_default_params(void);
/* Reads and checks every file of the folder, then allocates. NULL on error. */
TESSERA_API tessera_model *tessera_model_load(const char *dir, const tessera_model_params *params);
/* The device the model runs on and why it was chosen, for people:
 * "vulkan:0 (llvmpipe (LLVM 15.0.6, 256 bits)): auto: the kernels are spirv (target vulkan)"; a split
 * build names each of its devices: "vulkan:0 (llvmpipe ...) + cpu (this CPU, 2 threads): split build ...". */
TESSERA_API const char *tessera_model_device(const tessera_model *m);
/* What a GPU device did with the kernels when the model was loaded, for apps that watch load time
 * and for tests (the counts are summed over a split build's devices; all zero on the CPU). */
typedef struct tessera_compile_stats {
    uint32_t kernels;       /* kernels the device made ready (pipelines, programs) */
    uint32_t compiled;      /* of those, compiled at this load (the driver found no cached binary) */
    uint32_t from_cache;    /* of those, taken from the disk cache (cache_dir or the model's .tessera-cache) */
    uint32_t shader_modules; /* Vulkan: shader modules created */
    double seconds;         /* wall time spent making them */
} tessera_compile_stats;
TESSERA_API int tessera_model_compile_stats(const tessera_model *m, tessera_compile_stats *out);
/* What the model holds; tessera_model_plan() gives the same without allocating. */
TESSERA_API int tessera_model_memory(const tessera_model *m, tessera_memory *out);
TESSERA_API int tessera_model_plan(const char *dir, tessera_memory *out);
/* The same per device: one entry for most builds, two for a build split across devices (a GPU beside
 * the CPU). Weights count on each device that reads them: a GPU holds a copy, the CPU reads the
 * shards in place. */
typedef struct tessera_device_memory {
    char device[16]; /* the device's kind: "vulkan", "opencl", "metal", "cpu" (or "webgpu", "wasm") */
    uint64_t weights, arena, kv_cache, total;
} tessera_device_memory;
/* Write up to max entries and return how many devices the model has (or a negative status). The plan
 * reads executable.json and tensor-cache.json only, before anything is allocated. */
TESSERA_API int32_t tessera_model_plan_devices(const char *dir, tessera_device_memory *out, int32_t max);
TESSERA_API int32_t tessera_model_memory_devices(const tessera_model *m, tessera_device_memory *out, int32_t max);
/* Context length (positions) and vocabulary size of a chat model; 0 for a plain executable. */
TESSERA_API int32_t tessera_model_context_length(const tessera_model *m);
TESSERA_API int32_t tessera_model_vocab_size(const tessera_model *m);
/* Allocations made through the model's allocator so far (tests check that decode makes none). */
TESSERA_API uint64_t tessera_model_allocation_count(const tessera_model *m);
/* Frees the model and the sessions still open on it (do not use them afterwards). */
TESSERA_API void tessera_model_free(tessera_model *m);

/* ---- calling functions of the executable directly (tests, conformance, custom programs) --- */

/* Calls function `name` with the non-state parameters in args. On success *outputs points to an
 * array of *n_outputs tensors (the result, tuples flattened depth-first) owned by the model and
 * valid until the next call of any function; integer results come back as 0-d int64 tensors, and a
 * shape value as one such tensor per dimension. */
TESSERA_API int tessera_model_call(tessera_model *m, const char *name, const tessera_value *args,
                                   size_t n_args, const tessera_tensor **outputs, size_t *n_outputs);
/* Zero every state tensor (the KV cache). */
TESSERA_API void tessera_model_reset_state(tessera_model *m);

/* ---- named inputs and outputs: tensors in, tensors out (docs/native.md, "Named inputs and outputs") ---- */

/* An input of a function (a parameter that is not state) or an output (a value of its result, nested tuples
 * flattened depth-first), as executable.json describes it. The strings belong to the model. */
typedef struct tessera_io {
    const char *name;    /* the parameter's name; the output's recorded name (an ONNX graph's), else "output0" ... */
    int32_t kind;        /* TESSERA_VALUE_TENSOR, or TESSERA_VALUE_INT: an integer (passed as tessera_value.value;
                          * as an output, a 0-d int64 tensor) */
    int32_t has_dtype;   /* 0: the executable leaves the dtype open (dtype is then meaningless) */
    tessera_dtype dtype; /* an integer's is TESSERA_INT64 */
    int32_t ndim;        /* -1: not even the rank is known; an integer's is 0 */
    /* Per dimension (the first ndim entries, when the executable gives the shape): the size when it is fixed,
     * else -1; the dimension as executable.json writes it ("4", "n", "n + 1"; NULL where only the rank is
     * known); and, for a dimension that is one variable, that variable's upper bound (the most the memory plan
     * holds), else -1. */
    int64_t shape[TESSERA_MAX_NDIM];
    const char *dims[TESSERA_MAX_NDIM];
    int64_t upper_bounds[TESSERA_MAX_NDIM];
    const char *value;   /* an integer input whose value is a shape variable or expression: its text, else NULL */
} tessera_io;

/* Write up to max names of the executable's functions (in executable.json's order; the strings belong to the
 * model) and return how many it has, or a negative status. */
TESSERA_API int32_t tessera_model_functions(const tessera_model *m, const char **names, int32_t max);
/* Write up to max entries describing function `function`'s inputs (its non-state parameters, in order) or its
 * outputs; return how many there are (which may exceed max: call again with a larger array), or a negative
 * status. A parameter or result value that is neither a tensor nor an integer (a tuple parameter, a shape
 * value, an object) is TESSERA_ERROR_UNSUPPORTED, naming it: call such a function with tessera_model_call. */
TESSERA_API int32_t tessera_model_inputs(const tessera_model *m, const char *function, tessera_io *out, int32_t max);
TESSERA_API int32_t tessera_model_outputs(const tessera_model *m, const char *function, tessera_io *out, int32_t max);

/* Calls function `function` with its inputs by name: input_names[i] is given inputs[i] (any order; each input
 * exactly once; tensors in numpy's layout, integers as TESSERA_VALUE_INT). Every input is checked before
 * anything runs, and each failure names the input: an unknown or missing name, or one given twice, a tensor
 * for an integer or the reverse (TESSERA_ERROR_INVALID_ARGUMENT); a dtype, rank or fixed dimension that
 * differs, a dimension above its variable's upper bound, two inputs giving one variable different sizes, a
 * dimension that differs from its expression ("n + 1") (TESSERA_ERROR_RUNTIME_CHECK).
 * On success outputs[i] points to the output named output_names[i] (output_names NULL: the function's every
 * output in order, and n_outputs must be their number; an unknown name is TESSERA_ERROR_INVALID_ARGUMENT).
 * The tensors belong to the model and stay valid until its next call of any function, as tessera_model_call's. */
TESSERA_API int tessera_model_run_named(tessera_model *m, const char *function, size_t n_inputs,
                                        const char *const *input_names, const tessera_value *inputs,
                                        size_t n_outputs, const char *const *output_names,
                                        const tessera_tensor **outputs);

/* Per-kernel timing (bench/native.py's profile): while enabled, each launch is timed on the host
 * (devices that run asynchronously are synchronized after each). Enabling clears the totals. */
typedef struct tessera_kernel_profile {
    const char *kernel; /* its name in the executable */
    uint64_t launches;
    double seconds;
} tessera_kernel_profile;
TESSERA_API int tessera_model_set_profiling(tessera_model *m, int enable);
/* Writes up to max entries, one per kernel of the executable in its order; returns how many kernels there are. */
TESSERA_API int32_t tessera_model_kernel_profile(const tessera_model *m, tessera_kernel_profile *out, int32_t max);

/* ---- tokenizer ----------------------------------------------------------------------------- */

/* Writes up to max_tokens ids; returns the number of tokens the text has (which may be larger
 * than max_tokens: call again with a larger buffer), or a negative status. Special tokens in the
 * text (<|im_start|>) are recognized when parse_special is non-zero. */
TESSERA_API int32_t tessera_tokenize(const tessera_model *m, const char *text, size_t text_len, int32_t *tokens,
                                     int32_t max_tokens, int add_special, int parse_special);
/* Writes the UTF-8 text of the ids (not NUL-terminated) into buf, up to buf_size bytes; returns
 * its full length in bytes (larger than buf_size: call again), or a negative status. */
TESSERA_API int32_t tessera_detokenize(const tessera_model *m, const int32_t *tokens, int32_t n_tokens, char *buf,
                                       int32_t buf_size);

/* ---- chat ---------------------------------------------------------------------------------- */

typedef struct tessera_sampling_params {
    float temperature;        /* 0: greedy */
    float top_p;              /* 1: off */
    int32_t top_k;            /* 0: off */
    float repetition_penalty; /* 1: off */
    uint64_t seed;
    int32_t max_tokens;       /* at least 1 */
} tessera_sampling_params;

typedef struct { const char *role; const char *content; } tessera_message;

/* Gets each piece of the reply as it is generated (whole UTF-8 characters); return non-zero to stop. */
typedef int (*tessera_piece_callback)(const char *utf8_piece, void *user);

typedef struct tessera_usage {
    int32_t prompt_tokens;     /* tokens of the conversation */
    int32_t prefilled_tokens;  /* of those, the ones computed (the rest were in the KV cache) */
    int32_t completion_tokens;
    double prefill_tokens_per_s;
    double decode_tokens_per_s;
} tessera_usage;

TESSERA_API tessera_sampling_params tessera_sampling_default_params(void);
TESSERA_API tessera_session *tessera_session_new(tessera_model *m);
/* Runs one turn: the conversation msgs (all of it; the part already in the KV cache is not
 * prefilled again) and the assistant's reply, streamed to cb. usage may be NULL. */
TESSERA_API int tessera_chat_completion(tessera_session *s, const tessera_message *msgs, size_t n_msgs,
                                        const tessera_sampling_params *sp, tessera_piece_callback cb, void *user,
                                        tessera_usage *usage);
/* Forget the conversation (the next turn prefills from the start). */
TESSERA_API void tessera_session_reset(tessera_session *s);
TESSERA_API void tessera_session_free(tessera_session *s);

#ifdef __cplusplus
}
#endif
#endif /* TESSERA_H */
