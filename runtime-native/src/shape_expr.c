/* Shape expressions (docs/format.md), parsed as runtime-js/src/shape.js parses them, so that every
 * runtime accepts the same texts with the same meaning:
 *
 *   sum     := product (('+' | '-') product)*
 *   product := atom (('*' | '//' | '%') atom)*
 *   atom    := integer | '(' sum ')' | '-' atom | name | ('min' | 'max' | 'T.min' | 'T.max') '(' sum ',' sum ')'
 *   name    := [A-Za-z_][A-Za-z_0-9.]*   (kept as written; "T." only marks min/max, as in shape.js)
 *
 * Unary minus binds tighter than '*' ("-7 // 2" is (-7) // 2 = -4, as in Python). The parser emits
 * postfix code as it goes, folding an operation whose operands are both constants, so a constant
 * text compiles to no code at all. Evaluation is a loop over int64 with every overflow checked:
 * the values are tensor sizes, and a wrapped size would become a small allocation. */
#include "shape_expr.h"

#include <string.h>

#include "facts.h"
#include "files.h"

enum { OP_CONST = 1, OP_VAR, OP_ADD, OP_SUB, OP_MUL, OP_FLOORDIV, OP_FLOORMOD, OP_MIN, OP_MAX, OP_NEG };

#define MAX_TEXT 4096
#define MAX_DEPTH TSR_MAX_EXPRESSION_NESTING
/* Values on the evaluation stack at once. With nesting bounded by MAX_DEPTH each level holds at
 * most three pending operands (a sum's, a product's, min's first), so 256 is never reached by an
 * accepted text; compile checks it anyway. */
#define MAX_STACK 256

typedef struct parser {
    tsr_alloc *a;
    tsr_symbols *symbols;
    const char *text;
    size_t pos, len;
    int depth;
    int32_t *code;
    int32_t n, stack, max_stack;
    const char *error; /* the reason, once parsing failed */
    int status;
    char name[MAX_TEXT + 1]; /* a variable's name, NUL-terminated for the symbol table */
} parser;

/* The last-emitted operand, when it is a single constant, so an operation on it can fold. */
typedef struct operand {
    int is_const;
    int64_t value;
} operand;

int32_t tsr_symbols_index(tsr_alloc *a, tsr_symbols *symbols, const char *name) {
    for (int32_t i = 0; i < symbols->count; i++)
        if (strcmp(symbols->names[i], name) == 0) return i;
    if (symbols->count == symbols->capacity) {
        if (symbols->capacity > INT32_MAX / 2) {
            tsr_error(TESSERA_ERROR_FORMAT, "too many shape variables");
            return -1;
        }
        int32_t capacity = symbols->capacity ? symbols->capacity * 2 : 8;
        const char **names = tsr_malloc(a, (size_t)capacity * sizeof *names);
        if (!names) return -1;
        if (symbols->count) memcpy(names, symbols->names, (size_t)symbols->count * sizeof *names);
        tsr_free(a, (void *)symbols->names);
        symbols->names = names;
        symbols->capacity = capacity;
    }
    char *copy = tsr_strdup(a, name);
    if (!copy) return -1;
    symbols->names[symbols->count] = copy;
    return symbols->count++;
}

void tsr_symbols_free(tsr_alloc *a, tsr_symbols *symbols) {
    for (int32_t i = 0; i < symbols->count; i++) tsr_free(a, (void *)symbols->names[i]);
    tsr_free(a, (void *)symbols->names);
    memset(symbols, 0, sizeof *symbols);
}

static int fail(parser *p, const char *why) {
    if (!p->error) p->error = why;
    return -1;
}

static void skip_space(parser *p) {
    while (p->pos < p->len && strchr(" \t\n\r\f\v", p->text[p->pos]) && p->text[p->pos]) p->pos++;
}

