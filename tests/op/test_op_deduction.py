"""Deduction for every registered operator, with static, symbolic and coarse inputs.

Static cases also run in the reference interpreter on random data, which
checks the deduced struct info against the value numpy actually computes.
"""

import numpy as np
import pytest
from helpers import deduced, run_single_call
from tessera import op
from tessera.ir import DeductionError, GlobalVar, Tensor
from tessera.ir import Tuple as TupleExpr
from tessera.op.elementwise import BINARY, COMPARISON, UNARY

F32 = "float32"
T = Tensor


def tensor_text(shape, dtype=F32) -> str:
    """The expected printed form, written out by hand in the tests below."""
    dims = ", ".join(shape) + ("," if len(shape) == 1 else "")
    return f'R.Tensor(({dims}), dtype="{dtype}")'


def coarse_text(ndim, dtype=F32) -> str:
    return f'R.Tensor(dtype="{dtype}", ndim={ndim})'


COVERED: set[str] = set()


def covers(*names):
    """Declare which operators a test covers (checked by test_every_registered_op_is_covered)."""
    COVERED.update(names)
    return lambda test: test


# -- elementwise -----------------------------------------------------------------

@covers(*sorted(BINARY))
@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_broadcasting(name):
    make = getattr(op, name)
    assert deduced(make, T((2, 1, 4), F32), T((3, 1), F32)) == tensor_text(["2", "3", "4"])
    assert deduced(make, T(("n", 4), F32), T((4,), F32)) == tensor_text(["n", "4"])
    assert deduced(make, T(("n", 1), F32), T((1, "m"), F32)) == tensor_text(["n", "m"])
    assert deduced(make, T(("n", 4), F32), T(("m", 4), F32)) == coarse_text(2)  # n vs m: run time
    assert deduced(make, T(dtype=F32, ndim=3), T((4,), F32)) == coarse_text(3)
    run_single_call(make, T((2, 1, 4), F32), T((3, 1), F32))
    run_single_call(make, T(("n", 4), F32), T((4,), F32), sizes={"n": 5})


@covers(*sorted(COMPARISON))
@pytest.mark.parametrize("name", sorted(COMPARISON))
def test_comparisons_give_bool(name):
    make = getattr(op, name)
    dtype = "bool" if name.startswith("logical") else F32
    assert deduced(make, T(("n", 4), dtype), T((1, 4), dtype)) == tensor_text(["n", "4"], "bool")
    assert deduced(make, T(dtype=dtype, ndim=2), T(dtype=dtype, ndim=2)) == coarse_text(2, "bool")
    run_single_call(make, T((3, 4), dtype), T((4,), dtype))


def test_binary_errors_name_the_operands():
    with pytest.raises(DeductionError, match=r"dtype mismatch in out = R.add\(x0, x1\): x0 is float32, "
                       r"x1 is int32"):
        deduced(op.add, T((4,), F32), T((4,), "int32"))
    with pytest.raises(DeductionError, match=r"shape mismatch in out = R.add\(x0, x1\): cannot broadcast "
                       r"x0 has \(3,\) float32 and x1 has \(4,\) float32"):
        deduced(op.add, T((3,), F32), T((4,), F32))


@covers(*sorted(UNARY))
@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_keeps_the_input_info(name):
    make = op.nn.__getattr__(name[3:]) if name.startswith("nn.") else getattr(op, name)
    assert deduced(make, T(("n", "m * 2"), F32)) == tensor_text(["n", "m * 2"])
    assert deduced(make, T(dtype="float16", ndim=3)) == coarse_text(3, "float16")
    run_single_call(make, T((3, 5), F32))


def test_float_only_unary_rejects_integers():
    with pytest.raises(DeductionError, match=r"dtype mismatch in out = R.exp\(x0\): exp needs a float "
                       r"tensor, x0 is int32"):
        deduced(op.exp, T((4,), "int32"))


@covers("clip")
def test_clip_keeps_the_input_info():
    relu6 = lambda x: op.clip(x, min=0.0, max=6.0)  # noqa: E731
    assert deduced(relu6, T(("n", 4), F32)) == tensor_text(["n", "4"])
    assert deduced(relu6, T(dtype="float16", ndim=4)) == coarse_text(4, "float16")
    result, (x,) = run_single_call(lambda x: op.clip(x, min=0.75, max=1.25), T((3, 5), F32))
    np.testing.assert_array_equal(result, np.minimum(np.maximum(x, 0.75), 1.25))
    # An integer tensor keeps the integers inside the bounds: 0.5..2.5 is 1..2.
    result, (x,) = run_single_call(lambda x: op.clip(x, min=0.5, max=2.5), T((4, 4), "int32"))
    np.testing.assert_array_equal(result, np.minimum(np.maximum(x, 1), 2))
    # A bound left out is no bound.
    result, (x,) = run_single_call(lambda x: op.clip(x, max=1.0), T((3, 5), F32))
    np.testing.assert_array_equal(result, np.minimum(x, 1.0))
    with pytest.raises(DeductionError, match="clip needs min <= max, got min=6.0 max=0.0"):
        deduced(lambda x: op.clip(x, min=6.0, max=0.0), T((4,), F32))
    with pytest.raises(DeductionError, match="clip needs a number tensor, x0 is bool"):
        deduced(lambda x: op.clip(x, min=0.0), T((4,), "bool"))


