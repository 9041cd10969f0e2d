/* The storage layer: what the memory plan places is allocated once, here, at load (one arena for
 * every function, and the state tensors such as the KV cache at their upper bounds); what it
 * cannot place comes from a pool of power-of-two blocks that later calls reuse. */
#include <string.h>

#include "vm.h"

#define ALIGN 64

static size_t align_up(size_t n) { return (n + ALIGN - 1) & ~(size_t)(ALIGN - 1); }

size_t tsr_storage_bytes(tessera_dtype dtype, int64_t count) {
    size_t element = tsr_dtype_storage_bytes(dtype), bytes;
    if (count < 0 || !tsr_mul_size((size_t)count, element, &bytes)) return SIZE_MAX;
    bytes = (bytes + 3) & ~(size_t)3;
    return bytes < 4 ? 4 : bytes;
}

bool tsr_dtype_widened(tessera_dtype dtype) { return tsr_dtype_host_bytes(dtype) < tsr_dtype_storage_bytes(dtype); }

void tsr_widen_to_words(tessera_dtype dtype, const void *host, uint32_t *words, int64_t count) {
    const uint8_t *bytes = host;
    switch (dtype) {
    case TESSERA_BOOL:
        for (int64_t i = 0; i < count; i++) words[i] = bytes[i] != 0;
        break;
    case TESSERA_INT8: /* sign-extended: the i32 word the kernels compute in holds -128..127 */
        for (int64_t i = 0; i < count; i++) words[i] = bytes[i] & 0x80u ? 0xFFFFFF00u | bytes[i] : bytes[i];
        break;
    default: /* uint8: zero-extended */
        for (int64_t i = 0; i < count; i++) words[i] = bytes[i];
        break;
    }
}

void tsr_narrow_from_words(tessera_dtype dtype, const uint32_t *words, void *host, int64_t count) {
    uint8_t *bytes = host;
    if (dtype == TESSERA_BOOL)
        for (int64_t i = 0; i < count; i++) bytes[i] = words[i] != 0;
    else /* int8, uint8: the low byte (kernels store values wrapped to the range already) */
        for (int64_t i = 0; i < count; i++) bytes[i] = (uint8_t)(words[i] & 0xFFu);
}

/* A state parameter's bytes at the function's upper bounds. */
static int state_bytes(const tsr_function *f, const tsr_param *param, int64_t *out) {
    const tsr_register_info *info = &f->regs[param->reg];
    int32_t n = f->symbols.count;
    int64_t values[TSR_MAX_SYMBOLS];
    uint8_t bound[TSR_MAX_SYMBOLS];
    if (n > TSR_MAX_SYMBOLS)
        return tsr_error(TESSERA_ERROR_UNSUPPORTED, "function '%s' has more than %d symbolic variables", f->name, TSR_MAX_SYMBOLS);
    for (int32_t s = 0; s < n; s++) {
        values[s] = f->upper_bounds[s];
        bound[s] = f->upper_bounds[s] >= 0;
    }
    int rc = tsr_shape_expr_eval(&info->bytes, &f->symbols, values, bound, out);
    if (rc) return tsr_error_context(rc, "the state '%s' of function '%s' has no size at the upper bounds", param->name, f->name);
    return 0;
}

int tsr_plan_bytes(const tsr_executable *exe, int32_t device, uint64_t *arena, uint64_t *state) {
    *arena = 0;
    *state = 0;
    for (int32_t i = 0; i < exe->n_functions; i++) {
        const tsr_function *f = &exe->functions[i];
        for (int32_t b = 0; b < f->n_arena_buffers; b++)
            if (device < 0 || f->buffer_devices[b] == device) *arena += align_up(f->arena_buffers[b]);
    }
    /* State is shared by name: count each name once, at its largest. */
    for (int32_t i = 0; i < exe->n_functions; i++) {
        const tsr_function *f = &exe->functions[i];
        for (int32_t p = 0; p < f->n_params; p++) {
            if (!f->params[p].state || (device >= 0 && f->params[p].device != device)) continue;
            bool seen = false;
            for (int32_t j = 0; j < i && !seen; j++)
                for (int32_t q = 0; q < exe->functions[j].n_params; q++)
                    if (exe->functions[j].params[q].state && strcmp(exe->functions[j].params[q].name, f->params[p].name) == 0)
                        seen = true;
            if (seen) continue;
            int64_t bytes;
            int rc = state_bytes(f, &f->params[p], &bytes);
            if (rc) return rc;
            *state += align_up((size_t)bytes);
        }
    }
    return 0;
}

