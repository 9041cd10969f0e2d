"""Integer bit operators: and, or, xor, not, shifts, and reinterpreting a tensor's bits as another dtype.

Kernels compute integers in 32-bit words (``tessera.tir.compute``): narrow integers sign- or
zero-extended, wrapped to their dtype's range when stored, and int64/uint64 in one i32/u32 word.
Bitwise and, or, xor and not of extended values are the extended results, so they are exact for
every dtype but uint64's not (its high word would have to become ones: refused). Shifts are done on
the u32 bits: a count that is negative or at least the word's width shifts every bit out (zero, or
the sign for a signed right shift), as numpy's shifts do at a dtype's own width; the narrow result
then wraps to its dtype. int64 and uint64 results are their low 32 bits, as their other arithmetic.
"""

from __future__ import annotations

import numpy as np

from ..ir.errors import DeductionError
from ..ir.struct_info import TensorStructInfo
from ..tir.ir import Cast, Const, TExpr, Unary, binary, cast, select
from .common import INT_DTYPES, broadcast_shapes, result_tensor, same_dtype, same_vdevice, tensor_input
from .lowering import as_value
from .registry import register_op

WORD_BITS = 32


def _require_integer(call, sinfo, ctx, index):
    if sinfo.dtype and sinfo.dtype not in INT_DTYPES:
        raise DeductionError("dtype mismatch", f"{call.op.name} needs an integer tensor, "
                             f"{ctx.show(call.args[index])} is {sinfo.dtype}")


def _deduce_binary(call, ctx):
    infos = [tensor_input(call, i, ctx) for i in range(2)]
    dtype = same_dtype(call, infos, ctx)
    for index, info in enumerate(infos):
        _require_integer(call, info, ctx, index)
    shape = broadcast_shapes(call, [s.shape for s in infos], ctx)
    ndim = max(s.ndim for s in infos) if all(s.ndim >= 0 for s in infos) else -1
    return result_tensor(shape, dtype, ndim, same_vdevice(infos, call, ctx))


def _deduce_not(call, ctx):
    x = tensor_input(call, 0, ctx)
    _require_integer(call, x, ctx, 0)
    return x


# -- numpy references: exact at the dtype's own width ----------------------------------------


def _shift_reference(left: bool):
    def reference(x, count):
        x, count = np.broadcast_arrays(x, count)
        bits = x.dtype.itemsize * 8
        # Counts as unsigned numbers: a negative one is as large as can be, past the width.
        inside = (count >= 0) & (count < bits)
        safe = np.where(inside, count, 0).astype(x.dtype)
        if left:
            return np.where(inside, np.left_shift(x, safe), 0).astype(x.dtype)
        filled = np.where(x < 0, -1, 0) if np.issubdtype(x.dtype, np.signedinteger) else 0
        return np.where(inside, np.right_shift(x, safe), filled).astype(x.dtype)

    return reference


# -- kernels ----------------------------------------------------------------------------------


def _bits(x: TExpr) -> TExpr:
    return cast(x, "u32")  # i32 -> u32 keeps the bits in every kernel language


def _from_bits(bits: TExpr, dtype: str) -> TExpr:
    return cast(bits, dtype)


def _shift_kernel(left: bool):
    def fn(x, count):
        bits, count = _bits(x), _bits(count)
        inside = binary("<", count, Const(WORD_BITS, "u32"))
        amount = binary("&", count, Const(WORD_BITS - 1, "u32"))  # never past the width, where C is undefined
        zero = Const(0, "u32")
        if left:
            return _from_bits(select(inside, binary("<<", bits, amount), zero), x.dtype)
        if x.dtype == "u32":
            return select(inside, binary(">>", bits, amount), zero)
        # Arithmetic right shift from logical ones: ~(~x >> n) for a negative x; past the width the
        # sign fills every bit.
        sign = select(binary("<", x, Const(0, "i32")), Const(0xFFFFFFFF, "u32"), zero)
        shifted = select(inside, binary(">>", binary("^", bits, sign), amount), zero)
        return _from_bits(binary("^", shifted, sign), x.dtype)

    return fn


