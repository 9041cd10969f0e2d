/* The VM's program layer over a test device: tests/data/vm/program.json is a hand-written
 * executable whose kernels the device below runs as C functions (add, double, positive). Each
 * function of it exercises part of docs/format.md "Instructions": arenas and constants, calls by
 * name and through a function value, branches on a prim and on a one-element tensor, recursion
 * (and its depth limit), tuples, shapes and prims, the run-time pool, the builtins and user
 * libraries, match errors, bounds, state shared between functions. Outputs are checked against
 * values computed here; a steady loop of calls must allocate nothing. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "files.h"
#include "harness.h"
#include "tensor_cache.h"
#include "vm/vm.h"

static tsr_test_counts counts;

/* ---- the test device: host memory, kernels as C functions by index ------------------------- */

typedef struct test_device {
    tsr_device base;
    long launches;
    int32_t last_grid[3];
} test_device;

static void *dev_allocate(tsr_device *d, size_t size) { return tsr_calloc(d->alloc, 1, size ? size : 1); }
static void dev_release(tsr_device *d, void *base) { tsr_free(d->alloc, base); }
static void *dev_adopt_host(tsr_device *d, const void *host, size_t size) {
    (void)d, (void)size;
    return (void *)host;
}
static int dev_upload(tsr_device *d, void *base, size_t offset, const void *src, size_t size) {
    (void)d;
    if (size) memcpy((char *)base + offset, src, size);
    return 0;
}
static int dev_read_back(tsr_device *d, const void *base, size_t offset, void *dst, size_t size) {
    (void)d;
    if (size) memcpy(dst, (const char *)base + offset, size);
    return 0;
}
static void *dev_host_pointer(tsr_device *d, void *base, size_t offset) {
    (void)d;
    return (char *)base + offset;
}
static int dev_launch(tsr_device *d, int32_t kernel, int32_t n_bindings, void *const *bases, const size_t *offsets,
                      const size_t *sizes, const int32_t *scalars, const int32_t grid[3]) {
    test_device *t = (test_device *)d;
    t->launches++;
    memcpy(t->last_grid, grid, sizeof t->last_grid);
    float *b[3] = {NULL, NULL, NULL};
    for (int32_t i = 0; i < n_bindings && i < 3; i++) b[i] = (float *)((char *)bases[i] + offsets[i]);
    switch (kernel) {
    case 0: /* add: out = a + b over len elements */
        for (int32_t i = 0; i < scalars[0]; i++) b[2][i] = b[0][i] + b[1][i];
        return 0;
    case 1: /* double: out = 2 x */
        for (int32_t i = 0; i < scalars[0]; i++) b[1][i] = 2.0f * b[0][i];
        return 0;
    case 2: /* positive: a bool word, x[0] > 0 */
        *(uint32_t *)b[1] = b[0][0] > 0.0f;
        return 0;
    default:
        return tsr_error(TESSERA_ERROR_UNSUPPORTED, "test device: no kernel %d", kernel);
    }
}
static int dev_synchronize(tsr_device *d) {
    (void)d;
    return 0;
}
static void dev_destroy(tsr_device *d) { (void)d; }

static const tsr_device_ops TEST_OPS = {
    "test", NULL, dev_allocate, dev_release, dev_adopt_host, dev_upload, dev_read_back, dev_host_pointer,
    dev_launch, dev_synchronize, dev_destroy, NULL,
};

/* A second test device for split builds, like a GPU: the host cannot touch its memory (host_pointer is
 * NULL, so outputs, copies and arguments go through read_back and upload), and it runs only kernel 1
 * (double), as the split executable places it. */
static void *gpu_host_pointer(tsr_device *d, void *base, size_t offset) {
    (void)d, (void)base, (void)offset;
    return NULL;
}
static int gpu_launch(tsr_device *d, int32_t kernel, int32_t n_bindings, void *const *bases, const size_t *offsets,
                      const size_t *sizes, const int32_t *scalars, const int32_t grid[3]) {
    if (kernel != 1) return tsr_error(TESSERA_ERROR_DEVICE, "test gpu: kernel %d is not mine", kernel);
    return dev_launch(d, kernel, n_bindings, bases, offsets, sizes, scalars, grid);
}
static const tsr_device_ops GPU_OPS = {
    "test-gpu", NULL, dev_allocate, dev_release, dev_adopt_host, dev_upload, dev_read_back, gpu_host_pointer,
    gpu_launch, dev_synchronize, dev_destroy, NULL,
};

/* ---- user libraries --------------------------------------------------------------------------- */

/* out = 3 x; returns scalars[0] + scalars[1] (n + 10 n) so the test sees the scalars arrive. */
static int triple(const tessera_value *args, size_t n_args, tessera_tensor *outs, size_t n_outs, const int64_t *scalars,
                  size_t n_scalars, int64_t *result, void *user) {
    if (n_args != 1 || n_outs != 1 || n_scalars != 2 || args[0].kind != TESSERA_VALUE_TENSOR || user != (void *)&triple)
        return 1;
    const float *x = args[0].tensor.data;
    float *out = outs[0].data;
    for (int64_t i = 0; i < outs[0].shape[0]; i++) out[i] = 3.0f * x[i];
    *result = scalars[0] + scalars[1];
    return 0;
}

static int failing(const tessera_value *args, size_t n_args, tessera_tensor *outs, size_t n_outs,
                   const int64_t *scalars, size_t n_scalars, int64_t *result, void *user) {
    (void)args, (void)n_args, (void)outs, (void)n_outs, (void)scalars, (void)n_scalars, (void)result, (void)user;
    tessera_library_error("the moon is not full");
    return 1;
}

/* ---- the fixture ------------------------------------------------------------------------------ */