@covers("astype", "where")
def test_astype_and_where():
    assert deduced(lambda x: op.astype(x, dtype="float16"), T(("n", 4), F32)) == tensor_text(["n", "4"], "float16")
    assert deduced(lambda x: op.astype(x, dtype="int32"), T(dtype=F32, ndim=2)) == coarse_text(2, "int32")
    assert deduced(op.where, T(("n", 1), "bool"), T((1, 4), F32), T((4,), F32)) == tensor_text(["n", "4"])
    run_single_call(lambda x: op.astype(x, dtype="int32"), T((3,), F32))
    run_single_call(op.where, T((3, 1), "bool"), T((1, 4), F32), T((4,), F32))
    with pytest.raises(DeductionError, match="where needs a bool condition"):
        deduced(op.where, T((4,), F32), T((4,), F32), T((4,), F32))


@covers("bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not", "left_shift", "right_shift", "bitcast")
def test_bit_operators():
    for make in (op.bitwise_and, op.bitwise_or, op.bitwise_xor, op.left_shift, op.right_shift):
        assert deduced(make, T(("n", 1), "int8"), T((4,), "int8")) == tensor_text(["n", "4"], "int8")
        run_single_call(make, T((3, 4), "uint16"), T((4,), "uint16"))
    assert deduced(op.bitwise_not, T(dtype="int64", ndim=2)) == coarse_text(2, "int64")
    with pytest.raises(DeductionError, match="bitwise_and needs an integer tensor, x0 is float32"):
        deduced(op.bitwise_and, T((4,), F32), T((4,), F32))
    # Shifts count as numpy's do at the dtype's width: a negative or too large count shifts out every bit.
    x, counts = np.array([-8, 5, -1, 64], np.int8), np.array([1, 9, -1, 7], np.int8)
    np.testing.assert_array_equal(op.get_op("right_shift").reference(x, counts), [-4, 0, -1, 0])
    np.testing.assert_array_equal(op.get_op("left_shift").reference(x, counts), [-16, 0, 0, 0])
    assert deduced(lambda x: op.bitcast(x, dtype="int32"), T(("n",), F32)) == tensor_text(["n"], "int32")
    result, (x,) = run_single_call(lambda x: op.bitcast(x, dtype="uint32"), T((3,), F32))
    np.testing.assert_array_equal(result, x.view(np.uint32))
    with pytest.raises(DeductionError, match="bitcast keeps the element size: x0 is float32 \\(4 bytes\\), int8 has 1"):
        deduced(lambda x: op.bitcast(x, dtype="int8"), T((4,), F32))


# -- matmul --------------------------------------------------------------------------

@covers("matmul")
def test_matmul_static_symbolic_batched_and_vector():
    assert deduced(op.matmul, T((3, 4), F32), T((4, 5), F32)) == tensor_text(["3", "5"])
    assert deduced(op.matmul, T(("n", 4), F32), T((4, "m"), F32)) == tensor_text(["n", "m"])
    assert deduced(op.matmul, T((2, 1, "n", 8), F32), T((3, 8, 16), F32)) == tensor_text(["2", "3", "n", "16"])
    assert deduced(op.matmul, T((8,), F32), T((8, 16), F32)) == tensor_text(["16"])
    assert deduced(op.matmul, T(("n", 8), F32), T((8,), F32)) == tensor_text(["n"])
    assert deduced(op.matmul, T((8,), F32), T((8,), F32)) == 'R.Tensor((), dtype="float32")'
    assert deduced(op.matmul, T(dtype=F32, ndim=3), T((8, 16), F32)) == coarse_text(3)
    assert deduced(op.matmul, T(("n", "k"), F32), T(("m", 16), F32)) == tensor_text(["n", "16"])
    for a, b in [((3, 4), (4, 5)), ((2, 1, 3, 4), (3, 4, 2)), ((4,), (4, 2)), ((3, 4), (4,))]:
        run_single_call(op.matmul, T(a, F32), T(b, F32))


def test_matmul_errors():
    with pytest.raises(DeductionError, match=r"shape mismatch in out = R.matmul\(x, w\): x has \(n, 256\), "
                       r"w has \(128, 64\)"):
        deduced(op.matmul, T(("n", 256), F32), T((128, 64), F32), names=["x", "w"])
    with pytest.raises(DeductionError, match=r"rank mismatch in out = R.matmul\(x0, x1\): matmul needs "
                       r"tensors of rank >= 1, x0 has rank 0"):
        deduced(op.matmul, T((), F32), T((4, 4), F32))


# -- manipulation ------------------------------------------------------------------------

@covers("reshape")
def test_reshape_keeps_symbolic_relations():
    assert deduced(lambda x: op.reshape(x, [2, -1]), T(("n", 4), F32)) == tensor_text(["2", "n * 2"])
    assert deduced(lambda x: op.reshape(x, [-1]), T(("n", 2, 2), F32)) == tensor_text(["n * 4"])
    from tessera.arith import Var
    n = Var("n")
    assert deduced(lambda x: op.reshape(x, [n, 4]), T(("n", 2, 2), F32)) == tensor_text(["n", "4"])
    assert deduced(lambda x: op.reshape(x, [-1, 8]), T(dtype=F32, ndim=3)) == coarse_text(2)
    run_single_call(lambda x: op.reshape(x, [2, -1]), T((3, 4), F32))
    with pytest.raises(DeductionError, match=r"cannot reshape x0 of \(3, 4\) \(12 elements\) to \(5, 2\)"):
        deduced(lambda x: op.reshape(x, [5, 2]), T((3, 4), F32))
    with pytest.raises(DeductionError, match="more than one -1"):
        deduced(lambda x: op.reshape(x, [-1, -1]), T((3, 4), F32))


