/* libFuzzer target: arbitrary bytes as executable.json text. tsr_executable_parse must accept or
 * refuse without a crash, a leak, an out-of-bounds read or undefined behaviour; an accepted
 * executable is checked for the index invariants the VM relies on without checking again
 * (docs/format.md: every register, kernel, function, library and instruction target in range). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "executable.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_function(const tsr_executable *exe, const tsr_function *f) {
    for (int32_t p = 0; p < f->n_params; p++)
        if (f->params[p].reg < 0 || f->params[p].reg >= f->n_registers) abort();
    for (int32_t r = 0; r < f->n_registers; r++) {
        const tsr_register_info *info = &f->regs[r];
        if (info->location == TSR_LOC_ARENA) {
            if (info->index < 0 || info->index > f->max_token) abort();
            int32_t s = f->token_to_storage[info->index];
            if (s < 0 || s >= f->n_storages || f->storages[s].buffer < 0) abort();
        }
        if (info->location == TSR_LOC_CONSTANT && (info->index < 0 || info->index >= exe->n_constants)) abort();
        if (info->location == TSR_LOC_STORAGE && (info->index < 0 || info->index >= f->n_registers)) abort();
    }
    for (int32_t s = 0; s < f->n_storages; s++) {
        const tsr_storage_plan *st = &f->storages[s];
        if (st->buffer >= f->n_arena_buffers) abort();
        if (st->buffer >= 0 && st->offset + st->static_size > f->arena_buffers[st->buffer]) abort();
    }
    for (int32_t pc = 0; pc < f->n_code; pc++) {
        const tsr_instr *in = &f->code[pc];
        if (in->dst >= f->n_registers || in->reg >= f->n_registers || in->callee >= f->n_registers) abort();
        for (int32_t i = 0; i < in->n_args + in->n_outs; i++)
            if (in->regs[i] < 0 || in->regs[i] >= f->n_registers) abort();
        switch (in->op) {
        case TSR_OP_LAUNCH:
            if (in->target < 0 || in->target >= exe->n_kernels) abort();
            if (in->n_args + in->n_outs != exe->kernels[in->target].n_bindings) abort();
            if (in->n_exprs != exe->kernels[in->target].n_scalars) abort();
            break;
        case TSR_OP_CALL:
            if (in->target >= exe->n_functions || (in->target < 0 && in->callee < 0)) abort();
            if (in->dst < 0) abort();
            break;
        case TSR_OP_FUNC:
            if (in->target < 0 || in->target >= exe->n_functions) abort();
            break;
        case TSR_OP_IF:
        case TSR_OP_GOTO:
            if (in->target < 0 || in->target >= f->n_code) abort();
            break;
        case TSR_OP_CALL_BUILTIN:
            if (in->library < 0 || in->library >= exe->n_libraries) abort();
            break;
        default:
            break;
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    tsr_alloc a;
    tsr_alloc_init(&a, NULL);
    /* A copy of exactly `size` bytes, so that ASan sees any read past the end of the text. */
    char *text = malloc(size ? size : 1);
    if (!text) return 0;
    if (size) memcpy(text, data, size);
    tsr_executable exe;
    if (tsr_executable_parse(&a, text, size, &exe) == TESSERA_OK) {
        for (int32_t k = 0; k < exe.n_kernels; k++)
            if (exe.kernels[k].module < 0 || exe.kernels[k].module >= exe.n_modules) abort();
        for (int32_t i = 0; i < exe.n_functions; i++) check_function(&exe, &exe.functions[i]);
        tsr_executable_free(&exe);
    }
    free(text);
    return 0;
}
