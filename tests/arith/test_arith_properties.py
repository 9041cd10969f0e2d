"""Property tests: simplification and the provers agree with plain integer evaluation."""

from hypothesis import assume, given, settings
from hypothesis import strategies as st
from tessera.arith import (
    Add,
    Analyzer,
    FloorDiv,
    FloorMod,
    IntImm,
    Max,
    Min,
    Mul,
    Sub,
    Var,
    evaluate,
    simplify,
)

NAMES = ("n", "m", "k")
BOUNDS = {"n": (0, 20), "m": (1, 9), "k": (-6, 6)}

leaves = st.one_of(
    st.sampled_from([Var(name) for name in NAMES]),
    st.integers(-9, 9).map(IntImm),
)


def _combine(children):
    binary = st.sampled_from([Add, Sub, Mul, FloorDiv, FloorMod, Min, Max])
    return st.tuples(binary, children, children).map(lambda t: t[0](t[1], t[2]))


exprs = st.recursive(leaves, _combine, max_leaves=8)
envs = st.fixed_dictionaries({name: st.integers(lo, hi) for name, (lo, hi) in BOUNDS.items()})


def value_or_none(expr, env):
    try:
        return evaluate(expr, env)
    except ZeroDivisionError:
        return None


@settings(max_examples=400, deadline=None)
@given(exprs, envs)
def test_simplify_preserves_value(expr, env):
    expected = value_or_none(expr, env)
    assume(expected is not None)
    assert evaluate(simplify(expr), env) == expected


@settings(max_examples=300, deadline=None)
@given(exprs, envs)
def test_simplify_under_bounds_preserves_value_inside_bounds(expr, env):
    expected = value_or_none(expr, env)
    assume(expected is not None)
    assert evaluate(simplify(expr, BOUNDS), env) == expected


@settings(max_examples=300, deadline=None)
@given(exprs)
def test_simplify_is_idempotent(expr):
    once = simplify(expr, BOUNDS)
    assert simplify(once, BOUNDS) == once


@settings(max_examples=300, deadline=None)
@given(exprs, exprs, st.lists(envs, min_size=20, max_size=20))
def test_provers_are_sound(a, b, samples):
    analyzer = Analyzer(BOUNDS)
    claims = {
        "le": analyzer.prove_less_equal(a, b),
        "lt": analyzer.prove_less(a, b),
        "eq": analyzer.prove_equal(a, b),
    }
    for env in samples:
        va, vb = value_or_none(a, env), value_or_none(b, env)
        if va is None or vb is None:
            continue
        if claims["le"]:
            assert va <= vb
        if claims["lt"]:
            assert va < vb
        if claims["eq"]:
            assert va == vb


@settings(max_examples=300, deadline=None)
@given(exprs, st.lists(envs, min_size=20, max_size=20))
def test_bounds_contain_every_value(expr, samples):
    interval = Analyzer(BOUNDS).interval(expr)
    for env in samples:
        value = value_or_none(expr, env)
        if value is None:
            continue
        assert interval.lo is None or interval.lo <= value
        assert interval.hi is None or value <= interval.hi