@covers("flatten", "permute_dims", "expand_dims", "squeeze")
def test_flatten_permute_expand_squeeze():
    assert deduced(op.flatten, T(("n", 4), F32)) == tensor_text(["n * 4"])
    assert deduced(op.flatten, T(dtype=F32, ndim=3)) == coarse_text(1)
    assert deduced(lambda x: op.permute_dims(x, axes=[0, 2, 1]), T(("b", "n", 8), F32)) == tensor_text(["b", "8", "n"])
    assert deduced(op.permute_dims, T(("n", 8), F32)) == tensor_text(["8", "n"])
    assert deduced(lambda x: op.expand_dims(x, axis=[0, -1]), T(("n", 8), F32)) == tensor_text(["1", "n", "8", "1"])
    assert deduced(lambda x: op.squeeze(x, axis=[1]), T(("n", 1, 8), F32)) == tensor_text(["n", "8"])
    assert deduced(op.squeeze, T((1, 3, 1), F32)) == tensor_text(["3"])
    assert deduced(op.squeeze, T(("n", 1), F32)) == 'R.Tensor(dtype="float32", ndim=-1)'
    run_single_call(lambda x: op.permute_dims(x, axes=[2, 0, 1]), T((2, 3, 4), F32))
    run_single_call(lambda x: op.expand_dims(x, axis=1), T((2, 3), F32))
    run_single_call(op.squeeze, T((1, 3, 1), F32))
    with pytest.raises(DeductionError, match="cannot squeeze axis 0 of x0: it has size 3"):
        deduced(lambda x: op.squeeze(x, axis=0), T((3, 1), F32))
    with pytest.raises(DeductionError, match="not a permutation"):
        deduced(lambda x: op.permute_dims(x, axes=[0, 0]), T((3, 1), F32))


@covers("concat", "split")
def test_concat_and_split():
    assert deduced(lambda a, b: op.concat((a, b), axis=0), T(("n", 4), F32), T(("m", 4), F32)) \
        == tensor_text(["m + n", "4"])
    assert deduced(lambda a, b: op.concat((a, b), axis=1), T(("n", 4), F32), T(("n", 2), F32)) \
        == tensor_text(["n", "6"])
    assert deduced(lambda x: op.split(x, indices_or_sections=2, axis=1), T(("n", 8), F32)) \
        == f'R.Tuple({tensor_text(["n", "4"])}, {tensor_text(["n", "4"])})'
    assert deduced(lambda x: op.split(x, indices_or_sections=[2, 5], axis=0), T((8,), F32)) \
        == f'R.Tuple({tensor_text(["2"])}, {tensor_text(["3"])}, {tensor_text(["3"])})'
    assert deduced(lambda x: op.split(x, indices_or_sections=3, axis=0), T(dtype=F32, ndim=2)) \
        == f'R.Tuple({coarse_text(2)}, {coarse_text(2)}, {coarse_text(2)})'
    run_single_call(lambda a, b: op.concat((a, b), axis=1), T((2, 3), F32), T((2, 1), F32))
    run_single_call(lambda x: op.split(x, indices_or_sections=[1, 3], axis=1), T((2, 5), F32))
    with pytest.raises(DeductionError, match="not divisible into 3 sections"):
        deduced(lambda x: op.split(x, indices_or_sections=3, axis=0), T((8,), F32))
    with pytest.raises(DeductionError, match="dtype mismatch"):
        deduced(lambda a, b: op.concat((a, b)), T((2,), F32), T((2,), "int32"))


@covers("take", "strided_slice", "broadcast_to", "shape_of")
def test_take_strided_slice_broadcast_to_shape_of():
    assert deduced(lambda w, i: op.take(w, i, axis=0), T((49152, 576), F32), T(("n",), "int32")) \
        == tensor_text(["n", "576"])
    assert deduced(lambda x: op.strided_slice(x, axes=[0], begin=[1], end=[7], strides=[2]), T((10, 4), F32)) \
        == tensor_text(["3", "4"])
    from tessera.arith import Var
    n = Var("n")
    assert deduced(lambda x: op.strided_slice(x, axes=[0], begin=[0], end=[n]), T(("n", 4), F32)) \
        == tensor_text(["n", "4"])
    assert deduced(lambda x: op.strided_slice(x, axes=[1], begin=[-2], end=[8]), T(("n", 8), F32)) \
        == tensor_text(["n", "2"])
    assert deduced(lambda x: op.broadcast_to(x, [n, 4]), T((1, 4), F32)) == tensor_text(["n", "4"])
    assert deduced(op.shape_of, T(("n", 4), F32)) == "R.Shape([n, 4])"
    assert deduced(op.shape_of, T(dtype=F32, ndim=2)) == "R.Shape(ndim=2)"
    run_single_call(lambda w, i: op.take(w, i, axis=0), T((5, 3), F32), T((4,), "int32"))
    run_single_call(lambda x: op.strided_slice(x, axes=[0, 1], begin=[1, 0], end=[7, 3], strides=[2, 1]),
                    T((10, 4), F32))
    run_single_call(lambda x: op.broadcast_to(x, [3, 4]), T((1, 4), F32))
    with pytest.raises(DeductionError, match="take needs integer indices"):
        deduced(lambda w, i: op.take(w, i), T((5, 3), F32), T((4,), F32))
    with pytest.raises(DeductionError, match=r"cannot broadcast x0 of \(2, 4\) to \(3, 4\)"):
        deduced(lambda x: op.broadcast_to(x, [3, 4]), T((2, 4), F32))