static tsr_alloc a;
static tsr_executable exe;
static test_device device;
static tsr_vm vm;
static float bias_data[64];

static int has(const char *needle) {
    if (strstr(tessera_last_error(), needle)) return 1;
    fprintf(stderr, "last error \"%s\" lacks \"%s\"\n", tessera_last_error(), needle);
    return 0;
}

/* data is void *: the int32 and bool cases pass their own arrays, then set the dtype (no cast to float *,
 * which -Wstrict-aliasing=2, on in the cross builds, reports as type punning). */
static tessera_value f32(void *data, int32_t ndim, int64_t d0, int64_t d1) {
    tessera_value v;
    memset(&v, 0, sizeof v);
    v.kind = TESSERA_VALUE_TENSOR;
    v.tensor.data = data;
    v.tensor.dtype = TESSERA_FLOAT32;
    v.tensor.ndim = ndim;
    v.tensor.shape[0] = d0;
    v.tensor.shape[1] = d1;
    return v;
}

static tessera_value prim(int64_t value) {
    tessera_value v;
    memset(&v, 0, sizeof v);
    v.kind = TESSERA_VALUE_INT;
    v.value = value;
    return v;
}

static const float *out_f32(int32_t i) { return (const float *)vm.outputs[i].data; }
static int64_t out_i64(int32_t i, int64_t k) { return ((const int64_t *)vm.outputs[i].data)[k]; }

/* ---- the cases -------------------------------------------------------------------------------- */

/* straight-line: out = 2 (x + bias), bias a constant, the intermediate and the result in the arena */
static void straight(void) {
    float x[10];
    for (int i = 0; i < 10; i++) x[i] = (float)i - 3.0f;
    tessera_value args[1] = {f32(x, 1, 10, 0)};
    long launches = device.launches;
    CHECK_EQ_INT(tsr_vm_call(&vm, "straight", args, 1), 0);
    CHECK_EQ_INT(device.launches - launches, 2);
    CHECK_EQ_INT(device.last_grid[0], 2); /* (10 + 7) // 8 from the kernel's grid over its scalar */
    CHECK_EQ_INT(device.last_grid[1], 1);
    CHECK_EQ_INT(vm.n_outputs, 1);
    CHECK_EQ_INT(vm.outputs[0].dtype, TESSERA_FLOAT32);
    CHECK_EQ_INT(vm.outputs[0].ndim, 1);
    CHECK_EQ_INT(vm.outputs[0].shape[0], 10);
    int wrong = 0;
    for (int i = 0; i < 10; i++) wrong += out_f32(0)[i] != 2.0f * (x[i] + bias_data[i]);
    CHECK_EQ_INT(wrong, 0);
    /* the result lives in the function's arena: the planned storage for token 1 */
    const tsr_function *f = &exe.functions[tsr_executable_function(&exe, "straight")];
    const char *arena = vm.arenas[0];
    CHECK((const char *)vm.outputs[0].data == arena + vm.buffer_offsets[f - exe.functions][0] + 256);

    /* the upper bound n <= 64, for which the arena was planned */
    float big[65] = {0};
    tessera_value too_big[1] = {f32(big, 1, 65, 0)};
    CHECK_EQ_INT(tsr_vm_call(&vm, "straight", too_big, 1), TESSERA_ERROR_RUNTIME_CHECK);
    CHECK(has("straight: n = 65 exceeds its upper bound 64"));
    CHECK_EQ_INT(vm.n_outputs, 0);
    tessera_value at_bound[1] = {f32(big, 1, 64, 0)};
    CHECK_EQ_INT(tsr_vm_call(&vm, "straight", at_bound, 1), 0);

    /* argument count and dtype */
    CHECK_EQ_INT(tsr_vm_call(&vm, "straight", NULL, 0), TESSERA_ERROR_INVALID_ARGUMENT);
    CHECK(has("straight takes 1 arguments (x), got 0"));
    tessera_value two[2] = {f32(x, 1, 10, 0), f32(x, 1, 10, 0)};
    CHECK_EQ_INT(tsr_vm_call(&vm, "straight", two, 2), TESSERA_ERROR_INVALID_ARGUMENT);
    CHECK(has("got 2"));
    int32_t ints[4] = {1, 2, 3, 4};
    tessera_value wrong_dtype[1] = {f32(ints, 1, 4, 0)};
    wrong_dtype[0].tensor.dtype = TESSERA_INT32;
    CHECK_EQ_INT(tsr_vm_call(&vm, "straight", wrong_dtype, 1), TESSERA_ERROR_RUNTIME_CHECK);
    CHECK(has("argument 'x' of straight: expected R.Tensor((n,), dtype=\"float32\"), got dtype int32"));
    CHECK_EQ_INT(tsr_vm_call(&vm, "nothing", NULL, 0), TESSERA_ERROR_INVALID_ARGUMENT);
    CHECK(has("no function 'nothing'"));
}

/* Later calls take what the first built (vm.h): a weight's register is fixed, an argument's and one of a
 * symbolic shape are not; a launch's plan keeps the weight's binding and evaluates the others and its scalar
 * (over n) on every call, so calls with another n still get their own grid and results. */
