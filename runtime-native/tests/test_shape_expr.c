/* Shape expressions: precedence as runtime-js/src/shape.js, Python's floor division and modulo,
 * constant folding, errors (named unbound variables, division by zero, int64 overflow), limits. */
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "shape_expr.h"

static tsr_test_counts counts;

static tsr_alloc a;
static tsr_symbols symbols;
static int64_t values[16];
static uint8_t bound[16];

static void bind(const char *name, int64_t value) {
    int32_t i = tsr_symbols_index(&a, &symbols, name);
    CHECK(i >= 0 && i < 16);
    values[i] = value;
    bound[i] = 1;
}

/* Compiles and evaluates text; returns the status, the value in *out. */
static int run(const char *text, int64_t *out) {
    tsr_shape_expr e;
    int status = tsr_shape_expr_compile(&a, text, &symbols, &e);
    if (status) return status;
    CHECK(symbols.count <= 16);
    status = tsr_shape_expr_eval(&e, &symbols, values, bound, out);
    tsr_shape_expr_free(&a, &e);
    return status;
}

static void expect(const char *text, int64_t want) {
    int64_t got = 0;
    int status = run(text, &got);
    if (status || got != want)
        fprintf(stderr, "%s: status %d (%s), value %lld, want %lld\n", text, status, tessera_last_error(),
                (long long)got, (long long)want);
    CHECK(status == 0 && got == want);
}

static void expect_error(const char *text, int status, const char *needle) {
    int64_t got;
    int s = run(text, &got);
    if (s != status || !strstr(tessera_last_error(), needle))
        fprintf(stderr, "%s: status %d, error \"%s\", want %d with \"%s\"\n", text, s, tessera_last_error(), status,
                needle);
    CHECK(s == status && strstr(tessera_last_error(), needle));
}

static void expect_constant(const char *text, int64_t want) {
    tsr_shape_expr e;
    CHECK_EQ_INT(tsr_shape_expr_compile(&a, text, &symbols, &e), 0);
    CHECK(e.code == NULL);
    CHECK_EQ_INT(e.constant, want);
    tsr_shape_expr_free(&a, &e);
}

