/* Reading executable.json. Everything is checked here, once: the VM trusts these structures. */
#include "executable.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "facts.h"
#include "files.h"
#include "json.h"
#include "plan_checks.h"
#include "tensor_cache.h"

#define MAX_REGISTERS TSR_MAX_REGISTERS
#define MAX_CODE TSR_MAX_INSTRUCTIONS
#define MAX_ITEMS (1 << 22)

/* The executable's own allocations all come from its bump; a tsr_alloc over it lets the shape
 * expression compiler (which takes a tsr_alloc) allocate there too. */
static void *bump_alloc_cb(size_t size, void *user) { return tsr_bump_alloc(user, size); }
static void bump_free_cb(void *ptr, void *user) { (void)ptr, (void)user; }

typedef struct parser {
    tsr_executable *exe;
    size_t text_size; /* counts read from the file are checked against it before allocating */
    tsr_alloc mem; /* over exe->mem */
    tsr_alloc *scratch; /* what the checks need while they run, freed by them */
    int32_t most_devices; /* a `device` field is below this: the split build's device count, else 1 */
    char what[256];
} parser;

static int fail(const char *where, const char *why) {
    return tsr_error(TESSERA_ERROR_FORMAT, "executable.json: %s: %s", where, why);
}

/* A dtype the format has (facts.h's TSR_DTYPE_BYTES_*) but the C API has no tensors of is refused at load,
 * named, rather than run with a layout this runtime cannot give its host; any other name is no dtype. */
static int unknown_dtype(const char *where, const char *what, const char *dtype) {
    static const char *const format_only[] = {"int16", "uint16", "uint64", "float64"};
    char q[80];
    tsr_quote(dtype, q, sizeof q);
    for (size_t i = 0; i < TSR_ARRAY_LEN(format_only); i++)
        if (strcmp(dtype, format_only[i]) == 0)
            return tsr_error(TESSERA_ERROR_UNSUPPORTED, "executable.json: %s: %s has dtype %s, which this runtime "
                             "does not support (its tensors are float32, float16, int32, uint32, int64, bool, int8 "
                             "and uint8)", where, what, q);
    return tsr_error(TESSERA_ERROR_FORMAT, "executable.json: %s: %s has unknown dtype %s", where, what, q);
}

static const char *dup_string(parser *p, const char *s) { return tsr_bump_strdup(p->exe->mem, s); }

/* An object's optional `device` (version 4: an index into `devices`; a version-3 file may state only 0).
 * Absent: device 0, and *stated false. */
static int device_field(parser *p, const cJSON *doc, const char *where, int32_t *out, bool *stated) {
    const cJSON *item = cJSON_IsObject(doc) ? cJSON_GetObjectItemCaseSensitive(doc, "device") : NULL;
    *out = 0;
    if (stated) *stated = item != NULL;
    if (!item) return 0;
    int64_t v;
    char at[320];
    snprintf(at, sizeof at, "%s: 'device'", where);
    if (!cJSON_IsNumber(item) || tsr_json_int_item(item, at, 0, p->most_devices - 1, &v))
        return tsr_error(TESSERA_ERROR_FORMAT, "executable.json: %s: 'device' must be an index below %d, the number "
                         "of devices the executable lists (or 1 when it lists none)", where, (int)p->most_devices);
    *out = (int32_t)v;
    return 0;
}

/* A shape expression is a string, as docs/executable.schema.json says: a number there is refused as the
 * Python and JS loaders refuse it, so that a file means the same to every runtime. */
static int compile_expr(parser *p, const cJSON *item, tsr_symbols *symbols, const char *where, tsr_shape_expr *out) {
    if (!cJSON_IsString(item)) return fail(where, "a shape expression must be a string");
    int rc = tsr_shape_expr_compile(&p->mem, item->valuestring, symbols, out);
    return rc ? tsr_error_context(rc, "executable.json: %s", where) : 0;
}

/* ---- struct info --------------------------------------------------------------------------- */

