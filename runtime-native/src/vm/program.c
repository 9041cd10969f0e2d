/* The program layer: runs any function of an executable (docs/format.md "Instructions").
 *
 * Each call runs in a frame with its own registers and shape heap; calls push frames on a list
 * rather than recursing in C, so a deep recursion in the program is bounded by MAX_CALL_DEPTH.
 * A register with a location (a weight, an arena token, a storage of this call) is materialized
 * on first use. Pool blocks belong to the frame that took them; a return hands the blocks its
 * result reaches to the caller and gives the others back. Frames, tuples and host copies live in
 * a scratch bump that each top-level call resets, so a steady loop of calls allocates nothing. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "vm.h"

#define MAX_CALL_DEPTH 10000

typedef struct frame frame;
struct frame {
    const tsr_function *f;
    int32_t index; /* the function's index */
    int32_t pc;
    tsr_val *regs;
    int64_t *heap;
    uint8_t *bound;
    tsr_block *owned;
    frame *caller;
    int32_t depth;
};

/* ---- values ---------------------------------------------------------------------------------- */

static int64_t element_count(const int64_t *shape, int32_t ndim) {
    int64_t n = 1;
    for (int32_t i = 0; i < ndim; i++) n *= shape[i];
    return n;
}

/* The element count of a shape: false for a negative dimension or a count beyond int64. */
static bool checked_count(const int64_t *shape, int32_t ndim, int64_t *out) {
    int64_t n = 1;
    for (int32_t i = 0; i < ndim; i++)
        if (shape[i] < 0 || __builtin_mul_overflow(n, shape[i], &n)) return false;
    *out = n;
    return true;
}

/* A planned tensor must fit where it is placed: executable.json states a register's shape apart
 * from its 'bytes' and its storage (and a weight's size comes from the tensor cache), while
 * kernels, libraries and the host index a tensor by its shape. `have`: the bytes of the place. */
static int check_fits(const frame *fr, int32_t reg, const tsr_vtensor *t, size_t have) {
    int64_t count;
    size_t need;
    if (!checked_count(t->shape, t->ndim, &count) ||
        !tsr_mul_size((size_t)count, tsr_dtype_storage_bytes(t->dtype), &need))
        return tsr_error(TESSERA_ERROR_RUNTIME_CHECK, "%s: register %d has a negative or too large shape", fr->f->name, reg);
    if (need > have)
        return tsr_error(TESSERA_ERROR_RUNTIME_CHECK, "%s: register %d is a tensor of %zu bytes (by its shape) placed in "
                         "%zu bytes (executable.json's 'bytes' or the weight disagrees with the shape)", fr->f->name,
                         reg, need, have);
    return 0;
}

static int eval(const frame *fr, const tsr_shape_expr *e, int64_t *out) {
    int rc = tsr_shape_expr_eval(e, &fr->f->symbols, fr->heap, fr->bound, out);
    return rc ? tsr_error_context(rc, "%s", fr->f->name) : 0;
}

/* Whether a register's tensor is the same on every call of its function: a weight or an arena slot (places
 * fixed at load) whose shape and bytes are constant expressions (compiled to no code). */
static bool is_fixed(const tsr_register_info *info) {
    if (info->location != TSR_LOC_CONSTANT && info->location != TSR_LOC_ARENA) return false;
    if (info->bytes.code) return false;
    for (int32_t d = 0; d < info->ndim; d++)
        if (info->shape[d].code) return false;
    return true;
}

static int materialize_planned(tsr_vm *vm, frame *fr, int32_t reg, tsr_val *v);

static int materialize(tsr_vm *vm, frame *fr, int32_t reg, tsr_val **out) {
    tsr_val *v = &fr->regs[reg];
    *out = v;
    if (v->kind != TSR_V_NONE) return 0;
    /* A fixed register was built and checked by an earlier call (the same inputs give the same tensor):
     * copy it, which is most of a decode step's registers. */
    uint8_t *state = &vm->fixed_state[fr->index][reg];
    tsr_vtensor *fixed = &vm->fixed_tensors[fr->index][reg];
    if (*state == TSR_FIXED_READY) {
        v->as.tensor = *fixed;
        v->kind = TSR_V_TENSOR;
        return 0;
    }
    int rc = materialize_planned(vm, fr, reg, v);
    if (rc == 0 && *state == TSR_FIXED_UNKNOWN) {
        *state = is_fixed(&fr->f->regs[reg]) ? TSR_FIXED_READY : TSR_FIXED_NO;
        if (*state == TSR_FIXED_READY) *fixed = v->as.tensor;
    }
    return rc;
}

