"""Elementwise operators: binary with broadcasting, unary math, clip, astype, where."""

from __future__ import annotations

import math

import numpy as np

from ..ir.errors import DeductionError
from ..ir.struct_info import TensorStructInfo
from ..tir.ir import Const, Unary, binary, cast, intrinsic, is_float, select
from .common import (
    FLOAT_DTYPES,
    broadcast_shapes,
    require_float,
    result_tensor,
    same_dtype,
    same_vdevice,
    tensor_input,
)
from .lowering import as_value
from .registry import register_op

# -- binary -----------------------------------------------------------------


def _deduce_binary(out_dtype: str | None):
    def deduce(call, ctx):
        infos = [tensor_input(call, i, ctx) for i in range(2)]
        dtype = same_dtype(call, infos, ctx)
        shape = broadcast_shapes(call, [s.shape for s in infos], ctx)
        ndim = max(s.ndim for s in infos) if all(s.ndim >= 0 for s in infos) else -1
        return result_tensor(shape, out_dtype or dtype, ndim, same_vdevice(infos, call, ctx))

    return deduce


def _true_divide(a, b):
    if np.issubdtype(a.dtype, np.integer):
        # Integer division truncates toward zero, as in C, WGSL and TVM; signed operands widened
        # first, since |-128| is not an int8.
        wide = np.int64 if np.issubdtype(a.dtype, np.signedinteger) else a.dtype
        a_wide, b_wide = a.astype(wide), b.astype(wide)
        quotient = np.abs(a_wide) // np.abs(b_wide)
        return (quotient * np.sign(a_wide) * np.sign(b_wide)).astype(a.dtype)
    return np.divide(a, b)


BINARY = {
    "add": np.add,
    "subtract": np.subtract,
    "multiply": np.multiply,
    "divide": _true_divide,
    "floor_divide": np.floor_divide,
    "power": np.power,
    "maximum": np.maximum,
    "minimum": np.minimum,
}
COMPARISON = {
    "equal": np.equal,
    "not_equal": np.not_equal,
    "less": np.less,
    "less_equal": np.less_equal,
    "greater": np.greater,
    "greater_equal": np.greater_equal,
    "logical_and": np.logical_and,
    "logical_or": np.logical_or,
}


def _binary_reference(fn):
    def reference(a, b):
        return np.asarray(fn(a, b)).astype(np.result_type(a, b) if fn not in COMPARISON.values()
                                           else np.bool_)

    return reference


def _float_or_int(float_fn, int_fn):
    return lambda a, b: float_fn(a, b) if is_float(a.dtype) else int_fn(a, b)


EXACT_POWERS = 8  # integer exponents up to this are products of the base (what models and tests use)


def _integer_power(a, b):
    """``a ** b`` for integers: for exponents 0..EXACT_POWERS, the product of that many bases (exact,
    wrapping as numpy's integers do); above, through f32's pow (WGSL has no integer pow, and its pow,
    exp2(y * log2(x)), is undefined for a negative base and approximate: llvmpipe's 5 ** 2 is 24.9):
    |a| ** b, negated for a negative base and an odd exponent, rounded."""
    base, exponent = cast(a, "f32"), cast(b, "f32")
    if a.dtype == "u32":
        power = cast(intrinsic("round", intrinsic("pow", base, exponent)), a.dtype)
    else:
        magnitude = intrinsic("pow", intrinsic("abs", base), exponent)
        odd = binary("!=", binary("%", b, Const(2, b.dtype)), Const(0, b.dtype))
        negative = binary("&&", binary("<", a, Const(0, a.dtype)), odd)
        power = cast(intrinsic("round", select(negative, Unary("neg", magnitude, "f32"), magnitude)), a.dtype)
    products = [Const(1, a.dtype)]
    for _ in range(EXACT_POWERS):
        products.append(binary("*", products[-1], a))
    for k in range(EXACT_POWERS, -1, -1):
        power = select(binary("==", b, Const(k, b.dtype)), products[k], power)
    return power


