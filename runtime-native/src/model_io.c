/* Named inputs and outputs over tessera_model_call (tessera.h, docs/native.md "Named inputs and outputs"):
 * the tensor API of ONNX Runtime's shape. Inputs are a function's non-state parameters by name, outputs the
 * values of its result by executable.json's result_names. Every input is checked here before the call, with
 * a message naming it, as tessera.InferenceSession checks a feed; the VM's matches check again. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "executable.h"
#include "files.h"
#include "model.h"
#include "tensor_cache.h"

/* Up to this many inputs, or shape variables, are checked with arrays on the stack (no allocation). */
#define LOCAL_ITEMS 32

static const tsr_function *find_function(const tessera_model *m, const char *function, const char *api) {
    if (!m || !function) {
        tsr_error(TESSERA_ERROR_INVALID_ARGUMENT, "%s: NULL argument", api);
        return NULL;
    }
    int32_t index = tsr_executable_function(&m->exe, function);
    if (index < 0) {
        char q[300];
        tsr_quote(function, q, sizeof q);
        tsr_error(TESSERA_ERROR_INVALID_ARGUMENT, "%s: the executable has no function %s", api, q);
        return NULL;
    }
    return &m->exe.functions[index];
}

static bool is_input(const tsr_param *p) { return !p->state; }

static const char *kind_name(tsr_sinfo_kind kind) {
    switch (kind) {
    case TSR_SINFO_OBJECT: return "an object";
    case TSR_SINFO_PRIM: return "an integer";
    case TSR_SINFO_SHAPE: return "a shape value";
    case TSR_SINFO_TENSOR: return "a tensor";
    case TSR_SINFO_TUPLE: return "a tuple";
    case TSR_SINFO_CALLABLE: return "a function";
    }
    return "a value";
}

/* One input's or output's description from its struct info; UNSUPPORTED for what is neither a tensor nor an
 * integer. */
static int describe(const tsr_function *f, const char *role, const char *name, const tsr_sinfo *s, tessera_io *io) {
    memset(io, 0, sizeof *io);
    io->name = name;
    for (int32_t i = 0; i < TESSERA_MAX_NDIM; i++) io->shape[i] = io->upper_bounds[i] = -1;
    if (s->kind == TSR_SINFO_PRIM) {
        io->kind = TESSERA_VALUE_INT;
        io->has_dtype = 1;
        io->dtype = TESSERA_INT64;
        io->ndim = 0;
        io->value = s->n_dims == 1 ? s->dims[0].text : NULL;
        return 0;
    }
    if (s->kind != TSR_SINFO_TENSOR) {
        char q[300];
        tsr_quote(name, q, sizeof q);
        return tsr_error(TESSERA_ERROR_UNSUPPORTED, "%s %s of %s is %s, not a tensor or an integer: call %s with "
                         "tessera_model_call", role, q, f->name, kind_name(s->kind), f->name);
    }
    io->kind = TESSERA_VALUE_TENSOR;
    io->has_dtype = s->has_dtype;
    io->dtype = s->dtype;
    io->ndim = s->ndim;
    for (int32_t i = 0; i < s->n_dims && i < TESSERA_MAX_NDIM; i++) {
        const tsr_dim *d = &s->dims[i];
        io->dims[i] = d->text;
        if (!d->expr.code) io->shape[i] = d->expr.constant;
        if (d->symbol >= 0 && d->symbol < f->symbols.count) io->upper_bounds[i] = f->upper_bounds[d->symbol];
    }
    return 0;
}

int32_t tessera_model_functions(const tessera_model *m, const char **names, int32_t max) {
    if (!m || (max > 0 && !names))
        return tsr_error(TESSERA_ERROR_INVALID_ARGUMENT, "tessera_model_functions: NULL argument");
    for (int32_t i = 0; i < m->exe.n_functions && i < max; i++) names[i] = m->exe.functions[i].name;
    return m->exe.n_functions;
}