static int is_name_start(char c) { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_'; }
static int is_name_char(char c) { return is_name_start(c) || (c >= '0' && c <= '9') || c == '.'; }

/* Consumes `op` ("//", "(", ...) if it comes next. */
static int accept(parser *p, const char *op) {
    skip_space(p);
    size_t n = strlen(op);
    if (p->len - p->pos >= n && memcmp(p->text + p->pos, op, n) == 0) {
        p->pos += n;
        return 1;
    }
    return 0;
}

static void emit(parser *p, int32_t word) { p->code[p->n++] = word; }

static void push(parser *p) {
    if (++p->stack > p->max_stack) p->max_stack = p->stack;
}

static operand emit_const(parser *p, int64_t v) {
    emit(p, OP_CONST);
    emit(p, (int32_t)(uint32_t)((uint64_t)v & 0xffffffffu));
    emit(p, (int32_t)(uint32_t)((uint64_t)v >> 32));
    push(p);
    return (operand){1, v};
}

static int64_t const_at(const int32_t *code) {
    return (int64_t)((uint64_t)(uint32_t)code[1] | (uint64_t)(uint32_t)code[2] << 32); /* code[0] is OP_CONST */
}

static int apply(int op, int64_t x, int64_t y, int64_t *out, const char **why);

/* Emits `op` over the two operands just emitted, or folds them when both are constants (they are
 * then the last six words of code). */
static operand binary(parser *p, int op, operand x, operand y) {
    /* A divisor that is the constant 0 is refused here, at load, as the other runtimes refuse it. */
    if ((op == OP_FLOORDIV || op == OP_FLOORMOD) && y.is_const && y.value == 0) {
        fail(p, op == OP_FLOORDIV ? "division by zero" : "modulo by zero");
        return (operand){0, 0};
    }
    if (x.is_const && y.is_const) {
        int64_t v;
        const char *why;
        if (apply(op, x.value, y.value, &v, &why) != 0) {
            fail(p, why);
            return (operand){0, 0};
        }
        p->n -= 6;
        p->stack -= 2;
        return emit_const(p, v);
    }
    emit(p, op);
    p->stack--;
    return (operand){0, 0};
}

static operand sum(parser *p);

static operand atom(parser *p) {
    if (++p->depth > MAX_DEPTH) {
        fail(p, "nested deeper than " TSR_FACT_TEXT(TSR_MAX_EXPRESSION_NESTING) " levels");
        return (operand){0, 0};
    }
    operand r = {0, 0};
    skip_space(p);
    char c = p->pos < p->len ? p->text[p->pos] : '\0';
    if (p->pos >= p->len) {
        fail(p, "ends early");
    } else if (accept(p, "(")) {
        r = sum(p);
        if (!p->error && !accept(p, ")")) fail(p, "expected ')'");
    } else if (accept(p, "-")) {
        operand x = atom(p);
        if (p->error) {
            /* nothing to emit */
        } else if (x.is_const) {
            if (x.value == INT64_MIN) {
                fail(p, "int64 overflow");
                p->depth--;
                return r;
            }
            p->n -= 3;
            p->stack--;
            r = emit_const(p, -x.value);
        } else {
            emit(p, OP_NEG);
        }
    } else if (c >= '0' && c <= '9') {
        uint64_t v = 0;
        while (p->pos < p->len && p->text[p->pos] >= '0' && p->text[p->pos] <= '9') {
            v = v * 10 + (uint64_t)(p->text[p->pos++] - '0');
            if (v > INT64_MAX) {
                fail(p, "a number beyond int64");
                break;
            }
        }
        if (!p->error) r = emit_const(p, (int64_t)v);
    } else if (is_name_start(c)) {
        size_t start = p->pos;
        while (p->pos < p->len && is_name_char(p->text[p->pos])) p->pos++;
        size_t n = p->pos - start;
        const char *name = p->text + start, *bare = name;
        size_t bare_n = n;
        if (n > 2 && name[0] == 'T' && name[1] == '.') bare += 2, bare_n -= 2;
        int is_min = bare_n == 3 && memcmp(bare, "min", 3) == 0, is_max = bare_n == 3 && memcmp(bare, "max", 3) == 0;
        if ((is_min || is_max) && accept(p, "(")) {
            operand x = sum(p);
            if (!p->error && !accept(p, ",")) fail(p, "expected ','");
            operand y = p->error ? x : sum(p);
            if (!p->error && !accept(p, ")")) fail(p, "expected ')'");
            if (!p->error) r = binary(p, is_min ? OP_MIN : OP_MAX, x, y);
        } else {
            memcpy(p->name, name, n);
            p->name[n] = '\0';
            int32_t index = tsr_symbols_index(p->a, p->symbols, p->name);
            if (index < 0) {
                p->status = TESSERA_ERROR_OUT_OF_MEMORY;
                fail(p, "out of memory");
            } else {
                emit(p, OP_VAR);
                emit(p, index);
                push(p);
            }
        }
    } else {
        fail(p, "unexpected character");
    }
    p->depth--;
    return r;
}

static operand product(parser *p) {
    operand x = atom(p);
    while (!p->error) {
        int op = accept(p, "*") ? OP_MUL : accept(p, "//") ? OP_FLOORDIV : accept(p, "%") ? OP_FLOORMOD : 0;
        if (!op) break;
        operand y = atom(p);
        if (!p->error) x = binary(p, op, x, y);
    }
    return x;
}

static operand sum(parser *p) {
    operand x = product(p);
    while (!p->error) {
        int op = accept(p, "+") ? OP_ADD : accept(p, "-") ? OP_SUB : 0;
        if (!op) break;
        operand y = product(p);
        if (!p->error) x = binary(p, op, x, y);
    }
    return x;
}

int tsr_shape_expr_compile(tsr_alloc *a, const char *text, tsr_symbols *symbols, tsr_shape_expr *out) {
    memset(out, 0, sizeof *out);
    if (!text) return tsr_error(TESSERA_ERROR_FORMAT, "not a shape expression: null");
    size_t len = strnlen(text, MAX_TEXT + 1);
    char q[200];
    tsr_quote(text, q, sizeof q);
    if (len > MAX_TEXT) return tsr_error(TESSERA_ERROR_FORMAT, "not a shape expression: %s (longer than 4096 bytes)", q);
    /* Each byte of text emits at most three words (a one-digit constant). */
    parser p = {.a = a, .symbols = symbols, .text = text, .len = len, .status = TESSERA_ERROR_FORMAT};
    p.code = tsr_malloc(a, (3 * len + 3) * sizeof *p.code);
    if (!p.code) return tsr_error_context(TESSERA_ERROR_OUT_OF_MEMORY, "compiling shape expression %s", q);
    operand r = sum(&p);
    skip_space(&p);
    if (!p.error && p.pos < p.len) fail(&p, "trailing text");
    if (!p.error && p.max_stack > MAX_STACK) fail(&p, "too many pending operands");
    if (p.error) {
        tsr_free(a, p.code);
        char rest[64];
        tsr_quote(text + (p.pos < len ? p.pos : len), rest, sizeof rest);
        return tsr_error(p.status, "not a shape expression: %s (%s, at %s)", q, p.error, rest);
    }
    if (r.is_const) {
        tsr_free(a, p.code);
        out->constant = r.value;
        return TESSERA_OK;
    }
    out->code = tsr_malloc(a, (size_t)p.n * sizeof *out->code);
    if (!out->code) {
        tsr_free(a, p.code);
        return tsr_error_context(TESSERA_ERROR_OUT_OF_MEMORY, "compiling shape expression %s", q);
    }
    memcpy(out->code, p.code, (size_t)p.n * sizeof *out->code);
    out->length = p.n;
    tsr_free(a, p.code);
    return TESSERA_OK;
}

void tsr_shape_expr_free(tsr_alloc *a, tsr_shape_expr *e) {
    tsr_free(a, e->code);
    memset(e, 0, sizeof *e);
}

/* x op y with Python's floor division and modulo; 0, or -1 with the reason. */
static int apply(int op, int64_t x, int64_t y, int64_t *out, const char **why) {
    switch (op) {
    case OP_ADD: if (__builtin_add_overflow(x, y, out)) break; return 0;
    case OP_SUB: if (__builtin_sub_overflow(x, y, out)) break; return 0;
    case OP_MUL: if (__builtin_mul_overflow(x, y, out)) break; return 0;
    case OP_MIN: *out = x < y ? x : y; return 0;
    case OP_MAX: *out = x > y ? x : y; return 0;
    case OP_FLOORDIV:
    case OP_FLOORMOD:
        if (y == 0) {
            *why = op == OP_FLOORDIV ? "division by zero" : "modulo by zero";
            return -1;
        }
        if (y == -1) { /* INT64_MIN / -1 overflows, and INT64_MIN % -1 traps on x86 */
            if (op == OP_FLOORMOD) { *out = 0; return 0; }
            if (x == INT64_MIN) break;
            *out = -x;
            return 0;
        }
        {
            int64_t q = x / y, r = x % y;
            if (r != 0 && ((r < 0) != (y < 0))) q -= 1, r += y; /* C truncates; Python floors */
            *out = op == OP_FLOORDIV ? q : r;
        }
        return 0;
    }
    *why = "int64 overflow";
    return -1;
}

int tsr_shape_expr_eval(const tsr_shape_expr *e, const tsr_symbols *symbols, const int64_t *values,
                        const uint8_t *bound, int64_t *out) {
    if (!e->code) {
        *out = e->constant;
        return TESSERA_OK;
    }
    /* A lone variable (a dim "n", a scalar "total") is the commonest code: read it without the loop. */
    if (e->length == 2 && e->code[0] == OP_VAR) {
        int32_t i = e->code[1];
        if (i >= 0 && i < symbols->count && bound[i]) {
            *out = values[i];
            return TESSERA_OK;
        }
    }
    int64_t stack[MAX_STACK];
    int sp = 0;
    for (int32_t pc = 0; pc < e->length;) {
        int32_t op = e->code[pc++];
        if (op == OP_CONST) {
            stack[sp++] = const_at(e->code + pc - 1);
            pc += 2;
        } else if (op == OP_VAR) {
            int32_t i = e->code[pc++];
            if (i < 0 || i >= symbols->count)
                return tsr_error(TESSERA_ERROR_RUNTIME_CHECK, "shape variable #%d is not in the symbol table", i);
            if (!bound[i]) return tsr_error(TESSERA_ERROR_RUNTIME_CHECK, "shape variable %s is not bound", symbols->names[i]);
            stack[sp++] = values[i];
        } else if (op == OP_NEG) {
            if (stack[sp - 1] == INT64_MIN) return tsr_error(TESSERA_ERROR_RUNTIME_CHECK, "shape expression: int64 overflow");
            stack[sp - 1] = -stack[sp - 1];
        } else {
            const char *why;
            if (apply(op, stack[sp - 2], stack[sp - 1], &stack[sp - 2], &why) != 0)
                return tsr_error(TESSERA_ERROR_RUNTIME_CHECK, "shape expression: %s", why);
            sp--;
        }
    }
    *out = stack[0];
    return TESSERA_OK;
}