int tsr_state_index(const tsr_vm *vm, const char *name) {
    for (int32_t i = 0; i < vm->n_state; i++)
        if (strcmp(vm->state_names[i], name) == 0) return i;
    return -1;
}

static int init_state(tsr_vm *vm) {
    const tsr_executable *exe = vm->exe;
    int32_t capacity = 0;
    for (int32_t i = 0; i < exe->n_functions; i++)
        for (int32_t p = 0; p < exe->functions[i].n_params; p++) capacity += exe->functions[i].params[p].state;
    vm->state = tsr_calloc(vm->alloc, (size_t)capacity + 1, sizeof(void *));
    vm->state_names = tsr_calloc(vm->alloc, (size_t)capacity + 1, sizeof(char *));
    vm->state_bytes = tsr_calloc(vm->alloc, (size_t)capacity + 1, sizeof(size_t));
    vm->state_devices = tsr_calloc(vm->alloc, (size_t)capacity + 1, sizeof(int32_t));
    if (!vm->state || !vm->state_names || !vm->state_bytes || !vm->state_devices) return TESSERA_ERROR_OUT_OF_MEMORY;
    for (int32_t i = 0; i < exe->n_functions; i++) {
        const tsr_function *f = &exe->functions[i];
        for (int32_t p = 0; p < f->n_params; p++) {
            const tsr_param *param = &f->params[p];
            if (!param->state) continue;
            int64_t bytes;
            int rc = state_bytes(f, param, &bytes);
            if (rc) return rc;
            int32_t device = f->regs[param->reg].device;
            int k = tsr_state_index(vm, param->name);
            if (k >= 0) {
                if ((size_t)bytes > vm->state_bytes[k])
                    return tsr_error(TESSERA_ERROR_FORMAT, "state '%s' is declared with different sizes by different "
                                     "functions", param->name);
                if (device != vm->state_devices[k])
                    return tsr_error(TESSERA_ERROR_FORMAT, "state '%s' is placed on different devices by different "
                                     "functions", param->name);
                continue;
            }
            k = vm->n_state++;
            vm->state_names[k] = param->name;
            vm->state_bytes[k] = (size_t)bytes;
            vm->state_devices[k] = device;
            vm->state[k] = vm->devices[device]->ops->allocate(vm->devices[device], (size_t)bytes);
            if (!vm->state[k]) return TESSERA_ERROR_OUT_OF_MEMORY;
        }
    }
    return 0;
}

static int init_arena(tsr_vm *vm) {
    const tsr_executable *exe = vm->exe;
    uint64_t arena, state;
    int rc = tsr_plan_bytes(exe, -1, &arena, &state);
    if (rc) return rc;
    if (arena > SIZE_MAX / 2) return tsr_error(TESSERA_ERROR_OUT_OF_MEMORY, "the planned arena does not fit in memory");
    size_t n_functions = (size_t)(exe->n_functions ? exe->n_functions : 1);
    vm->buffer_offsets = tsr_calloc(vm->alloc, n_functions, sizeof(size_t *));
    if (!vm->buffer_offsets) return TESSERA_ERROR_OUT_OF_MEMORY;
    vm->fixed_tensors = tsr_calloc(vm->alloc, n_functions, sizeof(tsr_vtensor *));
    vm->fixed_state = tsr_calloc(vm->alloc, n_functions, sizeof(uint8_t *));
    vm->launch_plans = tsr_calloc(vm->alloc, n_functions, sizeof(tsr_launch_plan *));
    if (!vm->fixed_tensors || !vm->fixed_state || !vm->launch_plans) return TESSERA_ERROR_OUT_OF_MEMORY;
    /* Each buffer at the next free offset of its device's arena (the sum above bounds every one). */
    for (int32_t i = 0; i < exe->n_functions; i++) {
        const tsr_function *f = &exe->functions[i];
        vm->buffer_offsets[i] = tsr_calloc(vm->alloc, (size_t)(f->n_arena_buffers ? f->n_arena_buffers : 1), sizeof(size_t));
        if (!vm->buffer_offsets[i]) return TESSERA_ERROR_OUT_OF_MEMORY;
        size_t n_registers = (size_t)(f->n_registers ? f->n_registers : 1);
        vm->fixed_tensors[i] = tsr_calloc(vm->alloc, n_registers, sizeof(tsr_vtensor));
        vm->fixed_state[i] = tsr_calloc(vm->alloc, n_registers, 1); /* all TSR_FIXED_UNKNOWN */
        vm->launch_plans[i] = tsr_calloc(vm->alloc, (size_t)(f->n_code ? f->n_code : 1), sizeof(tsr_launch_plan));
        if (!vm->fixed_tensors[i] || !vm->fixed_state[i] || !vm->launch_plans[i]) return TESSERA_ERROR_OUT_OF_MEMORY;
        /* A register some instruction writes holds that value, not its planned place, once written: never
         * fixed, so a launch's plan never stands in for a value written on another path. */
        for (int32_t c = 0; c < f->n_code; c++) {
            int32_t dst = f->code[c].dst;
            if (dst >= 0 && dst < f->n_registers) vm->fixed_state[i][dst] = TSR_FIXED_NO;
        }
        for (int32_t b = 0; b < f->n_arena_buffers; b++) {
            int32_t d = f->buffer_devices[b];
            vm->buffer_offsets[i][b] = vm->arena_bytes[d];
            vm->arena_bytes[d] += align_up(f->arena_buffers[b]);
        }
    }
    for (int32_t d = 0; d < vm->n_devices; d++) {
        /* Device 0 always has one (a plan with no buffers still binds its empty arena); the others only
         * when the plan places something there. */
        if (d > 0 && vm->arena_bytes[d] == 0) continue;
        vm->arenas[d] = vm->devices[d]->ops->allocate(vm->devices[d], vm->arena_bytes[d]);
        if (!vm->arenas[d]) return TESSERA_ERROR_OUT_OF_MEMORY;
    }
    return 0;
}

