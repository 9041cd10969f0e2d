"""Integer bit operators and bit casts as kernels on every kernel device, against numpy, exactly.

Kernels compute integers in 32-bit words (tessera.op.bitwise): the narrow dtypes' full ranges and
int32/uint32 values with every bit pattern are exact; int64 and uint64 hold what their one word
holds (int64 here within int32's range, whose shifts stay there)."""

import numpy as np
import pytest
from harness import check_op
from tessera import op
from tessera.ir import Tensor

RANGES = {"int8": (-128, 127), "uint8": (0, 255), "int16": (-32768, 32767), "uint16": (0, 65535),
          "int32": (-2**31, 2**31 - 1), "uint32": (0, 2**32 - 1), "int64": (-2**31, 2**31 - 1),
          "uint64": (0, 2**32 - 1)}


def _full_range(dtype, operands):
    low, high = RANGES[dtype]

    def draw(env, rng):
        return [rng.integers(low, high, env["n"], endpoint=True, dtype=np.int64 if low < 0 else np.uint64)
                .astype(dtype) for _ in range(operands)]

    return draw


@pytest.mark.parametrize("dtype", sorted(RANGES))
def test_bitwise(runner, dtype):
    """and, or, xor and not over each dtype's whole range, in one fused kernel and one with broadcasting;
    uint64's not is refused (its high word would have to become ones)."""
    def combined(a, b):
        mixed = op.bitwise_or(op.bitwise_and(a, b), b if dtype == "uint64" else op.bitwise_not(b))
        return op.bitwise_xor(mixed, a)

    check_op(runner, combined, [Tensor(("n",), dtype)] * 2, inputs=_full_range(dtype, 2), rtol=0, atol=0,
             sizes=(1, 1000))
    check_op(runner, op.bitwise_and, [Tensor(("n", 3), dtype), Tensor((3,), dtype)], rtol=0, atol=0, sizes=(7,))


SHIFTED = {"int8": (-128, 127), "uint8": (0, 255), "int16": (-32768, 32767), "uint16": (0, 65535),
           "int32": (-2**31, 2**31 - 1), "uint32": (0, 2**32 - 1), "int64": (-2**31, 2**31 - 1)}


@pytest.mark.parametrize("dtype", sorted(SHIFTED))
@pytest.mark.parametrize("name", ["left_shift", "right_shift"])
def test_shifts(runner, name, dtype):
    """Counts from negative to past the width: bits shifted out are lost, a negative or too large count
    shifts out every bit (a signed right shift fills with the sign). int64 shifts left only as far as
    int32 holds (its low word), so its counts stop where every value still fits."""
    low, high = SHIFTED[dtype]
    bits = np.dtype(dtype).itemsize * 8
    signed = low < 0

    def draw(env, rng):
        values = rng.integers(low, high, env["n"], endpoint=True, dtype=np.int64 if signed else np.uint64)
        if dtype == "int64" and name == "left_shift":
            values, counts = rng.integers(-2**15, 2**15, env["n"]), rng.integers(-3, 17, env["n"])
            counts[::5] = 70  # past int64's width: zero
        else:
            counts = rng.integers(-3 if signed else 0, min(bits + 8, 40), env["n"])
        return [values.astype(dtype), counts.astype(dtype)]

    check_op(runner, getattr(op, name), [Tensor(("n",), dtype)] * 2, inputs=draw, rtol=0, atol=0, sizes=(1, 1000))


@pytest.mark.parametrize("source,target", [("float32", "int32"), ("float32", "uint32"), ("int32", "float32"),
                                           ("uint32", "float32"), ("uint32", "int32"), ("int8", "uint8"),
                                           ("uint16", "int16"), ("bool", "uint8")])
def test_bitcast(runner, source, target):
    """The same bits read as another dtype of the same size; floats drawn finite (every bit pattern of
    an integer that a float32 reads back is finite here: exponents below the top)."""
    def draw(env, rng):
        n = env["n"]
        if source == "float32":
            return [(rng.standard_normal(n) * 1e3).astype(np.float32)]
        if source == "bool":
            return [rng.random(n) > 0.5]
        if target == "float32":  # finite, not subnormal: a kernel may flush those to zero
            return [rng.integers(0x00800000, 0x7f000000, n).astype(source)]
        low, high = RANGES[source]
        return [rng.integers(low, high, n, endpoint=True, dtype=np.int64 if low < 0 else np.uint64).astype(source)]

    check_op(runner, lambda x: op.bitcast(x, dtype=target), [Tensor(("n",), source)], inputs=draw,
             rtol=0, atol=0, sizes=(1, 1000))
