/* The checks of plan_checks.h.
 *
 * When a tensor is live. The plan says which tensors each storage holds, one after another (the arena
 * locations of their registers), and the code says where each register is used. A tensor holds bytes still
 * to be read from the first instruction that uses its register, or a value that may hold it, to the last
 * such instruction; a register the function returns is live past its end. `move`, `tuple` and `get` read no
 * bytes, they only pass a tensor on, so they are not uses: the value they make is followed instead (a
 * `get` of a register one `tuple` built takes that field alone, as the compiler's planner does), and so is
 * a `call`'s result, which may be one of its arguments. Instructions run in order except where a jump says
 * otherwise; code that jumps back (a loop) is not bounded this way, and then every storage counts as live
 * for the whole function, as it does when values pass each other on in more rounds than MAX_ALIAS_ROUNDS.
 * Two tensors of different storages may share bytes only while at most one of them is live. Python
 * (tessera/vm/plan_checks.py) and JS (runtime-js/src/plan-checks.js) follow the same steps. */
#include "plan_checks.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "facts.h"

/* Rounds of following values passed on, from the last instruction to the first. The compiler's code needs
 * one (a value is made before it is passed on) and a second to see that nothing changed. */
#define MAX_ALIAS_ROUNDS TSR_MAX_ALIAS_ROUNDS

/* ---- dimensions ------------------------------------------------------------------------------ */

typedef struct bounds {
    const tsr_function *f;
    uint8_t *bound; /* per symbol: whether it has an upper bound */
} bounds;

/* The value of e at the upper bounds, or false when it has none there (a symbol without a bound, a
 * division by zero or an overflow: what the VM checks when it runs). */
static bool at_bounds(const bounds *b, const tsr_shape_expr *e, int64_t *out) {
    if (!e->code) {
        *out = e->constant;
        return true;
    }
    /* A failed evaluation sets the thread's last error; the load goes on, and a later error replaces it. */
    return tsr_shape_expr_eval(e, &b->f->symbols, b->f->upper_bounds, b->bound, out) == 0;
}

/* The message names the dimension by its text where the parser kept it (struct info), else by its value. */
static int negative(const bounds *b, const tsr_shape_expr *e, const char *where, const char *text) {
    int64_t value;
    if (!at_bounds(b, e, &value) || value >= 0) return 0;
    char shown[64] = "";
    if (e->code) snprintf(shown, sizeof shown, "%s%lld at the upper bounds", text ? ", " : "", (long long)value);
    else if (!text) snprintf(shown, sizeof shown, "%lld", (long long)value);
    if (text)
        return tsr_error(TESSERA_ERROR_FORMAT, "executable.json: function '%s': %s is '%s'%s: a negative dimension",
                         b->f->name, where, text, shown);
    return tsr_error(TESSERA_ERROR_FORMAT, "executable.json: function '%s': %s is %s: a negative dimension",
                     b->f->name, where, shown);
}

static int sinfo_dimensions(const bounds *b, const tsr_sinfo *s, const char *where, int depth) {
    char at[320];
    if (s->kind == TSR_SINFO_TENSOR) {
        for (int32_t i = 0; i < s->n_dims; i++) {
            snprintf(at, sizeof at, "%.200s.shape[%d]", where, i);
            int rc = negative(b, &s->dims[i].expr, at, s->dims[i].text);
            if (rc) return rc;
        }
    }
    if (s->kind != TSR_SINFO_TUPLE || depth > TSR_MAX_SINFO_NESTING) return 0; /* the parser refuses deeper struct info */
    for (int32_t i = 0; i < s->n_fields; i++) {
        snprintf(at, sizeof at, "%.200s.fields[%d]", where, i);
        int rc = sinfo_dimensions(b, &s->fields[i], at, depth + 1);
        if (rc) return rc;
    }
    return 0;
}

