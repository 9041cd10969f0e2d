"""Shape-manipulation and creation operators as kernels on WebGPU, against numpy."""

import numpy as np
import pytest
from harness import check_op
from tessera import arith, op
from tessera.ir import Shape, Tensor

n, m = arith.Var("n"), arith.Var("m")
F32 = "float32"


# Data movement is exact, so every dtype must come back bit for bit.
DTYPES = ["float32", "float16", "int32", "int64"]


@pytest.mark.parametrize("dtype", DTYPES)
def test_reshape_flatten_expand_squeeze(runner, dtype):
    check_op(runner, lambda x: op.reshape(x, [-1, 2]), [Tensor(("n", 4), dtype)], rtol=0, atol=0)
    check_op(runner, op.flatten, [Tensor(("n", 3, 2), dtype)], rtol=0, atol=0)
    check_op(runner, lambda x: op.expand_dims(x, axis=[0, 2]), [Tensor(("n", 3), dtype)], rtol=0, atol=0)
    check_op(runner, lambda x: op.squeeze(x, axis=[1]), [Tensor(("n", 1, 3), dtype)], rtol=0, atol=0)


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("axes", [None, [1, 0, 2], [2, 0, 1]])
def test_permute_dims(runner, axes, dtype):
    check_op(runner, lambda x: op.permute_dims(x, axes=axes), [Tensor(("n", 3, "m"), dtype)], rtol=0, atol=0)


@pytest.mark.parametrize("dtype", DTYPES)
def test_concat_and_split(runner, dtype):
    check_op(runner, lambda a, b: op.concat((a, b), axis=0), [Tensor(("n", 3), dtype), Tensor(("m", 3), dtype)],
             rtol=0, atol=0)
    check_op(runner, lambda a, b, c: op.concat((a, b, c), axis=1),
             [Tensor(("n", 1), dtype), Tensor(("n", 2), dtype), Tensor(("n", 3), dtype)], rtol=0, atol=0)
    check_op(runner, lambda x: op.split(x, indices_or_sections=[1, 3], axis=1), [Tensor(("n", 5), dtype)],
             rtol=0, atol=0)
    check_op(runner, lambda x: op.split(x, indices_or_sections=2, axis=0), [Tensor((4, "n"), dtype)],
             rtol=0, atol=0)


@pytest.mark.parametrize("table_dtype", ["float32", "float16"])
@pytest.mark.parametrize("index_dtype", ["int32", "int64"])
def test_take_rows_like_an_embedding(runner, index_dtype, table_dtype):
    def inputs(shape, axis):
        def make(env, rng):
            table = rng.standard_normal(shape).astype(table_dtype)
            return [table, rng.integers(0, shape[axis], (env["n"],)).astype(index_dtype)]

        return make

    check_op(runner, lambda w, i: op.take(w, i, axis=0), [Tensor((50, 8), table_dtype), Tensor(("n",), index_dtype)],
             inputs=inputs((50, 8), 0), rtol=0, atol=0)
    check_op(runner, lambda w, i: op.take(w, i, axis=1), [Tensor((3, 50), table_dtype), Tensor(("n",), index_dtype)],
             inputs=inputs((3, 50), 1), rtol=0, atol=0)


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_strided_slice_and_broadcast_to(runner, dtype):
    check_op(runner, lambda x: op.strided_slice(x, axes=[0, 1], begin=[1, -3], end=[n, 8], strides=[2, 1]),
             [Tensor(("n", 8), dtype)], rtol=0, atol=0)
    check_op(runner, lambda x: op.strided_slice(x, axes=[0], begin=[4], end=[0], strides=[-1]),
             [Tensor((6, "n"), dtype)], rtol=0, atol=0)
    check_op(runner, lambda x, s: op.broadcast_to(x, s), [Tensor((1, 4), dtype), Shape(["n", 4])],
             inputs=lambda env, rng: [rng.random((1, 4)).astype(dtype), _shape(env["n"], 4)], rtol=0, atol=0)


def _shape(*dims):
    from tessera.ir import ShapeValue

    return ShapeValue(dims)


@pytest.mark.parametrize("dtype", ["float32", "float16", "int32", "int64"])
def test_creation(runner, dtype):
    check_op(runner, lambda x: op.full([n, 3], fill_value=2.5 if "float" in dtype else 3, dtype=dtype),
             [Tensor(("n",), F32)])
    check_op(runner, lambda x: op.zeros([n], dtype=dtype), [Tensor(("n",), F32)])
    check_op(runner, lambda x: op.ones([3, n], dtype=dtype), [Tensor(("n",), F32)])
    check_op(runner, lambda x: op.arange(start=n, end=n * 3, step=2, dtype=dtype), [Tensor(("n",), F32)])


