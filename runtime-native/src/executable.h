/* executable.json (docs/format.md, versions 3 and 4) as C structures, checked once at load so that the
 * VM never meets an index out of range: every register, kernel, function, constant, storage token
 * and instruction target is validated here, and every shape expression is compiled. */
#ifndef TSR_EXECUTABLE_H
#define TSR_EXECUTABLE_H

#include "common.h"
#include "bump.h"
#include "shape_expr.h"

typedef enum tsr_opcode {
    TSR_OP_MATCH, TSR_OP_ALLOC_STORAGE, TSR_OP_ALLOC_TENSOR, TSR_OP_LAUNCH, TSR_OP_CALL_BUILTIN, TSR_OP_CALL,
    TSR_OP_FUNC, TSR_OP_IF, TSR_OP_GOTO, TSR_OP_PRIM, TSR_OP_MOVE, TSR_OP_TUPLE, TSR_OP_GET, TSR_OP_SHAPE,
    TSR_OP_RET, TSR_OP_TO_DEVICE,
} tsr_opcode;

/* The most devices a split build (version 4) lists (docs/executable.schema.json). */
#define TSR_MAX_DEVICES 16

/* One dimension of struct info: its text (for messages) and compiled form; `symbol` is the
 * index of the variable when the text is a plain name (bound by a match when not yet bound). */
typedef struct tsr_dim {
    const char *text;
    tsr_shape_expr expr;
    int32_t symbol;
} tsr_dim;

typedef enum tsr_sinfo_kind {
    TSR_SINFO_OBJECT, TSR_SINFO_PRIM, TSR_SINFO_SHAPE, TSR_SINFO_TENSOR, TSR_SINFO_TUPLE, TSR_SINFO_CALLABLE,
} tsr_sinfo_kind;

typedef struct tsr_sinfo {
    tsr_sinfo_kind kind;
    bool has_dtype;
    tessera_dtype dtype;
    int32_t ndim;     /* -1: unknown */
    tsr_dim *dims;    /* tensor shape or shape values (ndim of them), or a prim's value (one) */
    int32_t n_dims;   /* -1 when the struct info gives no dims */
    struct tsr_sinfo *fields;
    int32_t n_fields;
} tsr_sinfo;

typedef struct tsr_instr {
    tsr_opcode op;
    int32_t dst;      /* -1: none */
    int32_t reg;      /* match: the register checked; get/move/ret/to_device: the source; if: the condition */
    int32_t target;   /* goto target, if's else, get's index, launch's kernel, call's function (-1: callee reg) */
    int32_t callee;   /* call through a register: its register */
    int32_t library;  /* call_builtin: index into the executable's libraries */
    int32_t *regs;    /* launch/call_builtin args then outs; call args; tuple fields */
    int32_t n_args, n_outs;
    int32_t device;   /* alloc_storage/alloc_tensor: whose pool; to_device: where dst lives (0 unless split) */
    tsr_shape_expr *exprs; /* launch/call_builtin scalars; shape values; alloc_tensor shape; prim value; alloc size */
    int32_t n_exprs;
    tessera_dtype dtype;   /* alloc_tensor */
    tsr_sinfo sinfo;       /* match */
    const char *text, *what;
} tsr_instr;

typedef enum tsr_location_kind {
    TSR_LOC_NONE, TSR_LOC_PARAM, TSR_LOC_CONSTANT, TSR_LOC_ARENA, TSR_LOC_STORAGE,
} tsr_location_kind;

/* What executable.json says about one register: its planned tensor (if any) and its place. */
typedef struct tsr_register_info {
    bool has_tensor;
    tessera_dtype dtype;
    int32_t ndim;
    tsr_shape_expr shape[TESSERA_MAX_NDIM];
    tsr_shape_expr bytes;
    tsr_location_kind location;
    int32_t device;     /* the device of a split build it lives on (0 unless split) */
    bool device_stated; /* executable.json gives its device (a launch checks it against its kernel's) */
    int32_t index; /* param index, constant index, storage token, or the register of the storage */
} tsr_register_info;

typedef struct tsr_param {
    const char *name;
    int32_t reg;
    bool state;
    int32_t device; /* where an argument is uploaded (0 unless split) */
    tsr_sinfo sinfo;
} tsr_param;

typedef struct tsr_storage_plan {
    int32_t index;
    int32_t buffer;    /* -1: allocated at run time */
    uint64_t offset, static_size;
} tsr_storage_plan;