# -- reductions and normalization ----------------------------------------------------------

@covers("sum", "mean", "max", "min", "prod")
@pytest.mark.parametrize("name", ["sum", "mean", "max", "min", "prod"])
def test_reductions(name):
    make = getattr(op, name)
    assert deduced(lambda x: make(x, axis=[1]), T(("n", 4, 8), F32)) == tensor_text(["n", "8"])
    assert deduced(lambda x: make(x, axis=[-1], keepdims=True), T(("n", 4), F32)) == tensor_text(["n", "1"])
    assert deduced(make, T(("n", 4), F32)) == 'R.Tensor((), dtype="float32")'
    assert deduced(lambda x: make(x, axis=[0]), T(dtype=F32, ndim=3)) == coarse_text(2)
    run_single_call(lambda x: make(x, axis=[0, 2], keepdims=True), T((2, 3, 4), F32))


@covers("argmax", "argmin")
@pytest.mark.parametrize("name", ["argmax", "argmin"])
def test_arg_reductions(name):
    make = getattr(op, name)
    assert deduced(lambda x: make(x, axis=-1), T(("n", 49152), F32)) == tensor_text(["n"], "int64")
    assert deduced(make, T(("n", 4), F32)) == 'R.Tensor((), dtype="int64")'
    run_single_call(lambda x: make(x, axis=1, keepdims=True), T((3, 7), F32))


@covers("nn.softmax", "nn.log_softmax", "nn.rms_norm", "nn.layer_norm")
def test_softmax_and_norms():
    assert deduced(op.nn.softmax, T(("n", "n"), F32)) == tensor_text(["n", "n"])
    assert deduced(lambda x: op.nn.log_softmax(x, axis=0), T(dtype=F32, ndim=2)) == coarse_text(2)
    assert deduced(op.nn.rms_norm, T(("n", 576), F32), T((576,), F32)) == tensor_text(["n", "576"])
    assert deduced(op.nn.layer_norm, T(("n", 8), F32), T((8,), F32), T((8,), F32)) == tensor_text(["n", "8"])
    run_single_call(op.nn.softmax, T((3, 5), F32))
    run_single_call(op.nn.log_softmax, T((3, 5), F32))
    run_single_call(op.nn.rms_norm, T((3, 8), F32), T((8,), F32))
    run_single_call(op.nn.layer_norm, T((3, 8), F32), T((8,), F32), T((8,), F32))
    with pytest.raises(DeductionError, match="x1 has size 512 where x0 has 576"):
        deduced(op.nn.rms_norm, T(("n", 576), F32), T((512,), F32))
    with pytest.raises(DeductionError, match="axis 2 is out of range for x0 of rank 2"):
        deduced(lambda x: op.nn.softmax(x, axis=2), T((3, 5), F32))


# -- creation ------------------------------------------------------------------------------

@covers("full", "zeros", "ones", "arange")
def test_creation_ops():
    from tessera.arith import Var
    n = Var("n")

    def shape_user(make):
        # Symbolic sizes come from a parameter, so that n is defined.
        return lambda x: make([n, 4])

    assert deduced(shape_user(lambda s: op.zeros(s, dtype="float16")), T(("n",), F32)) \
        == tensor_text(["n", "4"], "float16")
    assert deduced(shape_user(lambda s: op.ones(s, dtype="int32")), T(("n",), F32)) == tensor_text(["n", "4"], "int32")
    assert deduced(shape_user(lambda s: op.full(s, fill_value=2.5)), T(("n",), F32)) == tensor_text(["n", "4"])
    assert deduced(lambda x: op.arange(end=n), T(("n",), F32)) == tensor_text(["n"], "int64")
    assert deduced(lambda x: op.arange(start=1, end=10, step=3), T((1,), F32)) == tensor_text(["3"], "int64")
    assert deduced(lambda x: op.arange(start=10, end=0, step=-4), T((1,), F32)) == tensor_text(["3"], "int64")
    result, _ = run_single_call(lambda x: op.arange(start=n, end=n * 3, step=2), T(("n",), F32), sizes={"n": 4})
    np.testing.assert_array_equal(result, np.arange(4, 12, 2))
    run_single_call(lambda x: op.full([n, 2], fill_value=1.5), T(("n",), F32), sizes={"n": 3})


# -- convolution and pooling ---------------------------------------------------------------

