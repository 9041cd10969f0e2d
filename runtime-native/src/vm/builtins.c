/* tessera.builtin.*: the data-dependent operators every runtime supplies (docs/format.md,
 * "Libraries"), on host arrays in numpy's layout. They come in pairs: `*_size` returns the output's
 * length, the program allocates a tensor that long, and the operator fills it. Elements are read
 * as int64 or double (every dtype's values fit one of them exactly). Their `user` is the model's
 * allocator (tsr_alloc), which the VM passes when it binds them. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tensor_cache.h"
#include "vm.h"

typedef struct element {
    bool is_float;
    int64_t i;
    double f;
} element;

static bool is_float(tessera_dtype d) { return d == TESSERA_FLOAT32 || d == TESSERA_FLOAT16; }

static double half_to_double(uint16_t h) {
    int exponent = (h >> 10) & 0x1f, mantissa = h & 0x3ff;
    double value = exponent == 0 ? ldexp(mantissa, -24)
                 : exponent == 31 ? (mantissa ? NAN : INFINITY)
                 : ldexp(mantissa + 1024, exponent - 25);
    return (h & 0x8000) ? -value : value;
}

static element read_element(const tessera_tensor *t, int64_t i) {
    element e = {is_float(t->dtype), 0, 0.0};
    const unsigned char *p = t->data;
    switch (t->dtype) {
    case TESSERA_FLOAT32: { float x; memcpy(&x, p + 4 * i, 4); e.f = x; break; }
    case TESSERA_FLOAT16: { uint16_t h; memcpy(&h, p + 2 * i, 2); e.f = half_to_double(h); break; }
    case TESSERA_INT32: { int32_t x; memcpy(&x, p + 4 * i, 4); e.i = x; break; }
    case TESSERA_UINT32: { uint32_t x; memcpy(&x, p + 4 * i, 4); e.i = x; break; }
    case TESSERA_INT64: { int64_t x; memcpy(&x, p + 8 * i, 8); e.i = x; break; }
    case TESSERA_BOOL: case TESSERA_UINT8: e.i = p[i]; break;
    case TESSERA_INT8: e.i = (int8_t)p[i]; break;
    }
    return e;
}

static void write_element(tessera_tensor *t, int64_t i, element e) {
    unsigned char *p = t->data;
    double f = e.is_float ? e.f : (double)e.i;
    int64_t v = e.is_float ? (int64_t)e.f : e.i;
    switch (t->dtype) {
    case TESSERA_FLOAT32: { float x = (float)f; memcpy(p + 4 * i, &x, 4); break; }
    case TESSERA_FLOAT16: { /* not produced by these operators' cases; store as zero rather than guess */
        uint16_t h = 0; memcpy(p + 2 * i, &h, 2); break; }
    case TESSERA_INT32: case TESSERA_UINT32: { int32_t x = (int32_t)v; memcpy(p + 4 * i, &x, 4); break; }
    case TESSERA_INT64: memcpy(p + 8 * i, &v, 8); break;
    case TESSERA_BOOL: p[i] = v != 0; break;
    case TESSERA_UINT8: case TESSERA_INT8: p[i] = (unsigned char)v; break;
    }
}

static bool nonzero(element e) { return e.is_float ? e.f != 0.0 : e.i != 0; } /* NaN is nonzero, as in numpy */

static bool same(element a, element b) {
    if (a.is_float) return (isnan(a.f) && isnan(b.f)) || a.f == b.f;
    return a.i == b.i;
}

static int ascending(const void *pa, const void *pb) {
    const element *a = pa, *b = pb;
    if (a->is_float) {
        if (isnan(a->f)) return isnan(b->f) ? 0 : 1;
        if (isnan(b->f)) return -1;
        return a->f < b->f ? -1 : a->f > b->f;
    }
    return a->i < b->i ? -1 : a->i > b->i;
}

static int64_t count_of(const tessera_tensor *t) {
    int64_t n = 1;
    for (int32_t d = 0; d < t->ndim; d++) n *= t->shape[d];
    return n;
}