int main(void) {
    tessera_allocator counting = tsr_test_counting_allocator(&counts);
    tsr_alloc_init(&a, &counting);
    bind("n", 10);
    bind("m", 3);
    bind("k", -7);
    bind("z", 0);
    bind("big", INT64_MAX / 2 + 1);
    bind("small", INT64_MIN);
    bind("a.b", 5);
    bind("T.x", 6);
    bind("min", 2);
    tsr_symbols_index(&a, &symbols, "q"); /* known, never bound */

    /* The format's own examples (docs/format.md, shape.js). */
    expect("n * 4 + 1", 41);
    expect("(n + 255) // 256", 1);
    expect("min(max(n, 1), 65535)", 10);
    expect("T.min(n, 2)", 2);
    expect("T.max(n, 2)", 10);
    /* Floor division and modulo, as Python: constants (folded) and variables (evaluated). */
    expect("-7 // 2", -4);
    expect("-7 % 2", 1);
    expect("7 // -2", -4);
    expect("7 % -2", -1);
    expect("-7 // -2", 3);
    expect("-7 % -2", -1);
    expect("7 // 2", 3);
    expect("7 % 2", 1);
    expect("k // 2", -4);
    expect("k % 2", 1);
    expect("k % -2", -1);
    expect("k // -2", 3);
    expect("-n // m", -4);
    expect("-n % m", 2);
    expect("n // m", 3);
    expect("n % m", 1);
    expect("0 // m", 0);
    expect("small // 1", INT64_MIN);
    expect("small % -1", 0);
    expect("n // -1", -10);
    /* Precedence and associativity. */
    expect("2 + 3 * 4", 14);
    expect("n - 2 - 3", 5);
    expect("n // 2 * 3", 15);
    expect("n * 3 // 4", 7);
    expect("n % 4 * 2", 4);
    expect("n - -m", 13);
    expect("-n * 2", -20);
    expect("2 * -n", -20);
    expect("- - n", 10);
    expect("-(n - 12)", 2);
    expect("(n + m) * (n - m)", 91);
    expect("min(n, m) + max(n, m) * 2", 23);
    expect("max(min(n, 4), min(m, 9)) - 1", 3);
    expect("  n\t*\n2 ", 20);
    expect("((((n))))", 10);
    /* Names: dots allowed, kept as written; min without '(' is a variable; T. marks only min/max. */
    expect("a.b + 1", 6);
    expect("T.x * 2", 12);
    expect("min + 1", 3);
    expect("min(min, 1)", 1);
    expect("9223372036854775807", INT64_MAX);
    expect("-9223372036854775807 - 1", INT64_MIN);

    /* Constant folding: whole constant texts compile to no code; constant parts shrink. */
    expect_constant("42", 42);
    expect_constant("max(3, 5) * 2 - -1", 11);
    expect_constant("(1 + 2) * (3 + 4) // 5", 4);
    tsr_shape_expr e;
    CHECK_EQ_INT(tsr_shape_expr_compile(&a, "n * (4 * 256)", &symbols, &e), 0);
    CHECK(e.code != NULL);
    CHECK_EQ_INT(e.length, 6); /* var n, const 1024, mul */
    tsr_shape_expr_free(&a, &e);

    /* Malformed texts name themselves and the reason. */
    expect_error("", TESSERA_ERROR_FORMAT, "ends early");
    expect_error("n +", TESSERA_ERROR_FORMAT, "ends early");
    expect_error("(n", TESSERA_ERROR_FORMAT, "expected ')'");
    expect_error("n)", TESSERA_ERROR_FORMAT, "trailing");
    expect_error("n m", TESSERA_ERROR_FORMAT, "not a shape expression: 'n m' (trailing text, at 'm')");
    expect_error("3n", TESSERA_ERROR_FORMAT, "trailing");
    expect_error("n ** 2", TESSERA_ERROR_FORMAT, "unexpected");
    expect_error("n / 2", TESSERA_ERROR_FORMAT, "trailing");
    expect_error("min(n)", TESSERA_ERROR_FORMAT, "expected ','");
    expect_error("max(n, m", TESSERA_ERROR_FORMAT, "expected ')'");
    expect_error("$", TESSERA_ERROR_FORMAT, "unexpected character");
    expect_error("1 // 0", TESSERA_ERROR_FORMAT, "division by zero");
    expect_error("1 % 0", TESSERA_ERROR_FORMAT, "modulo by zero");
    /* A constant 0 divisor is refused at compile time even when the dividend is a variable. */
    expect_error("n // 0", TESSERA_ERROR_FORMAT, "division by zero");
    expect_error("n % (2 - 2)", TESSERA_ERROR_FORMAT, "modulo by zero");
    expect_error("9223372036854775808", TESSERA_ERROR_FORMAT, "beyond int64");
    expect_error("9223372036854775807 + 1", TESSERA_ERROR_FORMAT, "overflow");
    expect_error("-(-9223372036854775807 - 1)", TESSERA_ERROR_FORMAT, "overflow");
    CHECK(tsr_shape_expr_compile(&a, NULL, &symbols, &e) == TESSERA_ERROR_FORMAT);

    /* Limits: 4096 bytes of text, 64 levels of nesting (parentheses, calls, unary minus). */
    char *text = malloc(8192);
    memset(text, ' ', 4096);
    text[0] = '1';
    text[4096] = '\0';
    expect("1", 1);
    CHECK_EQ_INT(run(text, &values[15]), 0);
    text[4096] = ' ';
    text[4097] = '\0';
    expect_error(text, TESSERA_ERROR_FORMAT, "longer than 4096");
    for (int levels = 62; levels <= 64; levels++) {
        int at = 0;
        for (int i = 0; i < levels; i++) text[at++] = '(';
        text[at++] = 'n';
        for (int i = 0; i < levels; i++) text[at++] = ')';
        text[at] = '\0';
        if (levels < 64) expect(text, 10);
        else expect_error(text, TESSERA_ERROR_FORMAT, "deeper than 64");
    }
    memset(text, '-', 2000);
    strcpy(text + 2000, "n");
    expect_error(text, TESSERA_ERROR_FORMAT, "deeper than 64");
    free(text);

    /* Evaluation errors. */
    expect_error("q + 1", TESSERA_ERROR_RUNTIME_CHECK, "shape variable q is not bound");
    expect_error("n // z", TESSERA_ERROR_RUNTIME_CHECK, "division by zero");
    expect_error("n % z", TESSERA_ERROR_RUNTIME_CHECK, "modulo by zero");
    expect_error("big * 2", TESSERA_ERROR_RUNTIME_CHECK, "int64 overflow");
    expect_error("big + big", TESSERA_ERROR_RUNTIME_CHECK, "int64 overflow");
    expect_error("small - 1", TESSERA_ERROR_RUNTIME_CHECK, "int64 overflow");
    expect_error("-small", TESSERA_ERROR_RUNTIME_CHECK, "int64 overflow");
    expect_error("small // -1", TESSERA_ERROR_RUNTIME_CHECK, "int64 overflow");
    expect_error("small * -1", TESSERA_ERROR_RUNTIME_CHECK, "int64 overflow");

    /* The symbol table holds each name once. */
    int32_t count = symbols.count;
    CHECK_EQ_INT(tsr_symbols_index(&a, &symbols, "n"), 0);
    CHECK_EQ_INT(symbols.count, count);
    tsr_symbols_free(&a, &symbols);
    CHECK_EQ_INT(counts.live, 0);
    return tsr_test_failures();
}