static void repeated_calls(void) {
    int32_t fi = tsr_executable_function(&exe, "straight");
    for (int round = 0; round < 4; round++) {
        int64_t n = round % 2 ? 3 : 10;
        float x[10];
        for (int i = 0; i < 10; i++) x[i] = (float)(i * (round + 1));
        tessera_value args[1] = {f32(x, 1, n, 0)};
        CHECK_EQ_INT(tsr_vm_call(&vm, "straight", args, 1), 0);
        CHECK_EQ_INT(device.last_grid[0], (int32_t)((n + 7) / 8));
        CHECK_EQ_INT(vm.outputs[0].shape[0], n);
        int wrong = 0;
        for (int64_t i = 0; i < n; i++) wrong += out_f32(0)[i] != 2.0f * (x[i] + bias_data[i]);
        CHECK_EQ_INT(wrong, 0);
    }
    CHECK_EQ_INT(vm.fixed_state[fi][1], TSR_FIXED_READY); /* bias: a weight of shape (64,) */
    CHECK_EQ_INT(vm.fixed_state[fi][2], TSR_FIXED_NO);    /* an arena slot of shape (n,) */
    CHECK_EQ_INT(vm.fixed_state[fi][0], TSR_FIXED_UNKNOWN); /* the argument: bound by the call, never planned */
    const tsr_launch_plan *plan = &vm.launch_plans[fi][1]; /* launch add(x, bias) -> register 2 */
    CHECK_EQ_INT(plan->state, TSR_FIXED_READY);
    CHECK(!plan->all_fixed && !plan->fixed_scalars);
    CHECK(plan->regs[0] == 0 && plan->regs[1] == -1 && plan->regs[2] == 2);
}

/* calls: by name and through a function value; the match message of a callee's parameter */
static void calls(void) {
    float x[12];
    for (int i = 0; i < 12; i++) x[i] = (float)i * 0.5f;
    tessera_value args[1] = {f32(x, 2, 3, 4)};
    CHECK_EQ_INT(tsr_vm_call(&vm, "calls", args, 1), 0);
    CHECK_EQ_INT(vm.n_outputs, 1);
    CHECK(vm.outputs[0].ndim == 2 && vm.outputs[0].shape[0] == 3 && vm.outputs[0].shape[1] == 4);
    CHECK(memcmp(out_f32(0), x, sizeof x) == 0);

    /* the exact message of docs/format.md */
    float y[15] = {0};
    tessera_value bad[1] = {f32(y, 2, 3, 5)};
    CHECK_EQ_INT(tsr_vm_call(&vm, "helper", bad, 1), TESSERA_ERROR_RUNTIME_CHECK);
    CHECK(strcmp(tessera_last_error(), "argument 'y' of helper: expected R.Tensor((m, 4), dtype=\"float32\"), got shape "
                                       "(3, 5): dimension 1 is 5, not 4") == 0);
    CHECK(has("got shape (3, 5): dimension 1 is 5, not 4"));
    /* the caller's own match fails first when called with the same shape */
    CHECK_EQ_INT(tsr_vm_call(&vm, "calls", bad, 1), TESSERA_ERROR_RUNTIME_CHECK);
    CHECK(has("argument 'x' of calls: expected R.Tensor((n, 4), dtype=\"float32\"), got shape (3, 5)"));
    /* rank */
    tessera_value flat[1] = {f32(y, 1, 15, 0)};
    CHECK_EQ_INT(tsr_vm_call(&vm, "helper", flat, 1), TESSERA_ERROR_RUNTIME_CHECK);
    CHECK(has("got rank 1 (shape (15,))"));
    /* a prim where a tensor is expected */
    tessera_value p[1] = {prim(3)};
    CHECK_EQ_INT(tsr_vm_call(&vm, "helper", p, 1), TESSERA_ERROR_RUNTIME_CHECK);
    CHECK(has("argument 'y' of helper: expected R.Tensor((m, 4), dtype=\"float32\"), got a"));
    CHECK(has("integer"));
}

static void branches(void) {
    float x[5] = {1, -2, 3, -4, 5};
    tessera_value args[2] = {f32(x, 1, 5, 0), prim(1)};
    /* if on a prim: non-zero takes the first arm (2 x), zero the else arm (x) */
    CHECK_EQ_INT(tsr_vm_call(&vm, "branch_prim", args, 2), 0);
    int wrong = 0;
    for (int i = 0; i < 5; i++) wrong += out_f32(0)[i] != 2.0f * x[i];
    CHECK_EQ_INT(wrong, 0);
    args[1] = prim(0);
    CHECK_EQ_INT(tsr_vm_call(&vm, "branch_prim", args, 2), 0);
    CHECK(memcmp(out_f32(0), x, sizeof x) == 0);
    args[1] = prim(-7); /* any non-zero value is true */
    CHECK_EQ_INT(tsr_vm_call(&vm, "branch_prim", args, 2), 0);
    CHECK(out_f32(0)[0] == 2.0f);

    /* if on a one-element bool tensor a kernel wrote (x[0] > 0) */
    CHECK_EQ_INT(tsr_vm_call(&vm, "branch_tensor", args, 1), 0);
    CHECK(out_f32(0)[4] == 10.0f);
    float neg[2] = {-1, 4};
    tessera_value nargs[1] = {f32(neg, 1, 2, 0)};
    CHECK_EQ_INT(tsr_vm_call(&vm, "branch_tensor", nargs, 1), 0);
    CHECK(out_f32(0)[0] == -1.0f && out_f32(0)[1] == 4.0f);

    /* if on a one-element tensor argument: int32, float32 (-0.0 is false), and more than one element */
    int32_t one = 1, zero = 0;
    float fzero = -0.0f, fhalf = 0.5f;
    tessera_value c[2] = {f32(&one, 1, 1, 0), prim(0)};
    c[0].tensor.dtype = TESSERA_INT32;
    CHECK_EQ_INT(tsr_vm_call(&vm, "branch_arg", c, 2), 0);
    CHECK_EQ_INT(out_i64(0, 0), 1);
    c[0].tensor.data = &zero;
    CHECK_EQ_INT(tsr_vm_call(&vm, "branch_arg", c, 2), 0);
    CHECK_EQ_INT(out_i64(0, 0), 0);
    c[0] = f32(&fzero, 1, 1, 0);
    CHECK_EQ_INT(tsr_vm_call(&vm, "branch_arg", c, 2), 0);
    CHECK_EQ_INT(out_i64(0, 0), 0);
    c[0] = f32(&fhalf, 1, 1, 0);
    CHECK_EQ_INT(tsr_vm_call(&vm, "branch_arg", c, 2), 0);
    CHECK_EQ_INT(out_i64(0, 0), 1);
    c[0] = f32(x, 1, 2, 0);
    CHECK_EQ_INT(tsr_vm_call(&vm, "branch_arg", c, 2), TESSERA_ERROR_RUNTIME_CHECK);
    CHECK(has("branch_arg: a branch condition must have one element"));
}