static int parse_dims(parser *p, const cJSON *array, tsr_symbols *symbols, const char *where, tsr_sinfo *s) {
    int n = cJSON_GetArraySize(array);
    if (n > TESSERA_MAX_NDIM)
        return fail(where, "more dimensions than the runtime supports (" TSR_FACT_TEXT(TSR_MAX_NDIM) ")");
    s->dims = tsr_bump_array(p->exe->mem, (size_t)(n ? n : 1), sizeof(tsr_dim));
    if (!s->dims) return TESSERA_ERROR_OUT_OF_MEMORY;
    s->n_dims = n;
    int i = 0;
    const cJSON *item;
    cJSON_ArrayForEach(item, array) {
        tsr_dim *d = &s->dims[i++];
        if (!cJSON_IsString(item)) return fail(where, "a dimension must be a string");
        int rc = compile_expr(p, item, symbols, where, &d->expr);
        if (rc) return rc;
        d->text = dup_string(p, item->valuestring);
        d->symbol = -1;
        const char *t = d->text;
        bool plain = (t[0] == '_' || (t[0] >= 'A' && t[0] <= 'Z') || (t[0] >= 'a' && t[0] <= 'z'));
        for (const char *c = t; plain && *c; c++)
            plain = *c == '_' || (*c >= 'A' && *c <= 'Z') || (*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9');
        if (plain) d->symbol = tsr_symbols_index(&p->mem, symbols, t);
    }
    return 0;
}

static int sinfo_too_deep(const char *where) {
    return fail(where, "struct info nested deeper than " TSR_FACT_TEXT(TSR_MAX_SINFO_NESTING) " levels");
}

/* A function's result struct info is not read (the match before its ret checks the value), but it may nest no
 * deeper than any other, so that every runtime gives the file the same verdict (recursion bounded by that). */
static int check_sinfo_nesting(const cJSON *doc, const char *where, int depth) {
    if (depth > TSR_MAX_SINFO_NESTING) return sinfo_too_deep(where);
    const cJSON *fields = cJSON_IsObject(doc) ? cJSON_GetObjectItemCaseSensitive(doc, "fields") : NULL, *f;
    if (!cJSON_IsArray(fields)) return 0;
    cJSON_ArrayForEach(f, fields) {
        int rc = check_sinfo_nesting(f, where, depth + 1);
        if (rc) return rc;
    }
    return 0;
}

static int parse_sinfo(parser *p, const cJSON *doc, tsr_symbols *symbols, const char *where, int depth, tsr_sinfo *s) {
    memset(s, 0, sizeof *s);
    s->ndim = -1;
    s->n_dims = -1;
    if (depth > TSR_MAX_SINFO_NESTING) return sinfo_too_deep(where);
    if (!cJSON_IsObject(doc)) return fail(where, "struct info must be an object");
    const char *kind;
    int rc = tsr_json_string(doc, "kind", where, &kind);
    if (rc) return rc;
    const cJSON *dtype = cJSON_GetObjectItemCaseSensitive(doc, "dtype");
    if (cJSON_IsString(dtype) && dtype->valuestring[0]) {
        if (tsr_dtype_from_name(dtype->valuestring, &s->dtype) != 0)
            return unknown_dtype(where, "a struct info", dtype->valuestring);
        s->has_dtype = true;
    }
    const cJSON *ndim = cJSON_GetObjectItemCaseSensitive(doc, "ndim");
    if (ndim && !cJSON_IsNull(ndim)) {
        int64_t v;
        if ((rc = tsr_json_int_item(ndim, where, -1, TESSERA_MAX_NDIM, &v))) return rc;
        s->ndim = (int32_t)v;
    }
    if (strcmp(kind, "tensor") == 0) {
        s->kind = TSR_SINFO_TENSOR;
        const cJSON *shape = cJSON_GetObjectItemCaseSensitive(doc, "shape");
        if (cJSON_IsArray(shape)) {
            if ((rc = parse_dims(p, shape, symbols, where, s))) return rc;
            s->ndim = s->n_dims;
        }
    } else if (strcmp(kind, "shape") == 0) {
        s->kind = TSR_SINFO_SHAPE;
        const cJSON *values = cJSON_GetObjectItemCaseSensitive(doc, "values");
        if (cJSON_IsArray(values)) {
            if ((rc = parse_dims(p, values, symbols, where, s))) return rc;
            s->ndim = s->n_dims;
        }
    } else if (strcmp(kind, "prim") == 0) {
        s->kind = TSR_SINFO_PRIM;
        const cJSON *value = cJSON_GetObjectItemCaseSensitive(doc, "value");
        if (value && !cJSON_IsNull(value)) {
            cJSON *one = cJSON_CreateArray();
            if (!one) return tsr_error(TESSERA_ERROR_OUT_OF_MEMORY, "out of memory");
            cJSON_AddItemReferenceToArray(one, (cJSON *)value);
            rc = parse_dims(p, one, symbols, where, s);
            cJSON_Delete(one);
            if (rc) return rc;
        }
    } else if (strcmp(kind, "tuple") == 0) {
        s->kind = TSR_SINFO_TUPLE;
        const cJSON *fields;
        if ((rc = tsr_json_array(doc, "fields", where, &fields))) return rc;
        int n = cJSON_GetArraySize(fields);
        s->fields = tsr_bump_array(p->exe->mem, (size_t)(n ? n : 1), sizeof(tsr_sinfo));
        if (!s->fields) return TESSERA_ERROR_OUT_OF_MEMORY;
        s->n_fields = n;
        int i = 0;
        const cJSON *f;
        cJSON_ArrayForEach(f, fields) {
            if ((rc = parse_sinfo(p, f, symbols, where, depth + 1, &s->fields[i++]))) return rc;
        }
    } else if (strcmp(kind, "object") == 0) {
        s->kind = TSR_SINFO_OBJECT;
    } else if (strcmp(kind, "callable") == 0 || strcmp(kind, "func") == 0) {
        s->kind = TSR_SINFO_CALLABLE;
    } else {
        return fail(where, "unknown struct info kind");
    }
    return 0;
}

/* ---- instructions -------------------------------------------------------------------------- */

static const struct { const char *name; tsr_opcode op; } OPCODES[] = {
    {"match", TSR_OP_MATCH}, {"alloc_storage", TSR_OP_ALLOC_STORAGE}, {"alloc_tensor", TSR_OP_ALLOC_TENSOR},
    {"launch", TSR_OP_LAUNCH}, {"call_builtin", TSR_OP_CALL_BUILTIN}, {"call", TSR_OP_CALL}, {"func", TSR_OP_FUNC},
    {"if", TSR_OP_IF}, {"goto", TSR_OP_GOTO}, {"prim", TSR_OP_PRIM}, {"move", TSR_OP_MOVE}, {"tuple", TSR_OP_TUPLE},
    {"get", TSR_OP_GET}, {"shape", TSR_OP_SHAPE}, {"ret", TSR_OP_RET}, {"to_device", TSR_OP_TO_DEVICE},
};

typedef struct function_scope {
    parser *p;
    const cJSON *all_functions; /* to resolve call targets by name */
    tsr_function *f;
    const char *where;
} function_scope;

static int reg_field(function_scope *fs, const cJSON *op, const char *key, bool nullable, int32_t *out) {
    const cJSON *item = cJSON_GetObjectItemCaseSensitive(op, key);
    if (nullable && (!item || cJSON_IsNull(item))) {
        *out = -1;
        return 0;
    }
    int64_t v;
    char where[300];
    snprintf(where, sizeof where, "%s: field '%s'", fs->where, key);
    if (!item) return fail(where, "missing");
    int rc = tsr_json_int_item(item, where, 0, fs->f->n_registers - 1, &v);
    if (rc) return fail(where, "not a register of the function");
    *out = (int32_t)v;
    return 0;
}

static int reg_list(function_scope *fs, const cJSON *op, const char *key, int32_t *into, int32_t *count) {
    const cJSON *array;
    int rc = tsr_json_array(op, key, fs->where, &array);
    if (rc) return rc;
    int i = 0;
    const cJSON *item;
    cJSON_ArrayForEach(item, array) {
        int64_t v;
        if (tsr_json_int_item(item, fs->where, 0, fs->f->n_registers - 1, &v)) return fail(fs->where, "a register out of range");
        if (into) into[i] = (int32_t)v;
        i++;
    }
    *count = i;
    return 0;
}

static int expr_list(function_scope *fs, const cJSON *op, const char *key, tsr_instr *in) {
    const cJSON *array;
    int rc = tsr_json_array(op, key, fs->where, &array);
    if (rc) return rc;
    int n = cJSON_GetArraySize(array);
    in->exprs = tsr_bump_array(fs->p->exe->mem, (size_t)(n ? n : 1), sizeof(tsr_shape_expr));
    if (!in->exprs) return TESSERA_ERROR_OUT_OF_MEMORY;
    in->n_exprs = n;
    int i = 0;
    const cJSON *item;
    cJSON_ArrayForEach(item, array) {
        if ((rc = compile_expr(fs->p, item, &fs->f->symbols, fs->where, &in->exprs[i++]))) return rc;
    }
    return 0;
}

static int args_outs(function_scope *fs, const cJSON *op, tsr_instr *in, bool with_outs) {
    const cJSON *args = cJSON_GetObjectItemCaseSensitive(op, "args");
    const cJSON *outs = with_outs ? cJSON_GetObjectItemCaseSensitive(op, "outs") : NULL;
    size_t n = (size_t)cJSON_GetArraySize(args) + (size_t)cJSON_GetArraySize(outs);
    in->regs = tsr_bump_array(fs->p->exe->mem, n ? n : 1, sizeof(int32_t));
    if (!in->regs) return TESSERA_ERROR_OUT_OF_MEMORY;
    int rc = reg_list(fs, op, "args", in->regs, &in->n_args);
    if (rc) return rc;
    if (with_outs) return reg_list(fs, op, "outs", in->regs + in->n_args, &in->n_outs);
    return 0;
}

static int function_index(const tsr_executable *exe, const cJSON *all, const char *name) {
    int i = 0;
    const cJSON *f;
    cJSON_ArrayForEach(f, all) {
        if (strcmp(f->string, name) == 0) return i;
        i++;
    }
    (void)exe;
    return -1;
}

static int parse_instr(function_scope *fs, const cJSON *op, int32_t pc, tsr_instr *in) {
    parser *p = fs->p;
    tsr_executable *exe = p->exe;
    tsr_function *f = fs->f;
    char where[300];
    snprintf(where, sizeof where, "function '%s', instruction %d", f->name, pc);
    fs->where = where;
    if (!cJSON_IsObject(op)) return fail(where, "not an object");
    const char *name;
    int rc = tsr_json_string(op, "op", where, &name);
    if (rc) return rc;
    size_t k = 0;
    while (k < TSR_ARRAY_LEN(OPCODES) && strcmp(OPCODES[k].name, name) != 0) k++;
    if (k == TSR_ARRAY_LEN(OPCODES))
        return tsr_error(TESSERA_ERROR_UNSUPPORTED, "executable.json: %s: unknown instruction '%s' (an executable "
                         "from a newer Tessera?)", where, name);
    in->op = OPCODES[k].op;
    in->dst = in->reg = in->target = in->callee = in->library = -1;
    int64_t v;
    bool device_stated;
    if ((rc = device_field(p, op, where, &in->device, &device_stated))) return rc;
    switch (in->op) {
    case TSR_OP_TO_DEVICE:
        if (!device_stated) return fail(where, "to_device must name its destination's 'device'");
        if ((rc = reg_field(fs, op, "src", false, &in->reg))) return rc;
        if ((rc = reg_field(fs, op, "dst", false, &in->dst))) return rc;
        if (f->regs[in->dst].device_stated && f->regs[in->dst].device != in->device)
            return tsr_error(TESSERA_ERROR_FORMAT, "executable.json: %s: field 'dst' is register %d, on device %d, not "
                             "a tensor on device %d, where to_device copies", where, in->dst,
                             (int)f->regs[in->dst].device, (int)in->device);
        return 0;
    case TSR_OP_MATCH: {
        if ((rc = reg_field(fs, op, "reg", false, &in->reg))) return rc;
        const cJSON *sinfo = cJSON_GetObjectItemCaseSensitive(op, "sinfo");
        if ((rc = parse_sinfo(p, sinfo, &f->symbols, where, 0, &in->sinfo))) return rc;
        const char *text = "", *what = "a value";
        if ((rc = tsr_json_opt_string(op, "text", where, &text))) return rc;
        if ((rc = tsr_json_opt_string(op, "what", where, &what))) return rc;
        in->text = dup_string(p, text);
        in->what = dup_string(p, what);
        return in->text && in->what ? 0 : TESSERA_ERROR_OUT_OF_MEMORY;
    }
    case TSR_OP_ALLOC_STORAGE:
        if ((rc = reg_field(fs, op, "dst", false, &in->dst))) return rc;
        in->exprs = tsr_bump_alloc(exe->mem, sizeof(tsr_shape_expr));
        if (!in->exprs) return TESSERA_ERROR_OUT_OF_MEMORY;
        in->n_exprs = 1;
        return compile_expr(p, cJSON_GetObjectItemCaseSensitive(op, "size"), &f->symbols, where, in->exprs);
    case TSR_OP_ALLOC_TENSOR: {
        if ((rc = reg_field(fs, op, "dst", false, &in->dst))) return rc;
        const char *dtype;
        if ((rc = tsr_json_string(op, "dtype", where, &dtype))) return rc;
        if (tsr_dtype_from_name(dtype, &in->dtype)) return unknown_dtype(where, "alloc_tensor", dtype);
        if ((rc = expr_list(fs, op, "shape", in))) return rc;
        if (in->n_exprs > TESSERA_MAX_NDIM) return fail(where, "more than 8 dimensions");
        return 0;
    }
    case TSR_OP_LAUNCH:
        if ((rc = tsr_json_int(op, "kernel", where, 0, exe->n_kernels - 1, &v))) return fail(where, "kernel index out of range");
        in->target = (int32_t)v;
        if ((rc = args_outs(fs, op, in, true))) return rc;
        if ((rc = expr_list(fs, op, "scalars", in))) return rc;
        {
            const tsr_kernel *kernel = &exe->kernels[in->target];
            if (in->n_args + in->n_outs != kernel->n_bindings)
                return fail(where, "the launch binds a different number of tensors than the kernel's ABI lists");
            if (in->n_exprs != kernel->n_scalars)
                return fail(where, "the launch passes a different number of scalars than the kernel's ABI lists");
            /* A kernel reads and writes memory of its own device only: a split build copies (to_device). */
            for (int32_t i = 0; i < in->n_args + in->n_outs; i++) {
                const tsr_register_info *info = &f->regs[in->regs[i]];
                if (info->has_tensor && info->device_stated && info->device != kernel->device)
                    return tsr_error(TESSERA_ERROR_FORMAT, "executable.json: %s: binds register %d, on device %d, to "
                                     "kernel %d (%s), which runs on device %d", where, in->regs[i], (int)info->device,
                                     in->target, kernel->name, (int)kernel->device);
            }
        }
        return 0;
    case TSR_OP_CALL_BUILTIN: {
        const char *lib;
        if ((rc = tsr_json_string(op, "name", where, &lib))) return rc;
        for (int32_t i = 0; i < exe->n_libraries; i++)
            if (strcmp(exe->libraries[i], lib) == 0) in->library = i;
        if (in->library < 0) return fail(where, "calls a library function that 'libraries' does not list");
        if ((rc = reg_field(fs, op, "dst", true, &in->dst))) return rc;
        if ((rc = args_outs(fs, op, in, true))) return rc;
        return expr_list(fs, op, "scalars", in);
    }
    case TSR_OP_CALL: {
        if ((rc = reg_field(fs, op, "dst", false, &in->dst))) return rc;
        const char *callee_name = NULL;
        if ((rc = tsr_json_opt_string(op, "func", where, &callee_name))) return rc;
        if (callee_name) {
            in->target = function_index(exe, fs->all_functions, callee_name);
            if (in->target < 0) return fail(where, "calls a function the executable does not have");
        } else if ((rc = reg_field(fs, op, "callee", false, &in->callee))) {
            return rc;
        }
        return args_outs(fs, op, in, false);
    }
    case TSR_OP_FUNC: {
        if ((rc = reg_field(fs, op, "dst", false, &in->dst))) return rc;
        const char *fname;
        if ((rc = tsr_json_string(op, "name", where, &fname))) return rc;
        in->target = function_index(exe, fs->all_functions, fname);
        return in->target < 0 ? fail(where, "names a function the executable does not have") : 0;
    }
    case TSR_OP_IF:
        if ((rc = reg_field(fs, op, "cond", false, &in->reg))) return rc;
        if ((rc = tsr_json_int(op, "else", where, 0, f->n_code - 1, &v))) return rc;
        in->target = (int32_t)v;
        return 0;
    case TSR_OP_GOTO:
        if ((rc = tsr_json_int(op, "target", where, 0, f->n_code - 1, &v))) return rc;
        in->target = (int32_t)v;
        return 0;
    case TSR_OP_PRIM:
        if ((rc = reg_field(fs, op, "dst", false, &in->dst))) return rc;
        in->exprs = tsr_bump_alloc(exe->mem, sizeof(tsr_shape_expr));
        if (!in->exprs) return TESSERA_ERROR_OUT_OF_MEMORY;
        in->n_exprs = 1;
        return compile_expr(p, cJSON_GetObjectItemCaseSensitive(op, "value"), &f->symbols, where, in->exprs);
    case TSR_OP_MOVE:
        if ((rc = reg_field(fs, op, "dst", false, &in->dst))) return rc;
        return reg_field(fs, op, "src", false, &in->reg);
    case TSR_OP_TUPLE: {
        if ((rc = reg_field(fs, op, "dst", false, &in->dst))) return rc;
        const cJSON *fields = cJSON_GetObjectItemCaseSensitive(op, "fields");
        int n = cJSON_GetArraySize(fields);
        in->regs = tsr_bump_array(exe->mem, (size_t)(n ? n : 1), sizeof(int32_t));
        if (!in->regs) return TESSERA_ERROR_OUT_OF_MEMORY;
        return reg_list(fs, op, "fields", in->regs, &in->n_args);
    }
    case TSR_OP_GET:
        if ((rc = reg_field(fs, op, "dst", false, &in->dst))) return rc;
        if ((rc = reg_field(fs, op, "src", false, &in->reg))) return rc;
        if ((rc = tsr_json_int(op, "index", where, 0, 1 << 20, &v))) return rc;
        in->target = (int32_t)v;
        return 0;
    case TSR_OP_SHAPE:
        if ((rc = reg_field(fs, op, "dst", false, &in->dst))) return rc;
        if ((rc = expr_list(fs, op, "values", in))) return rc;
        return in->n_exprs > TESSERA_MAX_NDIM ? fail(where, "a shape of more than 8 dimensions") : 0;
    case TSR_OP_RET:
        return reg_field(fs, op, "src", false, &in->reg);
    }
    return fail(where, "unhandled instruction");
}

/* ---- functions ----------------------------------------------------------------------------- */

static int parse_register_infos(parser *p, const cJSON *doc, tsr_function *f, const char *where) {
    const cJSON *tensors, *locations;
    int rc;
    if ((rc = tsr_json_object(doc, "tensors", where, &tensors))) return rc;
    if ((rc = tsr_json_object(doc, "locations", where, &locations))) return rc;
    const cJSON *item;
    cJSON_ArrayForEach(item, tensors) {
        int64_t r;
        char *end;
        r = strtoll(item->string, &end, 10);
        if (*end || end == item->string || r < 0 || r >= f->n_registers) return fail(where, "'tensors' names a register out of range");
        tsr_register_info *info = &f->regs[r];
        const char *dtype;
        const cJSON *shape;
        if ((rc = tsr_json_string(item, "dtype", where, &dtype))) return rc;
        if (tsr_dtype_from_name(dtype, &info->dtype)) {
            char what[64];
            snprintf(what, sizeof what, "register %lld in 'tensors'", (long long)r);
            return unknown_dtype(where, what, dtype);
        }
        if ((rc = tsr_json_array(item, "shape", where, &shape))) return rc;
        int n = cJSON_GetArraySize(shape);
        if (n > TESSERA_MAX_NDIM) return fail(where, "a tensor of more than 8 dimensions");
        info->ndim = n;
        int i = 0;
        const cJSON *d;
        cJSON_ArrayForEach(d, shape) {
            if ((rc = compile_expr(p, d, &f->symbols, where, &info->shape[i++]))) return rc;
        }
        if ((rc = compile_expr(p, cJSON_GetObjectItemCaseSensitive(item, "bytes"), &f->symbols, where, &info->bytes))) return rc;
        if ((rc = device_field(p, item, where, &info->device, &info->device_stated))) return rc;
        info->has_tensor = true;
    }
    cJSON_ArrayForEach(item, locations) {
        int64_t r;
        char *end;
        r = strtoll(item->string, &end, 10);
        if (*end || end == item->string || r < 0 || r >= f->n_registers) return fail(where, "'locations' names a register out of range");
        tsr_register_info *info = &f->regs[r];
        if (!info->has_tensor) return fail(where, "a register has a location but no entry in 'tensors'");
        const char *kind;
        int64_t v;
        if ((rc = tsr_json_string(item, "kind", where, &kind))) return rc;
        if (strcmp(kind, "param") == 0) {
            if ((rc = tsr_json_int(item, "index", where, 0, f->n_params - 1, &v))) return rc;
            info->location = TSR_LOC_PARAM;
        } else if (strcmp(kind, "constant") == 0) {
            const char *name;
            if ((rc = tsr_json_string(item, "name", where, &name))) return rc;
            v = -1;
            for (int32_t i = 0; i < p->exe->n_constants; i++)
                if (strcmp(p->exe->constants[i], name) == 0) v = i;
            if (v < 0) return fail(where, "a location names a constant that 'constants' does not list");
            info->location = TSR_LOC_CONSTANT;
        } else if (strcmp(kind, "arena") == 0) {
            if ((rc = tsr_json_int(item, "token", where, 0, f->max_token, &v))) return rc;
            if (f->token_to_storage[v] < 0 || f->storages[f->token_to_storage[v]].buffer < 0)
                return fail(where, "an arena location names a storage the plan does not place");
            info->location = TSR_LOC_ARENA;
        } else if (strcmp(kind, "storage") == 0) {
            if ((rc = tsr_json_int(item, "register", where, 0, f->n_registers - 1, &v))) return rc;
            info->location = TSR_LOC_STORAGE;
        } else {
            return fail(where, "unknown location kind");
        }
        info->index = (int32_t)v;
    }
    return 0;
}

static int parse_memory(parser *p, const cJSON *doc, tsr_function *f, const char *where) {
    const cJSON *memory, *buffers, *storages;
    int rc;
    if ((rc = tsr_json_object(doc, "memory", where, &memory))) return rc;
    f->static_memory = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(memory, "static"));
    f->recursive = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(memory, "recursive"));
    if ((rc = tsr_json_array(memory, "buffers", where, &buffers))) return rc;
    if ((rc = tsr_json_array(memory, "storages", where, &storages))) return rc;
    int nb = cJSON_GetArraySize(buffers), ns = cJSON_GetArraySize(storages);
    f->arena_buffers = tsr_bump_array(p->exe->mem, (size_t)(nb ? nb : 1), sizeof(uint64_t));
    f->storages = tsr_bump_array(p->exe->mem, (size_t)(ns ? ns : 1), sizeof(tsr_storage_plan));
    if (!f->arena_buffers || !f->storages) return TESSERA_ERROR_OUT_OF_MEMORY;
    f->n_arena_buffers = nb;
    f->n_storages = ns;
    int i = 0;
    const cJSON *item;
    cJSON_ArrayForEach(item, buffers) {
        int64_t v;
        /* An arena buffer larger than TSR_MAX_BUFFER_BYTES (1 TiB) is not a plan any device can hold. */
        if ((rc = tsr_json_int_item(item, where, 0, TSR_MAX_BUFFER_BYTES, &v))) return rc;
        f->arena_buffers[i++] = (uint64_t)v;
    }
    /* A split build's arena is one per device: each buffer names its device. */
    f->buffer_devices = tsr_bump_array(p->exe->mem, (size_t)(nb ? nb : 1), sizeof(int32_t));
    if (!f->buffer_devices) return TESSERA_ERROR_OUT_OF_MEMORY;
    memset(f->buffer_devices, 0, (size_t)(nb ? nb : 1) * sizeof(int32_t));
    const cJSON *placed = cJSON_GetObjectItemCaseSensitive(memory, "buffer_devices");
    if (placed) {
        if (!cJSON_IsArray(placed) || cJSON_GetArraySize(placed) != nb)
            return fail(where, "memory.buffer_devices must list one device per arena buffer");
        i = 0;
        cJSON_ArrayForEach(item, placed) {
            int64_t v;
            if (!cJSON_IsNumber(item) || tsr_json_int_item(item, where, 0, p->most_devices - 1, &v))
                return fail(where, "memory.buffer_devices names a device the executable does not list");
            f->buffer_devices[i++] = (int32_t)v;
        }
    }
    i = 0;
    f->max_token = -1;
    cJSON_ArrayForEach(item, storages) {
        tsr_storage_plan *s = &f->storages[i++];
        int64_t v;
        int32_t device; /* checked only: a storage lives on its buffer's device */
        if ((rc = device_field(p, item, where, &device, NULL))) return rc;
        if ((rc = tsr_json_int(item, "index", where, 0, MAX_REGISTERS, &v))) return rc;
        s->index = (int32_t)v;
        if (s->index > f->max_token) f->max_token = s->index;
        const cJSON *buffer = cJSON_GetObjectItemCaseSensitive(item, "buffer");
        if (!buffer || cJSON_IsNull(buffer)) {
            s->buffer = -1;
            continue;
        }
        if ((rc = tsr_json_int_item(buffer, where, 0, nb - 1, &v))) return fail(where, "a storage's buffer is out of range");
        s->buffer = (int32_t)v;
        int64_t offset, size;
        if ((rc = tsr_json_int(item, "offset", where, 0, TSR_MAX_BUFFER_BYTES, &offset))) return rc;
        if ((rc = tsr_json_int(item, "static_size", where, 0, TSR_MAX_BUFFER_BYTES, &size))) return rc;
        if ((uint64_t)offset + (uint64_t)size > f->arena_buffers[s->buffer])
            return fail(where, "a storage lies outside its arena buffer");
        s->offset = (uint64_t)offset;
        s->static_size = (uint64_t)size;
    }
    f->token_to_storage = tsr_bump_array(p->exe->mem, (size_t)(f->max_token + 2), sizeof(int32_t));
    if (!f->token_to_storage) return TESSERA_ERROR_OUT_OF_MEMORY;
    for (int32_t t = 0; t <= f->max_token; t++) f->token_to_storage[t] = -1;
    for (int32_t s = 0; s < f->n_storages; s++) {
        if (f->token_to_storage[f->storages[s].index] >= 0) return fail(where, "two storages share a token");
        f->token_to_storage[f->storages[s].index] = s;
    }
    return 0;
}