/* Weight w as device d holds it: the mapped shard itself where the layouts agree (a GPU makes its copy
 * in adopt_host), else a copy widened (bool, int8, uint8: one 32-bit word each) or padded to whole words. */
static int place_constant(tsr_vm *vm, const tsr_weight *w, int32_t c, int32_t d) {
    tsr_device *device = vm->devices[d];
    size_t slot = (size_t)c * (size_t)vm->n_devices + (size_t)d;
    int64_t count = 1;
    for (int32_t k = 0; k < w->ndim; k++) count *= w->shape[k];
    size_t bytes = vm->constant_bytes[c];
    if (bytes == w->nbytes) {
        vm->constants[slot] = device->ops->adopt_host(device, w->data, w->nbytes);
        return vm->constants[slot] ? 0 : TESSERA_ERROR_OUT_OF_MEMORY;
    }
    void *copy = device->ops->allocate(device, bytes);
    if (!copy) return TESSERA_ERROR_OUT_OF_MEMORY;
    vm->owned_constants[slot] = copy;
    vm->constants[slot] = copy;
    if (!tsr_dtype_widened(w->dtype)) return device->ops->upload(device, copy, 0, w->data, w->nbytes);
    uint32_t *words = tsr_calloc(vm->alloc, (size_t)(count ? count : 1), 4);
    if (!words) return TESSERA_ERROR_OUT_OF_MEMORY;
    tsr_widen_to_words(w->dtype, w->data, words, count);
    int rc = device->ops->upload(device, copy, 0, words, (size_t)count * 4);
    tsr_free(vm->alloc, words);
    return rc;
}

static int init_constants(tsr_vm *vm, const tsr_tensor_cache *weights) {
    const tsr_executable *exe = vm->exe;
    size_t n = (size_t)(exe->n_constants ? exe->n_constants : 1);
    vm->constants = tsr_calloc(vm->alloc, n * (size_t)vm->n_devices, sizeof(void *));
    vm->constant_bytes = tsr_calloc(vm->alloc, n, sizeof(size_t));
    vm->owned_constants = tsr_calloc(vm->alloc, n * (size_t)vm->n_devices, sizeof(void *));
    if (!vm->constants || !vm->constant_bytes || !vm->owned_constants) return TESSERA_ERROR_OUT_OF_MEMORY;
    for (int32_t c = 0; c < exe->n_constants; c++) {
        const tsr_weight *w = weights ? tsr_tensor_cache_find(weights, exe->constants[c]) : NULL;
        if (!w)
            return tsr_error(TESSERA_ERROR_FORMAT, "the weight '%s' that the executable uses is not in tensor-cache.json",
                             exe->constants[c]);
        int64_t count = 1;
        for (int32_t d = 0; d < w->ndim; d++) count *= w->shape[d];
        vm->constant_bytes[c] = tsr_storage_bytes(w->dtype, count);
        /* A copy on each device that reads it (constant_devices; device 0 unless split). */
        uint32_t placed = exe->constant_devices ? exe->constant_devices[c] : 1;
        for (int32_t d = 0; d < vm->n_devices; d++) {
            if (!(placed >> d & 1)) continue;
            int rc = place_constant(vm, w, c, d);
            if (rc) return rc;
        }
    }
    return 0;
}

