"""Integer converters: bitwise ops, shifts and bit casts (tessera.op.bitwise says what kernels compute)."""

from __future__ import annotations

import numpy as np

from ... import op as R
from ...ir.expr import Constant
from .loader import ir_dtype
from .registry import NodeContext, converter

_BITWISE = {"BitwiseAnd": "bitwise_and", "BitwiseOr": "bitwise_or", "BitwiseXor": "bitwise_xor"}


def _bitwise(name):
    def convert(ctx: NodeContext):
        return R.make_call(name, ctx.input(0), ctx.input(1))

    return convert


for _onnx, _ir in _BITWISE.items():
    converter(_onnx, since=18)(_bitwise(_ir))


@converter("BitwiseNot", since=18)
def _bitwise_not(ctx: NodeContext):
    return R.bitwise_not(ctx.input(0))


@converter("BitShift", attrs=("direction",))
def _bit_shift(ctx: NodeContext):
    """Opset 11 shifts unsigned integers; opset 28 signed ones too (arithmetic right shifts), and says
    that a count past the width (or negative) shifts every bit out, as tessera.op's shifts do."""
    direction = ctx.attr("direction", b"")
    direction = direction.decode() if isinstance(direction, bytes) else direction
    if direction not in ("LEFT", "RIGHT"):
        raise ctx.error(f"direction={direction!r} must be LEFT or RIGHT", "invalid")
    return (R.left_shift if direction == "LEFT" else R.right_shift)(ctx.input(0), ctx.input(1))


@converter("BitCast", since=26, attrs=("to",))
def _bit_cast(ctx: NodeContext):
    dtype = ir_dtype(int(ctx.attr("to")), "BitCast 'to'")
    source = ctx.dtype(0)
    if np.dtype(source).itemsize != np.dtype(dtype).itemsize:
        raise ctx.error(f"input 0 is {source}, 'to' is {dtype}: BitCast needs types of one size", "invalid")
    if isinstance(ctx.inputs[0], Constant):
        return Constant(np.array(ctx.inputs[0].data, order="C").view(dtype))
    if source == dtype:  # ONNX allows it: the same bits
        return ctx.input(0)
    return R.bitcast(ctx.input(0), dtype=dtype)


# -- float bits: what IsInf, IsNaN and Mod test instead of comparing with infinity ----------------------
# WGSL has no infinity constant (kernels use the largest finite value) and GPU compilers may fold
# x != x to false, so a float32's class is read from its bits.
F32_INF_BITS, F32_NEG_INF_BITS, F32_MAGNITUDE = 0x7F800000, -0x00800000, 0x7FFFFFFF


def float32_bits(x, dtype: str):
    """``x``'s float32 bits as int32 (float16 widened first, which keeps infinities and NaN), or None
    for float64, whose values float32 cannot all hold."""
    if dtype == "float64":
        return None
    return R.bitcast(x if dtype == "float32" else R.astype(x, dtype="float32"), dtype="int32")


def _int32(value: int) -> Constant:
    return Constant(np.array(value, np.int32))


def is_infinite(x, dtype: str, sign: int = 0):
    """Where ``x`` is infinite (of that sign when ``sign`` is 1 or -1)."""
    bits = float32_bits(x, dtype)
    if bits is None:
        if sign:
            return R.equal(x, Constant(np.array(sign * np.inf, dtype)))
        return R.equal(R.abs(x), Constant(np.array(np.inf, dtype)))
    if sign:
        return R.equal(bits, _int32(F32_INF_BITS if sign > 0 else F32_NEG_INF_BITS))
    return R.equal(R.bitwise_and(bits, _int32(F32_MAGNITUDE)), _int32(F32_INF_BITS))


def is_nan(x, dtype: str):
    bits = float32_bits(x, dtype)
    if bits is None:
        return R.not_equal(x, x)
    # An exponent of all ones and a mantissa that is not zero.
    return R.greater(R.bitwise_and(bits, _int32(F32_MAGNITUDE)), _int32(F32_INF_BITS))