int tsr_check_dimensions(tsr_alloc *a, const tsr_function *f) {
    bounds b = {f, tsr_calloc(a, (size_t)(f->symbols.count ? f->symbols.count : 1), 1)};
    if (!b.bound) return TESSERA_ERROR_OUT_OF_MEMORY;
    for (int32_t s = 0; s < f->symbols.count; s++) b.bound[s] = f->upper_bounds[s] >= 0;
    char where[320];
    int rc = 0;
    for (int32_t i = 0; !rc && i < f->n_params; i++) {
        snprintf(where, sizeof where, "params[%d].sinfo", i);
        rc = sinfo_dimensions(&b, &f->params[i].sinfo, where, 0);
    }
    for (int32_t r = 0; !rc && r < f->n_registers; r++) {
        const tsr_register_info *info = &f->regs[r];
        for (int32_t d = 0; !rc && info->has_tensor && d < info->ndim; d++) {
            snprintf(where, sizeof where, "tensors['%d'].shape[%d]", r, d);
            rc = negative(&b, &info->shape[d], where, NULL);
        }
    }
    for (int32_t pc = 0; !rc && pc < f->n_code; pc++) {
        const tsr_instr *in = &f->code[pc];
        if (in->op == TSR_OP_MATCH) {
            snprintf(where, sizeof where, "code[%d].sinfo", pc);
            rc = sinfo_dimensions(&b, &in->sinfo, where, 0);
        }
        for (int32_t d = 0; !rc && in->op == TSR_OP_ALLOC_TENSOR && d < in->n_exprs; d++) {
            snprintf(where, sizeof where, "code[%d].shape[%d]", pc, d);
            rc = negative(&b, &in->exprs[d], where, NULL);
        }
    }
    tsr_free(a, b.bound);
    return rc;
}

/* ---- live storages --------------------------------------------------------------------------- */

/* Instructions first .. last (both included); empty when first > last. */
typedef struct span {
    int32_t first, last;
} span;

static void widen(span *s, int32_t first, int32_t last) {
    if (first < s->first) s->first = first;
    if (last > s->last) s->last = last;
}

/* A value made from `source` (by move, tuple, get or call): where `made` is used, `source` is live. */
typedef struct passing {
    int32_t source, made;
} passing;

/* Widens the span of each register `in` uses (it is none of those that only pass a value on). */
static void uses(const tsr_instr *in, span *spans, int32_t pc, int32_t end) {
    int32_t n = 0;
    switch (in->op) {
    case TSR_OP_LAUNCH: case TSR_OP_CALL_BUILTIN: n = in->n_args + in->n_outs; break;
    case TSR_OP_CALL: n = in->n_args; break;
    default: break;
    }
    for (int32_t i = 0; i < n; i++) widen(&spans[in->regs[i]], pc, pc);
    if (in->dst >= 0) widen(&spans[in->dst], pc, pc);
    if (in->callee >= 0) widen(&spans[in->callee], pc, pc);
    /* match, if and ret read `reg`; move and get pass it on, and are not given here */
    if (in->reg >= 0) widen(&spans[in->reg], pc, in->op == TSR_OP_RET ? end : pc);
}

/* The span of each register in `spans` (f->n_registers of them); *bounded false when the code is not
 * bounded so (a jump back, or more rounds of passing on than MAX_ALIAS_ROUNDS). */