@covers("nn.conv2d", "nn.max_pool2d", "nn.avg_pool2d")
def test_conv2d_and_pools():
    conv = lambda x, w: op.nn.conv2d(x, w, strides=2, padding=1)  # noqa: E731
    assert deduced(conv, T(("b", 3, 32, 32), F32), T((16, 3, 3, 3), F32)) == tensor_text(["b", "16", "16", "16"])
    assert deduced(op.nn.conv2d, T((1, 3, "h", "w"), F32), T((8, 3, 3, 3), F32)) \
        == tensor_text(["1", "8", "h - 2", "w - 2"])
    grouped = lambda x, w: op.nn.conv2d(x, w, groups=2)  # noqa: E731
    assert deduced(grouped, T((1, 4, 5, 5), F32), T((6, 2, 3, 3), F32)) == tensor_text(["1", "6", "3", "3"])
    pool = lambda x: op.nn.max_pool2d(x, pool_size=2, strides=2)  # noqa: E731
    assert deduced(pool, T(("b", 8, "h", 16), F32)) == tensor_text(["b", "8", "h // 2", "8"])
    assert deduced(lambda x: op.nn.avg_pool2d(x, pool_size=3, padding=1), T((1, 2, 5, 5), F32)) \
        == tensor_text(["1", "2", "5", "5"])
    run_single_call(conv, T((2, 3, 7, 7), F32), T((4, 3, 3, 3), F32))
    run_single_call(grouped, T((1, 4, 5, 5), F32), T((6, 2, 3, 3), F32))
    run_single_call(pool, T((1, 2, 6, 7), F32))
    run_single_call(lambda x: op.nn.avg_pool2d(x, pool_size=3, strides=2, padding=1), T((1, 2, 7, 7), F32))
    with pytest.raises(DeductionError, match="x0 has 4 channels, x1 expects 3 x 1 groups"):
        deduced(op.nn.conv2d, T((1, 4, 5, 5), F32), T((8, 3, 3, 3), F32))
    with pytest.raises(DeductionError, match="supports data_layout='NCHW'"):
        deduced(lambda x, w: op.nn.conv2d(x, w, data_layout="NHWC"), T((1, 5, 5, 3), F32), T((8, 3, 3, 3), F32))


def test_conv2d_reference_matches_direct_loops():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, 2, 5, 5)).astype(np.float32)
    w = rng.standard_normal((3, 2, 3, 3)).astype(np.float32)
    got = op.get_op("nn.conv2d").reference(x, w, (1, 1), (1, 1, 1, 1), (1, 1), 1, "NCHW", "OIHW", "")
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    want = np.zeros((1, 3, 5, 5))
    for o in range(3):
        for i in range(5):
            for j in range(5):
                want[0, o, i, j] = np.sum(padded[0, :, i:i + 3, j:j + 3] * w[o])
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


# -- data-dependent and cross-level -----------------------------------------------------------

@covers("unique")
def test_unique_is_coarse():
    assert deduced(op.unique, T(("n", 4), F32)) == coarse_text(1)
    result, (x,) = run_single_call(op.unique, T((6,), "int32"))
    np.testing.assert_array_equal(result, np.unique(x))


@covers("shape_to_tensor")
def test_shape_to_tensor():
    from tessera.arith import Var
    n = Var("n")
    assert deduced(lambda x: op.shape_to_tensor([n * 2, n, 3]), T(("n",), F32)) == tensor_text(["3"], "int64")
    result, _ = run_single_call(lambda x: op.shape_to_tensor([n * 2, n, 3]), T(("n",), F32), sizes={"n": 4})
    np.testing.assert_array_equal(result, [8, 4, 3])


@covers("nonzero", "masked_select", "arange_dynamic")
def test_value_dependent_sizes_are_coarse():
    assert deduced(op.nonzero, T(("n", 4), F32)) == coarse_text(2, "int64")
    result, (x,) = run_single_call(op.nonzero, T((2, 3), "int32"))
    np.testing.assert_array_equal(result, np.stack(np.nonzero(x)))
    assert deduced(op.masked_select, T(("n", 4), F32), T(("n", 4), "bool")) == coarse_text(1)
    result, (x, mask) = run_single_call(op.masked_select, T((2, 3), F32), T((2, 3), "bool"))
    np.testing.assert_array_equal(result, x[mask])
    with pytest.raises(DeductionError, match="needs a bool mask"):
        deduced(op.masked_select, T((3,), F32), T((3,), F32))
    with pytest.raises(DeductionError, match="mask of the input's rank 2, got rank 1"):
        deduced(op.masked_select, T((3, 2), F32), T((3,), "bool"))
    assert deduced(lambda e: op.arange_dynamic(e, start=1, step=2), T((), "int32")) == coarse_text(1, "int64")
    result, (end,) = run_single_call(lambda e: op.arange_dynamic(e, start=1, step=2), T((), "int32"))
    np.testing.assert_array_equal(result, np.arange(1, int(end), 2))
    with pytest.raises(DeductionError, match="needs an integer end"):
        deduced(op.arange_dynamic, T((), F32))
    with pytest.raises(DeductionError, match="as a 0-d tensor"):
        deduced(op.arange_dynamic, T((2,), "int32"))


@covers("call_tir", "call_dps_library", "call_pure_packed")
def test_cross_level_calls_use_explicit_output_info():
    from tessera.arith import Var
    n = Var("n")
    out = T((n * 2, 4), F32)
    assert deduced(lambda x: op.call_tir("kernel", [x], out, tir_vars=[n]), T(("n", 4), F32)) \
        == tensor_text(["n * 2", "4"])
    assert deduced(lambda x: op.call_dps_library("lib.fn", [x], [out, T((n,), "int32")]), T(("n", 4), F32)) \
        == f'R.Tuple({tensor_text(["n * 2", "4"])}, {tensor_text(["n"], "int32")})'
    assert deduced(lambda x: op.call_pure_packed("vm.fn", x, sinfo_args=T(dtype=F32, ndim=1)), T((3,), F32)) \
        == coarse_text(1)
    with pytest.raises(DeductionError, match="call_tir needs out_sinfo"):
        deduced(lambda x: op.make_call("call_tir", GlobalVar("k"), TupleExpr((x,))), T((3,), F32))