static int compare_names(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static int32_t count_leaves(const tsr_sinfo *s) {
    if (s->kind != TSR_SINFO_TUPLE) return 1;
    int32_t n = 0;
    for (int32_t i = 0; i < s->n_fields; i++) n += count_leaves(&s->fields[i]);
    return n;
}

/* The result's struct info (the VM checks the value with the match before `ret`; this is what the tensor API
 * describes) and its optional result_names: one distinct, non-empty name per value, tuples flattened. */
static int parse_result(parser *p, const cJSON *doc, tsr_function *f, const char *where) {
    const cJSON *result = cJSON_GetObjectItemCaseSensitive(doc, "result");
    int rc;
    f->result.kind = TSR_SINFO_OBJECT;
    f->result.ndim = f->result.n_dims = -1;
    if (cJSON_IsObject(result) && (rc = parse_sinfo(p, result, &f->symbols, where, 0, &f->result))) return rc;
    f->n_results = count_leaves(&f->result);
    f->result_names = tsr_bump_array(p->exe->mem, (size_t)(f->n_results ? f->n_results : 1), sizeof(const char *));
    if (!f->result_names) return TESSERA_ERROR_OUT_OF_MEMORY;
    const cJSON *names = cJSON_GetObjectItemCaseSensitive(doc, "result_names"), *item;
    if (!names) {
        for (int32_t i = 0; i < f->n_results; i++) {
            char name[32];
            snprintf(name, sizeof name, "output%d", (int)i);
            if (!(f->result_names[i] = dup_string(p, name))) return TESSERA_ERROR_OUT_OF_MEMORY;
        }
        return 0;
    }
    if (!cJSON_IsArray(names)) return fail(where, "'result_names' must be an array of strings");
    if (cJSON_GetArraySize(names) != f->n_results)
        return tsr_error(TESSERA_ERROR_FORMAT, "executable.json: %s: 'result_names' has %d names for a result of %d "
                         "values", where, cJSON_GetArraySize(names), (int)f->n_results);
    int32_t i = 0;
    cJSON_ArrayForEach(item, names) {
        if (!cJSON_IsString(item) || !item->valuestring[0] || strlen(item->valuestring) > 1024)
            return fail(where, "'result_names' must hold non-empty strings of at most 1024 characters");
        if (!(f->result_names[i++] = dup_string(p, item->valuestring))) return TESSERA_ERROR_OUT_OF_MEMORY;
    }
    /* Distinct: sorted, a name equal to the next is a second one (n log n, for a hostile file's many names). */
    const char **sorted = tsr_bump_array(p->exe->mem, (size_t)(f->n_results ? f->n_results : 1), sizeof(const char *));
    if (!sorted) return TESSERA_ERROR_OUT_OF_MEMORY;
    memcpy(sorted, f->result_names, (size_t)f->n_results * sizeof(const char *));
    qsort(sorted, (size_t)f->n_results, sizeof(const char *), compare_names);
    for (int32_t k = 1; k < f->n_results; k++) {
        if (strcmp(sorted[k - 1], sorted[k]) == 0) {
            char q[300];
            tsr_quote(sorted[k], q, sizeof q);
            return tsr_error(TESSERA_ERROR_FORMAT, "executable.json: %s: 'result_names' names the result %s a second "
                             "time", where, q);
        }
    }
    f->result_names_recorded = true;
    return 0;
}

static int parse_function(parser *p, const cJSON *all, const cJSON *doc, tsr_function *f) {
    char where[300];
    snprintf(where, sizeof where, "function '%s'", doc->string);
    if (!cJSON_IsObject(doc)) return fail(where, "not an object");
    f->name = dup_string(p, doc->string);
    int rc;
    int64_t v;
    if ((rc = tsr_json_int(doc, "registers", where, 1, MAX_REGISTERS, &v))) return rc;
    /* A valid file names each register at least once, in more than one byte. */
    if ((size_t)v > p->text_size) return fail(where, "more registers than the file could use");
    f->n_registers = (int32_t)v;
    f->regs = tsr_bump_array(p->exe->mem, (size_t)f->n_registers, sizeof(tsr_register_info));
    if (!f->regs) return TESSERA_ERROR_OUT_OF_MEMORY;
    /* Symbols with bounds come first, in the file's order. */
    const cJSON *symbols, *item;
    if ((rc = tsr_json_object(doc, "symbols", where, &symbols))) return rc;
    int n_sym = cJSON_GetArraySize(symbols);
    cJSON_ArrayForEach(item, symbols) {
        if (tsr_symbols_index(&p->mem, &f->symbols, item->string) < 0) return TESSERA_ERROR_OUT_OF_MEMORY;
    }
    /* Params. */
    const cJSON *params;
    if ((rc = tsr_json_array(doc, "params", where, &params))) return rc;
    f->n_params = cJSON_GetArraySize(params);
    f->params = tsr_bump_array(p->exe->mem, (size_t)(f->n_params ? f->n_params : 1), sizeof(tsr_param));
    if (!f->params) return TESSERA_ERROR_OUT_OF_MEMORY;
    int i = 0;
    cJSON_ArrayForEach(item, params) {
        tsr_param *param = &f->params[i++];
        const char *name;
        if ((rc = tsr_json_string(item, "name", where, &name))) return rc;
        param->name = dup_string(p, name);
        if ((rc = tsr_json_int(item, "register", where, 0, f->n_registers - 1, &v))) return rc;
        param->reg = (int32_t)v;
        param->state = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(item, "state"));
        if ((rc = device_field(p, item, where, &param->device, NULL))) return rc;
        if ((rc = parse_sinfo(p, cJSON_GetObjectItemCaseSensitive(item, "sinfo"), &f->symbols, where, 0, &param->sinfo))) return rc;
    }
    if ((rc = check_sinfo_nesting(cJSON_GetObjectItemCaseSensitive(doc, "result"), where, 0))) return rc;
    if ((rc = parse_result(p, doc, f, where))) return rc;
    if ((rc = parse_memory(p, doc, f, where))) return rc;
    if ((rc = parse_register_infos(p, doc, f, where))) return rc;
    for (int32_t k = 0; k < f->n_params; k++) {
        if (f->params[k].state && !f->regs[f->params[k].reg].has_tensor)
            return fail(where, "a state parameter without a planned tensor");
    }
    const cJSON *code;
    if ((rc = tsr_json_array(doc, "code", where, &code))) return rc;
    f->n_code = cJSON_GetArraySize(code);
    if (f->n_code < 1 || f->n_code > MAX_CODE) return fail(where, "'code' is empty or too long");
    f->code = tsr_bump_array(p->exe->mem, (size_t)f->n_code, sizeof(tsr_instr));
    if (!f->code) return TESSERA_ERROR_OUT_OF_MEMORY;
    function_scope fs = {p, all, f, where};
    i = 0;
    cJSON_ArrayForEach(item, code) {
        if ((rc = parse_instr(&fs, item, i, &f->code[i]))) return rc;
        i++;
    }
    if (f->code[f->n_code - 1].op != TSR_OP_RET && f->code[f->n_code - 1].op != TSR_OP_GOTO)
        return fail(where, "the code does not end with ret");
    /* Bounds, by symbol index (the expressions may have added symbols after the declared ones). */
    f->upper_bounds = tsr_bump_array(p->exe->mem, (size_t)(f->symbols.count ? f->symbols.count : 1), sizeof(int64_t));
    if (!f->upper_bounds) return TESSERA_ERROR_OUT_OF_MEMORY;
    for (int32_t s = 0; s < f->symbols.count; s++) f->upper_bounds[s] = -1;
    i = 0;
    cJSON_ArrayForEach(item, symbols) {
        const cJSON *bound = cJSON_GetObjectItemCaseSensitive(item, "upper_bound");
        if (bound && !cJSON_IsNull(bound)) {
            if ((rc = tsr_json_int_item(bound, where, 0, TSR_MAX_BUFFER_BYTES, &v))) return rc;
            f->upper_bounds[i] = v;
        }
        i++;
    }
    /* Every variable the expressions use is one of the function's symbols (docs/format.md): the
     * expressions added any other to the table after the declared ones. */
    if (f->symbols.count > n_sym) {
        char q[300];
        tsr_quote(f->symbols.names[n_sym], q, sizeof q);
        return tsr_error(TESSERA_ERROR_FORMAT, "executable.json: %s: an expression uses %s, which is not one of the "
                         "function's symbols", where, q);
    }
    /* Last: they evaluate at the bounds and follow the registers and jumps checked above. */
    if ((rc = tsr_check_dimensions(p->scratch, f))) return rc;
    return tsr_check_live_storages(p->scratch, f);
}