def _float_power(a, b):
    """``a ** b`` for floats: an integer exponent 0..EXACT_POWERS is that many products of the base
    (rounded per product, not once; WGSL's pow is exp2(y * log2(x)), undefined for a negative base
    and approximate: llvmpipe's is 0.4% off); other whole exponents of a negative base are |a| ** b
    with the sign of an odd power; the rest is pow (whose value for a negative base and a fractional
    exponent is the target's: NaN in C and on Mesa, undefined in WGSL and SPIR-V)."""
    zero, half, one = Const(0.0, a.dtype), Const(0.5, a.dtype), Const(1.0, a.dtype)
    magnitude = intrinsic("pow", intrinsic("abs", a), b)
    if isinstance(b, Const):
        # The usual case (x ** 2, x ** 3): choose here, reading the base only as often as the form
        # needs. A fused kernel inlines every read of a value, so the run-time choice below (the base
        # read 36 times) would multiply through a chain of powers.
        k = float(b.value)
        if k.is_integer() and 0 <= k <= EXACT_POWERS:
            power = one
            for index in range(int(k)):
                power = a if index == 0 else binary("*", power, a)
            return power
        if k.is_integer():
            signed = Unary("neg", magnitude, a.dtype) if int(k) % 2 else magnitude
            return select(binary("<", a, zero), signed, magnitude)
        return intrinsic("pow", a, b)
    odd = binary("==", binary("-", b, binary("*", Const(2.0, b.dtype), intrinsic("floor", binary("*", b, half)))), one)
    whole = binary("==", intrinsic("floor", b), b)
    power = select(binary("&&", binary("<", a, zero), whole), select(odd, Unary("neg", magnitude, a.dtype), magnitude),
                   intrinsic("pow", a, b))
    products = [one]
    for _ in range(EXACT_POWERS):
        products.append(binary("*", products[-1], a))
    for k in range(EXACT_POWERS, -1, -1):
        power = select(binary("==", b, Const(float(k), b.dtype)), products[k], power)
    return power


# How each binary op computes one element in a kernel.
BINARY_KERNEL = {
    "add": lambda a, b: binary("+", a, b),
    "subtract": lambda a, b: binary("-", a, b),
    "multiply": lambda a, b: binary("*", a, b),
    "divide": lambda a, b: binary("/", a, b),
    "floor_divide": _float_or_int(lambda a, b: intrinsic("floor", binary("/", a, b)),
                                  lambda a, b: binary("/", a, b) if a.dtype == "u32"  # (already floor)
                                  else intrinsic("floordiv", a, b)),
    "power": _float_or_int(_float_power, _integer_power),
    "maximum": lambda a, b: binary("max", a, b),
    "minimum": lambda a, b: binary("min", a, b),
    "equal": lambda a, b: binary("==", a, b),
    "not_equal": lambda a, b: binary("!=", a, b),
    "less": lambda a, b: binary("<", a, b),
    "less_equal": lambda a, b: binary("<=", a, b),
    "greater": lambda a, b: binary(">", a, b),
    "greater_equal": lambda a, b: binary(">=", a, b),
    "logical_and": lambda a, b: binary("&&", a, b),
    "logical_or": lambda a, b: binary("||", a, b),
}


def _legalize_binary(name):
    return lambda call, ctx: ctx.elementwise(BINARY_KERNEL[name])


for _name, _fn in BINARY.items():
    register_op(_name, inputs=("x1", "x2"), deduce=_deduce_binary(None), reference=_binary_reference(_fn),
                legalize=_legalize_binary(_name))
for _name, _fn in COMPARISON.items():
    register_op(_name, inputs=("x1", "x2"), deduce=_deduce_binary("bool"), reference=_binary_reference(_fn),
                legalize=_legalize_binary(_name))


# -- unary ------------------------------------------------------------------


def _deduce_unary(float_only: bool):
    def deduce(call, ctx):
        x = tensor_input(call, 0, ctx)
        if float_only:
            require_float(call, x, ctx)
        return x

    return deduce


