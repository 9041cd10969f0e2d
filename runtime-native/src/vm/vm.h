/* The VM: the program layer (frames, registers, the shape heap, the instruction set of
 * docs/format.md) over the storage layer (arenas of the memory plan, weights, state, a pool for
 * run-time allocations) and a device. The same three layers as the Python VM and runtime-js.
 *
 * A build split across devices (format version 4) has one device per entry of its `devices`: each
 * has its own arena, state, copies of the weights it reads and pool, a tensor remembers its device,
 * a launch goes to its kernel's device and to_device copies between them. One device is the case
 * of devices[0] alone, with no more work per launch. */
#ifndef TSR_VM_H
#define TSR_VM_H

#include "bump.h"
#include "device.h"
#include "executable.h"
#include "tensor_cache.h"

typedef struct tsr_block tsr_block;

typedef enum tsr_value_kind {
    TSR_V_NONE, TSR_V_TENSOR, TSR_V_INT, TSR_V_TUPLE, TSR_V_SHAPE, TSR_V_FUNC, TSR_V_STORAGE,
} tsr_value_kind;

typedef struct tsr_vtensor {
    void *base;    /* device memory */
    size_t offset; /* bytes into it */
    size_t nbytes; /* storage bytes (whole words) */
    tessera_dtype dtype;
    int32_t ndim;
    int32_t device; /* which of the VM's devices holds it */
    int64_t shape[TESSERA_MAX_NDIM];
    tsr_block *block; /* the pool block holding it, if any */
} tsr_vtensor;

enum { TSR_FIXED_UNKNOWN, TSR_FIXED_READY, TSR_FIXED_NO };

/* What a launch instruction passes that is the same on every call, kept per function and instruction, in
 * program order: the bindings that are fixed registers (see fixed_tensors) and, when every scalar is a
 * constant, the scalars and the grid. A step's launches then read one contiguous record each instead of the
 * instruction, its registers' plans and expressions, which a kernel run between two launches has evicted
 * from the caches (the per-launch host time of issue 34). */
#define TSR_PLAN_BINDINGS 8
#define TSR_PLAN_SCALARS 8
typedef struct tsr_launch_plan {
    uint8_t state;                      /* TSR_FIXED_*: NO keeps the general path */
    bool all_fixed;                     /* every binding is fixed: bases, offsets, sizes are the launch's */
    bool fixed_scalars;                 /* scalars and grid are the launch's */
    int32_t n;
    int32_t regs[TSR_PLAN_BINDINGS];    /* -1: binding i is fixed, in bases/offsets/sizes; else its register */
    void *bases[TSR_PLAN_BINDINGS];
    size_t offsets[TSR_PLAN_BINDINGS], sizes[TSR_PLAN_BINDINGS];
    int32_t scalars[TSR_PLAN_SCALARS];
    int32_t grid[3];
} tsr_launch_plan;

typedef struct tsr_val tsr_val;
struct tsr_val {
    tsr_value_kind kind;
    union {
        tsr_vtensor tensor;
        int64_t i;
        struct { tsr_val *items; int32_t n; } tuple;
        struct { int64_t *dims; int32_t n; } shape;
        int32_t func;
        tsr_block *storage;
    } as;
};

/* A block of the run-time pool: power-of-two size classes, reused by later allocations. */
struct tsr_block {
    void *base;
    size_t size;
    int32_t size_class;
    int32_t device;         /* the VM's device it lives on */
    bool kept;              /* marked while a frame returns: the result reaches it */
    tsr_block *next_free;
    tsr_block *next_owned;  /* the frame (or the held list) that owns it */
};

#define TSR_POOL_CLASSES 48
/* Symbolic variables per function (the shape heap of a frame is this big). */
#define TSR_MAX_SYMBOLS 256