/* ---- kernels and modules ------------------------------------------------------------------- */

static int parse_kernel(parser *p, const cJSON *doc, int32_t index, tsr_kernel *k) {
    char where[300];
    snprintf(where, sizeof where, "kernel %d", index);
    const char *name, *backend, *module, *entry;
    int rc;
    if ((rc = tsr_json_string(doc, "name", where, &name))) return rc;
    snprintf(where, sizeof where, "kernel %d (%s)", index, name);
    if ((rc = tsr_json_string(doc, "backend", where, &backend))) return rc;
    if ((rc = tsr_json_string(doc, "module", where, &module))) return rc;
    if ((rc = tsr_json_string(doc, "entry_point", where, &entry))) return rc;
    k->name = dup_string(p, name);
    k->backend = dup_string(p, backend);
    k->entry_point = dup_string(p, entry);
    k->module = -1;
    for (int32_t m = 0; m < p->exe->n_modules; m++)
        if (strcmp(p->exe->modules[m].path, module) == 0) k->module = m;
    if (k->module < 0) return fail(where, "its module is not listed in 'modules'");
    if ((rc = device_field(p, doc, where, &k->device, NULL))) return rc;
    const cJSON *wg, *abi, *bindings, *scalars, *grid, *item;
    if ((rc = tsr_json_array(doc, "workgroup_size", where, &wg))) return rc;
    if (cJSON_GetArraySize(wg) != 3) return fail(where, "workgroup_size must have 3 entries");
    int i = 0;
    cJSON_ArrayForEach(item, wg) {
        int64_t v;
        if ((rc = tsr_json_int_item(item, where, 1, 1 << 16, &v))) return rc;
        k->workgroup_size[i++] = (int32_t)v;
    }
    if ((rc = tsr_json_object(doc, "abi", where, &abi))) return rc;
    if ((rc = tsr_json_array(abi, "bindings", where, &bindings))) return rc;
    if ((rc = tsr_json_array(abi, "scalars", where, &scalars))) return rc;
    k->n_bindings = cJSON_GetArraySize(bindings);
    k->n_scalars = cJSON_GetArraySize(scalars);
    if (k->n_bindings > 256 || k->n_scalars > 256) return fail(where, "more than 256 bindings or scalars");
    k->binding_access = tsr_bump_alloc(p->exe->mem, (size_t)(k->n_bindings ? k->n_bindings : 1));
    if (!k->binding_access) return TESSERA_ERROR_OUT_OF_MEMORY;
    i = 0;
    cJSON_ArrayForEach(item, bindings) {
        const cJSON *access = cJSON_GetObjectItemCaseSensitive(item, "access");
        const char *text = cJSON_IsString(access) ? access->valuestring : "";
        k->binding_access[i++] = strcmp(text, "read") == 0 ? TSR_ACCESS_READ : strcmp(text, "write") == 0
                                 ? TSR_ACCESS_WRITE : TSR_ACCESS_READ | TSR_ACCESS_WRITE;
    }
    cJSON_ArrayForEach(item, scalars) {
        const char *sname;
        if ((rc = tsr_json_string(item, "name", where, &sname))) return rc;
        if (tsr_symbols_index(&p->mem, &k->scalar_symbols, sname) < 0) return TESSERA_ERROR_OUT_OF_MEMORY;
    }
    if (k->scalar_symbols.count != k->n_scalars) return fail(where, "two scalars share a name");
    if ((rc = tsr_json_array(doc, "grid", where, &grid))) return rc;
    if (cJSON_GetArraySize(grid) != 3) return fail(where, "grid must have 3 expressions");
    i = 0;
    cJSON_ArrayForEach(item, grid) {
        if ((rc = compile_expr(p, item, &k->scalar_symbols, where, &k->grid[i++]))) return rc;
    }
    if (k->scalar_symbols.count != k->n_scalars) return fail(where, "its grid uses a variable that is not one of its scalars");
    return 0;
}