/* Builds a register's tensor from executable.json's place and shape for it, checking that it fits. */
static int materialize_planned(tsr_vm *vm, frame *fr, int32_t reg, tsr_val *v) {
    const tsr_register_info *info = &fr->f->regs[reg];
    if (info->location == TSR_LOC_NONE || info->location == TSR_LOC_PARAM)
        return tsr_error(TESSERA_ERROR_RUNTIME_CHECK, "%s: register %d is read before it is written", fr->f->name, reg);
    tsr_vtensor *t = &v->as.tensor;
    memset(t, 0, sizeof *t);
    t->dtype = info->dtype;
    t->ndim = info->ndim;
    int rc;
    for (int32_t d = 0; d < info->ndim; d++)
        if ((rc = eval(fr, &info->shape[d], &t->shape[d]))) return rc;
    int64_t nbytes;
    if ((rc = eval(fr, &info->bytes, &nbytes))) return rc;
    t->nbytes = (size_t)nbytes;
    size_t have = 0;
    switch (info->location) {
    case TSR_LOC_CONSTANT:
        t->device = info->device;
        t->base = vm->constants[(size_t)info->index * (size_t)vm->n_devices + (size_t)info->device];
        if (!t->base)
            return tsr_error(TESSERA_ERROR_RUNTIME_CHECK, "%s: the weight %s is not placed on device %d "
                             "(constant_devices)", fr->f->name, vm->exe->constants[info->index], (int)info->device);
        t->nbytes = have = vm->constant_bytes[info->index];
        break;
    case TSR_LOC_ARENA: {
        const tsr_storage_plan *s = &fr->f->storages[fr->f->token_to_storage[info->index]];
        if ((uint64_t)nbytes > s->static_size)
            return tsr_error(TESSERA_ERROR_RUNTIME_CHECK, "%s: a tensor of %lld bytes in a storage planned for %llu",
                             fr->f->name, (long long)nbytes, (unsigned long long)s->static_size);
        t->device = fr->f->buffer_devices[s->buffer];
        t->base = vm->arenas[t->device];
        t->offset = vm->buffer_offsets[fr->index][s->buffer] + s->offset;
        have = (size_t)s->static_size;
        break;
    }
    case TSR_LOC_STORAGE: {
        const tsr_val *storage = &fr->regs[info->index];
        if (storage->kind != TSR_V_STORAGE)
            return tsr_error(TESSERA_ERROR_RUNTIME_CHECK, "%s: register %d lives in a storage not yet allocated", fr->f->name, reg);
        if ((size_t)nbytes > storage->as.storage->size)
            return tsr_error(TESSERA_ERROR_RUNTIME_CHECK, "%s: a tensor of %lld bytes in a storage of %zu", fr->f->name,
                             (long long)nbytes, storage->as.storage->size);
        t->base = storage->as.storage->base;
        t->device = storage->as.storage->device;
        t->block = storage->as.storage;
        have = storage->as.storage->size;
        break;
    }
    default:
        break;
    }
    if ((rc = check_fits(fr, reg, t, have))) return rc;
    v->kind = TSR_V_TENSOR;
    return 0;
}

static int get_tensor(tsr_vm *vm, frame *fr, int32_t reg, const char *role, tsr_vtensor **out) {
    tsr_val *v;
    int rc = materialize(vm, fr, reg, &v);
    if (rc) return rc;
    if (v->kind != TSR_V_TENSOR)
        return tsr_error(TESSERA_ERROR_RUNTIME_CHECK, "%s: %s is given a non-tensor value (register %d)", fr->f->name, role, reg);
    *out = &v->as.tensor;
    return 0;
}

/* ---- frames ---------------------------------------------------------------------------------- */

static int enter(tsr_vm *vm, int32_t index, const tsr_val *args, int32_t n_args, frame *caller, frame **out) {
    const tsr_function *f = &vm->exe->functions[index];
    int32_t n_inputs = 0;
    for (int32_t p = 0; p < f->n_params; p++) n_inputs += !f->params[p].state;
    if (n_args != n_inputs) {
        char names[512] = "";
        size_t used = 0;
        for (int32_t p = 0; p < f->n_params && used < sizeof names; p++)
            if (!f->params[p].state)
                used += (size_t)snprintf(names + used, sizeof names - used, "%s%s", used ? ", " : "", f->params[p].name);
        return tsr_error(TESSERA_ERROR_INVALID_ARGUMENT, "%s takes %d arguments (%s), got %d", f->name, n_inputs, names, n_args);
    }
    int32_t depth = caller ? caller->depth + 1 : 0;
    if (depth >= MAX_CALL_DEPTH)
        return tsr_error(TESSERA_ERROR_RUNTIME_CHECK, "calls nested deeper than %d (runaway recursion in %s?)",
                         MAX_CALL_DEPTH, caller->f->name);
    frame *fr = tsr_bump_alloc(vm->scratch, sizeof *fr);
    if (!fr) return TESSERA_ERROR_OUT_OF_MEMORY;
    fr->f = f;
    fr->index = index;
    fr->caller = caller;
    fr->depth = depth;
    fr->regs = tsr_bump_array(vm->scratch, (size_t)f->n_registers, sizeof(tsr_val));
    int32_t n_sym = f->symbols.count ? f->symbols.count : 1;
    fr->heap = tsr_bump_array(vm->scratch, (size_t)n_sym, sizeof(int64_t));
    fr->bound = tsr_bump_array(vm->scratch, (size_t)n_sym, 1);
    if (!fr->regs || !fr->heap || !fr->bound) return TESSERA_ERROR_OUT_OF_MEMORY;
    int32_t next = 0;
    for (int32_t p = 0; p < f->n_params; p++) {
        const tsr_param *param = &f->params[p];
        tsr_val *v = &fr->regs[param->reg];
        if (!param->state) {
            *v = args[next++];
            continue;
        }
        /* State lives across calls at its planned size (the upper bounds). */
        const tsr_register_info *info = &f->regs[param->reg];
        int k = tsr_state_index(vm, param->name);
        int64_t values[TSR_MAX_SYMBOLS];
        uint8_t bound[TSR_MAX_SYMBOLS];
        for (int32_t s = 0; s < f->symbols.count && s < TSR_MAX_SYMBOLS; s++) {
            values[s] = f->upper_bounds[s];
            bound[s] = f->upper_bounds[s] >= 0;
        }
        v->kind = TSR_V_TENSOR;
        tsr_vtensor *t = &v->as.tensor;
        memset(t, 0, sizeof *t);
        t->base = vm->state[k];
        t->device = vm->state_devices[k];
        t->nbytes = vm->state_bytes[k];
        t->dtype = info->dtype;
        t->ndim = info->ndim;
        for (int32_t d = 0; d < info->ndim; d++) {
            int rc = tsr_shape_expr_eval(&info->shape[d], &f->symbols, values, bound, &t->shape[d]);
            if (rc) return rc;
        }
        int rc = check_fits(fr, param->reg, t, t->nbytes);
        if (rc) return rc;
    }
    *out = fr;
    return 0;
}