_erf = np.vectorize(math.erf, otypes=[np.float64])


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


UNARY = {
    # name: (numpy reference computed in float64 for floats, float only?)
    "exp": (np.exp, True),
    "log": (np.log, True),
    "sqrt": (np.sqrt, True),
    "rsqrt": (lambda x: 1.0 / np.sqrt(x), True),
    "tanh": (np.tanh, True),
    "sigmoid": (_sigmoid, True),
    "erf": (_erf, True),
    "sin": (np.sin, True),
    "cos": (np.cos, True),
    "asin": (np.arcsin, True),
    "acos": (np.arccos, True),
    "atan": (np.arctan, True),
    "floor": (np.floor, True),
    "ceil": (np.ceil, True),
    "round": (np.round, True),
    "negative": (np.negative, False),
    "abs": (np.abs, False),
    "square": (np.square, False),
    "nn.relu": (lambda x: np.maximum(x, 0), False),
    "nn.silu": (lambda x: x * _sigmoid(x), True),
    "nn.gelu": (lambda x: 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0))), True),
    "nn.gelu_tanh": (lambda x: 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi)
                                                         * (x + 0.044715 * x ** 3))), True),
}


def _unary_reference(fn):
    def reference(x):
        if x.dtype.name in FLOAT_DTYPES:
            return np.asarray(fn(x.astype(np.float64))).astype(x.dtype)
        return np.asarray(fn(x)).astype(x.dtype)

    return reference


def _sigmoid_kernel(x):
    one = Const(1.0, x.dtype)
    return binary("/", one, binary("+", one, intrinsic("exp", Unary("neg", x, x.dtype))))


def _gelu_kernel(x):
    half, one = Const(0.5, x.dtype), Const(1.0, x.dtype)
    inner = intrinsic("erf", binary("*", x, Const(1 / math.sqrt(2.0), x.dtype)))
    return binary("*", binary("*", half, x), binary("+", one, inner))


def _gelu_tanh_kernel(x):
    half, one = Const(0.5, x.dtype), Const(1.0, x.dtype)
    cube = binary("*", binary("*", x, x), x)
    inner = binary("*", Const(math.sqrt(2.0 / math.pi), x.dtype),
                   binary("+", x, binary("*", Const(0.044715, x.dtype), cube)))
    return binary("*", binary("*", half, x), binary("+", one, intrinsic("tanh", inner)))


def _arcsine_parts(x):
    """(x, sqrt(1 - x^2)) with 1 - x^2 as (1 - x)(1 + x), exact where it cancels (|x| near 1).
    asin and acos are atan2 of these: GPU drivers' own asin/acos are approximations (Mesa's within
    about 3e-4), their atan2 is as good as their atan."""
    one = Const(1.0, x.dtype)
    return x, intrinsic("sqrt", binary("*", binary("-", one, x), binary("+", one, x)))


def _zero(x):
    return Const(0.0, x.dtype) if is_float(x.dtype) else Const(0, x.dtype)


UNARY_KERNEL = {
    "sigmoid": _sigmoid_kernel,
    "negative": lambda x: Unary("neg", x, x.dtype),
    "square": lambda x: binary("*", x, x),
    "nn.relu": lambda x: binary("max", x, _zero(x)),
    "nn.silu": lambda x: binary("*", x, _sigmoid_kernel(x)),
    "nn.gelu": _gelu_kernel,
    "nn.gelu_tanh": _gelu_tanh_kernel,
    "asin": lambda x: intrinsic("atan2", *_arcsine_parts(x)),
    "acos": lambda x: intrinsic("atan2", *reversed(_arcsine_parts(x))),
}


def _legalize_unary(name):
    fn = UNARY_KERNEL.get(name) or (lambda x: intrinsic(name, x))
    return lambda call, ctx: ctx.elementwise(fn)


for _name, (_fn, _float_only) in UNARY.items():
    register_op(_name, inputs=("x",), deduce=_deduce_unary(_float_only), reference=_unary_reference(_fn),
                legalize=_legalize_unary(_name))