static int string_list(parser *p, const cJSON *root, const char *key, const char ***out, int32_t *count) {
    const cJSON *array, *item;
    int rc = tsr_json_array(root, key, "executable.json", &array);
    if (rc) return rc;
    int n = cJSON_GetArraySize(array);
    *out = tsr_bump_array(p->exe->mem, (size_t)(n ? n : 1), sizeof(char *));
    if (!*out) return TESSERA_ERROR_OUT_OF_MEMORY;
    int i = 0;
    cJSON_ArrayForEach(item, array) {
        if (!cJSON_IsString(item)) return fail(key, "entries must be strings");
        (*out)[i++] = dup_string(p, item->valuestring);
    }
    *count = n;
    return 0;
}

/* required_limits by name (docs/format.md); -1 for each the object does not give. */
static void parse_limits(const cJSON *limits, int64_t *invocations, int64_t *storage_buffers,
                         int64_t *workgroup_storage, int64_t *buffer_size, int64_t *binding_size) {
    *invocations = *storage_buffers = *workgroup_storage = *buffer_size = *binding_size = -1;
    if (!cJSON_IsObject(limits)) return;
    tsr_json_opt_int(limits, "maxComputeInvocationsPerWorkgroup", "required_limits", 0, INT64_MAX, invocations);
    tsr_json_opt_int(limits, "maxStorageBuffersPerShaderStage", "required_limits", 0, INT64_MAX, storage_buffers);
    tsr_json_opt_int(limits, "maxComputeWorkgroupStorageSize", "required_limits", 0, INT64_MAX, workgroup_storage);
    tsr_json_opt_int(limits, "maxBufferSize", "required_limits", 0, INT64_MAX, buffer_size);
    tsr_json_opt_int(limits, "maxStorageBufferBindingSize", "required_limits", 0, INT64_MAX, binding_size);
}