static void mark(tsr_val *v, bool kept) {
    if (v->kind == TSR_V_TENSOR && v->as.tensor.block) v->as.tensor.block->kept = kept;
    else if (v->kind == TSR_V_STORAGE) v->as.storage->kept = kept;
    else if (v->kind == TSR_V_TUPLE)
        for (int32_t i = 0; i < v->as.tuple.n; i++) mark(&v->as.tuple.items[i], kept);
}

/* Hands the blocks the result reaches to *keep, gives the frame's others back to the pool. */
static void release_frame(tsr_vm *vm, frame *fr, tsr_val *result, tsr_block **keep) {
    if (result) mark(result, true);
    for (tsr_block *b = fr->owned; b;) {
        tsr_block *next = b->next_owned;
        if (b->kept && keep) {
            b->next_owned = *keep;
            *keep = b;
        } else {
            tsr_pool_give(vm, b);
        }
        b = next;
    }
    fr->owned = NULL;
    if (result) mark(result, false);
}

static int own(frame *fr, tsr_block *b) {
    if (!b) return TESSERA_ERROR_OUT_OF_MEMORY;
    b->next_owned = fr->owned;
    fr->owned = b;
    return 0;
}

/* ---- instructions ---------------------------------------------------------------------------- */

/* A launch's fixed plan: built on its first run, when every binding was materialized and checked, from what
 * cannot change between calls (tsr_launch_plan in vm.h). A launch not fitting the plan's arrays, or whose
 * grid came out empty, keeps the general path. */
static void plan_launch(tsr_vm *vm, frame *fr, const tsr_instr *in, tsr_launch_plan *plan, void *const *bases,
                        const size_t *offsets, const size_t *sizes, const int32_t *scalars, const int32_t grid[3]) {
    int32_t n = in->n_args + in->n_outs;
    plan->state = TSR_FIXED_NO;
    if (n > TSR_PLAN_BINDINGS || in->n_exprs > TSR_PLAN_SCALARS) return;
    plan->n = n;
    plan->all_fixed = true;
    for (int32_t i = 0; i < n; i++) {
        bool fixed = vm->fixed_state[fr->index][in->regs[i]] == TSR_FIXED_READY;
        plan->regs[i] = fixed ? -1 : in->regs[i];
        plan->all_fixed &= fixed;
        plan->bases[i] = bases[i];
        plan->offsets[i] = offsets[i];
        plan->sizes[i] = sizes[i];
    }
    /* Constant scalars make a constant grid too: the grid is an expression over the scalars alone. */
    plan->fixed_scalars = true;
    for (int32_t i = 0; i < in->n_exprs; i++) {
        plan->fixed_scalars &= in->exprs[i].code == NULL;
        plan->scalars[i] = scalars[i];
    }
    memcpy(plan->grid, grid, sizeof plan->grid);
    plan->state = TSR_FIXED_READY;
}