static int need(const char *name, size_t n_args, size_t n_outs, size_t want_args, size_t want_outs) {
    if (n_args != want_args || n_outs != want_outs)
        return tsr_error(TESSERA_ERROR_LIBRARY, "%s takes %zu inputs and %zu outputs, got %zu and %zu", name, want_args,
                         want_outs, n_args, n_outs);
    return 0;
}

static int tensor_arg(const char *name, const tessera_value *v) {
    return v->kind == TESSERA_VALUE_TENSOR ? 0 : tsr_error(TESSERA_ERROR_LIBRARY, "%s: expected a tensor", name);
}

/* Distinct values in order of first occurrence, in a malloc'd array (freed by the caller). */
static element *distinct(tsr_alloc *a, const tessera_tensor *x, int64_t *n_out) {
    int64_t n = count_of(x), found = 0;
    element *values = tsr_calloc(a, (size_t)(n ? n : 1), sizeof(element));
    if (!values) return NULL;
    for (int64_t i = 0; i < n; i++) {
        element e = read_element(x, i);
        bool seen = false;
        for (int64_t j = 0; j < found && !seen; j++) seen = same(values[j], e);
        if (!seen) values[found++] = e;
    }
    *n_out = found;
    return values;
}

static int unique_common(tsr_alloc *a, const char *name, bool sorted, bool size_only, const tessera_value *args,
                         size_t n_args, tessera_tensor *outs, size_t n_outs, int64_t *result) {
    int rc = need(name, n_args, n_outs, 1, size_only ? 0 : 1);
    if (rc || (rc = tensor_arg(name, &args[0]))) return rc;
    int64_t n;
    element *values = distinct(a, &args[0].tensor, &n);
    if (!values) return tsr_error(TESSERA_ERROR_OUT_OF_MEMORY, "%s: out of memory", name);
    if (size_only) {
        *result = n;
    } else if (count_of(&outs[0]) != n) {
        rc = tsr_error(TESSERA_ERROR_LIBRARY, "%s: the output holds %lld elements, the result %lld", name,
                       (long long)count_of(&outs[0]), (long long)n);
    } else {
        if (sorted) qsort(values, (size_t)n, sizeof(element), ascending);
        for (int64_t i = 0; i < n; i++) write_element(&outs[0], i, values[i]);
    }
    tsr_free(a, values);
    return rc;
}

static int unique_size(const tessera_value *a, size_t na, tessera_tensor *o, size_t no, const int64_t *s, size_t ns, int64_t *r, void *u) {
    (void)s, (void)ns;
    return unique_common(u, "unique_size", true, true, a, na, o, no, r);
}
static int unique(const tessera_value *a, size_t na, tessera_tensor *o, size_t no, const int64_t *s, size_t ns, int64_t *r, void *u) {
    (void)s, (void)ns;
    return unique_common(u, "unique", true, false, a, na, o, no, r);
}
static int unique_unsorted(const tessera_value *a, size_t na, tessera_tensor *o, size_t no, const int64_t *s, size_t ns, int64_t *r, void *u) {
    (void)s, (void)ns;
    return unique_common(u, "unique_unsorted", false, false, a, na, o, no, r);
}

static int nonzero_size(const tessera_value *a, size_t na, tessera_tensor *o, size_t no, const int64_t *s, size_t ns, int64_t *r, void *u) {
    (void)o, (void)s, (void)ns, (void)u;
    int rc = need("nonzero_size", na, no, 1, 0);
    if (rc || (rc = tensor_arg("nonzero_size", &a[0]))) return rc;
    int64_t n = count_of(&a[0].tensor), found = 0;
    for (int64_t i = 0; i < n; i++) found += nonzero(read_element(&a[0].tensor, i));
    *r = found;
    return 0;
}