/* A split build's `devices` (format version 4, `tessera compile --gpu-layers N`): 2 to 16 entries, each
 * a device kind and what its own kernels ask of it. A version-3 file lists none (as the Python loader
 * refuses `devices` there, so does this one). */
static int parse_devices(parser *p, const cJSON *root, bool split) {
    tsr_executable *exe = p->exe;
    const cJSON *devices = cJSON_GetObjectItemCaseSensitive(root, "devices"), *item;
    p->most_devices = 1;
    if (!split && devices) return fail("devices", "only a version 4 executable (a split build) lists devices");
    if (!split) return 0;
    int n = cJSON_IsArray(devices) ? cJSON_GetArraySize(devices) : 0;
    if (n < 2 || n > TSR_MAX_DEVICES)
        return fail("devices",
                    "a version 4 executable must list its devices (2 to " TSR_FACT_TEXT(TSR_MAX_DEVICES) ")");
    exe->devices = tsr_bump_array(exe->mem, (size_t)n, sizeof(tsr_exe_device));
    if (!exe->devices) return TESSERA_ERROR_OUT_OF_MEMORY;
    exe->n_devices = p->most_devices = n;
    int i = 0;
    cJSON_ArrayForEach(item, devices) {
        tsr_exe_device *d = &exe->devices[i];
        char where[64];
        snprintf(where, sizeof where, "devices[%d]", i++);
        if (!cJSON_IsObject(item)) return fail(where, "not an object");
        const char *kind, *name = "?", *cpu = "";
        const cJSON *vdevices, *target;
        int64_t id;
        int rc;
        if ((rc = tsr_json_string(item, "kind", where, &kind))) return rc;
        if (!kind[0]) return fail(where, "'kind' is empty");
        if ((rc = tsr_json_int(item, "id", where, 0, 65535, &id))) return rc;
        if ((rc = tsr_json_array(item, "vdevices", where, &vdevices))) return rc;
        if ((rc = tsr_json_object(item, "target", where, &target))) return rc;
        tsr_json_opt_string(target, "name", where, &name);
        tsr_json_opt_string(target, "cpu", where, &cpu);
        const char **vnames;
        int32_t n_vnames;
        if ((rc = string_list(p, item, "vdevices", &vnames, &n_vnames))) return rc;
        if ((rc = string_list(p, item, "required_features", &d->required_features, &d->n_required_features))) return rc;
        const cJSON *limits;
        if ((rc = tsr_json_object(item, "required_limits", where, &limits))) return rc;
        parse_limits(limits, &d->max_invocations, &d->max_storage_buffers, &d->max_workgroup_storage,
                     &d->max_buffer_size, &d->max_binding_size);
        d->kind = dup_string(p, kind);
        d->id = (int32_t)id;
        d->vdevice = n_vnames ? vnames[0] : d->kind;
        d->target_name = dup_string(p, name);
        d->target_cpu = dup_string(p, cpu);
        if (!d->kind || !d->target_name || !d->target_cpu) return TESSERA_ERROR_OUT_OF_MEMORY;
    }
    return 0;
}