static void recursion(void) {
    /* countdown(n) calls itself n times and counts the returns */
    tessera_value n[1] = {prim(0)};
    CHECK_EQ_INT(tsr_vm_call(&vm, "countdown", n, 1), 0);
    CHECK_EQ_INT(vm.n_outputs, 1);
    CHECK_EQ_INT(vm.outputs[0].ndim, 0); /* a prim comes back as a 0-d int64 tensor */
    CHECK_EQ_INT(vm.outputs[0].dtype, TESSERA_INT64);
    CHECK_EQ_INT(out_i64(0, 0), 0);
    n[0] = prim(500);
    CHECK_EQ_INT(tsr_vm_call(&vm, "countdown", n, 1), 0);
    CHECK_EQ_INT(out_i64(0, 0), 500);
    n[0] = prim(9999); /* the deepest frame is at depth 9999: allowed */
    CHECK_EQ_INT(tsr_vm_call(&vm, "countdown", n, 1), 0);
    CHECK_EQ_INT(out_i64(0, 0), 9999);
    /* runaway recursion stops at depth 10000 with a message, not a stack overflow */
    n[0] = prim(10000);
    CHECK_EQ_INT(tsr_vm_call(&vm, "countdown", n, 1), TESSERA_ERROR_RUNTIME_CHECK);
    CHECK(has("calls nested deeper than 10000 (runaway recursion in countdown?)"));
    n[0] = prim(1000000);
    CHECK_EQ_INT(tsr_vm_call(&vm, "countdown", n, 1), TESSERA_ERROR_RUNTIME_CHECK);
    CHECK_EQ_INT(vm.n_outputs, 0);
    /* the VM is usable after the failure */
    n[0] = prim(3);
    CHECK_EQ_INT(tsr_vm_call(&vm, "countdown", n, 1), 0);
    CHECK_EQ_INT(out_i64(0, 0), 3);

    /* rdouble(x, n) = x 2^n: each level's result is a pool tensor handed to its caller */
    float x[4] = {1, -1, 0.5f, 3};
    tessera_value args[2] = {f32(x, 1, 4, 0), prim(6)};
    CHECK_EQ_INT(tsr_vm_call(&vm, "rdouble", args, 2), 0);
    int wrong = 0;
    for (int i = 0; i < 4; i++) wrong += out_f32(0)[i] != 64.0f * x[i];
    CHECK_EQ_INT(wrong, 0);
    /* blocks go back to the pool: the same call again takes no new device memory */
    uint64_t blocks = vm.pool_device_allocations;
    for (int k = 0; k < 5; k++) CHECK_EQ_INT(tsr_vm_call(&vm, "rdouble", args, 2), 0);
    CHECK_EQ_INT(vm.pool_device_allocations, blocks);
    for (int i = 0; i < 4; i++) wrong += out_f32(0)[i] != 64.0f * x[i];
    CHECK_EQ_INT(wrong, 0);
}

static void tuples(void) {
    float x[3] = {7, 8, 9};
    tessera_value args[1] = {f32(x, 1, 3, 0)};
    CHECK_EQ_INT(tsr_vm_call(&vm, "tuples", args, 1), 0);
    /* (x, shape (n, 2n), prim 3n) flattened depth-first; a shape value comes back as one 0-d int64
     * per dimension, as the other runtimes flatten it (tests/conformance) */
    CHECK_EQ_INT(vm.n_outputs, 4);
    CHECK(memcmp(out_f32(0), x, sizeof x) == 0);
    for (int i = 1; i < 4; i++) {
        CHECK_EQ_INT(vm.outputs[i].dtype, TESSERA_INT64);
        CHECK_EQ_INT(vm.outputs[i].ndim, 0);
    }
    CHECK_EQ_INT(out_i64(1, 0), 3);
    CHECK_EQ_INT(out_i64(2, 0), 6);
    CHECK_EQ_INT(out_i64(3, 0), 9);
    /* a tuple argument where an object is expected passes through (branch_arg's x is R.Object) */
    tessera_value items[2] = {prim(1), f32(x, 1, 3, 0)};
    tessera_value tup = {TESSERA_VALUE_TUPLE, {0}, 0, items, 2};
    int32_t one = 1;
    tessera_value c[2] = {f32(&one, 1, 1, 0), tup};
    c[0].tensor.dtype = TESSERA_INT32;
    CHECK_EQ_INT(tsr_vm_call(&vm, "branch_arg", c, 2), 0);
}

