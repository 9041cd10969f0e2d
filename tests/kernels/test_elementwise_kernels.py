"""Elementwise operators as kernels on every kernel device, against numpy, f32 and f16, at sizes
1..1000, over signed operands (negatives, zero, half-integers: harness.SIGNED) wherever the
operator is defined there."""

import numpy as np
import pytest
from harness import NONZERO, POSITIVE, SIGNED, Domain, check_op, rule_on
from tessera import op
from tessera.ir import Constant, Tensor
from tessera.op.elementwise import BINARY, COMPARISON, UNARY

# Every elementwise kernel computes a float16 element in float32 (its loads widen) and rounds it to
# float16 once, at the store: within 1 ulp of numpy's float64 rounded once (harness.assert_within_ulps).
FLOATS = [("float32", {"rtol": 1e-5, "atol": 1e-5}), ("float16", {"ulps": 1, "atol": 0.0})]

# Where an operand leaves SIGNED: logarithms and roots of positives, a power of a positive base
# (a negative one to a fractional power is NaN), divisors either sign but away from zero, arcsine
# and arccosine inside (-1, 1).
UNIT = Domain(-0.99, 0.99, (0, 0))
DOMAINS = {"asin": [UNIT], "acos": [UNIT], "log": [POSITIVE], "sqrt": [POSITIVE], "rsqrt": [POSITIVE], "power": [POSITIVE, SIGNED],
           "divide": [SIGNED, NONZERO], "floor_divide": [SIGNED, NONZERO]}


def _domains(name, arity):
    return DOMAINS.get(name, [SIGNED] * arity)


def _make(name):
    return op.nn.__getattr__(name[3:]) if name.startswith("nn.") else getattr(op, name)


@pytest.mark.parametrize("dtype,tolerance", FLOATS, ids=["f32", "f16"])
@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary(runner, name, dtype, tolerance):
    check_op(runner, _make(name), [Tensor(("n", 3), dtype)], domains=_domains(name, 1), **tolerance)


@pytest.mark.parametrize("dtype,tolerance", FLOATS, ids=["f32", "f16"])
@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_with_broadcasting(runner, name, dtype, tolerance):
    check_op(runner, getattr(op, name), [Tensor(("n", "m"), dtype), Tensor((1, "m"), dtype)],
             domains=_domains(name, 2), **tolerance)


@pytest.mark.parametrize("dtype", ["int32", "int64", "uint32"])
@pytest.mark.parametrize("name", ["add", "subtract", "multiply", "divide", "floor_divide", "maximum"])
def test_integer_binary(runner, name, dtype):
    """Signed numerators (and zero) over divisors of either sign: division truncates toward zero,
    floor_divide rounds toward negative infinity, as numpy's // does."""
    check_op(runner, getattr(op, name), [Tensor(("n",), dtype), Tensor(("n",), dtype)], domains=_domains(name, 2))


NARROW = {"int8": (-128, 127), "uint8": (0, 255), "int16": (-32768, 32767), "uint16": (0, 65535),
          "uint64": (0, 30000)}  # uint64 computes in u32, as int64 in i32: results below 2**32


@pytest.mark.parametrize("dtype", sorted(NARROW))
def test_narrow_integers_wrap_as_numpys_do(runner, dtype):
    """int8 ... uint16 are kept in 32-bit words and computed in i32/u32: every result, stored or read
    by a fused consumer, wraps to the dtype's range as numpy's does; comparisons, division and casts
    to and from float32 and int32 see the dtype's values."""
    low, high = NARROW[dtype]

    def full_range(env, rng):
        return [rng.integers(low, high + 1, env["n"]).astype(dtype) for _ in range(2)]

    as_f32 = lambda x: op.astype(x, dtype="float32")  # noqa: E731
    checks = [lambda a, b: op.subtract(op.multiply(op.add(a, b), b), a),  # one fused kernel: each step wraps
              lambda a, b: op.divide(op.add(a, b), op.maximum(b, Constant(np.array(1, dtype)))),
              lambda a, b: op.less(op.add(a, b), b),
              lambda a, b: op.astype(op.add(as_f32(a), as_f32(b)), dtype="int32"),
              lambda a, b: op.astype(op.add(op.astype(a, dtype="int32"), op.astype(b, dtype="int32")), dtype=dtype)]
    for make in checks:
        check_op(runner, make, [Tensor(("n",), dtype)] * 2, inputs=full_range, rtol=0, atol=0, sizes=(1000,))


@pytest.mark.parametrize("dtype", ["int32", "int64", "uint8"])
def test_integer_power(runner, dtype):
    """Integer powers to the 8th are exact (products of the base, wrapping as numpy's do), with the
    sign of a negative base to an odd power; higher ones go through f32's pow and are approximate."""
    def bases_and_exponents(env, rng):
        low = 0 if dtype.startswith("u") else -5
        return [rng.integers(low, 6, env["n"]).astype(dtype), rng.integers(0, 9, env["n"]).astype(dtype)]

    check_op(runner, op.power, [Tensor(("n",), dtype)] * 2, inputs=bases_and_exponents, rtol=0, atol=0, sizes=(64,))