static int launch(tsr_vm *vm, frame *fr, const tsr_instr *in) {
    const tsr_kernel *k = &vm->exe->kernels[in->target];
    tsr_launch_plan *plan = &vm->launch_plans[fr->index][in - fr->f->code];
    void *bases[256];
    size_t offsets[256], sizes[256];
    int32_t scalars[256];
    int64_t scalar_values[256];
    uint8_t bound[256];
    int32_t n = in->n_args + in->n_outs;
    void *const *use_bases = bases;
    const size_t *use_offsets = offsets, *use_sizes = sizes;
    const int32_t *use_scalars = scalars, *use_grid;
    bool ready = plan->state == TSR_FIXED_READY;
    if (ready && plan->all_fixed) {
        /* The commonest launch of a step: weights and arena slots only, read from one contiguous record. */
        use_bases = plan->bases;
        use_offsets = plan->offsets;
        use_sizes = plan->sizes;
    } else {
        for (int32_t i = 0; i < n; i++) {
            if (ready && plan->regs[i] < 0) {
                bases[i] = plan->bases[i];
                offsets[i] = plan->offsets[i];
                sizes[i] = plan->sizes[i];
                continue;
            }
            tsr_vtensor *t = NULL;
            int rc = get_tensor(vm, fr, in->regs[i], k->name, &t);
            if (rc) return rc;
            /* The loader checked what executable.json places; a value passed in (an argument, a callee's result)
             * is checked here, as the Python VM's bind does. */
            if (t->device != k->device)
                return tsr_error(TESSERA_ERROR_RUNTIME_CHECK, "%s: kernel %s of device %d is given a tensor on "
                                 "device %d (register %d)", fr->f->name, k->name, (int)k->device, (int)t->device,
                                 in->regs[i]);
            bases[i] = t->base;
            offsets[i] = t->offset;
            sizes[i] = t->nbytes;
        }
    }
    int32_t grid[3];
    if (ready && plan->fixed_scalars) {
        use_scalars = plan->scalars;
        use_grid = plan->grid;
    } else {
        for (int32_t i = 0; i < in->n_exprs; i++) {
            int rc = eval(fr, &in->exprs[i], &scalar_values[i]);
            if (rc) return rc;
            if (scalar_values[i] < INT32_MIN || scalar_values[i] > INT32_MAX)
                return tsr_error(TESSERA_ERROR_RUNTIME_CHECK, "%s: kernel %s's scalar %s = %lld does not fit in "
                                 "32 bits", fr->f->name, k->name, k->scalar_symbols.names[i],
                                 (long long)scalar_values[i]);
            scalars[i] = (int32_t)scalar_values[i];
            bound[i] = 1;
        }
        for (int d = 0; d < 3; d++) {
            int64_t g;
            int rc = tsr_shape_expr_eval(&k->grid[d], &k->scalar_symbols, scalar_values, bound, &g);
            if (rc) return tsr_error_context(rc, "%s: the grid of kernel %s", fr->f->name, k->name);
            if (g <= 0) return 0; /* nothing to do (an empty tensor) */
            if (g > INT32_MAX)
                return tsr_error(TESSERA_ERROR_RUNTIME_CHECK, "%s: kernel %s's grid is too large", fr->f->name,
                                 k->name);
            grid[d] = (int32_t)g;
        }
        use_grid = grid;
        if (plan->state == TSR_FIXED_UNKNOWN) plan_launch(vm, fr, in, plan, bases, offsets, sizes, scalars, grid);
    }
    tsr_device *device = vm->devices[k->device];
    if (!vm->profiling)
        return device->ops->launch(device, in->target, n, use_bases, use_offsets, use_sizes, use_scalars, use_grid);
    struct timespec start, end;
    clock_gettime(CLOCK_MONOTONIC, &start);
    int rc = device->ops->launch(device, in->target, n, use_bases, use_offsets, use_sizes, use_scalars, use_grid);
    if (rc == 0) rc = device->ops->synchronize(device);
    clock_gettime(CLOCK_MONOTONIC, &end);
    vm->kernel_launches[in->target]++;
    vm->kernel_seconds[in->target] += (double)(end.tv_sec - start.tv_sec) + 1e-9 * (double)(end.tv_nsec - start.tv_nsec);
    return rc;
}

/* A tensor's bytes as the host sees them (numpy's layout), for a library: in place when the
 * device shares host memory and the layouts agree, else a copy in the scratch bump. */
static void *host_view(tsr_vm *vm, const tsr_vtensor *t, int64_t count, bool *copied) {
    tsr_device *device = vm->devices[t->device];
    void *device_bytes = device->ops->host_pointer(device, t->base, t->offset);
    *copied = false;
    bool widened = tsr_dtype_widened(t->dtype);
    if (!widened && device_bytes) return device_bytes;
    size_t host_bytes = (size_t)count * tsr_dtype_host_bytes(t->dtype);
    unsigned char *copy = tsr_bump_alloc(vm->scratch, host_bytes ? host_bytes : 1);
    if (!copy) return NULL;
    *copied = true;
    if (widened) {
        uint32_t *words = device_bytes;
        if (!words) {
            words = tsr_bump_array(vm->scratch, (size_t)(count ? count : 1), 4);
            if (!words || device->ops->read_back(device, t->base, t->offset, words, (size_t)count * 4)) return NULL;
        }
        tsr_narrow_from_words(t->dtype, words, copy, count);
    } else if (device->ops->read_back(device, t->base, t->offset, copy, host_bytes)) {
        return NULL;
    }
    return copy;
}

/* bool, int8 and uint8 tensors are one 32-bit word per element on devices (widened here, in the scratch bump). */
static int write_host(tsr_vm *vm, const tsr_vtensor *t, const void *host, int64_t count) {
    tsr_device *device = vm->devices[t->device];
    if (!tsr_dtype_widened(t->dtype))
        return device->ops->upload(device, t->base, t->offset, host, (size_t)count * tsr_dtype_host_bytes(t->dtype));
    uint32_t *words = tsr_bump_array(vm->scratch, (size_t)(count ? count : 1), 4);
    if (!words) return TESSERA_ERROR_OUT_OF_MEMORY;
    tsr_widen_to_words(t->dtype, host, words, count);
    return device->ops->upload(device, t->base, t->offset, words, (size_t)count * 4);
}