static int nonzero_fill(const tessera_value *a, size_t na, tessera_tensor *o, size_t no, const int64_t *s, size_t ns, int64_t *r, void *u) {
    (void)s, (void)ns, (void)u, (void)r;
    int rc = need("nonzero", na, no, 1, 1);
    if (rc || (rc = tensor_arg("nonzero", &a[0]))) return rc;
    const tessera_tensor *x = &a[0].tensor;
    int64_t n = count_of(x), found = 0, ndim = x->ndim;
    for (int64_t i = 0; i < n; i++) found += nonzero(read_element(x, i));
    if (count_of(&o[0]) != ndim * found)
        return tsr_error(TESSERA_ERROR_LIBRARY, "nonzero: the output holds %lld elements, the result %lld",
                         (long long)count_of(&o[0]), (long long)(ndim * found));
    /* Row d of the output holds axis d's indices, row-major order of the elements. */
    int64_t k = 0;
    for (int64_t i = 0; i < n; i++) {
        if (!nonzero(read_element(x, i))) continue;
        int64_t rest = i;
        for (int64_t axis = ndim - 1; axis >= 0; axis--) {
            element e = {false, rest % x->shape[axis], 0.0};
            rest /= x->shape[axis];
            write_element(&o[0], axis * found + k, e);
        }
        k++;
    }
    return 0;
}

/* The flat indices of x where mask, broadcast to x's shape as numpy does, is true; count only if picked is NULL. */
static int select_indices(const tessera_tensor *x, const tessera_tensor *mask, int64_t *picked, int64_t *count) {
    int32_t offset = x->ndim - mask->ndim;
    if (offset < 0) return tsr_error(TESSERA_ERROR_LIBRARY, "mask_select: the mask has more dimensions than x");
    for (int32_t d = 0; d < mask->ndim; d++)
        if (mask->shape[d] != 1 && mask->shape[d] != x->shape[d + offset])
            return tsr_error(TESSERA_ERROR_LIBRARY, "mask_select: the mask's shape does not broadcast to x's");
    int64_t n = count_of(x), found = 0;
    for (int64_t flat = 0; flat < n; flat++) {
        int64_t rest = flat, at = 0, stride = 1;
        for (int32_t axis = x->ndim - 1; axis >= 0; axis--) {
            int64_t position = rest % x->shape[axis];
            rest /= x->shape[axis];
            int32_t mask_axis = axis - offset;
            if (mask_axis >= 0) {
                if (mask->shape[mask_axis] != 1) at += position * stride;
                stride *= mask->shape[mask_axis];
            }
        }
        if (nonzero(read_element(mask, at))) {
            if (picked) picked[found] = flat;
            found++;
        }
    }
    *count = found;
    return 0;
}

static int mask_select_size(const tessera_value *a, size_t na, tessera_tensor *o, size_t no, const int64_t *s, size_t ns, int64_t *r, void *u) {
    (void)o, (void)s, (void)ns, (void)u;
    int rc = need("mask_select_size", na, no, 2, 0);
    if (rc || (rc = tensor_arg("mask_select_size", &a[0])) || (rc = tensor_arg("mask_select_size", &a[1]))) return rc;
    return select_indices(&a[0].tensor, &a[1].tensor, NULL, r);
}

static int mask_select(const tessera_value *a, size_t na, tessera_tensor *o, size_t no, const int64_t *s, size_t ns, int64_t *r, void *u) {
    (void)s, (void)ns, (void)r;
    int rc = need("mask_select", na, no, 2, 1);
    if (rc || (rc = tensor_arg("mask_select", &a[0])) || (rc = tensor_arg("mask_select", &a[1]))) return rc;
    int64_t n = count_of(&a[0].tensor), found;
    int64_t *picked = tsr_calloc(u, (size_t)(n ? n : 1), sizeof(int64_t));
    if (!picked) return tsr_error(TESSERA_ERROR_OUT_OF_MEMORY, "mask_select: out of memory");
    rc = select_indices(&a[0].tensor, &a[1].tensor, picked, &found);
    if (!rc && count_of(&o[0]) != found)
        rc = tsr_error(TESSERA_ERROR_LIBRARY, "mask_select: the output holds %lld elements, the result %lld",
                       (long long)count_of(&o[0]), (long long)found);
    for (int64_t k = 0; !rc && k < found; k++) write_element(&o[0], k, read_element(&a[0].tensor, picked[k]));
    tsr_free(u, picked);
    return rc;
}