typedef struct tsr_vm {
    tsr_alloc *alloc;
    const tsr_executable *exe;
    tsr_device *device;          /* devices[0] */
    tsr_device *devices[TSR_MAX_DEVICES]; /* by the executable's device index (one unless split) */
    int32_t n_devices;
    /* storage */
    void **constants;            /* device memory of constant c on device d at [c * n_devices + d]; NULL: not there */
    size_t *constant_bytes;      /* by constant */
    void **owned_constants;      /* copies a device made (on a GPU, or bool weights widened), freed at the end */
    void *arenas[TSR_MAX_DEVICES]; /* per device, every function's planned buffers on it, allocated once at load */
    size_t arena_bytes[TSR_MAX_DEVICES];
    size_t **buffer_offsets;     /* per function: where each of its arena buffers starts in its device's arena */
    /* Per function, per register: a register placed on a weight or an arena slot whose shape and bytes are
     * constant expressions is the same tensor on every call, so materialize builds (and checks) it once and
     * copies it after (the per-launch host time of a decode step, issue 34). fixed_state: TSR_FIXED_*. */
    tsr_vtensor **fixed_tensors;
    uint8_t **fixed_state;
    tsr_launch_plan **launch_plans; /* per function, per instruction (only launches' are used) */
    void **state;                /* per state name: its memory; shared by every function naming it */
    const char **state_names;
    size_t *state_bytes;
    int32_t *state_devices;
    int32_t n_state;
    tsr_block *free_blocks[TSR_MAX_DEVICES][TSR_POOL_CLASSES];
    uint64_t copies;             /* to_device copies between two devices so far */
    uint64_t pool_device_allocations;
    /* program */
    const tessera_library *libraries; /* by the executable's library index */
    tsr_bump *scratch;           /* frames, tuples and host copies of one top-level call */
    tsr_block *held;             /* the last call's result blocks */
    tessera_tensor *outputs;     /* the last call's flattened result */
    int32_t n_outputs, outputs_capacity;
    tsr_bump *output_scratch;    /* host copies of outputs that need conversion (bool) */
    /* profiling (tessera_model_set_profiling) */
    bool profiling;
    uint64_t *kernel_launches;
    double *kernel_seconds;
} tsr_vm;

/* Storage: allocates arenas and state from the memory plan, binds the weights. */
int tsr_vm_init(tsr_vm *vm, tsr_alloc *a, const tsr_executable *exe, tsr_device *device,
                const tsr_tensor_cache *weights, const tessera_library *libraries, size_t n_libraries);
/* The same over a split build's devices, one per entry of exe->devices (n_devices of them; one device
 * for a build of one device). */
int tsr_vm_init_devices(tsr_vm *vm, tsr_alloc *a, const tsr_executable *exe, tsr_device *const *devices,
                        int32_t n_devices, const tsr_tensor_cache *weights, const tessera_library *libraries,
                        size_t n_libraries);
void tsr_vm_free(tsr_vm *vm);
/* Bytes of the planned arenas and of the state (the KV cache), from the executable alone: of device
 * `device` of a split build, or of every device for -1. */
int tsr_plan_bytes(const tsr_executable *exe, int32_t device, uint64_t *arena, uint64_t *state);
int tsr_vm_reset_state(tsr_vm *vm);

/* Runs function `name` (docs/format.md "Instructions"); the result is vm->outputs. */
int tsr_vm_call(tsr_vm *vm, const char *name, const tessera_value *args, size_t n_args);

/* storage helpers shared by the program layer */
tsr_block *tsr_pool_take(tsr_vm *vm, size_t nbytes, int32_t device);
void tsr_pool_give(tsr_vm *vm, tsr_block *block);
size_t tsr_storage_bytes(tessera_dtype dtype, int64_t count);
/* bool, int8 and uint8 take a 32-bit word per element on devices (facts.h's TSR_DTYPE_BYTES_*): a value
 * crosses between host (numpy's layout) and device widened (bool 0 or 1, int8 sign- and uint8
 * zero-extended) or narrowed (bool: nonzero; int8, uint8: the low byte, as numpy's astype wraps). */
bool tsr_dtype_widened(tessera_dtype dtype);
void tsr_widen_to_words(tessera_dtype dtype, const void *host, uint32_t *words, int64_t count);
void tsr_narrow_from_words(tessera_dtype dtype, const uint32_t *words, void *host, int64_t count);
int tsr_state_index(const tsr_vm *vm, const char *name);

/* match: bind plain symbolic dims not yet bound, then check (messages as tessera.ir.check words them). */
int tsr_match(const tsr_function *f, const tsr_instr *in, const tsr_val *value, int64_t *heap, uint8_t *bound);

/* tessera.builtin.*: the data-dependent operators every runtime supplies (docs/format.md). */
const tessera_library *tsr_builtin_library(const char *name);

#endif