static int call_builtin(tsr_vm *vm, frame *fr, const tsr_instr *in) {
    const tessera_library *lib = &vm->libraries[in->library];
    tessera_value *args = tsr_bump_array(vm->scratch, (size_t)in->n_args + 1, sizeof(tessera_value));
    tessera_tensor *outs = tsr_bump_array(vm->scratch, (size_t)in->n_outs + 1, sizeof(tessera_tensor));
    int64_t *scalars = tsr_bump_array(vm->scratch, (size_t)in->n_exprs + 1, sizeof(int64_t));
    bool *copied = tsr_bump_array(vm->scratch, (size_t)in->n_outs + 1, sizeof(bool));
    if (!args || !outs || !scalars || !copied) return TESSERA_ERROR_OUT_OF_MEMORY;
    int rc;
    for (int32_t i = 0; i < in->n_args; i++) {
        tsr_val *v;
        if ((rc = materialize(vm, fr, in->regs[i], &v))) return rc;
        if (v->kind == TSR_V_INT) {
            args[i].kind = TESSERA_VALUE_INT;
            args[i].value = v->as.i;
        } else if (v->kind == TSR_V_TENSOR) {
            const tsr_vtensor *t = &v->as.tensor;
            bool c;
            args[i].kind = TESSERA_VALUE_TENSOR;
            args[i].tensor.dtype = t->dtype;
            args[i].tensor.ndim = t->ndim;
            memcpy(args[i].tensor.shape, t->shape, sizeof t->shape);
            args[i].tensor.data = host_view(vm, t, element_count(t->shape, t->ndim), &c);
            if (!args[i].tensor.data) return TESSERA_ERROR_OUT_OF_MEMORY;
        } else {
            return tsr_error(TESSERA_ERROR_RUNTIME_CHECK, "%s: library function '%s' is given a value that is neither a "
                             "tensor nor an integer", fr->f->name, lib->name);
        }
    }
    for (int32_t i = 0; i < in->n_outs; i++) {
        tsr_vtensor *t = NULL;
        if ((rc = get_tensor(vm, fr, in->regs[in->n_args + i], lib->name, &t))) return rc;
        outs[i].dtype = t->dtype;
        outs[i].ndim = t->ndim;
        memcpy(outs[i].shape, t->shape, sizeof t->shape);
        outs[i].data = host_view(vm, t, element_count(t->shape, t->ndim), &copied[i]);
        if (!outs[i].data) return TESSERA_ERROR_OUT_OF_MEMORY;
    }
    for (int32_t i = 0; i < in->n_exprs; i++)
        if ((rc = eval(fr, &in->exprs[i], &scalars[i]))) return rc;
    int64_t result = 0;
    tsr_clear_error();
    rc = lib->fn(args, (size_t)in->n_args, outs, (size_t)in->n_outs, scalars, (size_t)in->n_exprs, &result, lib->user);
    if (rc != 0) {
        char why[1024];
        snprintf(why, sizeof why, "%s", tessera_last_error());
        return tsr_error(TESSERA_ERROR_LIBRARY, "library function '%s' failed%s%s", lib->name, why[0] ? ": " : "", why);
    }
    for (int32_t i = 0; i < in->n_outs; i++) {
        if (!copied[i]) continue;
        tsr_vtensor *t = NULL;
        get_tensor(vm, fr, in->regs[in->n_args + i], lib->name, &t);
        if ((rc = write_host(vm, t, outs[i].data, element_count(t->shape, t->ndim)))) return rc;
    }
    if (in->dst >= 0) {
        fr->regs[in->dst].kind = TSR_V_INT;
        fr->regs[in->dst].as.i = result;
    }
    return 0;
}

/* to_device: the bytes of tensor `reg` into tensor `dst` (on another device, in a split build). A read back
 * waits for what the source device has queued; an upload is ordered before what the destination runs
 * next (device.h). Memory the host shares (the CPU device's) is read or written in place. */
static int to_device(tsr_vm *vm, frame *fr, const tsr_instr *in) {
    tsr_vtensor *src = NULL, *dst = NULL;
    int rc;
    if ((rc = get_tensor(vm, fr, in->reg, "to_device", &src))) return rc;
    if ((rc = get_tensor(vm, fr, in->dst, "to_device", &dst))) return rc;
    if (src->nbytes != dst->nbytes)
        return tsr_error(TESSERA_ERROR_RUNTIME_CHECK, "%s: to_device copies %zu bytes into a tensor of %zu",
                         fr->f->name, src->nbytes, dst->nbytes);
    tsr_device *from = vm->devices[src->device], *to = vm->devices[dst->device];
    size_t n = src->nbytes;
    if (src->device != dst->device) vm->copies++;
    if (n == 0) return 0;
    const void *host = from->ops->host_pointer(from, src->base, src->offset);
    if (host) return to->ops->upload(to, dst->base, dst->offset, host, n);
    void *into = to->ops->host_pointer(to, dst->base, dst->offset);
    if (into) return from->ops->read_back(from, src->base, src->offset, into, n);
    void *staging = tsr_malloc(vm->alloc, n);
    if (!staging) return TESSERA_ERROR_OUT_OF_MEMORY;
    rc = from->ops->read_back(from, src->base, src->offset, staging, n);
    if (!rc) rc = to->ops->upload(to, dst->base, dst->offset, staging, n);
    tsr_free(vm->alloc, staging);
    return rc;
}

static int truth(tsr_vm *vm, frame *fr, int32_t reg, bool *out) {
    tsr_val *v;
    int rc = materialize(vm, fr, reg, &v);
    if (rc) return rc;
    if (v->kind == TSR_V_INT) {
        *out = v->as.i != 0;
        return 0;
    }
    if (v->kind != TSR_V_TENSOR)
        return tsr_error(TESSERA_ERROR_RUNTIME_CHECK, "%s: a branch condition must be a prim or a tensor", fr->f->name);
    const tsr_vtensor *t = &v->as.tensor;
    if (element_count(t->shape, t->ndim) != 1)
        return tsr_error(TESSERA_ERROR_RUNTIME_CHECK, "%s: a branch condition must have one element", fr->f->name);
    unsigned char word[8] = {0};
    size_t size = tsr_dtype_storage_bytes(t->dtype);
    tsr_device *device = vm->devices[t->device];
    if ((rc = device->ops->read_back(device, t->base, t->offset, word, size > 8 ? 8 : size))) return rc;
    switch (t->dtype) {
    case TESSERA_FLOAT32: { float x; memcpy(&x, word, 4); *out = x != 0.0f; break; }
    default: { bool any = false; for (size_t i = 0; i < size && i < 8; i++) any |= word[i] != 0; *out = any; }
    }
    return 0;
}