int32_t tessera_model_inputs(const tessera_model *m, const char *function, tessera_io *out, int32_t max) {
    const tsr_function *f = find_function(m, function, "tessera_model_inputs");
    if (!f) return TESSERA_ERROR_INVALID_ARGUMENT;
    if (max > 0 && !out) return tsr_error(TESSERA_ERROR_INVALID_ARGUMENT, "tessera_model_inputs: NULL argument");
    int32_t n = 0;
    for (int32_t p = 0; p < f->n_params; p++) {
        if (!is_input(&f->params[p])) continue;
        tessera_io io;
        int rc = describe(f, "input", f->params[p].name, &f->params[p].sinfo, &io);
        if (rc) return rc;
        if (n < max) out[n] = io;
        n++;
    }
    return n;
}

/* The result's values, tuples flattened depth-first, described into out (up to max); *n counts them all. */
static int describe_results(const tsr_function *f, const tsr_sinfo *s, tessera_io *out, int32_t max, int32_t *n) {
    if (s->kind == TSR_SINFO_TUPLE) {
        for (int32_t i = 0; i < s->n_fields; i++) {
            int rc = describe_results(f, &s->fields[i], out, max, n);
            if (rc) return rc;
        }
        return 0;
    }
    tessera_io io;
    int rc = describe(f, "output", f->result_names[*n], s, &io);
    if (rc) return rc;
    if (*n < max) out[*n] = io;
    (*n)++;
    return 0;
}

int32_t tessera_model_outputs(const tessera_model *m, const char *function, tessera_io *out, int32_t max) {
    const tsr_function *f = find_function(m, function, "tessera_model_outputs");
    if (!f) return TESSERA_ERROR_INVALID_ARGUMENT;
    if (max > 0 && !out) return tsr_error(TESSERA_ERROR_INVALID_ARGUMENT, "tessera_model_outputs: NULL argument");
    int32_t n = 0;
    int rc = describe_results(f, &f->result, out, max, &n);
    return rc ? rc : n;
}

/* ---- checking the inputs ------------------------------------------------------------------- */

/* What the inputs checked so far say about the shape variables. */
typedef struct sizes {
    const tsr_function *f;
    int64_t *values;
    uint8_t *bound;
    int32_t *source; /* the input (parameter index) that gave each variable its size */
} sizes;

/* "(n, 4)", as the text format prints a shape. */
static void shape_text(const tsr_sinfo *s, char *out, size_t size) {
    size_t at = (size_t)snprintf(out, size, "(");
    for (int32_t i = 0; i < s->n_dims && at < size; i++)
        at += (size_t)snprintf(out + at, size - at, "%s%s", i ? ", " : "", s->dims[i].text);
    if (at < size) snprintf(out + at, size - at, "%s)", s->n_dims == 1 ? "," : "");
}

static void value_shape_text(const tessera_tensor *t, char *out, size_t size) {
    size_t at = (size_t)snprintf(out, size, "(");
    for (int32_t i = 0; i < t->ndim && at < size; i++)
        at += (size_t)snprintf(out + at, size - at, "%s%lld", i ? ", " : "", (long long)t->shape[i]);
    if (at < size) snprintf(out + at, size - at, "%s)", t->ndim == 1 ? "," : "");
}

/* A fixed dimension or a plain variable, against the size the input gives it. */
static int check_dim(sizes *z, int32_t param, const char *q, const tsr_dim *d, int64_t size, const char *where) {
    const tsr_function *f = z->f;
    if (!d->expr.code) {
        if (size == d->expr.constant) return 0;
        return tsr_error(TESSERA_ERROR_RUNTIME_CHECK, "input %s of %s: %s is %lld, not %lld", q, f->name, where,
                         (long long)size, (long long)d->expr.constant);
    }
    if (d->symbol < 0 || d->symbol >= f->symbols.count) return 0; /* an expression: once every variable is known */
    int32_t v = d->symbol;
    if (z->bound[v] && z->values[v] != size) {
        char from[300];
        tsr_quote(f->params[z->source[v]].name, from, sizeof from);
        return tsr_error(TESSERA_ERROR_RUNTIME_CHECK, "input %s of %s: %s is %lld, but %s = %lld from input %s", q,
                         f->name, where, (long long)size, d->text, (long long)z->values[v], from);
    }
    if (size < 0)
        return tsr_error(TESSERA_ERROR_RUNTIME_CHECK, "input %s of %s: %s (%s) is %lld, not a size", q, f->name, where,
                         d->text, (long long)size);
    if (f->upper_bounds[v] >= 0 && size > f->upper_bounds[v])
        return tsr_error(TESSERA_ERROR_RUNTIME_CHECK, "input %s of %s: %s (%s) is %lld, above its upper bound %lld (the "
                         "most the executable's memory was planned for)", q, f->name, where, d->text, (long long)size,
                         (long long)f->upper_bounds[v]);
    z->values[v] = size;
    z->bound[v] = 1;
    z->source[v] = param;
    return 0;
}