@covers("to_vdevice", "hint_on_device")
def test_device_moves_deduction():
    """Placement is tested in tests/ir/test_vdevice.py; here the shapes pass through and the numbers copy."""
    assert deduced(lambda x: op.to_vdevice(x, "webgpu:0"), T(("n", 4), F32)) == \
        'R.Tensor((n, 4), dtype="float32", vdevice="webgpu:0")'
    assert deduced(lambda x: op.hint_on_device(x, "gpu"), T(("n", 4), F32)) == tensor_text(["n", "4"])
    for move in (lambda x: op.to_vdevice(x, "webgpu:0"), lambda x: op.hint_on_device(x, "cpu")):
        out, (x,) = run_single_call(move, T((2, 3), F32))
        np.testing.assert_array_equal(out, x)
    with pytest.raises(DeductionError, match="R.to_vdevice takes the name of a vdevice"):
        deduced(lambda x: op.to_vdevice(x, ""), T((2,), F32))


def test_every_registered_op_is_covered():
    assert set(op.list_ops()) - COVERED == set()


def _coarse_cases():
    from tessera.ir import Shape

    c = T  # readability: c(dtype=..., ndim=...) is a coarse tensor
    return [
        ("where", op.where, (c(dtype="bool", ndim=2), c(dtype=F32, ndim=2), T((4,), F32)), coarse_text(2)),
        ("permute_dims", lambda x: op.permute_dims(x, axes=[0, 2, 1]), (c(dtype=F32, ndim=3),), coarse_text(3)),
        ("expand_dims", lambda x: op.expand_dims(x, axis=0), (c(dtype=F32, ndim=2),), coarse_text(3)),
        ("concat", lambda a, b: op.concat((a, b)), (c(dtype=F32, ndim=2), T(("n", 4), F32)), coarse_text(2)),
        ("take", op.take, (c(dtype=F32, ndim=2), T(("n",), "int32")), coarse_text(2)),
        ("strided_slice", lambda x: op.strided_slice(x, axes=[0], begin=[1], end=[3]), (c(dtype=F32, ndim=2),),
         coarse_text(2)),
        # The target shape alone decides broadcast_to's result.
        ("broadcast_to", lambda x, s: op.broadcast_to(x, s), (c(dtype=F32, ndim=1), Shape(["n", 4])),
         tensor_text(["n", "4"])),
        ("argmax", lambda x: op.argmax(x, axis=1), (c(dtype=F32, ndim=3),), coarse_text(2, "int64")),
        ("nn.rms_norm", op.nn.rms_norm, (c(dtype=F32, ndim=3), T((576,), F32)), coarse_text(3)),
        ("nn.layer_norm", op.nn.layer_norm, (c(dtype=F32, ndim=2), T((8,), F32), T((8,), F32)), coarse_text(2)),
        ("zeros", lambda s: op.zeros(s, dtype="float16"), (Shape(ndim=2),), coarse_text(2, "float16")),
        ("full", lambda s: op.full(s, fill_value=1.0), (Shape(ndim=3),), coarse_text(3)),
        ("nn.conv2d", op.nn.conv2d, (c(dtype=F32, ndim=4), T((8, 3, 3, 3), F32)), coarse_text(4)),
        ("nn.max_pool2d", lambda x: op.nn.max_pool2d(x, pool_size=2), (c(dtype=F32, ndim=4),), coarse_text(4)),
        ("call_tir", lambda x: op.call_tir("k", [x], T((3,), F32)), (c(dtype=F32, ndim=-1),), tensor_text(["3"])),
    ]


@pytest.mark.parametrize("case", _coarse_cases(), ids=lambda case: case[0])
def test_coarse_inputs_give_coarse_results(case):
    _, make, inputs, expected = case
    assert deduced(make, *inputs) == expected


def test_flatten_static():
    assert deduced(op.flatten, T((2, 3, 4), F32)) == tensor_text(["24"])
    result, (x,) = run_single_call(op.flatten, T((2, 3, 4), F32))
    np.testing.assert_array_equal(result, x.reshape(-1))


@covers("builtin.alloc_tensor", "call_tir_dps", "memory.alloc_storage", "memory.alloc_tensor", "vm.check",
        "vm.call_builtin_dps", "vm.to_device")