typedef struct tsr_function {
    const char *name;
    tsr_param *params;
    int32_t n_params;
    tsr_symbols symbols;     /* every variable its expressions use; the first n_bounded have bounds */
    int64_t *upper_bounds;   /* per symbol; -1: none */
    int32_t n_registers;
    tsr_register_info *regs; /* n_registers */
    tsr_instr *code;
    int32_t n_code;
    bool static_memory, recursive;
    uint64_t *arena_buffers; /* bytes of each arena buffer */
    int32_t *buffer_devices; /* the device of each arena buffer (all 0 unless split) */
    int32_t n_arena_buffers;
    tsr_storage_plan *storages;
    int32_t n_storages;
    int32_t max_token;       /* storages are looked up by token index: token -> storages[] position */
    int32_t *token_to_storage;
    /* The result's struct info (a kind-object one when the file gives none) and a name per value of it, nested
     * tuples flattened: result_names when the file records them (an ONNX graph's outputs), else "output0" ... */
    tsr_sinfo result;
    const char **result_names;
    int32_t n_results;
    bool result_names_recorded;
} tsr_function;

/* How a kernel touches a binding (abi.bindings[].access): GPU devices order launches by it. */
enum { TSR_ACCESS_READ = 1, TSR_ACCESS_WRITE = 2 };

typedef struct tsr_kernel {
    const char *name, *backend, *entry_point;
    int32_t module;           /* index into modules */
    int32_t device;           /* the device of a split build that runs it (0 unless split) */
    int32_t workgroup_size[3];
    int32_t n_bindings;
    uint8_t *binding_access;  /* per binding: TSR_ACCESS_READ | TSR_ACCESS_WRITE (both when abi gives no access) */
    int32_t n_scalars;
    tsr_symbols scalar_symbols; /* the kernel's scalars, by position: its grid is over these */
    tsr_shape_expr grid[3];
} tsr_kernel;

typedef struct tsr_module {
    const char *path, *backend, *sha256;
    uint64_t nbytes;
} tsr_module;

/* One entry of a split build's `devices` (docs/format.md "Devices (version 4)"): what it is and what its
 * own kernels and arena ask of it. Entry 0 is the build's own target. */
typedef struct tsr_exe_device {
    const char *kind;    /* the runtime device: "vulkan", "opencl", "cpu", "webgpu", "wasm" */
    int32_t id;          /* which device of that kind */
    const char *vdevice; /* the first of its vdevices ("vulkan:0"), for messages */
    const char *target_name, *target_cpu;
    const char **required_features;
    int32_t n_required_features;
    int64_t max_invocations, max_storage_buffers, max_workgroup_storage, max_buffer_size, max_binding_size;
} tsr_exe_device;

typedef struct tsr_executable {
    tsr_bump *mem;            /* everything below lives here, freed at once */
    const char *target_kind, *target_name;
    const char *target_cpu; /* the instruction set a cpu build's kernels use ("native", "x86-64-v3"), or "" */
    tsr_module *modules;
    int32_t n_modules;
    tsr_kernel *kernels;
    int32_t n_kernels;
    tsr_function *functions;
    int32_t n_functions;
    const char **constants;
    int32_t n_constants;
    const char **libraries;
    int32_t n_libraries;
    const char **required_features;
    int32_t n_required_features;
    /* required_limits by name; -1 when absent */
    int64_t max_invocations, max_storage_buffers, max_workgroup_storage, max_buffer_size, max_binding_size;
    /* A split build (version 4): its devices (2 .. TSR_MAX_DEVICES); 0 and NULL for one device. */
    tsr_exe_device *devices;
    int32_t n_devices;
    /* Per constant, bit d set when device d reads it (a copy on each); bit 0 alone unless split. */
    uint32_t *constant_devices;
} tsr_executable;

/* Parses and checks executable.json text (`size` bytes). `a` backs the executable's memory. */
int tsr_executable_parse(tsr_alloc *a, const char *json, size_t size, tsr_executable *out);
void tsr_executable_free(tsr_executable *exe);
int32_t tsr_executable_function(const tsr_executable *exe, const char *name);
/* The executable as device `device` of a split build sees it, for tsr_device_check_requirements and a
 * device's load_kernels: that device's target and required features and limits (every kernel is still
 * listed, by its index). For a build of one device, *exe itself. */
tsr_executable tsr_executable_device_view(const tsr_executable *exe, int32_t device);

#endif
