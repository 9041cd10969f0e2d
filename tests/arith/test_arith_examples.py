"""The identities shape reasoning relies on, written out."""

import pytest
from tessera.arith import (
    Analyzer,
    IntImm,
    Var,
    evaluate,
    max_expr,
    min_expr,
    prove_equal,
    prove_less,
    prove_less_equal,
    simplify,
    substitute,
    to_source,
    upper_bound,
)

n, m = Var("n"), Var("m")


def test_canonical_form_identifies_commuted_and_expanded_products():
    assert simplify(n * 4) == simplify(4 * n)
    assert simplify((n + 1) * 4 - 4) == simplify(4 * n)
    assert prove_equal((n + m) * (n - m), n * n - m * m)
    assert to_source(simplify(n * 2 + m * 3 - n * 2)) == "m * 3"


def test_division_by_constants():
    assert simplify((n * 4) // 4) == n
    assert simplify((n * 4 + 3) // 4) == n
    assert simplify((n * 8 + 4) // 8) == n
    assert to_source(simplify((n * 6 + 4) // 8)) == "(n * 3 + 2) // 4"
    assert simplify((n * 6) % 3) == IntImm(0)
    assert simplify((n * m) // m) == n
    # n % 8 lies in [0, 7] for every integer n.
    assert simplify((n % 8) // 8) == IntImm(0)


def test_ranges_decide_min_max_and_modulo():
    bounds = {"n": (1, 2048)}
    assert simplify(min_expr(n, n + 1)) == n
    assert simplify(max_expr(n, 2048), bounds) == IntImm(2048)
    assert simplify(n % 4096, bounds) == n
    assert to_source(simplify(min_expr(n + 2, m + 2))) == "min(m, n) + 2"


def test_provers_use_bounds_and_fail_when_unknown():
    bounds = {"n": (1, 2048)}
    assert prove_less_equal(n, 2048, bounds)
    assert prove_less(0, n, bounds)
    assert not prove_less_equal(n, 2047, bounds)
    assert not prove_less_equal(n, m)  # nothing is known about m
    assert Analyzer(bounds).prove_less_equal(n * 64, 131072)


def test_upper_bound_of_expressions():
    assert upper_bound(n * 4 + m // 2, {"n": (1, 10), "m": (0, 7)}) == 43
    assert upper_bound(n * m, {"n": (1, 2048), "m": (1, 32)}) == 65536
    assert upper_bound(n + m, {"n": (1, 2048)}) is None


def test_substitute_and_evaluate():
    expr = substitute(n * 4 + m, {"n": 3, m: n})
    assert evaluate(expr, {"n": 5}) == 17
    with pytest.raises(KeyError, match="'m' has no value"):
        evaluate(n + m, {"n": 1})
    with pytest.raises(ZeroDivisionError, match="n // m"):
        evaluate(n // m, {"n": 1, "m": 0})


def test_printing_keeps_python_precedence():
    assert to_source(n - (m - 1)) == "n - (m - 1)"
    assert to_source((n + 1) * 4) == "(n + 1) * 4"
    assert to_source(min_expr(n, m) // 2, "T.") == "T.min(n, m) // 2"


def test_empty_range_is_rejected():
    with pytest.raises(ValueError, match="empty range for 'n'"):
        Analyzer({"n": (5, 1)})