int tsr_vm_init(tsr_vm *vm, tsr_alloc *a, const tsr_executable *exe, tsr_device *device,
                const tsr_tensor_cache *weights, const tessera_library *libraries, size_t n_libraries) {
    return tsr_vm_init_devices(vm, a, exe, &device, 1, weights, libraries, n_libraries);
}

int tsr_vm_init_devices(tsr_vm *vm, tsr_alloc *a, const tsr_executable *exe, tsr_device *const *devices,
                        int32_t n_devices, const tsr_tensor_cache *weights, const tessera_library *libraries,
                        size_t n_libraries) {
    memset(vm, 0, sizeof *vm);
    int32_t wanted = exe->n_devices ? exe->n_devices : 1;
    if (n_devices != wanted)
        return tsr_error(TESSERA_ERROR_INVALID_ARGUMENT, "the executable runs on %d device%s; the VM was given %d",
                         (int)wanted, wanted == 1 ? "" : "s", (int)n_devices);
    vm->alloc = a;
    vm->exe = exe;
    vm->device = devices[0];
    vm->n_devices = n_devices;
    for (int32_t d = 0; d < n_devices; d++) vm->devices[d] = devices[d];
    vm->libraries = tsr_calloc(a, (size_t)(exe->n_libraries ? exe->n_libraries : 1), sizeof(tessera_library));
    if (!vm->libraries) return TESSERA_ERROR_OUT_OF_MEMORY;
    for (int32_t l = 0; l < exe->n_libraries; l++) {
        const char *name = exe->libraries[l];
        const tessera_library *found = tsr_builtin_library(name);
        for (size_t u = 0; u < n_libraries; u++) {
            if (!libraries[u].name || strcmp(libraries[u].name, name) != 0) continue;
            if (found)
                return tsr_error(TESSERA_ERROR_LIBRARY, "the library '%s' is a builtin of the runtime and cannot be "
                                 "replaced", name);
            found = &libraries[u];
        }
        if (!found || !found->fn)
            return tsr_error(TESSERA_ERROR_LIBRARY, "the executable calls the library function '%s', which is not "
                             "registered: pass it in tessera_model_params.libraries", name);
        tessera_library *bound = (tessera_library *)&vm->libraries[l];
        *bound = *found;
        if (found == tsr_builtin_library(name)) bound->user = a; /* builtins allocate through the model */
    }
    int rc;
    if ((rc = init_constants(vm, weights))) return rc;
    if ((rc = init_arena(vm))) return rc;
    if ((rc = init_state(vm))) return rc;
    vm->kernel_launches = tsr_calloc(a, (size_t)exe->n_kernels + 1, sizeof(uint64_t));
    vm->kernel_seconds = tsr_calloc(a, (size_t)exe->n_kernels + 1, sizeof(double));
    if (!vm->kernel_launches || !vm->kernel_seconds) return TESSERA_ERROR_OUT_OF_MEMORY;
    vm->scratch = tsr_bump_new(a, 1 << 16);
    vm->output_scratch = tsr_bump_new(a, 1 << 12);
    if (!vm->scratch || !vm->output_scratch) return TESSERA_ERROR_OUT_OF_MEMORY;
    return 0;
}

int tsr_vm_reset_state(tsr_vm *vm) {
    static const unsigned char zeros[1 << 14];
    for (int32_t i = 0; i < vm->n_state; i++) {
        tsr_device *device = vm->devices[vm->state_devices[i]];
        void *p = device->ops->host_pointer(device, vm->state[i], 0);
        if (p) {
            memset(p, 0, vm->state_bytes[i]);
            continue;
        }
        /* A device whose memory the host cannot touch: zeros uploaded a chunk at a time. */
        for (size_t at = 0; at < vm->state_bytes[i]; at += sizeof zeros) {
            size_t n = vm->state_bytes[i] - at < sizeof zeros ? vm->state_bytes[i] - at : sizeof zeros;
            int rc = device->ops->upload(device, vm->state[i], at, zeros, n);
            if (rc) return rc;
        }
    }
    return 0;
}