def test_lowered_program_operators():
    from tessera.arith import Var as SymVar
    from tessera.ir import GlobalVar, ObjectStructInfo, Shape, ShapeExpr, StringImm

    n = SymVar("n")
    assert deduced(lambda x: op.make_call("builtin.alloc_tensor", ShapeExpr((n, 4)), dtype="float16"),
                   T(("n",), F32)) == tensor_text(["n", "4"], "float16")
    assert deduced(lambda s: op.make_call("builtin.alloc_tensor", s, dtype="int32"), Shape(ndim=2)) \
        == coarse_text(2, "int32")
    assert deduced(lambda x: op.make_call("memory.alloc_storage", ShapeExpr((n * 16,)), token=0),
                   T(("n",), F32)) == "R.Object"
    assert deduced(lambda x, s: op.make_call("memory.alloc_tensor", s, ShapeExpr((n, 4)), dtype=F32),
                   T(("n",), F32), ObjectStructInfo()) == tensor_text(["n", "4"])
    assert deduced(lambda x, y: op.make_call("call_tir_dps", GlobalVar("k"), TupleExpr((x, y))),
                   T(("n",), F32), T(("n",), F32)) == "R.Object"
    assert deduced(lambda x: op.make_call("vm.check", x, sinfo_args=(T(("n",), F32),)), T(("n",), F32)) \
        == tensor_text(["n"])
    assert deduced(lambda x, y: op.make_call("vm.call_builtin_dps", StringImm("lib.fn"), TupleExpr((x, y)), outputs=1),
                   T(("n",), F32), T(("n",), F32)) == "R.Object"
    assert deduced(lambda x, y: op.make_call("vm.to_device", x, y), T(("n",), F32), T(("n",), F32)) == "R.Object"
    with pytest.raises(DeductionError, match="alloc_tensor needs a dtype"):
        deduced(lambda x: op.make_call("builtin.alloc_tensor", ShapeExpr((n,))), T(("n",), F32))


@covers("quantized_matmul")
def test_quantized_matmul_deduction():
    assert deduced(lambda x, w: op.quantized_matmul(x, w, format="q4_1", k=576),
                   T(("n", 576), F32), T((1536, 90), "uint32")) == tensor_text(["n", "1536"])
    assert deduced(lambda x, w: op.quantized_matmul(x, w, format="q8_0", k=576),
                   T(("b", "n", 576), "float16"), T((49152, 153), "uint32")) == tensor_text(["b", "n", "49152"], "float16")
    assert deduced(lambda x, w: op.quantized_matmul(x, w, format="q4_1", k=576),
                   T(dtype=F32, ndim=2), T((1536, 90), "uint32")) == coarse_text(2)
    with pytest.raises(DeductionError, match="x1 has 91 words per row, a q4_1 row of K = 576 has 90"):
        deduced(lambda x, w: op.quantized_matmul(x, w, format="q4_1", k=576), T((1, 576), F32),
                T((8, 91), "uint32"))
    with pytest.raises(DeductionError, match="format 'iq4_nl' is not one of q4_0, q4_1, q5_0, q5_1, q8_0, q2_k"):
        deduced(lambda x, w: op.quantized_matmul(x, w, format="iq4_nl", k=576), T((1, 576), F32),
                T((8, 90), "uint32"))
    # K-quants: 256 values a block; an odd number of 210-byte Q6_K blocks is padded to a whole word.
    assert deduced(lambda x, w: op.quantized_matmul(x, w, format="q6_k", k=768),
                   T((1, 768), F32), T((576, 158), "uint32")) == tensor_text(["1", "576"])
    with pytest.raises(DeductionError, match="needs K as a multiple of 256 for q4_k, got 576"):
        deduced(lambda x, w: op.quantized_matmul(x, w, format="q4_k", k=576), T((1, 576), F32),
                T((8, 81), "uint32"))


@covers("quantized_take")
def test_quantized_take_deduction():
    assert deduced(lambda w, i: op.quantized_take(w, i, format="q8_0", k=576),
                   T((49152, 153), "uint32"), T(("n",), "int32")) == tensor_text(["n", "576"])
    assert deduced(lambda w, i: op.quantized_take(w, i, format="q8_0", k=576),
                   T((49152, 153), "uint32"), T(dtype="int32", ndim=2)) == coarse_text(3)
    with pytest.raises(DeductionError, match="x0 has 160 words per row, a q5_0 row of K = 576 has 99"):
        deduced(lambda w, i: op.quantized_take(w, i, format="q5_0", k=576), T((8, 160), "uint32"), T((2,), "int32"))
    with pytest.raises(DeductionError, match="quantized_take needs integer indices"):
        deduced(lambda w, i: op.quantized_take(w, i, format="q8_0", k=576), T((8, 153), "uint32"), T((2,), F32))


@covers("sample_token")
def test_sample_token_deduction():
    sample = op.sample_token
    assert deduced(sample, T((1, 49152), F32), T(("m",), "int32"), T((5,), F32)) == tensor_text(["1"], "int32")
    with pytest.raises(DeductionError, match="takes one row of logits, got 4 rows"):
        deduced(sample, T((4, 100), F32), T(("m",), "int32"), T((5,), F32))
    with pytest.raises(DeductionError, match="history must be int32, got float32"):
        deduced(sample, T((1, 100), F32), T(("m",), F32), T((5,), F32))
    with pytest.raises(DeductionError, match="params holds temperature, .*: 5 values, got 3"):
        deduced(sample, T((1, 100), F32), T(("m",), "int32"), T((3,), F32))