def test_shape_to_tensor(runner):
    check_op(runner, lambda x: op.shape_to_tensor([n * 2, n, 3]), [Tensor(("n",), F32)])


def test_shape_of_needs_no_kernel(runner):
    lowered, kernels = check_op(runner, op.shape_of, [Tensor(("n", 3), F32)])
    assert kernels == []


@pytest.mark.parametrize("dtype", ["float32", "float16", "int64", "bool"])
def test_transpose_of_the_last_two_axes_uses_the_tiled_rule(runner, dtype):
    from tessera.ir import Function

    lowered, kernels = check_op(runner, op.permute_dims, [Tensor(("n", "m"), dtype)], rtol=0, atol=0)
    assert [k.attrs["rule"] for k in kernels] == ["transpose"]
    lowered, kernels = check_op(runner, lambda x: op.permute_dims(x, axes=[0, 2, 1]), [Tensor((3, "n", 33), dtype)],
                                rtol=0, atol=0)
    assert [f.attrs["rule"] for f in lowered.functions.values() if not isinstance(f, Function)] == ["transpose"]


def test_kv_cache_write_updates_rows_in_place(runner):
    from tessera.ir import PrimValue

    lowered, kernels = check_op(runner, lambda cache, value: op.kv_cache_write(cache, value, PrimValue(3)),
                                [Tensor(("n + 3", 2, 4), F32), Tensor(("n", 2, 4), F32)], rtol=0, atol=0)
    assert kernels[0].attrs["inplace"] == {0: 0}
    cache = np.arange(5 * 8, dtype=np.float32).reshape(5, 2, 4)
    value = -np.ones((2, 2, 4), np.float32)
    from tessera.ir import interpret

    got = interpret(lowered, "main", cache.copy(), value, kernel_runner=runner)
    want = cache.copy()
    want[3:5] = value
    np.testing.assert_array_equal(got, want)  # rows 0..2 kept: the kernel writes only its rows
    # New rows that come flat, (n, heads * dim), as a projection writes them: the same rows.
    check_op(runner, lambda cache, value: op.kv_cache_write(cache, value, PrimValue(3)),
             [Tensor(("n + 3", 2, 4), F32), Tensor(("n", 8), F32)], rtol=0, atol=0)


def test_rope_append_rotates_q_and_k_and_appends_k_and_v_in_one_kernel(runner):
    """qkv holds 3 query heads, then 2 KV heads of keys and of values (head size 8): q comes out
    rotated, the caches get the rotated keys and the values in rows 3 .. n + 2, in place."""
    from tessera.ir import PrimValue, interpret

    params = [Tensor(("n", 7 * 8), F32), Tensor(("n", 1, 8), F32), Tensor(("n", 1, 8), F32),
              Tensor(("n + 3", 2, 8), F32), Tensor(("n + 3", 2, 8), F32)]
    lowered, kernels = check_op(runner, lambda qkv, cos, sin, k, v: op.rope_append(qkv, cos, sin, k, v, PrimValue(3)),
                                params)
    assert [k.attrs["rule"] for k in kernels] == ["rope-append"] and kernels[0].attrs["inplace"] == {1: 3, 2: 4}
    rng = np.random.default_rng(1)
    qkv = rng.standard_normal((2, 56)).astype(np.float32)
    angles = rng.standard_normal((2, 1, 8)).astype(np.float32)
    keys, values = np.full((5, 2, 8), 7, np.float32), np.full((5, 2, 8), 9, np.float32)
    q, got_keys, got_values = interpret(lowered, "main", qkv, np.cos(angles), np.sin(angles), keys.copy(),
                                        values.copy(), kernel_runner=runner)

    def rope(x):  # rotate-half, as models/llama.py's _rope
        return x * np.cos(angles) + np.concatenate((-x[..., 4:], x[..., :4]), axis=-1) * np.sin(angles)

    np.testing.assert_allclose(q, rope(qkv[:, :24].reshape(2, 3, 8)), rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(got_keys[:3], keys[:3])  # rows before the offset kept
    np.testing.assert_allclose(got_keys[3:], rope(qkv[:, 24:40].reshape(2, 2, 8)), rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(got_values[3:], qkv[:, 40:].reshape(2, 2, 8))