/* alloc_storage from the pool; tensors placed in those storages by their locations */
static void pool(void) {
    float x[100];
    for (int i = 0; i < 100; i++) x[i] = (float)i;
    tessera_value args[1] = {f32(x, 1, 100, 0)};
    CHECK_EQ_INT(tsr_vm_call(&vm, "pool", args, 1), 0);
    int wrong = 0;
    for (int i = 0; i < 100; i++) wrong += out_f32(0)[i] != 4.0f * x[i];
    CHECK_EQ_INT(wrong, 0);
    uint64_t blocks = vm.pool_device_allocations;
    for (int k = 0; k < 10; k++) CHECK_EQ_INT(tsr_vm_call(&vm, "pool", args, 1), 0);
    CHECK_EQ_INT(vm.pool_device_allocations, blocks); /* blocks reused across calls */
    /* a smaller size fits the same power-of-two classes */
    args[0] = f32(x, 1, 70, 0);
    CHECK_EQ_INT(tsr_vm_call(&vm, "pool", args, 1), 0);
    CHECK_EQ_INT(vm.pool_device_allocations, blocks);
    CHECK(out_f32(0)[69] == 276.0f);
    /* an empty tensor: zero elements, the kernel's grid is empty and the launch is skipped */
    long launches = device.launches;
    args[0] = f32(x, 1, 0, 0);
    CHECK_EQ_INT(tsr_vm_call(&vm, "pool", args, 1), 0);
    CHECK_EQ_INT(device.launches, launches);
    CHECK_EQ_INT(vm.outputs[0].shape[0], 0);
}

static void builtins(void) {
    /* unique: sorted distinct values */
    float x[8] = {3, 1, 3, 2, 1, 7, 2, 3};
    tessera_value args[3] = {f32(x, 1, 8, 0)};
    CHECK_EQ_INT(tsr_vm_call(&vm, "uniq", args, 1), 0);
    CHECK_EQ_INT(vm.outputs[0].shape[0], 4);
    CHECK(out_f32(0)[0] == 1 && out_f32(0)[1] == 2 && out_f32(0)[2] == 3 && out_f32(0)[3] == 7);

    /* nonzero of a 2-D int32 tensor: row 0 the row indices, row 1 the column indices */
    int32_t m[6] = {0, 5, 0, 7, 0, 9}; /* [[0, 5, 0], [7, 0, 9]] */
    args[0] = f32(m, 2, 2, 3);
    args[0].tensor.dtype = TESSERA_INT32;
    CHECK_EQ_INT(tsr_vm_call(&vm, "nz", args, 1), 0);
    CHECK(vm.outputs[0].ndim == 2 && vm.outputs[0].shape[0] == 2 && vm.outputs[0].shape[1] == 3);
    CHECK_EQ_INT(vm.outputs[0].dtype, TESSERA_INT64);
    int64_t want[6] = {0, 1, 1, 1, 0, 2};
    CHECK(memcmp(vm.outputs[0].data, want, sizeof want) == 0);

    /* mask_select with a bool mask (one byte per element on the host, a word on the device) */
    uint8_t mask[8] = {1, 0, 0, 1, 1, 0, 0, 1};
    args[0] = f32(x, 1, 8, 0);
    args[1] = f32(mask, 1, 8, 0);
    args[1].tensor.dtype = TESSERA_BOOL;
    CHECK_EQ_INT(tsr_vm_call(&vm, "msel", args, 2), 0);
    CHECK_EQ_INT(vm.outputs[0].shape[0], 4);
    CHECK(out_f32(0)[0] == 3 && out_f32(0)[1] == 2 && out_f32(0)[2] == 1 && out_f32(0)[3] == 3);
    /* a mask of another length fails msel's own match */
    args[1].tensor.shape[0] = 7;
    CHECK_EQ_INT(tsr_vm_call(&vm, "msel", args, 2), TESSERA_ERROR_RUNTIME_CHECK);
    CHECK(has("argument 'mask' of msel"));

    /* arange as numpy's: (2, 11, 3) -> 2 5 8; (5, 0, -2) -> 5 3 1; (3, 3, 1) -> empty */
    tessera_value r[3] = {prim(2), prim(11), prim(3)};
    CHECK_EQ_INT(tsr_vm_call(&vm, "ar", r, 3), 0);
    CHECK_EQ_INT(vm.outputs[0].shape[0], 3);
    CHECK(out_i64(0, 0) == 2 && out_i64(0, 1) == 5 && out_i64(0, 2) == 8);
    r[0] = prim(5), r[1] = prim(0), r[2] = prim(-2);
    CHECK_EQ_INT(tsr_vm_call(&vm, "ar", r, 3), 0);
    CHECK_EQ_INT(vm.outputs[0].shape[0], 3);
    CHECK(out_i64(0, 0) == 5 && out_i64(0, 1) == 3 && out_i64(0, 2) == 1);
    r[0] = prim(3), r[1] = prim(3), r[2] = prim(1);
    CHECK_EQ_INT(tsr_vm_call(&vm, "ar", r, 3), 0);
    CHECK_EQ_INT(vm.outputs[0].shape[0], 0);
    /* a builtin's failure comes back as TESSERA_ERROR_LIBRARY naming it and why */
    r[2] = prim(0);
    CHECK_EQ_INT(tsr_vm_call(&vm, "ar", r, 3), TESSERA_ERROR_LIBRARY);
    CHECK(has("library function 'tessera.builtin.arange_size' failed: arange_size: the step is 0"));
}

static void libraries(void) {
    float x[6] = {1, 2, 3, 4, 5, 6};
    tessera_value args[1] = {f32(x, 1, 6, 0)};
    CHECK_EQ_INT(tsr_vm_call(&vm, "lib", args, 1), 0);
    CHECK_EQ_INT(vm.n_outputs, 2);
    int wrong = 0;
    for (int i = 0; i < 6; i++) wrong += out_f32(0)[i] != 3.0f * x[i];
    CHECK_EQ_INT(wrong, 0);
    CHECK_EQ_INT(out_i64(1, 0), 66); /* its integer result: scalars n + 10 n */

    /* a failing library: its tessera_library_error message is in the error */
    CHECK_EQ_INT(tsr_vm_call(&vm, "libfail", args, 1), TESSERA_ERROR_LIBRARY);
    CHECK(strcmp(tessera_last_error(), "library function 'tessera.test.fail' failed: the moon is not full") == 0);
}