static int register_spans(tsr_alloc *a, const tsr_function *f, span *spans, bool *bounded) {
    *bounded = false;
    for (int32_t pc = 0; pc < f->n_code; pc++) {
        const tsr_instr *in = &f->code[pc];
        if ((in->op == TSR_OP_GOTO || in->op == TSR_OP_IF) && in->target <= pc) return 0;
    }
    size_t n_passing = 0;
    for (int32_t pc = 0; pc < f->n_code; pc++) {
        const tsr_instr *in = &f->code[pc];
        if (in->op == TSR_OP_MOVE || in->op == TSR_OP_GET) n_passing++;
        else if (in->op == TSR_OP_TUPLE || in->op == TSR_OP_CALL) n_passing += (size_t)in->n_args;
    }
    size_t n_regs = (size_t)f->n_registers;
    int32_t *writers = tsr_calloc(a, n_regs, sizeof *writers);
    int32_t *built = tsr_malloc(a, n_regs * sizeof *built); /* the tuple instruction that wrote it, or -1 */
    passing *passed = tsr_malloc(a, (n_passing ? n_passing : 1) * sizeof *passed);
    int rc = writers && built && passed ? 0 : TESSERA_ERROR_OUT_OF_MEMORY;
    if (!rc) {
        for (size_t r = 0; r < n_regs; r++) {
            spans[r] = (span){INT32_MAX, -1};
            built[r] = -1;
        }
        for (int32_t pc = 0; pc < f->n_code; pc++) {
            const tsr_instr *in = &f->code[pc];
            if (in->dst < 0) continue;
            writers[in->dst]++;
            if (in->op == TSR_OP_TUPLE) built[in->dst] = pc;
        }
        size_t k = 0;
        for (int32_t pc = 0; pc < f->n_code; pc++) {
            const tsr_instr *in = &f->code[pc];
            if (in->op == TSR_OP_MOVE) {
                passed[k++] = (passing){in->reg, in->dst};
            } else if (in->op == TSR_OP_TUPLE) {
                for (int32_t i = 0; i < in->n_args; i++) passed[k++] = (passing){in->regs[i], in->dst};
            } else if (in->op == TSR_OP_GET) {
                const tsr_instr *tuple = writers[in->reg] == 1 && built[in->reg] >= 0 ? &f->code[built[in->reg]] : NULL;
                int32_t source = tuple && in->target < tuple->n_args ? tuple->regs[in->target] : in->reg;
                passed[k++] = (passing){source, in->dst};
            } else {
                uses(in, spans, pc, f->n_code);
                for (int32_t i = 0; in->op == TSR_OP_CALL && i < in->n_args; i++) passed[k++] = (passing){in->regs[i], in->dst};
            }
        }
        for (int round = 0; round < MAX_ALIAS_ROUNDS && !*bounded; round++) {
            *bounded = true;
            for (size_t i = n_passing; i-- > 0;) {
                const span made = spans[passed[i].made];
                span *source = &spans[passed[i].source];
                if (made.first > made.last || (source->first <= made.first && source->last >= made.last)) continue;
                widen(source, made.first, made.last);
                *bounded = false;
            }
        }
    }
    tsr_free(a, writers);
    tsr_free(a, built);
    tsr_free(a, passed);
    return rc;
}

/* A tensor of the arena while it is live: its storage (by position in f->storages) and bytes. */
typedef struct tensor {
    span live;
    int32_t storage, buffer;
    uint64_t begin, end;
} tensor;

static int cmp_i64(int64_t x, int64_t y) { return (x > y) - (x < y); }

/* By storage, then lifetime and size (`end` holds the size until the tensors are merged). */
static int by_storage(const void *x, const void *y) {
    const tensor *a = x, *b = y;
    int c = cmp_i64(a->storage, b->storage);
    if (!c) c = cmp_i64(a->live.first, b->live.first);
    if (!c) c = cmp_i64(a->live.last, b->live.last);
    return c ? c : cmp_i64((int64_t)a->end, (int64_t)b->end);
}

/* In the order they become live (then by storage and place: the order Python and JS use too). */
static int by_start(const void *x, const void *y) {
    const tensor *a = x, *b = y;
    int c = cmp_i64(a->live.first, b->live.first);
    if (!c) c = cmp_i64(a->live.last, b->live.last);
    if (!c) c = cmp_i64(a->storage, b->storage);
    if (!c) c = cmp_i64(a->buffer, b->buffer);
    if (!c) c = cmp_i64((int64_t)a->begin, (int64_t)b->begin);
    return c ? c : cmp_i64((int64_t)a->end, (int64_t)b->end);
}

static int by_end(const void *x, const void *y) {
    const tensor *a = x, *b = y;
    int c = cmp_i64(a->live.last, b->live.last);
    if (!c) c = cmp_i64(a->storage, b->storage);
    return c ? c : cmp_i64(a->live.first, b->live.first);
}

/* The arena's tensors while live, `*n` of them, in `out` (room for one per register or storage): a storage
 * holds several one after another, each its own size at the upper bounds and lifetime; registers of one
 * storage live at once (a `get` that names its field's place) are one tensor, as large as the largest.
 * Where the code is not bounded, each storage is one tensor of its whole size, live throughout. */