static int run(tsr_vm *vm, frame **top, tsr_val *result) {
    frame *fr = *top;
    int rc;
    for (;;) {
        if (fr->pc < 0 || fr->pc >= fr->f->n_code)
            return tsr_error(TESSERA_ERROR_RUNTIME_CHECK, "%s: ran past its last instruction", fr->f->name);
        const tsr_instr *in = &fr->f->code[fr->pc++];
        tsr_val *v;
        switch (in->op) {
        case TSR_OP_MATCH:
            if ((rc = materialize(vm, fr, in->reg, &v))) return rc;
            if ((rc = tsr_match(fr->f, in, v, fr->heap, fr->bound))) return rc;
            break;
        case TSR_OP_LAUNCH:
            if ((rc = launch(vm, fr, in))) return rc;
            break;
        case TSR_OP_ALLOC_STORAGE: {
            int64_t size;
            if ((rc = eval(fr, &in->exprs[0], &size))) return rc;
            if (size < 0) return tsr_error(TESSERA_ERROR_RUNTIME_CHECK, "%s: a storage of negative size", fr->f->name);
            tsr_block *b = tsr_pool_take(vm, (size_t)size, in->device);
            if ((rc = own(fr, b))) return rc;
            fr->regs[in->dst].kind = TSR_V_STORAGE;
            fr->regs[in->dst].as.storage = b;
            break;
        }
        case TSR_OP_ALLOC_TENSOR: {
            tsr_val *dst = &fr->regs[in->dst];
            tsr_vtensor *t = &dst->as.tensor;
            memset(t, 0, sizeof *t);
            t->dtype = in->dtype;
            t->ndim = in->n_exprs;
            for (int32_t d = 0; d < in->n_exprs; d++) {
                if ((rc = eval(fr, &in->exprs[d], &t->shape[d]))) return rc;
                if (t->shape[d] < 0) return tsr_error(TESSERA_ERROR_RUNTIME_CHECK, "%s: a tensor of negative size", fr->f->name);
            }
            int64_t count;
            if (!checked_count(t->shape, t->ndim, &count))
                return tsr_error(TESSERA_ERROR_RUNTIME_CHECK, "%s: a tensor with more elements than int64 holds", fr->f->name);
            t->nbytes = tsr_storage_bytes(in->dtype, count);
            tsr_block *b = tsr_pool_take(vm, t->nbytes, in->device);
            if ((rc = own(fr, b))) return rc;
            t->base = b->base;
            t->device = in->device;
            t->block = b;
            dst->kind = TSR_V_TENSOR;
            break;
        }
        case TSR_OP_CALL_BUILTIN:
            if ((rc = call_builtin(vm, fr, in))) return rc;
            break;
        case TSR_OP_TO_DEVICE:
            if ((rc = to_device(vm, fr, in))) return rc;
            break;
        case TSR_OP_CALL: {
            int32_t callee = in->target;
            if (callee < 0) {
                if ((rc = materialize(vm, fr, in->callee, &v))) return rc;
                if (v->kind != TSR_V_FUNC)
                    return tsr_error(TESSERA_ERROR_RUNTIME_CHECK, "%s calls a value that is not a function", fr->f->name);
                callee = v->as.func;
            }
            tsr_val *args = tsr_bump_array(vm->scratch, (size_t)in->n_args + 1, sizeof(tsr_val));
            if (!args) return TESSERA_ERROR_OUT_OF_MEMORY;
            for (int32_t i = 0; i < in->n_args; i++) {
                if ((rc = materialize(vm, fr, in->regs[i], &v))) return rc;
                args[i] = *v;
            }
            frame *next;
            if ((rc = enter(vm, callee, args, in->n_args, fr, &next))) return rc;
            *top = fr = next;
            break;
        }
        case TSR_OP_RET: {
            if ((rc = materialize(vm, fr, in->reg, &v))) return rc;
            tsr_val value = *v;
            frame *caller = fr->caller;
            if (!caller) {
                release_frame(vm, fr, &value, &vm->held);
                *result = value;
                return 0;
            }
            release_frame(vm, fr, &value, &caller->owned);
            caller->regs[caller->f->code[caller->pc - 1].dst] = value;
            *top = fr = caller;
            break;
        }
        case TSR_OP_FUNC:
            fr->regs[in->dst].kind = TSR_V_FUNC;
            fr->regs[in->dst].as.func = in->target;
            break;
        case TSR_OP_IF: {
            bool yes = false;
            if ((rc = truth(vm, fr, in->reg, &yes))) return rc;
            if (!yes) fr->pc = in->target;
            break;
        }
        case TSR_OP_GOTO:
            fr->pc = in->target;
            break;
        case TSR_OP_PRIM:
            fr->regs[in->dst].kind = TSR_V_INT;
            if ((rc = eval(fr, &in->exprs[0], &fr->regs[in->dst].as.i))) return rc;
            break;
        case TSR_OP_MOVE:
            if ((rc = materialize(vm, fr, in->reg, &v))) return rc;
            fr->regs[in->dst] = *v;
            break;
        case TSR_OP_TUPLE: {
            tsr_val *items = tsr_bump_array(vm->scratch, (size_t)in->n_args + 1, sizeof(tsr_val));
            if (!items) return TESSERA_ERROR_OUT_OF_MEMORY;
            for (int32_t i = 0; i < in->n_args; i++) {
                if ((rc = materialize(vm, fr, in->regs[i], &v))) return rc;
                items[i] = *v;
            }
            fr->regs[in->dst].kind = TSR_V_TUPLE;
            fr->regs[in->dst].as.tuple.items = items;
            fr->regs[in->dst].as.tuple.n = in->n_args;
            break;
        }
        case TSR_OP_GET:
            if ((rc = materialize(vm, fr, in->reg, &v))) return rc;
            if (v->kind != TSR_V_TUPLE || in->target >= v->as.tuple.n)
                return tsr_error(TESSERA_ERROR_RUNTIME_CHECK, "%s: field %d of a value that is not a tuple that long",
                                 fr->f->name, in->target);
            fr->regs[in->dst] = v->as.tuple.items[in->target];
            break;
        case TSR_OP_SHAPE: {
            int64_t *dims = tsr_bump_array(vm->scratch, (size_t)in->n_exprs + 1, sizeof(int64_t));
            if (!dims) return TESSERA_ERROR_OUT_OF_MEMORY;
            for (int32_t i = 0; i < in->n_exprs; i++)
                if ((rc = eval(fr, &in->exprs[i], &dims[i]))) return rc;
            fr->regs[in->dst].kind = TSR_V_SHAPE;
            fr->regs[in->dst].as.shape.dims = dims;
            fr->regs[in->dst].as.shape.n = in->n_exprs;
            break;
        }
        }
    }
}

