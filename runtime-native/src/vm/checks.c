/* The `match` instruction: bind, then check, in the words of tessera.ir.check and runtime-js's
 * checks.js, e.g.
 *   argument 'y' of helper: expected R.Tensor((m, 4), dtype="float32"), got shape (3, 5): dimension 1 is 5, not 4 */
#include <stdio.h>
#include <string.h>

#include "vm.h"

static const char *kind_of(const tsr_val *v) {
    switch (v->kind) {
    case TSR_V_TENSOR: return "tensor";
    case TSR_V_INT: return "integer";
    case TSR_V_SHAPE: return "shape";
    case TSR_V_FUNC: return "function";
    case TSR_V_TUPLE: return "tuple";
    case TSR_V_STORAGE: return "storage";
    default: return "nothing (an unset register)";
    }
}

static void print_dims(char *buf, size_t size, const int64_t *dims, int32_t n) {
    size_t used = (size_t)snprintf(buf, size, "(");
    for (int32_t i = 0; i < n && used < size; i++)
        used += (size_t)snprintf(buf + used, size - used, "%s%lld", i ? ", " : "", (long long)dims[i]);
    if (used < size) snprintf(buf + used, size - used, n == 1 ? ",)" : ")");
}

static void bind_dims(const tsr_sinfo *s, const int64_t *actual, int32_t n, int64_t *heap, uint8_t *bound) {
    if (s->n_dims != n) return;
    for (int32_t i = 0; i < n; i++) {
        int32_t sym = s->dims[i].symbol;
        if (sym >= 0 && !bound[sym]) {
            heap[sym] = actual[i];
            bound[sym] = 1;
        }
    }
}

static void bind(const tsr_sinfo *s, const tsr_val *v, int64_t *heap, uint8_t *bound) {
    if (s->kind == TSR_SINFO_TENSOR && s->n_dims >= 0 && v->kind == TSR_V_TENSOR)
        bind_dims(s, v->as.tensor.shape, v->as.tensor.ndim, heap, bound);
    else if (s->kind == TSR_SINFO_SHAPE && s->n_dims >= 0 && v->kind == TSR_V_SHAPE)
        bind_dims(s, v->as.shape.dims, v->as.shape.n, heap, bound);
    else if (s->kind == TSR_SINFO_PRIM && s->n_dims == 1 && v->kind == TSR_V_INT)
        bind_dims(s, &v->as.i, 1, heap, bound);
    else if (s->kind == TSR_SINFO_TUPLE && v->kind == TSR_V_TUPLE)
        for (int32_t i = 0; i < s->n_fields && i < v->as.tuple.n; i++) bind(&s->fields[i], &v->as.tuple.items[i], heap, bound);
}

/* Writes why the dims differ into why (empty when they match). */
static void dims_mismatch(const tsr_function *f, const tsr_sinfo *s, const int64_t *actual, int32_t n,
                          const int64_t *heap, const uint8_t *bound, char *why, size_t size) {
    for (int32_t axis = 0; axis < s->n_dims; axis++) {
        const tsr_dim *d = &s->dims[axis];
        int64_t expected;
        if (tsr_shape_expr_eval(&d->expr, &f->symbols, heap, bound, &expected) != 0) {
            snprintf(why, size, "symbolic variable in %s is not bound when checking", d->text);
            return;
        }
        if (expected != actual[axis]) {
            char shape[256], shown[300];
            print_dims(shape, sizeof shape, actual, n);
            if (d->expr.code == NULL) snprintf(shown, sizeof shown, "%lld", (long long)expected);
            else snprintf(shown, sizeof shown, "%s = %lld", d->text, (long long)expected);
            snprintf(why, size, "got shape %s: dimension %d is %lld, not %s", shape, axis, (long long)actual[axis], shown);
            return;
        }
    }
    why[0] = '\0';
}

static void mismatch(const tsr_function *f, const tsr_sinfo *s, const tsr_val *v, const int64_t *heap,
                     const uint8_t *bound, char *why, size_t size) {
    why[0] = '\0';
    switch (s->kind) {
    case TSR_SINFO_OBJECT:
        return;
    case TSR_SINFO_CALLABLE:
        if (v->kind != TSR_V_FUNC) snprintf(why, size, "got a %s", kind_of(v));
        return;
    case TSR_SINFO_PRIM:
        if (v->kind != TSR_V_INT) snprintf(why, size, "got a %s", kind_of(v));
        else if (s->n_dims == 1) dims_mismatch(f, s, &v->as.i, 1, heap, bound, why, size);
        return;
    case TSR_SINFO_SHAPE:
        if (v->kind != TSR_V_SHAPE) snprintf(why, size, "got a %s", kind_of(v));
        else if (s->ndim >= 0 && v->as.shape.n != s->ndim) snprintf(why, size, "got a shape of rank %d", v->as.shape.n);
        else if (s->n_dims >= 0) dims_mismatch(f, s, v->as.shape.dims, v->as.shape.n, heap, bound, why, size);
        return;
    case TSR_SINFO_TUPLE:
        if (v->kind != TSR_V_TUPLE) {
            snprintf(why, size, "got a %s", kind_of(v));
        } else if (v->as.tuple.n != s->n_fields) {
            snprintf(why, size, "got a tuple of %d fields", v->as.tuple.n);
        } else {
            for (int32_t i = 0; i < s->n_fields; i++) {
                char inner[768];
                mismatch(f, &s->fields[i], &v->as.tuple.items[i], heap, bound, inner, sizeof inner);
                if (inner[0]) {
                    snprintf(why, size, "field %d: %s", i, inner);
                    return;
                }
            }
        }
        return;
    case TSR_SINFO_TENSOR: {
        if (v->kind != TSR_V_TENSOR) {
            snprintf(why, size, "got a %s", kind_of(v));
            return;
        }
        const tsr_vtensor *t = &v->as.tensor;
        if (s->has_dtype && t->dtype != s->dtype) {
            snprintf(why, size, "got dtype %s", tsr_dtype_name(t->dtype));
        } else if (s->ndim >= 0 && t->ndim != s->ndim) {
            char shape[256];
            print_dims(shape, sizeof shape, t->shape, t->ndim);
            snprintf(why, size, "got rank %d (shape %s)", t->ndim, shape);
        } else if (s->n_dims >= 0) {
            dims_mismatch(f, s, t->shape, t->ndim, heap, bound, why, size);
        }
        return;
    }
    }
}

int tsr_match(const tsr_function *f, const tsr_instr *in, const tsr_val *value, int64_t *heap, uint8_t *bound) {
    bind(&in->sinfo, value, heap, bound);
    char why[1024];
    mismatch(f, &in->sinfo, value, heap, bound, why, sizeof why);
    if (why[0]) return tsr_error(TESSERA_ERROR_RUNTIME_CHECK, "%s: expected %s, %s", in->what, in->text, why);
    for (int32_t s = 0; s < f->symbols.count; s++) {
        if (f->upper_bounds[s] >= 0 && bound[s] && heap[s] > f->upper_bounds[s])
            return tsr_error(TESSERA_ERROR_RUNTIME_CHECK, "%s: %s = %lld exceeds its upper bound %lld, for which memory "
                             "was planned", f->name, f->symbols.names[s], (long long)heap[s],
                             (long long)f->upper_bounds[s]);
    }
    return 0;
}