# -- clip -----------------------------------------------------------------------


def _deduce_clip(call, ctx):
    x = tensor_input(call, 0, ctx)
    if x.dtype == "bool":
        raise DeductionError("dtype mismatch", f"clip needs a number tensor, {ctx.show(call.args[0])} is bool")
    if call.attr("min") > call.attr("max"):
        raise DeductionError("invalid attribute", f"clip needs min <= max, got min={call.attr('min')} "
                             f"max={call.attr('max')}")
    return x


def _bounds(low, high, dtype: str):
    """The bounds as the tensor's dtype compares: an integer tensor clips to the integers inside
    [low, high] that it can hold, in the kernel and the reference alike. Infinite means none."""
    if np.issubdtype(np.dtype(dtype), np.floating):
        return low, high
    info = np.iinfo(dtype)
    return (None if low <= info.min else math.ceil(low)), (None if high >= info.max else math.floor(high))


def _clip_reference(x, min, max):  # the attribute names, as Relax spells them
    low, high = _bounds(min, max, x.dtype.name)
    out = x if low is None else np.maximum(x, low)
    return (out if high is None else np.minimum(out, high)).astype(x.dtype)


def _legalize_clip(call, ctx):
    low, high = _bounds(call.attr("min"), call.attr("max"), call.args[0].struct_info.dtype)

    def clip(x):
        as_type = float if is_float(x.dtype) else int
        # An infinite bound is left out: WGSL has no infinity literal, and it would compare to nothing.
        if low is not None and low != -math.inf:
            x = binary("max", x, Const(as_type(low), x.dtype))
        if high is not None and high != math.inf:
            x = binary("min", x, Const(as_type(high), x.dtype))
        return x

    return ctx.elementwise(clip)


# ReLU6 is clip(x, min=0, max=6); the bounds are attributes rather than tensors, and a bound left out
# is no bound.
register_op("clip", inputs=("x",), attrs={"min": -math.inf, "max": math.inf}, deduce=_deduce_clip,
            reference=_clip_reference, legalize=_legalize_clip)


# -- astype, where ------------------------------------------------------------


def _deduce_astype(call, ctx):
    x = tensor_input(call, 0, ctx)
    dtype = call.attr("dtype")
    if not dtype:
        raise DeductionError("invalid attribute", "astype needs a dtype")
    return TensorStructInfo(x.shape, dtype, x.ndim, x.vdevice)


register_op("astype", inputs=("x",), attrs={"dtype": ""}, deduce=_deduce_astype,
            reference=lambda x, dtype: x.astype(dtype),
            legalize=lambda call, ctx: ctx.elementwise(lambda x: as_value(x, ctx.output.dtype)))


def _deduce_where(call, ctx):
    infos = [tensor_input(call, i, ctx) for i in range(3)]
    if infos[0].dtype and infos[0].dtype != "bool":
        raise DeductionError("dtype mismatch", f"where needs a bool condition, "
                             f"{ctx.show(call.args[0])} is {infos[0].dtype}")
    branches = infos[1:]
    known = {s.dtype for s in branches if s.dtype}
    if len(known) > 1:
        raise DeductionError("dtype mismatch", f"{ctx.show(call.args[1])} is {branches[0].dtype}, "
                             f"{ctx.show(call.args[2])} is {branches[1].dtype}")
    shape = broadcast_shapes(call, [s.shape for s in infos], ctx)
    ndim = max(s.ndim for s in infos) if all(s.ndim >= 0 for s in infos) else -1
    return result_tensor(shape, known.pop() if known else "", ndim, same_vdevice(infos, call, ctx))


register_op("where", inputs=("condition", "x1", "x2"), deduce=_deduce_where,
            reference=lambda c, a, b: np.where(c, a, b).astype(np.result_type(a, b)),
            legalize=lambda call, ctx: ctx.elementwise(lambda c, a, b: select(c, a, b)))