/* state: one tensor named "cache" shared by st_add and st_read, kept across calls, zeroed by reset */
static void state(void) {
    CHECK_EQ_INT(vm.n_state, 1);
    float x[4] = {1, 2, 3, 4};
    tessera_value args[1] = {f32(x, 1, 4, 0)};
    CHECK_EQ_INT(tsr_vm_call(&vm, "st_read", NULL, 0), 0);
    CHECK(out_f32(0)[0] == 0.0f && out_f32(0)[3] == 0.0f);
    CHECK_EQ_INT(tsr_vm_call(&vm, "st_add", args, 1), 0);
    CHECK_EQ_INT(tsr_vm_call(&vm, "st_add", args, 1), 0);
    CHECK_EQ_INT(tsr_vm_call(&vm, "st_add", args, 1), 0);
    CHECK_EQ_INT(tsr_vm_call(&vm, "st_read", NULL, 0), 0);
    CHECK_EQ_INT(vm.outputs[0].shape[0], 4);
    int wrong = 0;
    for (int i = 0; i < 4; i++) wrong += out_f32(0)[i] != 3.0f * x[i];
    CHECK_EQ_INT(wrong, 0);
    /* state parameters are not arguments */
    CHECK_EQ_INT(tsr_vm_call(&vm, "st_read", args, 1), TESSERA_ERROR_INVALID_ARGUMENT);
    CHECK(has("st_read takes 0 arguments"));
    tsr_vm_reset_state(&vm);
    CHECK_EQ_INT(tsr_vm_call(&vm, "st_read", NULL, 0), 0);
    CHECK(out_f32(0)[0] == 0.0f && out_f32(0)[1] == 0.0f && out_f32(0)[2] == 0.0f && out_f32(0)[3] == 0.0f);
    CHECK_EQ_INT(tsr_vm_call(&vm, "st_add", args, 1), 0);
    CHECK(out_f32(0)[2] == 3.0f);
}

/* After one warm-up call, more calls of the same function allocate nothing (with `scratch`:
 * the function's builtins may take and free host scratch memory per call, but nothing stays). */
static void steady_calls(const char *name, const tessera_value *args, size_t n_args, bool scratch) {
    CHECK_EQ_INT(tsr_vm_call(&vm, name, args, n_args), 0);
    long before = counts.total, live_before = counts.live;
    uint64_t counted = a.count;
    for (int k = 0; k < 100; k++) CHECK_EQ_INT(tsr_vm_call(&vm, name, args, n_args), 0);
    CHECK_EQ_INT(counts.live, live_before);
    if (scratch) return;
    if (counts.total != before) fprintf(stderr, "%s: %ld allocations in 100 steady calls\n", name, counts.total - before);
    CHECK_EQ_INT(counts.total - before, 0);
    CHECK_EQ_INT(a.count - counted, 0);
}
static void steady(const char *name, const tessera_value *args, size_t n_args) { steady_calls(name, args, n_args, false); }

static void no_allocations(void) {
    float x[32];
    for (int i = 0; i < 32; i++) x[i] = (float)i;
    tessera_value one[1] = {f32(x, 1, 32, 0)};
    steady("straight", one, 1);
    steady("pool", one, 1);
    steady_calls("uniq", one, 1, true); /* unique's distinct-value list is a malloc per call */
    tessera_value four[2] = {f32(x, 1, 4, 0), prim(5)};
    steady("rdouble", four, 2);
    tessera_value n[1] = {prim(200)};
    steady("countdown", n, 1);
    steady("tuples", one, 1);
    steady("st_add", four, 1);
}

static void init_errors(void) {
    /* a user library named like a builtin is refused; a missing one is named */
    tessera_library fake[2] = {{"tessera.test.triple", triple, (void *)&triple},
                               {"tessera.builtin.unique", failing, NULL}};
    tsr_vm other;
    CHECK_EQ_INT(tsr_vm_init(&other, &a, &exe, &device.base, NULL, fake, 2), TESSERA_ERROR_LIBRARY);
    CHECK(has("'tessera.builtin.unique' is a builtin of the runtime and cannot be replaced"));
    tsr_vm_free(&other);
    CHECK_EQ_INT(tsr_vm_init(&other, &a, &exe, &device.base, NULL, fake, 1), TESSERA_ERROR_LIBRARY);
    CHECK(has("'tessera.test.fail', which is not registered"));
    tsr_vm_free(&other);
    /* the weight the executable names must be in the cache */
    tessera_library libs[2] = {{"tessera.test.triple", triple, (void *)&triple}, {"tessera.test.fail", failing, NULL}};
    CHECK_EQ_INT(tsr_vm_init(&other, &a, &exe, &device.base, NULL, libs, 2), TESSERA_ERROR_FORMAT);
    CHECK(has("the weight 'bias' that the executable uses is not in tensor-cache.json"));
    tsr_vm_free(&other);
}

/* A register whose planned tensor is larger than the bytes it is given (a malformed executable:
 * its 'bytes' disagrees with its shape, or the weight is smaller than the shape says) is refused
 * when the register is first used, before a library writes or the host reads past the memory;
 * an alloc_tensor whose element count overflows int64 is refused too. */
/* A build split across two devices (tests/data/vm/split.json, format version 4): main doubles x on the
 * GPU, copies the result to the CPU (to_device) and adds the bias there, from the CPU's arena; pooled does
 * the same through each device's pool. The bias is on both devices (constant_devices). */