tsr_block *tsr_pool_take(tsr_vm *vm, size_t nbytes, int32_t device) {
    int32_t size_class = 8; /* 256 bytes, the smallest block */
    while (size_class < TSR_POOL_CLASSES - 1 && ((size_t)1 << size_class) < nbytes) size_class++;
    if (((size_t)1 << size_class) < nbytes) {
        tsr_error(TESSERA_ERROR_OUT_OF_MEMORY, "a run-time allocation of %zu bytes is too large", nbytes);
        return NULL;
    }
    tsr_block *block = vm->free_blocks[device][size_class];
    if (block) {
        vm->free_blocks[device][size_class] = block->next_free;
    } else {
        block = tsr_calloc(vm->alloc, 1, sizeof *block);
        if (!block) return NULL;
        block->size = (size_t)1 << size_class;
        block->size_class = size_class;
        block->device = device;
        block->base = vm->devices[device]->ops->allocate(vm->devices[device], block->size);
        if (!block->base) {
            tsr_free(vm->alloc, block);
            return NULL;
        }
        vm->pool_device_allocations++;
    }
    block->next_free = NULL;
    block->next_owned = NULL;
    block->kept = false;
    return block;
}

void tsr_pool_give(tsr_vm *vm, tsr_block *block) {
    block->next_free = vm->free_blocks[block->device][block->size_class];
    vm->free_blocks[block->device][block->size_class] = block;
}

void tsr_vm_free(tsr_vm *vm) {
    if (!vm->exe) return;
    for (tsr_block *b = vm->held; b;) {
        tsr_block *next = b->next_owned;
        tsr_pool_give(vm, b);
        b = next;
    }
    for (int32_t dev = 0; dev < vm->n_devices; dev++) {
        tsr_device *d = vm->devices[dev];
        for (int32_t c = 0; c < TSR_POOL_CLASSES; c++) {
            for (tsr_block *b = vm->free_blocks[dev][c]; b;) {
                tsr_block *next = b->next_free;
                d->ops->release(d, b->base);
                tsr_free(vm->alloc, b);
                b = next;
            }
        }
        if (vm->owned_constants)
            for (int32_t c = 0; c < vm->exe->n_constants; c++) {
                void *copy = vm->owned_constants[(size_t)c * (size_t)vm->n_devices + (size_t)dev];
                if (copy) d->ops->release(d, copy);
            }
        if (vm->arenas[dev]) d->ops->release(d, vm->arenas[dev]);
    }
    for (int32_t i = 0; i < vm->n_state; i++) {
        tsr_device *d = vm->devices[vm->state_devices[i]];
        if (vm->state[i]) d->ops->release(d, vm->state[i]);
    }
    for (int32_t i = 0; i < vm->exe->n_functions; i++) {
        if (vm->buffer_offsets) tsr_free(vm->alloc, vm->buffer_offsets[i]);
        if (vm->fixed_tensors) tsr_free(vm->alloc, vm->fixed_tensors[i]);
        if (vm->fixed_state) tsr_free(vm->alloc, vm->fixed_state[i]);
        if (vm->launch_plans) tsr_free(vm->alloc, vm->launch_plans[i]);
    }
    tsr_free(vm->alloc, vm->buffer_offsets);
    tsr_free(vm->alloc, vm->fixed_tensors);
    tsr_free(vm->alloc, vm->fixed_state);
    tsr_free(vm->alloc, vm->launch_plans);
    tsr_free(vm->alloc, vm->constants);
    tsr_free(vm->alloc, vm->constant_bytes);
    tsr_free(vm->alloc, vm->owned_constants);
    tsr_free(vm->alloc, vm->state);
    tsr_free(vm->alloc, (void *)vm->state_names);
    tsr_free(vm->alloc, vm->state_bytes);
    tsr_free(vm->alloc, vm->state_devices);
    tsr_free(vm->alloc, (void *)vm->libraries);
    tsr_free(vm->alloc, vm->outputs);
    tsr_free(vm->alloc, vm->kernel_launches);
    tsr_free(vm->alloc, vm->kernel_seconds);
    tsr_bump_free(vm->scratch);
    tsr_bump_free(vm->output_scratch);
    memset(vm, 0, sizeof *vm);
}