static int check_input(sizes *z, int32_t param, const tessera_value *value) {
    const tsr_function *f = z->f;
    const tsr_sinfo *s = &f->params[param].sinfo;
    char q[300];
    tsr_quote(f->params[param].name, q, sizeof q);
    if (s->kind == TSR_SINFO_PRIM) {
        if (value->kind != TESSERA_VALUE_INT)
            return tsr_error(TESSERA_ERROR_INVALID_ARGUMENT, "input %s of %s: expected an integer "
                             "(TESSERA_VALUE_INT), got %s", q, f->name,
                             value->kind == TESSERA_VALUE_TENSOR ? "a tensor" : "a tuple");
        return s->n_dims == 1 ? check_dim(z, param, q, &s->dims[0], value->value, "its value") : 0;
    }
    if (s->kind != TSR_SINFO_TENSOR)
        return tsr_error(TESSERA_ERROR_UNSUPPORTED, "input %s of %s is %s, not a tensor or an integer: call %s with "
                         "tessera_model_call", q, f->name, kind_name(s->kind), f->name);
    if (value->kind != TESSERA_VALUE_TENSOR)
        return tsr_error(TESSERA_ERROR_INVALID_ARGUMENT, "input %s of %s: expected a tensor (TESSERA_VALUE_TENSOR), "
                         "got %s", q, f->name, value->kind == TESSERA_VALUE_INT ? "an integer" : "a tuple");
    const tessera_tensor *t = &value->tensor;
    if (t->ndim < 0 || t->ndim > TESSERA_MAX_NDIM)
        return tsr_error(TESSERA_ERROR_INVALID_ARGUMENT, "input %s of %s: ndim is %d, outside 0 .. %d", q, f->name,
                         (int)t->ndim, TESSERA_MAX_NDIM);
    if (s->has_dtype && t->dtype != s->dtype)
        return tsr_error(TESSERA_ERROR_RUNTIME_CHECK, "input %s of %s: expected dtype %s, got %s (no implicit casts)",
                         q, f->name, tsr_dtype_name(s->dtype), tsr_dtype_name(t->dtype));
    char expected[600], got[300];
    value_shape_text(t, got, sizeof got);
    if (s->ndim >= 0 && t->ndim != s->ndim) {
        if (s->n_dims >= 0) {
            shape_text(s, expected, sizeof expected);
            return tsr_error(TESSERA_ERROR_RUNTIME_CHECK, "input %s of %s: expected rank %d (shape %s), got rank %d "
                             "(shape %s)", q, f->name, (int)s->ndim, expected, (int)t->ndim, got);
        }
        return tsr_error(TESSERA_ERROR_RUNTIME_CHECK, "input %s of %s: expected rank %d, got rank %d (shape %s)", q,
                         f->name, (int)s->ndim, (int)t->ndim, got);
    }
    for (int32_t i = 0; i < s->n_dims && i < t->ndim; i++) {
        char where[64];
        if (!s->dims[i].expr.code && t->shape[i] != s->dims[i].expr.constant) {
            shape_text(s, expected, sizeof expected);
            snprintf(where, sizeof where, "dimension %d", (int)i);
            return tsr_error(TESSERA_ERROR_RUNTIME_CHECK, "input %s of %s: expected shape %s, got %s: %s is %lld, not "
                             "%lld", q, f->name, expected, got, where, (long long)t->shape[i],
                             (long long)s->dims[i].expr.constant);
        }
        snprintf(where, sizeof where, "dimension %d", (int)i);
        int rc = check_dim(z, param, q, &s->dims[i], t->shape[i], where);
        if (rc) return rc;
    }
    return 0;
}