def test_tanh_keeps_its_digits_near_zero(runner):
    """tanh of small |x| (Mish's tanh of e^x for x near -10): an exp-based tanh, (e^2x - 1) / (e^2x + 1),
    keeps only about 6e-8 / |x| of relative precision there; the kernels' series keeps them all."""
    def small(env, rng):
        return [(rng.uniform(-0.1, 0.1, env["n"]) * 10.0 ** -rng.integers(0, 5, env["n"])).astype("float32")]

    check_op(runner, op.tanh, [Tensor(("n",), "float32")], inputs=small, rtol=2e-6, atol=0, sizes=(1000,))


def test_float_power_of_a_negative_base(runner):
    """Whole exponents of any base: 0..8 are products, others |x| ** y with an odd power's sign
    (WGSL's pow, exp2(y * log2(x)), is undefined for a negative base: tanh-GELU's x ** 3 was -0)."""
    def bases_and_exponents(env, rng):
        n = env["n"]
        return [rng.uniform(-2.0, 2.0, n).astype("float32"), rng.integers(-3, 12, n).astype("float32")]

    check_op(runner, op.power, [Tensor(("n",), "float32")] * 2, inputs=bases_and_exponents, sizes=(64,))


@pytest.mark.parametrize("name", sorted(COMPARISON))
def test_comparisons(runner, name):
    dtype = "bool" if name.startswith("logical") else "float32"
    check_op(runner, getattr(op, name), [Tensor(("n", 2), dtype), Tensor((2,), dtype)])


@pytest.mark.parametrize("source,target", [("float32", "int32"), ("int32", "float32"), ("float32", "bool"),
                                           ("bool", "float32"), ("int64", "float16"), ("float16", "float32")])
def test_astype(runner, source, target):
    """Every one of these casts is exact on these inputs (floats to integers truncate toward zero;
    the integers -3..3 are float16 values)."""
    check_op(runner, lambda x: op.astype(x, dtype=target), [Tensor(("n",), source)], rtol=0, atol=0)


@pytest.mark.parametrize("dtype,bounds", [("float32", {"min": 0.0, "max": 6.0}), ("float32", {"min": 0.7, "max": 1.1}),
                                          ("float16", {"min": 0.7, "max": 1.1}), ("float32", {"max": 1.1}),
                                          ("int32", {"min": 1.5, "max": 2.5}), ("int64", {"min": 2})])
def test_clip(runner, dtype, bounds):
    """ReLU6, narrower bounds and one bound left out; inputs lie in -2..2 (ints -3..3), so every
    bound bites."""
    # Each element is itself or a bound; a float16 bound may be rounded once on its way (0.7 to float32
    # and then to float16 in a kernel, straight to float16 in numpy).
    check_op(runner, lambda x: op.clip(x, **bounds), [Tensor(("n", 3), dtype)], rtol=0, atol=0, ulps=1)


@pytest.mark.parametrize("dtype", ["float32", "float16", "int64"])
def test_where(runner, dtype):
    check_op(runner, op.where, [Tensor(("n", 1), "bool"), Tensor((1, 5), dtype), Tensor(("n", 5), dtype)])


SCALAR_ONLY = {"power", "asin", "acos"}  # a two-operand intrinsic (pow, atan2) keeps one element per thread


def _vector_rule(runner) -> str:
    """The rule same-shaped elementwise kernels get: vec4 where the language has vectors; C kernels
    are scalar, a thread's loop over a row that the C compiler vectorizes itself."""
    return "vectorized-elementwise" if runner.target.vector_lanes else rule_on(runner, "injective")


@pytest.mark.parametrize("dtype,tolerance", FLOATS, ids=["f32", "f16"])
@pytest.mark.parametrize("name", sorted(UNARY) + sorted(BINARY) + sorted(COMPARISON))
def test_vectorized_when_every_read_is_elementwise(runner, name, dtype, tolerance):
    """Same-shaped operands and an element count that is a multiple of 4: vec4 loads and stores."""
    arity = 1 if name in UNARY else 2
    operand = "bool" if name.startswith("logical") else dtype
    _, kernels = check_op(runner, _make(name), [Tensor(("n", 8), operand)] * arity, domains=_domains(name, arity),
                          **tolerance)
    expected = rule_on(runner, "injective") if name in SCALAR_ONLY else _vector_rule(runner)
    assert [k.attrs["rule"] for k in kernels] == [expected]


def test_vectorized_casts_and_selects(runner):
    """Exact but for float32 -> float16, which rounds once."""
    for source, target in [("float32", "float16"), ("bool", "float32"), ("int32", "float32"), ("float32", "bool")]:
        _, kernels = check_op(runner, lambda x, t=target: op.astype(x, dtype=t), [Tensor(("n", 4), source)],
                              rtol=0, atol=0, ulps=1)
        assert kernels[0].attrs["rule"] == _vector_rule(runner)
    _, kernels = check_op(runner, op.where, [Tensor(("n", 4), "bool")] + [Tensor(("n", 4), "float32")] * 2)
    assert kernels[0].attrs["rule"] == _vector_rule(runner)