@covers("nn.attention", "nn.attention_partial", "nn.attention_merge")
def test_attention_deduction():
    from tessera import arith
    from tessera.ir import PrimValue

    total = PrimValue(arith.Var("total"))

    def attention(q, k, v):
        return op.nn.attention(q, k, v, total)

    assert deduced(attention, T(("n", 9, 64), F32), T((2048, 3, 64), F32), T((2048, 3, 64), F32)) \
        == tensor_text(["n", "576"])
    assert deduced(lambda q, k, v: op.nn.attention_partial(q, k, v, total, splits=4), T((1, 9, 64), F32),
                   T((2048, 3, 64), F32), T((2048, 3, 64), F32)) == tensor_text(["4", "1", "9", "66"])
    assert deduced(lambda p: op.nn.attention_merge(p, dtype="float16"), T((4, 1, 9, 66), F32)) \
        == tensor_text(["1", "576"], "float16")
    with pytest.raises(DeductionError, match="9 query heads cannot share 2 KV heads evenly"):
        deduced(attention, T((1, 9, 64), F32), T((16, 2, 64), F32), T((16, 2, 64), F32))
    with pytest.raises(DeductionError, match="keys hold 16 rows, values 8"):
        deduced(attention, T((1, 9, 64), F32), T((16, 3, 64), F32), T((8, 3, 64), F32))
    with pytest.raises(DeductionError, match="must share a dtype"):
        deduced(attention, T((1, 9, 64), "float16"), T((16, 3, 64), F32), T((16, 3, 64), F32))
    with pytest.raises(DeductionError, match=r"takes q \(n, heads, d\), got 2 dimensions"):
        deduced(attention, T((1, 64), F32), T((16, 3, 64), F32), T((16, 3, 64), F32))
    with pytest.raises(DeductionError, match="values rows are"):
        deduced(attention, T((1, 9, 64), F32), T((16, 3, 64), F32), T((16, 3, 32), F32))


@covers("nn.paged_attention", "paged_rope_append")
def test_paged_deduction():
    """A pool of pages, each row's position, and a page table of one row or one per query row."""
    pool, angles = T((64, 3, 64), F32), T(("b", 1, 64), F32)

    def attend(q, k, v, pos, table):
        return op.nn.paged_attention(q, k, v, pos, table, page_size=16)

    def append(qkv, cos, sin, k, v, pos, table):
        return op.paged_rope_append(qkv, cos, sin, k, v, pos, table, page_size=16)

    rows, table = T(("b",), "int32"), T(("b", 4), "int32")
    assert deduced(attend, T(("b", 9, 64), F32), pool, pool, rows, table) == tensor_text(["b", "576"])
    assert deduced(attend, T(("b", 9, 64), F32), pool, pool, rows, T((1, 4), "int32")) == tensor_text(["b", "576"])
    assert deduced(append, T(("b", 960), F32), angles, angles, pool, pool, rows, table) == \
        f'R.Tuple({tensor_text(["b", "9", "64"])}, {tensor_text(["64", "3", "64"])}, {tensor_text(["64", "3", "64"])})'
    with pytest.raises(DeductionError, match="a page table of 2 rows for 3 query rows"):
        deduced(attend, T((3, 9, 64), F32), pool, pool, T((3,), "int32"), T((2, 4), "int32"))
    with pytest.raises(DeductionError, match="2 positions for 3 rows"):
        deduced(attend, T((3, 9, 64), F32), pool, pool, T((2,), "int32"), T((3, 4), "int32"))
    with pytest.raises(DeductionError, match="takes int32 page_table, got int64"):
        deduced(append, T(("b", 960), F32), angles, angles, pool, pool, rows, T(("b", 4), "int64"))
    with pytest.raises(DeductionError, match="page_size must be at least 1"):
        deduced(lambda q, k, v, p, t: op.nn.paged_attention(q, k, v, p, t, page_size=0), T(("b", 9, 64), F32),
                pool, pool, rows, table)


@covers("kv_cache_write")
def test_kv_cache_write_deduction():
    from tessera.ir import PrimValue

    assert deduced(lambda c, v: op.kv_cache_write(c, v, PrimValue(0)), T((2048, 3, 64), F32), T(("n", 3, 64), F32)) \
        == tensor_text(["2048", "3", "64"])
    with pytest.raises(DeductionError, match=r"cache rows are \(3, 64\), new rows \(2, 64\)"):
        deduced(lambda c, v: op.kv_cache_write(c, v, PrimValue(0)), T((16, 3, 64), F32), T((1, 2, 64), F32))
    # The new rows may come flat, as a projection writes them: (n, heads * dim).
    assert deduced(lambda c, v: op.kv_cache_write(c, v, PrimValue(0)), T((2048, 3, 64), F32), T(("n", 192), F32)) \
        == tensor_text(["2048", "3", "64"])
    with pytest.raises(DeductionError, match=r"cache rows are \(3, 64\), new rows \(190\)"):
        deduced(lambda c, v: op.kv_cache_write(c, v, PrimValue(0)), T((16, 3, 64), F32), T((1, 190), F32))


@covers("rope_append")
def test_rope_append_deduction():
    """qkv holds 9 query heads, then 3 KV heads of keys and of values: q (n, 9, 64) and both caches."""
    from tessera.ir import PrimValue

    def append(qkv, cos, sin, k, v):
        return op.rope_append(qkv, cos, sin, k, v, PrimValue(0))

    cache = T((2048, 3, 64), F32)
    angles = T(("n", 1, 64), F32)
    assert deduced(append, T(("n", 960), F32), angles, angles, cache, cache) == \
        f'R.Tuple({tensor_text(["n", "9", "64"])}, {tensor_text(["2048", "3", "64"])}, {tensor_text(["2048", "3", "64"])})'
    with pytest.raises(DeductionError, match=r"qkv rows of 384 do not hold q heads and k and v"):
        deduced(append, T(("n", 384), F32), angles, angles, cache, cache)
    with pytest.raises(DeductionError, match=r"keys are \(2048, 3, 64\), values \(16, 3, 64\)"):
        deduced(append, T(("n", 960), F32), angles, angles, cache, T((16, 3, 64), F32))