/* Dimensions such as "n + 1", once the plain variables are known (one no input fixes is left to the VM). */
static int check_expressions(sizes *z, int32_t param, const tessera_value *value) {
    const tsr_function *f = z->f;
    const tsr_sinfo *s = &f->params[param].sinfo;
    if (s->kind != TSR_SINFO_TENSOR) return 0;
    for (int32_t i = 0; i < s->n_dims && i < value->tensor.ndim; i++) {
        const tsr_dim *d = &s->dims[i];
        if (!d->expr.code || d->symbol >= 0) continue;
        int64_t expected;
        if (tsr_shape_expr_eval(&d->expr, &f->symbols, z->values, z->bound, &expected) != 0) {
            tsr_clear_error();
            continue;
        }
        if (expected == value->tensor.shape[i]) continue;
        char q[300], shape[600], got[300];
        tsr_quote(f->params[param].name, q, sizeof q);
        shape_text(s, shape, sizeof shape);
        value_shape_text(&value->tensor, got, sizeof got);
        return tsr_error(TESSERA_ERROR_RUNTIME_CHECK, "input %s of %s: expected shape %s, got %s: dimension %d is %lld, "
                         "not %s = %lld", q, f->name, shape, got, (int)i, (long long)value->tensor.shape[i], d->text,
                         (long long)expected);
    }
    return 0;
}

/* "x0, x1, x2": the function's inputs, for messages. */
static void input_list(const tsr_function *f, char *out, size_t size) {
    size_t at = 0;
    out[0] = '\0';
    for (int32_t p = 0; p < f->n_params && at < size; p++) {
        if (!is_input(&f->params[p])) continue;
        char q[120];
        tsr_quote(f->params[p].name, q, sizeof q);
        at += (size_t)snprintf(out + at, size - at, "%s%s", at ? ", " : "", q);
    }
}

/* The position of each input among the arguments: order[k] is the index into inputs of the k-th non-state
 * parameter. Unknown names, names given twice and missing inputs are refused, named. */
static int match_names(const tsr_function *f, size_t n_inputs, const char *const *names, int32_t *params_of,
                       size_t *order) {
    char list[1024], q[300];
    input_list(f, list, sizeof list);
    for (size_t i = 0; i < n_inputs; i++) {
        params_of[i] = -1;
        for (int32_t p = 0; p < f->n_params && names[i]; p++) {
            if (is_input(&f->params[p]) && strcmp(f->params[p].name, names[i]) == 0) params_of[i] = p;
        }
        tsr_quote(names[i], q, sizeof q);
        if (params_of[i] < 0)
            return tsr_error(TESSERA_ERROR_INVALID_ARGUMENT, "unknown input %s of %s; the inputs are %s", q, f->name,
                             list);
        for (size_t j = 0; j < i; j++) {
            if (params_of[j] == params_of[i])
                return tsr_error(TESSERA_ERROR_INVALID_ARGUMENT, "input %s of %s is given twice", q, f->name);
        }
    }
    size_t k = 0;
    for (int32_t p = 0; p < f->n_params; p++) {
        if (!is_input(&f->params[p])) continue;
        size_t i = 0;
        while (i < n_inputs && params_of[i] != p) i++;
        if (i == n_inputs) {
            tsr_quote(f->params[p].name, q, sizeof q);
            return tsr_error(TESSERA_ERROR_INVALID_ARGUMENT, "input %s of %s is missing (the inputs are %s)", q, f->name,
                             list);
        }
        order[k++] = i;
    }
    return 0;
}

/* Output indices: wanted[i] is the position among the function's outputs of output_names[i]. */
static int match_outputs(const tsr_function *f, size_t n_outputs, const char *const *names, int32_t *wanted) {
    if (!names) {
        if (n_outputs != (size_t)f->n_results)
            return tsr_error(TESSERA_ERROR_INVALID_ARGUMENT, "%s has %d outputs; n_outputs is %zu (output_names NULL asks "
                             "for every output)", f->name, (int)f->n_results, n_outputs);
        for (size_t i = 0; i < n_outputs; i++) wanted[i] = (int32_t)i;
        return 0;
    }
    for (size_t i = 0; i < n_outputs; i++) {
        wanted[i] = -1;
        for (int32_t r = 0; r < f->n_results && names[i]; r++) {
            if (strcmp(f->result_names[r], names[i]) == 0) wanted[i] = r;
        }
        if (wanted[i] >= 0) continue;
        char q[300], list[1024];
        size_t at = 0;
        list[0] = '\0';
        for (int32_t r = 0; r < f->n_results && at < sizeof list; r++) {
            char name[120];
            tsr_quote(f->result_names[r], name, sizeof name);
            at += (size_t)snprintf(list + at, sizeof list - at, "%s%s", r ? ", " : "", name);
        }
        tsr_quote(names[i], q, sizeof q);
        return tsr_error(TESSERA_ERROR_INVALID_ARGUMENT, "unknown output %s of %s; the outputs are %s", q, f->name, list);
    }
    return 0;
}