def _not_kernel(x):
    ones = Const(-1, "i32") if x.dtype == "i32" else Const(0xFFFFFFFF, "u32")
    return binary("^", x, ones)


def _legalize(fn, refuse_uint64: bool = False):
    def legalize(call, ctx):
        if refuse_uint64 and ctx.output.storage_dtype == "uint64":
            raise ctx.fail(f"uint64 is not supported by target {ctx.target}: it is computed in its low 32-bit "
                           "word, whose not is not the 64-bit not")
        return ctx.elementwise(fn)

    return legalize


_BITWISE = {"bitwise_and": (np.bitwise_and, "&"), "bitwise_or": (np.bitwise_or, "|"),
            "bitwise_xor": (np.bitwise_xor, "^")}
for _name, (_fn, _symbol) in _BITWISE.items():
    register_op(_name, inputs=("x1", "x2"), deduce=_deduce_binary,
                reference=lambda a, b, fn=_fn: np.asarray(fn(a, b)).astype(np.result_type(a, b)),
                legalize=_legalize(lambda a, b, s=_symbol: binary(s, a, b)))
register_op("bitwise_not", inputs=("x",), deduce=_deduce_not, reference=lambda x: np.invert(x),
            legalize=_legalize(_not_kernel, refuse_uint64=True))
register_op("left_shift", inputs=("x1", "x2"), deduce=_deduce_binary, reference=_shift_reference(True),
            legalize=_legalize(_shift_kernel(True)))
register_op("right_shift", inputs=("x1", "x2"), deduce=_deduce_binary, reference=_shift_reference(False),
            legalize=_legalize(_shift_kernel(False)))


# -- bitcast ------------------------------------------------------------------------------------


def _deduce_bitcast(call, ctx):
    x = tensor_input(call, 0, ctx)
    dtype = call.attr("dtype")
    if not dtype:
        raise DeductionError("invalid attribute", "bitcast needs a dtype")
    if x.dtype and np.dtype(x.dtype).itemsize != np.dtype(dtype).itemsize:
        raise DeductionError("dtype mismatch", f"bitcast keeps the element size: {ctx.show(call.args[0])} is "
                             f"{x.dtype} ({np.dtype(x.dtype).itemsize} bytes), {dtype} has "
                             f"{np.dtype(dtype).itemsize}")
    return TensorStructInfo(x.shape, dtype, x.ndim, x.vdevice)


# Dtypes whose kernel value is all of their bits: the 32-bit ones, and the narrow integers and bool,
# whose extended words hold their value (wrapped to the target dtype on store).
_WHOLE_WORD = {"float32", "int32", "uint32"}
_NARROW = {"bool", "int8", "uint8", "int16", "uint16"}


def _legalize_bitcast(call, ctx):
    source, target = call.args[0].struct_info.dtype, call.attr("dtype")
    out = ctx.output.dtype
    if source in _NARROW and target in _NARROW:
        return ctx.elementwise(lambda x: as_value(x, out))
    if source in _WHOLE_WORD and target in _WHOLE_WORD:
        def fn(x):
            if x.dtype == out:  # the same type: the same bits (a cast through u32 would convert them)
                return x
            if x.dtype == "f32":
                return _from_bits(Unary("bitcast_u32", x, "u32"), out)
            if out == "f32":
                return Unary("bitcast_f32", _bits(x), "f32")
            return Cast(x, out) if x.dtype != out else x

        return ctx.elementwise(fn)
    raise ctx.fail(f"{source} -> {target} is not supported by target {ctx.target}: kernels reinterpret only "
                   "32-bit words and narrow integers (64-bit integers are computed in one 32-bit word, float16 "
                   "in float32)")


register_op("bitcast", inputs=("x",), attrs={"dtype": ""}, deduce=_deduce_bitcast,
            reference=lambda x, dtype: np.array(x, order="C").view(dtype),
            legalize=_legalize_bitcast)
