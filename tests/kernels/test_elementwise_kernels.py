"""Elementwise operators as WGSL kernels on WebGPU, against numpy, f32 and f16, at sizes 1..1000."""

import pytest
from harness import check_op, rule_on
from tessera import op
from tessera.ir import Tensor
from tessera.op.elementwise import BINARY, COMPARISON, UNARY

FLOATS = [("float32", 1e-5, 1e-5), ("float16", 1e-2, 1e-2)]


def _make(name):
    return op.nn.__getattr__(name[3:]) if name.startswith("nn.") else getattr(op, name)


@pytest.mark.parametrize("dtype,rtol,atol", FLOATS, ids=["f32", "f16"])
@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary(runner, name, dtype, rtol, atol):
    check_op(runner, _make(name), [Tensor(("n", 3), dtype)], rtol=rtol, atol=atol)


@pytest.mark.parametrize("dtype,rtol,atol", FLOATS, ids=["f32", "f16"])
@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_with_broadcasting(runner, name, dtype, rtol, atol):
    check_op(runner, getattr(op, name), [Tensor(("n", "m"), dtype), Tensor((1, "m"), dtype)], rtol=rtol, atol=atol)


@pytest.mark.parametrize("dtype", ["int32", "int64"])
@pytest.mark.parametrize("name", ["add", "subtract", "multiply", "divide", "floor_divide", "maximum"])
def test_integer_binary(runner, name, dtype):
    check_op(runner, getattr(op, name), [Tensor(("n",), dtype), Tensor(("n",), dtype)])


@pytest.mark.parametrize("name", sorted(COMPARISON))
def test_comparisons(runner, name):
    dtype = "bool" if name.startswith("logical") else "float32"
    check_op(runner, getattr(op, name), [Tensor(("n", 2), dtype), Tensor((2,), dtype)])


@pytest.mark.parametrize("source,target", [("float32", "int32"), ("int32", "float32"), ("float32", "bool"),
                                           ("bool", "float32"), ("int64", "float16"), ("float16", "float32")])
def test_astype(runner, source, target):
    check_op(runner, lambda x: op.astype(x, dtype=target), [Tensor(("n",), source)], rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("dtype,bounds", [("float32", {"min": 0.0, "max": 6.0}), ("float32", {"min": 0.7, "max": 1.1}),
                                          ("float16", {"min": 0.7, "max": 1.1}), ("float32", {"max": 1.1}),
                                          ("int32", {"min": 1.5, "max": 2.5}), ("int64", {"min": 2})])
def test_clip(runner, dtype, bounds):
    """ReLU6, narrower bounds and one bound left out; inputs lie in 0.5..1.5 (ints 1..3), so the
    narrower bounds bite."""
    check_op(runner, lambda x: op.clip(x, **bounds), [Tensor(("n", 3), dtype)], rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("dtype", ["float32", "float16", "int64"])
def test_where(runner, dtype):
    check_op(runner, op.where, [Tensor(("n", 1), "bool"), Tensor((1, 5), dtype), Tensor(("n", 5), dtype)])


SCALAR_ONLY = {"power"}  # a two-operand intrinsic keeps one element per thread


def _vector_rule(runner) -> str:
    """The rule same-shaped elementwise kernels get: vec4 where the language has vectors; C kernels
    are scalar, a thread's loop over a row that the C compiler vectorizes itself."""
    return "vectorized-elementwise" if runner.target.vector_lanes else rule_on(runner, "injective")


@pytest.mark.parametrize("dtype,rtol,atol", FLOATS, ids=["f32", "f16"])
@pytest.mark.parametrize("name", sorted(UNARY) + sorted(BINARY) + sorted(COMPARISON))
def test_vectorized_when_every_read_is_elementwise(runner, name, dtype, rtol, atol):
    """Same-shaped operands and an element count that is a multiple of 4: vec4 loads and stores."""
    arity = 1 if name in UNARY else 2
    operand = "bool" if name.startswith("logical") else dtype
    _, kernels = check_op(runner, _make(name), [Tensor(("n", 8), operand)] * arity, rtol=rtol, atol=atol)
    expected = rule_on(runner, "injective") if name in SCALAR_ONLY else _vector_rule(runner)
    assert [k.attrs["rule"] for k in kernels] == [expected]


def test_vectorized_casts_and_selects(runner):
    for source, target in [("float32", "float16"), ("bool", "float32"), ("int32", "float32"), ("float32", "bool")]:
        _, kernels = check_op(runner, lambda x, t=target: op.astype(x, dtype=t), [Tensor(("n", 4), source)],
                              rtol=1e-3, atol=1e-3)
        assert kernels[0].attrs["rule"] == _vector_rule(runner)
    _, kernels = check_op(runner, op.where, [Tensor(("n", 4), "bool")] + [Tensor(("n", 4), "float32")] * 2)
    assert kernels[0].attrs["rule"] == _vector_rule(runner)