/* `constant_devices` (version 4): each weight it names is a constant, read on the devices listed; every
 * other constant is on device 0 alone. */
static int parse_constant_devices(parser *p, const cJSON *root) {
    tsr_executable *exe = p->exe;
    size_t n_slots = (size_t)(exe->n_constants ? exe->n_constants : 1);
    exe->constant_devices = tsr_bump_array(exe->mem, n_slots, sizeof(uint32_t));
    if (!exe->constant_devices) return TESSERA_ERROR_OUT_OF_MEMORY;
    for (int32_t c = 0; c < exe->n_constants; c++) exe->constant_devices[c] = 1;
    const cJSON *placements = cJSON_GetObjectItemCaseSensitive(root, "constant_devices"), *item, *d;
    if (!placements) return 0;
    if (!cJSON_IsObject(placements)) return fail("constant_devices", "not an object");
    cJSON_ArrayForEach(item, placements) {
        int32_t c = 0;
        while (c < exe->n_constants && strcmp(exe->constants[c], item->string) != 0) c++;
        int n = cJSON_IsArray(item) ? cJSON_GetArraySize(item) : 0;
        uint32_t mask = 0;
        bool known = c < exe->n_constants && n >= 1 && n <= TSR_MAX_DEVICES;
        const cJSON *list = known ? item : NULL;
        cJSON_ArrayForEach(d, list) {
            int64_t v;
            if (!cJSON_IsNumber(d) || tsr_json_int_item(d, "constant_devices", 0, exe->n_devices - 1, &v)) {
                known = false;
                break;
            }
            mask |= 1u << v;
        }
        if (!known) {
            char q[300];
            tsr_quote(item->string, q, sizeof q);
            return tsr_error(TESSERA_ERROR_FORMAT, "executable.json: constant_devices: %s names a weight or device the "
                             "executable does not have", q);
        }
        exe->constant_devices[c] = mask;
    }
    return 0;
}