/* Scratch arrays for one run: on the stack when small, else from the model's allocator. */
typedef struct run_scratch {
    tsr_alloc *alloc;
    void *heap;
} run_scratch;

static void *scratch_get(run_scratch *r, void *local, size_t local_size, size_t size) {
    if (size <= local_size) return local;
    r->heap = tsr_malloc(r->alloc, size);
    return r->heap;
}

int tessera_model_run_named(tessera_model *m, const char *function, size_t n_inputs, const char *const *input_names,
                            const tessera_value *inputs, size_t n_outputs, const char *const *output_names,
                            const tessera_tensor **outputs) {
    const tsr_function *f = find_function(m, function, "tessera_model_run_named");
    if (!f) return TESSERA_ERROR_INVALID_ARGUMENT;
    if ((n_inputs && (!input_names || !inputs)) || (n_outputs && !outputs))
        return tsr_error(TESSERA_ERROR_INVALID_ARGUMENT, "tessera_model_run_named: NULL argument");
    if (n_inputs > 4096 || n_outputs > (size_t)1 << 20)
        return tsr_error(TESSERA_ERROR_INVALID_ARGUMENT, "tessera_model_run_named: too many inputs or outputs");
    int32_t n_symbols = f->symbols.count;
    size_t n_params = (size_t)f->n_params;
    /* One block: params_of and order (per input), the arguments (per parameter), the variables, the outputs. */
    size_t need = n_inputs * (sizeof(int32_t) + sizeof(size_t)) + n_params * sizeof(tessera_value) +
                  (size_t)n_symbols * (sizeof(int64_t) + sizeof(int32_t) + 1) + n_outputs * sizeof(int32_t) + 64;
    _Alignas(64) unsigned char local[LOCAL_ITEMS * (sizeof(tessera_value) + 64)];
    run_scratch scratch = {&m->alloc, NULL};
    unsigned char *block = scratch_get(&scratch, local, sizeof local, need);
    if (!block) return TESSERA_ERROR_OUT_OF_MEMORY;
    tessera_value *args = (tessera_value *)block;
    int64_t *values = (int64_t *)(args + n_params);
    size_t *order = (size_t *)(values + n_symbols);
    int32_t *params_of = (int32_t *)(order + n_inputs);
    int32_t *source = params_of + n_inputs;
    int32_t *wanted = source + n_symbols;
    uint8_t *bound = (uint8_t *)(wanted + n_outputs);
    memset(bound, 0, (size_t)n_symbols);
    sizes z = {f, values, bound, source};
    int rc = match_names(f, n_inputs, input_names, params_of, order);
    if (!rc) rc = match_outputs(f, n_outputs, output_names, wanted);
    for (int32_t p = 0, k = 0; p < f->n_params && !rc; p++) {
        if (!is_input(&f->params[p])) continue;
        const tessera_value *v = &inputs[order[k]];
        rc = check_input(&z, p, v);
        args[k++] = *v;
    }
    for (int32_t p = 0, k = 0; p < f->n_params && !rc; p++) {
        if (is_input(&f->params[p])) rc = check_expressions(&z, p, &inputs[order[k++]]);
    }
    size_t n_args = 0;
    for (int32_t p = 0; p < f->n_params; p++) n_args += is_input(&f->params[p]);
    const tessera_tensor *results = NULL;
    size_t n_results = 0;
    if (!rc) rc = tessera_model_call(m, function, args, n_args, &results, &n_results);
    if (!rc && n_results != (size_t)f->n_results)
        rc = tsr_error(TESSERA_ERROR_RUNTIME_CHECK, "%s returned %zu tensors, but its result has %d values (a shape "
                       "value among them: call it with tessera_model_call)", f->name, n_results, (int)f->n_results);
    for (size_t i = 0; i < n_outputs && !rc; i++) outputs[i] = &results[wanted[i]];
    tsr_free(&m->alloc, scratch.heap);
    return rc;
}