static void split(void) {
    char *json = NULL;
    size_t size = 0;
    CHECK_EQ_INT(tsr_read_file(&a, "data/vm", "split.json", 1 << 20, &json, &size), 0);
    tsr_executable split_exe;
    int rc = tsr_executable_parse(&a, json, size, &split_exe);
    tsr_free(&a, json);
    if (rc) fprintf(stderr, "split.json: %s\n", tessera_last_error());
    CHECK_EQ_INT(rc, 0);
    if (rc) return;
    test_device gpu, cpu;
    memset(&gpu, 0, sizeof gpu);
    memset(&cpu, 0, sizeof cpu);
    gpu.base.ops = &GPU_OPS;
    gpu.base.alloc = &a;
    cpu.base.ops = &TEST_OPS;
    cpu.base.alloc = &a;
    tsr_weight bias;
    memset(&bias, 0, sizeof bias);
    bias.name = "bias";
    bias.dtype = TESSERA_FLOAT32;
    bias.ndim = 1;
    bias.shape[0] = 64;
    bias.nbytes = sizeof bias_data;
    bias.data = bias_data;
    const tsr_weight *by_name[1] = {&bias};
    tsr_tensor_cache cache;
    memset(&cache, 0, sizeof cache);
    cache.weights = &bias;
    cache.n_weights = 1;
    cache.by_name = by_name;
    tsr_vm v;
    tsr_device *one[1] = {&gpu.base};
    CHECK_EQ_INT(tsr_vm_init_devices(&v, &a, &split_exe, one, 1, &cache, NULL, 0), TESSERA_ERROR_INVALID_ARGUMENT);
    CHECK(has("runs on 2 devices; the VM was given 1"));
    tsr_device *both[2] = {&gpu.base, &cpu.base};
    rc = tsr_vm_init_devices(&v, &a, &split_exe, both, 2, &cache, NULL, 0);
    if (rc) fprintf(stderr, "tsr_vm_init_devices: %s\n", tessera_last_error());
    CHECK_EQ_INT(rc, 0);
    if (rc == 0) {
        /* one arena per device, each as big as the buffers the plan puts there */
        CHECK(v.arenas[0] != NULL && v.arenas[1] != NULL);
        CHECK_EQ_INT(v.arena_bytes[0], 256);
        CHECK_EQ_INT(v.arena_bytes[1], 512);
        CHECK(v.constants[0] != NULL && v.constants[1] != NULL); /* the bias on each device */
        float x[7] = {1, -2, 3, 0.5f, 7, 8, -9};
        tessera_value arg = f32(x, 1, 5, 0);
        CHECK_EQ_INT(tsr_vm_call(&v, "main", &arg, 1), 0);
        CHECK_EQ_INT(v.n_outputs, 1);
        const float *out = v.outputs[0].data;
        for (int i = 0; i < 5; i++) CHECK(out[i] == 2.0f * x[i] + bias_data[i]);
        CHECK_EQ_INT(gpu.launches, 1);
        CHECK_EQ_INT(cpu.launches, 1);
        CHECK_EQ_INT((int64_t)v.copies, 1);
        /* the result is in the CPU's arena, handed out in place */
        CHECK((const char *)out == (const char *)v.arenas[1] + v.buffer_offsets[0][1] + 256);

        arg = f32(x, 1, 7, 0);
        CHECK_EQ_INT(tsr_vm_call(&v, "pooled", &arg, 1), 0);
        out = v.outputs[0].data;
        for (int i = 0; i < 7; i++) CHECK(out[i] == 2.0f * x[i] + bias_data[i]);
        CHECK_EQ_INT((int64_t)v.copies, 2);
        CHECK_EQ_INT(gpu.launches, 2);
        CHECK_EQ_INT(cpu.launches, 2);
        /* each device's pool keeps its blocks: a second call allocates nothing new */
        uint64_t made = v.pool_device_allocations;
        CHECK_EQ_INT(tsr_vm_call(&v, "pooled", &arg, 1), 0);
        CHECK_EQ_INT((int64_t)v.pool_device_allocations, (int64_t)made);
        /* the GPU's blocks (the argument, the doubled x) are back in its pool; the result's is the CPU's */
        int on_gpu = 0;
        for (int c = 0; c < TSR_POOL_CLASSES; c++) on_gpu += v.free_blocks[0][c] != NULL;
        CHECK(on_gpu > 0);
        CHECK(v.held != NULL && v.held->device == 1 && v.held->next_owned == NULL);
        tsr_vm_free(&v);
    }
    tsr_executable_free(&split_exe);
}

static void oversized(void) {
    char *json = NULL;
    size_t size = 0;
    CHECK_EQ_INT(tsr_read_file(&a, "data/vm", "oversized.json", 1 << 20, &json, &size), 0);
    tsr_executable bad;
    int rc = tsr_executable_parse(&a, json, size, &bad);
    tsr_free(&a, json);
    CHECK_EQ_INT(rc, 0);
    if (rc) return;
    float small_data[4] = {1, 2, 3, 4};
    tsr_weight small;
    memset(&small, 0, sizeof small);
    small.name = "small";
    small.dtype = TESSERA_FLOAT32;
    small.ndim = 1;
    small.shape[0] = 4;
    small.nbytes = sizeof small_data;
    small.data = small_data;
    const tsr_weight *by_name[1] = {&small};
    tsr_tensor_cache cache;
    memset(&cache, 0, sizeof cache);
    cache.weights = &small;
    cache.n_weights = 1;
    cache.by_name = by_name;
    tsr_vm v;
    rc = tsr_vm_init(&v, &a, &bad, &device.base, &cache, NULL, 0);
    CHECK_EQ_INT(rc, 0);
    if (rc == 0) {
        CHECK_EQ_INT(tsr_vm_call(&v, "over_storage", NULL, 0), TESSERA_ERROR_RUNTIME_CHECK);
        CHECK(has("over_storage: register 2 is a tensor of 8000 bytes"));
        CHECK_EQ_INT(tsr_vm_call(&v, "over_arena", NULL, 0), TESSERA_ERROR_RUNTIME_CHECK);
        CHECK(has("over_arena: register 1 is a tensor of 8000 bytes"));
        CHECK_EQ_INT(tsr_vm_call(&v, "over_constant", NULL, 0), TESSERA_ERROR_RUNTIME_CHECK);
        CHECK(has("over_constant: register 0 is a tensor of 16384 bytes"));
        tessera_value n[1] = {prim((int64_t)1 << 22)}; /* 2^66 elements */
        CHECK_EQ_INT(tsr_vm_call(&v, "huge_alloc", n, 1), TESSERA_ERROR_RUNTIME_CHECK);
        CHECK(has("huge_alloc"));
        n[0] = prim(-3);
        CHECK_EQ_INT(tsr_vm_call(&v, "huge_alloc", n, 1), TESSERA_ERROR_RUNTIME_CHECK);
        CHECK(has("negative size"));
    }
    tsr_vm_free(&v);
    tsr_executable_free(&bad);
}