static int arena_tensors(tsr_alloc *a, const tsr_function *f, tensor *out, size_t *n) {
    span *spans = tsr_malloc(a, (size_t)f->n_registers * sizeof *spans);
    uint8_t *bound = tsr_calloc(a, (size_t)(f->symbols.count ? f->symbols.count : 1), 1);
    bool bounded = false;
    int rc = spans && bound ? register_spans(a, f, spans, &bounded) : TESSERA_ERROR_OUT_OF_MEMORY;
    size_t found = 0;
    for (int32_t s = 0; !rc && !bounded && s < f->n_storages; s++) {
        const tsr_storage_plan *plan = &f->storages[s];
        if (plan->buffer >= 0) out[found++] = (tensor){{0, f->n_code}, s, plan->buffer, 0, plan->static_size};
    }
    for (int32_t s = 0; !rc && s < f->symbols.count; s++) bound[s] = f->upper_bounds[s] >= 0;
    bounds b = {f, bound};
    for (int32_t r = 0; !rc && bounded && r < f->n_registers; r++) {
        const tsr_register_info *info = &f->regs[r];
        if (info->location != TSR_LOC_ARENA || spans[r].first > spans[r].last) continue;
        int32_t s = f->token_to_storage[info->index];
        int64_t size = (int64_t)f->storages[s].static_size, bytes;
        if (at_bounds(&b, &info->bytes, &bytes) && bytes < size) size = bytes;
        out[found++] = (tensor){spans[r], s, f->storages[s].buffer, 0, (uint64_t)(size > 0 ? size : 0)};
    }
    qsort(out, found, sizeof *out, by_storage);
    size_t merged = 0;
    for (size_t i = 0; i < found; i++) {
        tensor *top = merged ? &out[merged - 1] : NULL;
        if (top && top->storage == out[i].storage && out[i].live.first <= top->live.last) {
            widen(&top->live, out[i].live.first, out[i].live.last);
            if (out[i].end > top->end) top->end = out[i].end;
        } else {
            out[merged++] = out[i];
        }
    }
    *n = 0;
    for (size_t i = 0; i < merged; i++) {
        if (out[i].end == 0) continue;
        tensor t = out[i];
        t.begin = f->storages[t.storage].offset;
        t.end += t.begin;
        out[(*n)++] = t;
    }
    qsort(out, *n, sizeof *out, by_start);
    tsr_free(a, spans);
    tsr_free(a, bound);
    return rc;
}

/* Where (buffer, first byte) goes among the live tensors, which are in order of place. */
static size_t place_of(const tensor *live, size_t n, int32_t buffer, uint64_t begin) {
    size_t low = 0, high = n;
    while (low < high) {
        size_t mid = low + (high - low) / 2;
        if (live[mid].buffer < buffer || (live[mid].buffer == buffer && live[mid].begin < begin)) low = mid + 1;
        else high = mid;
    }
    return low;
}

/* A sweep over the instructions that keeps the live tensors in order of place: they share no byte (else
 * the sweep stops), so a tensor that becomes live need only be compared with its two neighbours there. */
static int sweep(const tsr_function *f, const tensor *starts, tensor *ends, tensor *live, size_t n) {
    memcpy(ends, starts, n * sizeof *ends);
    qsort(ends, n, sizeof *ends, by_end);
    size_t n_live = 0, ended = 0;
    for (size_t i = 0; i < n; i++) {
        const tensor *item = &starts[i];
        for (; ended < n && ends[ended].live.last < item->live.first; ended++) {
            size_t at = place_of(live, n_live, ends[ended].buffer, ends[ended].begin);
            /* It is there: it became live before (it ends before this one starts), and live tensors share
             * no place. The test keeps a mistake in that reasoning from moving memory it should not. */
            if (at == n_live || live[at].storage != ends[ended].storage) continue;
            memmove(&live[at], &live[at + 1], (n_live - at - 1) * sizeof *live);
            n_live--;
        }
        size_t at = place_of(live, n_live, item->buffer, item->begin);
        for (size_t j = at ? at - 1 : 0; j < at + 1 && j < n_live; j++) {
            const tensor *other = &live[j];
            if (other->buffer != item->buffer || other->begin >= item->end || item->begin >= other->end) continue;
            return tsr_error(TESSERA_ERROR_FORMAT, "executable.json: function '%s': memory.storages[%d] shares bytes "
                             "%llu to %llu of buffer %d with storages[%d] while both are live (at code[%d])", f->name,
                             item->storage, (unsigned long long)(item->begin > other->begin ? item->begin : other->begin),
                             (unsigned long long)(item->end < other->end ? item->end : other->end), item->buffer,
                             other->storage, item->live.first);
        }
        memmove(&live[at + 1], &live[at], (n_live - at) * sizeof *live);
        live[at] = *item;
        n_live++;
    }
    return 0;
}