/* ---- from and to the host -------------------------------------------------------------------- */

static int upload(tsr_vm *vm, const tessera_value *in, tsr_val *out, tsr_block **uploaded, int depth, int32_t device) {
    if (depth > 16) return tsr_error(TESSERA_ERROR_INVALID_ARGUMENT, "arguments nested deeper than 16 tuples");
    if (in->kind == TESSERA_VALUE_INT) {
        out->kind = TSR_V_INT;
        out->as.i = in->value;
        return 0;
    }
    if (in->kind == TESSERA_VALUE_TUPLE) {
        tsr_val *items = tsr_bump_array(vm->scratch, in->n_items + 1, sizeof(tsr_val));
        if (!items) return TESSERA_ERROR_OUT_OF_MEMORY;
        for (size_t i = 0; i < in->n_items; i++) {
            int rc = upload(vm, &in->items[i], &items[i], uploaded, depth + 1, 0); /* as the Python VM places them */
            if (rc) return rc;
        }
        out->kind = TSR_V_TUPLE;
        out->as.tuple.items = items;
        out->as.tuple.n = (int32_t)in->n_items;
        return 0;
    }
    if (in->kind != TESSERA_VALUE_TENSOR)
        return tsr_error(TESSERA_ERROR_INVALID_ARGUMENT, "an argument of unknown kind %d", (int)in->kind);
    const tessera_tensor *src = &in->tensor;
    if (src->ndim < 0 || src->ndim > TESSERA_MAX_NDIM || (int)src->dtype < 0 || src->dtype > TESSERA_UINT8)
        return tsr_error(TESSERA_ERROR_INVALID_ARGUMENT, "a tensor argument with a bad ndim or dtype");
    int64_t count = 1;
    for (int32_t d = 0; d < src->ndim; d++) {
        if (src->shape[d] < 0 || __builtin_mul_overflow(count, src->shape[d], &count))
            return tsr_error(TESSERA_ERROR_INVALID_ARGUMENT, "a tensor argument with a bad shape");
    }
    if (count > 0 && !src->data) return tsr_error(TESSERA_ERROR_INVALID_ARGUMENT, "a tensor argument without data");
    tsr_vtensor *t = &out->as.tensor;
    memset(t, 0, sizeof *t);
    t->dtype = src->dtype;
    t->ndim = src->ndim;
    memcpy(t->shape, src->shape, sizeof t->shape);
    t->nbytes = tsr_storage_bytes(src->dtype, count);
    if (t->nbytes == SIZE_MAX) return tsr_error(TESSERA_ERROR_INVALID_ARGUMENT, "a tensor argument too large");
    tsr_block *b = tsr_pool_take(vm, t->nbytes, device);
    if (!b) return TESSERA_ERROR_OUT_OF_MEMORY;
    b->next_owned = *uploaded;
    *uploaded = b;
    t->base = b->base;
    t->device = device;
    int rc = write_host(vm, t, src->data, count);
    if (rc) return rc;
    out->kind = TSR_V_TENSOR;
    return 0;
}

static int push_output(tsr_vm *vm, const tessera_tensor *t) {
    if (vm->n_outputs == vm->outputs_capacity) {
        int32_t capacity = vm->outputs_capacity ? vm->outputs_capacity * 2 : 8;
        tessera_tensor *grown = tsr_calloc(vm->alloc, (size_t)capacity, sizeof *grown);
        if (!grown) return TESSERA_ERROR_OUT_OF_MEMORY;
        if (vm->outputs) memcpy(grown, vm->outputs, (size_t)vm->n_outputs * sizeof *grown);
        tsr_free(vm->alloc, vm->outputs);
        vm->outputs = grown;
        vm->outputs_capacity = capacity;
    }
    vm->outputs[vm->n_outputs++] = *t;
    return 0;
}