/* bool, int8 and uint8 cross between host bytes and device words as the Python VM's to_device and
 * from_device do (numpy's astype to and from int32/uint32): widened, then narrowed to the low byte. */
static void narrow_words(void) {
    CHECK(tsr_dtype_widened(TESSERA_BOOL) && tsr_dtype_widened(TESSERA_INT8) && tsr_dtype_widened(TESSERA_UINT8));
    CHECK(!tsr_dtype_widened(TESSERA_INT64) && !tsr_dtype_widened(TESSERA_FLOAT16) && !tsr_dtype_widened(TESSERA_INT32));
    int8_t s[5] = {-128, -1, 0, 1, 127};
    uint32_t words[5];
    tsr_widen_to_words(TESSERA_INT8, s, words, 5);
    int32_t signed_words[5];
    memcpy(signed_words, words, sizeof words);
    CHECK(signed_words[0] == -128 && signed_words[1] == -1 && signed_words[2] == 0 && signed_words[4] == 127);
    uint8_t u[4] = {0, 127, 128, 255}, back[5];
    tsr_widen_to_words(TESSERA_UINT8, u, words, 4);
    CHECK(words[0] == 0 && words[1] == 127 && words[2] == 128 && words[3] == 255);
    uint8_t b[3] = {0, 1, 7};
    tsr_widen_to_words(TESSERA_BOOL, b, words, 3);
    CHECK(words[0] == 0 && words[1] == 1 && words[2] == 1);
    /* narrowing keeps the low byte (a kernel stores wrapped values; 300 is what astype(uint8) makes 44) */
    uint32_t out[5] = {0xFFFFFF80u, 0xFFFFFFFFu, 0, 300, 0x7F};
    tsr_narrow_from_words(TESSERA_INT8, out, back, 5);
    int8_t sb[5];
    memcpy(sb, back, sizeof sb);
    CHECK(sb[0] == -128 && sb[1] == -1 && sb[2] == 0 && sb[3] == 44 && sb[4] == 127);
    tsr_narrow_from_words(TESSERA_UINT8, out, back, 5);
    CHECK(back[0] == 128 && back[1] == 255 && back[3] == 44);
    tsr_narrow_from_words(TESSERA_BOOL, out, back, 5);
    CHECK(back[0] == 1 && back[2] == 0 && back[3] == 1);
}

int main(void) {
    tessera_allocator counting = tsr_test_counting_allocator(&counts);
    tsr_alloc_init(&a, &counting);
    device.base.ops = &TEST_OPS;
    device.base.alloc = &a;

    char *json = NULL;
    size_t size = 0;
    CHECK_EQ_INT(tsr_read_file(&a, "data/vm", "program.json", 1 << 20, &json, &size), 0);
    int rc = tsr_executable_parse(&a, json, size, &exe);
    if (rc) fprintf(stderr, "program.json: %s\n", tessera_last_error());
    CHECK_EQ_INT(rc, 0);
    tsr_free(&a, json);
    if (rc) return tsr_test_failures();

    /* one weight, "bias", in a tensor cache built in memory */
    for (int i = 0; i < 64; i++) bias_data[i] = 0.25f * (float)i;
    tsr_weight bias;
    memset(&bias, 0, sizeof bias);
    bias.name = "bias";
    bias.dtype = TESSERA_FLOAT32;
    bias.ndim = 1;
    bias.shape[0] = 64;
    bias.nbytes = sizeof bias_data;
    bias.data = bias_data;
    const tsr_weight *by_name[1] = {&bias};
    tsr_tensor_cache cache;
    memset(&cache, 0, sizeof cache);
    cache.weights = &bias;
    cache.n_weights = 1;
    cache.by_name = by_name;

    narrow_words();
    init_errors();
    tessera_library libs[2] = {{"tessera.test.triple", triple, (void *)&triple}, {"tessera.test.fail", failing, NULL}};
    rc = tsr_vm_init(&vm, &a, &exe, &device.base, &cache, libs, 2);
    if (rc) fprintf(stderr, "tsr_vm_init: %s\n", tessera_last_error());
    CHECK_EQ_INT(rc, 0);
    if (rc == 0) {
        straight();
    repeated_calls();
        calls();
        branches();
        recursion();
        tuples();
        pool();
        builtins();
        libraries();
        state();
        no_allocations();
    }
    oversized();
    split();
    tsr_vm_free(&vm);
    tsr_executable_free(&exe);
    CHECK_EQ_INT(counts.live, 0); /* the VM and the executable return every allocation */
    return tsr_test_failures();
}