int tsr_check_live_storages(tsr_alloc *a, const tsr_function *f) {
    /* one tensor per arena register, or per storage where the code is not bounded */
    size_t room = (size_t)(f->n_registers > f->n_storages ? f->n_registers : f->n_storages) + 1;
    tensor *items = tsr_malloc(a, 3 * room * sizeof *items); /* by start, by end, live */
    size_t n = 0;
    int rc = items ? arena_tensors(a, f, items, &n) : TESSERA_ERROR_OUT_OF_MEMORY;
    if (!rc) rc = sweep(f, items, items + room, items + 2 * room, n);
    tsr_free(a, items);
    return rc;
}

/* ---- what the device takes ------------------------------------------------------------------- */

int tsr_check_device_fit(tsr_alloc *a, const tsr_executable *exe, const char *device, uint64_t storage_alignment,
                         int64_t max_workgroups) {
    return tsr_check_device_fit_on(a, exe, -1, device, storage_alignment, max_workgroups);
}

int tsr_check_device_fit_on(tsr_alloc *a, const tsr_executable *exe, int32_t on, const char *device,
                            uint64_t storage_alignment, int64_t max_workgroups) {
    for (int32_t i = 0; i < exe->n_functions; i++) {
        const tsr_function *f = &exe->functions[i];
        for (int32_t s = 0; storage_alignment && s < f->n_storages; s++) {
            const tsr_storage_plan *plan = &f->storages[s];
            if (plan->buffer >= 0 && on >= 0 && f->buffer_devices[plan->buffer] != on) continue;
            if (plan->buffer >= 0 && plan->offset % storage_alignment)
                return tsr_error(TESSERA_ERROR_UNSUPPORTED, "executable.json does not fit the %s: function '%s': "
                                 "memory.storages[%d].offset is %llu, not a multiple of %llu, the %s's storage "
                                 "alignment (minStorageBufferOffsetAlignment)", device, f->name, s,
                                 (unsigned long long)plan->offset, (unsigned long long)storage_alignment, device);
        }
        if (max_workgroups <= 0) continue;
        bounds b = {f, tsr_calloc(a, (size_t)(f->symbols.count ? f->symbols.count : 1), 1)};
        if (!b.bound) return TESSERA_ERROR_OUT_OF_MEMORY;
        for (int32_t s = 0; s < f->symbols.count; s++) b.bound[s] = f->upper_bounds[s] >= 0;
        int rc = 0;
        for (int32_t pc = 0; !rc && pc < f->n_code; pc++) {
            const tsr_instr *in = &f->code[pc];
            if (in->op != TSR_OP_LAUNCH) continue;
            const tsr_kernel *k = &exe->kernels[in->target];
            if (on >= 0 && k->device != on) continue;
            int64_t scalars[256]; /* the parser allows a kernel at most 256 */
            uint8_t all[256];
            bool known = in->n_exprs <= 256;
            for (int32_t j = 0; known && j < in->n_exprs; j++) known = at_bounds(&b, &in->exprs[j], &scalars[j]);
            if (!known) continue;
            memset(all, 1, sizeof all);
            for (int d = 0; !rc && d < 3; d++) {
                int64_t count;
                if (tsr_shape_expr_eval(&k->grid[d], &k->scalar_symbols, scalars, all, &count) || count <= max_workgroups)
                    continue;
                rc = tsr_error(TESSERA_ERROR_UNSUPPORTED, "executable.json does not fit the %s: kernels[%d].grid[%d] "
                               "(kernel %s) is %lld workgroups at the upper bounds of function '%s', code[%d], more "
                               "than the %s's %lld (maxComputeWorkgroupsPerDimension)", device, in->target, d,
                               k->name, (long long)count, f->name, pc, device, (long long)max_workgroups);
            }
        }
        tsr_free(a, b.bound);
        if (rc) return rc;
    }
    return 0;
}