/* A prim or a one-element tensor, as a number. */
static int scalar_of(const char *name, const tessera_value *v, double *out) {
    if (v->kind == TESSERA_VALUE_INT) {
        *out = (double)v->value;
        return 0;
    }
    if (v->kind == TESSERA_VALUE_TENSOR && count_of(&v->tensor) == 1) {
        element e = read_element(&v->tensor, 0);
        *out = e.is_float ? e.f : (double)e.i;
        return 0;
    }
    return tsr_error(TESSERA_ERROR_LIBRARY, "%s: expected an integer or a one-element tensor", name);
}

static int arange_length(const char *name, const tessera_value *a, double *start, double *step, int64_t *length) {
    double end = 0.0;
    *start = *step = 0.0;
    *length = 0;
    int rc;
    if ((rc = scalar_of(name, &a[0], start)) || (rc = scalar_of(name, &a[1], &end)) || (rc = scalar_of(name, &a[2], step))) return rc;
    if (*step == 0) return tsr_error(TESSERA_ERROR_LIBRARY, "%s: the step is 0", name);
    double n = ceil((end - *start) / *step);
    if (!(n < 9.0e15)) return tsr_error(TESSERA_ERROR_LIBRARY, "%s: the range is too long", name);
    *length = n > 0 ? (int64_t)n : 0;
    return 0;
}

static int arange_size(const tessera_value *a, size_t na, tessera_tensor *o, size_t no, const int64_t *s, size_t ns, int64_t *r, void *u) {
    (void)o, (void)s, (void)ns, (void)u;
    int rc = need("arange_size", na, no, 3, 0);
    double start = 0.0, step = 0.0;
    return rc ? rc : arange_length("arange_size", a, &start, &step, r);
}

static int arange(const tessera_value *a, size_t na, tessera_tensor *o, size_t no, const int64_t *s, size_t ns, int64_t *r, void *u) {
    (void)s, (void)ns, (void)u, (void)r;
    int rc = need("arange", na, no, 3, 1);
    double start = 0.0, step = 0.0;
    int64_t length = 0;
    if (rc || (rc = arange_length("arange", a, &start, &step, &length))) return rc;
    if (count_of(&o[0]) != length)
        return tsr_error(TESSERA_ERROR_LIBRARY, "arange: the output holds %lld elements, the result %lld",
                         (long long)count_of(&o[0]), (long long)length);
    for (int64_t i = 0; i < length; i++) {
        double value = start + (double)i * step;
        element e = {is_float(o[0].dtype), (int64_t)value, value};
        write_element(&o[0], i, e);
    }
    return 0;
}

static const tessera_library BUILTINS[] = {
    {"tessera.builtin.unique_size", unique_size, NULL},
    {"tessera.builtin.unique_unsorted_size", unique_size, NULL},
    {"tessera.builtin.unique", unique, NULL},
    {"tessera.builtin.unique_unsorted", unique_unsorted, NULL},
    {"tessera.builtin.nonzero_size", nonzero_size, NULL},
    {"tessera.builtin.nonzero", nonzero_fill, NULL},
    {"tessera.builtin.mask_select_size", mask_select_size, NULL},
    {"tessera.builtin.mask_select", mask_select, NULL},
    {"tessera.builtin.arange_size", arange_size, NULL},
    {"tessera.builtin.arange", arange, NULL},
};

const tessera_library *tsr_builtin_library(const char *name) {
    for (size_t i = 0; i < TSR_ARRAY_LEN(BUILTINS); i++)
        if (strcmp(BUILTINS[i].name, name) == 0) return &BUILTINS[i];
    return NULL;
}