static int flatten(tsr_vm *vm, const tsr_val *v) {
    tessera_tensor out;
    memset(&out, 0, sizeof out);
    switch (v->kind) {
    case TSR_V_TENSOR: {
        const tsr_vtensor *t = &v->as.tensor;
        int64_t count = element_count(t->shape, t->ndim);
        tsr_device *device = vm->devices[t->device];
        void *host = device->ops->host_pointer(device, t->base, t->offset);
        bool widened = tsr_dtype_widened(t->dtype);
        if (widened || !host) {
            size_t bytes = (size_t)count * tsr_dtype_host_bytes(t->dtype);
            unsigned char *copy = tsr_bump_alloc(vm->output_scratch, bytes ? bytes : 1);
            if (!copy) return TESSERA_ERROR_OUT_OF_MEMORY;
            int rc = 0;
            if (widened) {
                uint32_t *words = host;
                if (!words) {
                    words = tsr_bump_array(vm->output_scratch, (size_t)(count ? count : 1), 4);
                    if (!words) return TESSERA_ERROR_OUT_OF_MEMORY;
                    rc = device->ops->read_back(device, t->base, t->offset, words, (size_t)count * 4);
                }
                if (!rc) tsr_narrow_from_words(t->dtype, words, copy, count);
            } else {
                rc = device->ops->read_back(device, t->base, t->offset, copy, bytes);
            }
            if (rc) return rc;
            host = copy;
        }
        out.data = host;
        out.dtype = t->dtype;
        out.ndim = t->ndim;
        memcpy(out.shape, t->shape, sizeof out.shape);
        return push_output(vm, &out);
    }
    case TSR_V_INT: {
        int64_t *value = tsr_bump_alloc(vm->output_scratch, sizeof(int64_t));
        if (!value) return TESSERA_ERROR_OUT_OF_MEMORY;
        *value = v->as.i;
        out.data = value;
        out.dtype = TESSERA_INT64;
        return push_output(vm, &out);
    }
    case TSR_V_SHAPE: /* one integer per dimension, as a tuple of prims flattens */
        for (int32_t i = 0; i < v->as.shape.n; i++) {
            tsr_val dim = {.kind = TSR_V_INT, .as.i = v->as.shape.dims[i]};
            int rc = flatten(vm, &dim);
            if (rc) return rc;
        }
        return 0;
    case TSR_V_TUPLE:
        for (int32_t i = 0; i < v->as.tuple.n; i++) {
            int rc = flatten(vm, &v->as.tuple.items[i]);
            if (rc) return rc;
        }
        return 0;
    default:
        return tsr_error(TESSERA_ERROR_UNSUPPORTED, "the function returns a value the C API cannot hand out (a function "
                         "or a storage)");
    }
}

int tsr_vm_call(tsr_vm *vm, const char *name, const tessera_value *args, size_t n_args) {
    int32_t index = tsr_executable_function(vm->exe, name);
    if (index < 0) return tsr_error(TESSERA_ERROR_INVALID_ARGUMENT, "the executable has no function '%s'", name);
    tsr_bump_reset(vm->scratch, (tsr_bump_mark){0});
    vm->n_outputs = 0;
    if (n_args > 4096) return tsr_error(TESSERA_ERROR_INVALID_ARGUMENT, "too many arguments");
    tsr_val *values = tsr_bump_array(vm->scratch, n_args + 1, sizeof(tsr_val));
    if (!values) return TESSERA_ERROR_OUT_OF_MEMORY;
    tsr_block *uploaded = NULL;
    int rc = 0;
    /* Each argument to its parameter's device (a split build's; extra arguments, refused when the function
     * is entered, to device 0). */
    const tsr_function *f = &vm->exe->functions[index];
    int32_t p = 0;
    for (size_t i = 0; i < n_args && rc == 0; i++) {
        while (p < f->n_params && f->params[p].state) p++;
        int32_t device = p < f->n_params ? f->params[p++].device : 0;
        rc = upload(vm, &args[i], &values[i], &uploaded, 0, device);
    }
    /* The last call's results stay alive until the arguments are copied: one may be an argument. */
    for (tsr_block *b = vm->held; b;) {
        tsr_block *next = b->next_owned;
        tsr_pool_give(vm, b);
        b = next;
    }
    vm->held = NULL;
    tsr_bump_reset(vm->output_scratch, (tsr_bump_mark){0});
    frame *top = NULL;
    tsr_val result;
    if (rc == 0) rc = enter(vm, index, values, (int32_t)n_args, NULL, &top);
    if (rc == 0) rc = run(vm, &top, &result);
    for (int32_t d = 0; d < vm->n_devices && rc == 0; d++) rc = vm->devices[d]->ops->synchronize(vm->devices[d]);
    if (rc == 0) rc = flatten(vm, &result);
    if (rc != 0) {
        for (frame *fr = top; fr; fr = fr->caller) release_frame(vm, fr, NULL, NULL);
        for (tsr_block *b = vm->held; b;) {
            tsr_block *next = b->next_owned;
            tsr_pool_give(vm, b);
            b = next;
        }
        vm->held = NULL;
        vm->n_outputs = 0;
    }
    /* Arguments' blocks go back now; outputs that view them stay readable until the next call,
     * since the pool hands a block out again only then. */
    for (tsr_block *b = uploaded; b;) {
        tsr_block *next = b->next_owned;
        tsr_pool_give(vm, b);
        b = next;
    }
    return rc;
}
