/* Shape expressions of the executable format (docs/format.md): integer text such as "n * 4 + 1",
 * "(total + 255) // 256" or "min(max(n, 1), 65535)", over named symbolic variables. Division and
 * modulo floor, as in Python, which wrote them. A text is compiled once, at load, into a small
 * postfix program whose variables are indices into a symbol table; evaluating it is a loop. */
#ifndef TSR_SHAPE_EXPR_H
#define TSR_SHAPE_EXPR_H

#include "common.h"

/* The variables one function's expressions use, by name (the names live as long as the table). */
typedef struct tsr_symbols {
    const char **names;
    int32_t count, capacity;
} tsr_symbols;

typedef struct tsr_shape_expr {
    int32_t *code; /* postfix: opcodes and operands, see shape_expr.c */
    int32_t length;
    int64_t constant; /* when code is NULL: the expression is this number */
} tsr_shape_expr;

/* Looks a name up, adding it if absent (the name is copied with `a`); returns its index or -1. */
int32_t tsr_symbols_index(tsr_alloc *a, tsr_symbols *symbols, const char *name);
void tsr_symbols_free(tsr_alloc *a, tsr_symbols *symbols);

/* Compiles text; variables are added to `symbols`. TESSERA_ERROR_FORMAT names the text on error. */
int tsr_shape_expr_compile(tsr_alloc *a, const char *text, tsr_symbols *symbols, tsr_shape_expr *out);
void tsr_shape_expr_free(tsr_alloc *a, tsr_shape_expr *e);

/* values[i] is symbol i's value; bound[i] says whether it is bound. TESSERA_ERROR_RUNTIME_CHECK for
 * an unbound variable (named), a division by zero or an overflow of int64. */
int tsr_shape_expr_eval(const tsr_shape_expr *e, const tsr_symbols *symbols, const int64_t *values,
                        const uint8_t *bound, int64_t *out);

#endif