static int parse_root(parser *p, const cJSON *root) {
    tsr_executable *exe = p->exe;
    const char *format;
    int64_t version;
    int rc;
    if (!cJSON_IsObject(root)) return fail("top level", "not an object");
    if ((rc = tsr_json_string(root, "format", "executable.json", &format))) return rc;
    if (strcmp(format, "tessera-executable") != 0) return fail("format", "not \"tessera-executable\"");
    if ((rc = tsr_json_int(root, "version", "executable.json", 0, INT32_MAX, &version))) return rc;
    bool split = version == TESSERA_SPLIT_FORMAT_VERSION;
    if (!split && version != TESSERA_FORMAT_VERSION)
        return tsr_error(TESSERA_ERROR_VERSION, "executable.json has format version %lld; this runtime reads version "
                         "%d: rebuild it with a matching Tessera (tessera compile MODEL.gguf --target cpu -o DIR)",
                         (long long)version, TESSERA_FORMAT_VERSION);
    const cJSON *target = cJSON_GetObjectItemCaseSensitive(root, "target");
    const char *kind = "?", *name = "?", *cpu = "";
    if (cJSON_IsObject(target)) {
        tsr_json_opt_string(target, "kind", "target", &kind);
        tsr_json_opt_string(target, "name", "target", &name);
        tsr_json_opt_string(target, "cpu", "target", &cpu);
    }
    exe->target_cpu = dup_string(p, cpu);
    exe->target_kind = dup_string(p, kind);
    exe->target_name = dup_string(p, name);
    if ((rc = string_list(p, root, "constants", &exe->constants, &exe->n_constants))) return rc;
    if ((rc = string_list(p, root, "libraries", &exe->libraries, &exe->n_libraries))) return rc;
    if ((rc = string_list(p, root, "required_features", &exe->required_features, &exe->n_required_features))) return rc;
    parse_limits(cJSON_GetObjectItemCaseSensitive(root, "required_limits"), &exe->max_invocations,
                 &exe->max_storage_buffers, &exe->max_workgroup_storage, &exe->max_buffer_size, &exe->max_binding_size);
    /* Devices before everything that names one. */
    if ((rc = parse_devices(p, root, split))) return rc;
    if ((rc = parse_constant_devices(p, root))) return rc;
    const cJSON *modules, *kernels, *functions, *item;
    if ((rc = tsr_json_array(root, "modules", "executable.json", &modules))) return rc;
    if ((rc = tsr_json_array(root, "kernels", "executable.json", &kernels))) return rc;
    if ((rc = tsr_json_object(root, "functions", "executable.json", &functions))) return rc;
    exe->n_modules = cJSON_GetArraySize(modules);
    exe->modules = tsr_bump_array(exe->mem, (size_t)(exe->n_modules ? exe->n_modules : 1), sizeof(tsr_module));
    if (!exe->modules) return TESSERA_ERROR_OUT_OF_MEMORY;
    int i = 0;
    cJSON_ArrayForEach(item, modules) {
        tsr_module *m = &exe->modules[i++];
        const char *path, *backend = "", *sha;
        int64_t nbytes;
        if ((rc = tsr_json_string(item, "path", "modules", &path))) return rc;
        if ((rc = tsr_check_relative_path(path, "module"))) return rc;
        /* null for a module no kernel uses */
        if ((rc = tsr_json_opt_string(item, "backend", "modules", &backend))) return rc;
        if ((rc = tsr_json_string(item, "sha256", "modules", &sha))) return rc;
        if ((rc = tsr_json_int(item, "nbytes", "modules", 0, TSR_MAX_MODULE_BYTES, &nbytes))) return rc;
        if (strlen(sha) != 64) return fail("modules", "a sha256 must be 64 hex digits");
        m->path = dup_string(p, path);
        m->backend = dup_string(p, backend);
        m->sha256 = dup_string(p, sha);
        m->nbytes = (uint64_t)nbytes;
    }
    exe->n_kernels = cJSON_GetArraySize(kernels);
    exe->kernels = tsr_bump_array(exe->mem, (size_t)(exe->n_kernels ? exe->n_kernels : 1), sizeof(tsr_kernel));
    if (!exe->kernels) return TESSERA_ERROR_OUT_OF_MEMORY;
    i = 0;
    cJSON_ArrayForEach(item, kernels) {
        if ((rc = parse_kernel(p, item, i, &exe->kernels[i]))) return rc;
        i++;
    }
    exe->n_functions = cJSON_GetArraySize(functions);
    exe->functions = tsr_bump_array(exe->mem, (size_t)(exe->n_functions ? exe->n_functions : 1), sizeof(tsr_function));
    if (!exe->functions) return TESSERA_ERROR_OUT_OF_MEMORY;
    i = 0;
    cJSON_ArrayForEach(item, functions) {
        if ((rc = parse_function(p, functions, item, &exe->functions[i]))) return rc;
        i++;
    }
    return 0;
}

int tsr_executable_parse(tsr_alloc *a, const char *json, size_t size, tsr_executable *out) {
    memset(out, 0, sizeof *out);
    out->mem = tsr_bump_new(a, 1 << 16);
    if (!out->mem) return TESSERA_ERROR_OUT_OF_MEMORY;
    parser p = {.exe = out, .text_size = size, .scratch = a};
    p.mem.base.alloc = bump_alloc_cb;
    p.mem.base.free = bump_free_cb;
    p.mem.base.user = out->mem;
    cJSON *root = tsr_json_parse(json, size, "executable.json");
    if (!root) {
        tsr_executable_free(out);
        return TESSERA_ERROR_FORMAT;
    }
    int rc = parse_root(&p, root);
    cJSON_Delete(root);
    if (rc) tsr_executable_free(out);
    return rc;
}

void tsr_executable_free(tsr_executable *exe) {
    tsr_bump_free(exe->mem);
    memset(exe, 0, sizeof *exe);
}

tsr_executable tsr_executable_device_view(const tsr_executable *exe, int32_t device) {
    tsr_executable view = *exe;
    if (device < 0 || device >= exe->n_devices) return view;
    const tsr_exe_device *d = &exe->devices[device];
    view.target_kind = d->kind;
    view.target_name = d->target_name;
    view.target_cpu = d->target_cpu;
    view.required_features = d->required_features;
    view.n_required_features = d->n_required_features;
    view.max_invocations = d->max_invocations;
    view.max_storage_buffers = d->max_storage_buffers;
    view.max_workgroup_storage = d->max_workgroup_storage;
    view.max_buffer_size = d->max_buffer_size;
    view.max_binding_size = d->max_binding_size;
    return view;
}

int32_t tsr_executable_function(const tsr_executable *exe, const char *name) {
    for (int32_t i = 0; i < exe->n_functions; i++)
        if (strcmp(exe->functions[i].name, name) == 0) return i;
    return -1;
}
