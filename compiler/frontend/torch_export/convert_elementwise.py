"""Elementwise converters: arithmetic with torch's type promotion, activations, comparisons,
selection, casts, identities, and tensors made from nothing (full, arange)."""

from __future__ import annotations

import math

import numpy as np

from ... import arith
from ... import op as R
from ...ir.expr import Constant
from .convert_common import as_tensor, cast, compute_dtype, const, is_static
from .registry import NodeContext, converter

# -- arithmetic -----------------------------------------------------------------------------------

_ARITHMETIC = {"add": "add", "sub": "subtract", "mul": "multiply", "div": "divide"}


def _arithmetic(name: str):
    def convert(ctx: NodeContext):
        dtype = ctx.out_dtype
        a, b = as_tensor(ctx, ctx["self"], dtype), as_tensor(ctx, ctx["other"], dtype)
        alpha = ctx["alpha"]
        if alpha is not None and alpha != 1:
            b = R.multiply(b, const(alpha, dtype))
        return R.make_call(name, a, b)

    return convert


for _aten, _ir in _ARITHMETIC.items():
    converter(f"aten.{_aten}.Tensor", f"aten.{_aten}.Scalar")(_arithmetic(_ir))


@converter("aten.rsub.Scalar", "aten.rsub.Tensor")
def _rsub(ctx: NodeContext):
    dtype = ctx.out_dtype
    a, b = as_tensor(ctx, ctx["self"], dtype), as_tensor(ctx, ctx["other"], dtype)
    if ctx["alpha"] not in (None, 1):
        a = R.multiply(a, const(ctx["alpha"], dtype))
    return R.subtract(b, a)


@converter("aten.div.Tensor_mode", "aten.div.Scalar_mode")
def _div_mode(ctx: NodeContext):
    mode = ctx["rounding_mode"]
    dtype = ctx.out_dtype
    a, b = as_tensor(ctx, ctx["self"], dtype), as_tensor(ctx, ctx["other"], dtype)
    if mode is None:
        return R.divide(a, b)
    if mode == "floor":
        return R.floor_divide(a, b) if dtype not in ("float16", "float32", "float64") else R.floor(R.divide(a, b))
    if mode == "trunc" and dtype in ("float16", "float32", "float64"):
        q = R.divide(a, b)
        return R.where(R.less(q, const(0, dtype)), R.ceil(q), R.floor(q))
    raise ctx.error(f"rounding_mode={mode!r} on {dtype} is not supported")


@converter("aten.floor_divide.default")
def _floor_divide(ctx: NodeContext):
    dtype = ctx.out_dtype
    return R.floor_divide(as_tensor(ctx, ctx["self"], dtype), as_tensor(ctx, ctx["other"], dtype))


@converter("aten.pow.Tensor_Scalar", "aten.pow.Tensor_Tensor", "aten.pow.Scalar")
def _pow(ctx: NodeContext):
    dtype = ctx.out_dtype
    base, exponent = ctx["self"], ctx["exponent"]
    if isinstance(exponent, int | float) and not isinstance(exponent, bool):
        x = as_tensor(ctx, base, dtype)
        if exponent == 2:
            return R.multiply(x, x)
        if exponent == 1:
            return x
        if exponent == 0.5:
            return R.sqrt(x)
    return R.power(as_tensor(ctx, base, dtype), as_tensor(ctx, exponent, dtype))


@converter("aten.maximum.default", "aten.minimum.default")
def _max_min(ctx: NodeContext):
    dtype = ctx.out_dtype
    name = "maximum" if "maximum" in ctx.overload else "minimum"
    return R.make_call(name, as_tensor(ctx, ctx["self"], dtype), as_tensor(ctx, ctx["other"], dtype))


# -- unary functions and activations --------------------------------------------------------------

_UNARY = {"neg": "negative", "abs": "abs", "sqrt": "sqrt", "rsqrt": "rsqrt", "exp": "exp", "log": "log",
          "sin": "sin", "cos": "cos", "tanh": "tanh", "sigmoid": "sigmoid", "erf": "erf", "floor": "floor",
          "ceil": "ceil", "round": "round", "relu": "nn.relu", "silu": "nn.silu"}


def _unary(name: str):
    def convert(ctx: NodeContext):
        return R.make_call(name, cast(ctx.tensor("self"), ctx.out_dtype))

    return convert


for _aten, _ir in _UNARY.items():
    converter(f"aten.{_aten}.default")(_unary(_ir))


@converter("aten.gelu.default")
def _gelu(ctx: NodeContext):
    approximate = ctx["approximate"] or "none"
    if approximate not in ("none", "tanh"):
        raise ctx.error(f"approximate={approximate!r} is not supported", "invalid")
    return (R.nn.gelu if approximate == "none" else R.nn.gelu_tanh)(ctx.tensor("self"))


@converter("aten.reciprocal.default")
def _reciprocal(ctx: NodeContext):
    return R.divide(const(1, ctx.out_dtype), cast(ctx.tensor("self"), ctx.out_dtype))


@converter("aten.log1p.default")
def _log1p(ctx: NodeContext):
    return R.log(R.add(cast(ctx.tensor("self"), ctx.out_dtype), const(1, ctx.out_dtype)))


@converter("aten.hardtanh.default")
def _hardtanh(ctx: NodeContext):
    low, high = ctx["min_val"], ctx["max_val"]
    return R.clip(ctx.tensor("self"), min=float(-1 if low is None else low), max=float(1 if high is None else high))


@converter("aten.clamp.default")
def _clamp(ctx: NodeContext):
    low, high = ctx["min"], ctx["max"]
    return R.clip(cast(ctx.tensor("self"), ctx.out_dtype), min=-math.inf if low is None else float(low),
                  max=math.inf if high is None else float(high))


@converter("aten.clamp_min.default")
def _clamp_min(ctx: NodeContext):
    return R.clip(ctx.tensor("self"), min=float(ctx["min"]))


@converter("aten.clamp_max.default")
def _clamp_max(ctx: NodeContext):
    return R.clip(ctx.tensor("self"), max=float(ctx["max"]))


def _hard_gate(x, dtype: str):
    """clip(x / 6 + 1/2, 0, 1): hardsigmoid, and hardswish's gate."""
    return R.clip(R.add(R.multiply(x, const(1.0 / 6.0, dtype)), const(0.5, dtype)), min=0.0, max=1.0)


@converter("aten.hardswish.default")
def _hardswish(ctx: NodeContext):
    x = ctx.tensor("self")
    return R.multiply(x, _hard_gate(x, ctx.dtype(x)))


@converter("aten.hardsigmoid.default")
def _hardsigmoid(ctx: NodeContext):
    x = ctx.tensor("self")
    return _hard_gate(x, ctx.dtype(x))


@converter("aten.leaky_relu.default")
def _leaky_relu(ctx: NodeContext):
    x = ctx.tensor("self")
    slope = const(0.01 if ctx["negative_slope"] is None else ctx["negative_slope"], ctx.dtype(x))
    return R.where(R.less(x, const(0, ctx.dtype(x))), R.multiply(x, slope), x)


@converter("aten.elu.default")
def _elu(ctx: NodeContext):
    x = ctx.tensor("self")
    dtype = ctx.dtype(x)
    alpha, scale, input_scale = (float(ctx[k]) for k in ("alpha", "scale", "input_scale"))
    negative = R.multiply(const(alpha, dtype), R.subtract(R.exp(R.multiply(x, const(input_scale, dtype))),
                                                          const(1, dtype)))
    return R.multiply(const(scale, dtype), R.where(R.less_equal(x, const(0, dtype)), negative, x))


# -- comparisons and logic ------------------------------------------------------------------------

_COMPARE = {"eq": "equal", "ne": "not_equal", "lt": "less", "le": "less_equal", "gt": "greater",
            "ge": "greater_equal"}


def _compare(name: str):
    def convert(ctx: NodeContext):
        dtype = compute_dtype(ctx, ctx["self"], ctx["other"])
        return R.make_call(name, as_tensor(ctx, ctx["self"], dtype), as_tensor(ctx, ctx["other"], dtype))

    return convert


for _aten, _ir in _COMPARE.items():
    converter(f"aten.{_aten}.Tensor", f"aten.{_aten}.Scalar")(_compare(_ir))


@converter("aten.logical_not.default", "aten.bitwise_not.default")
def _logical_not(ctx: NodeContext):
    x = ctx.tensor("self")
    if ctx.overload.startswith("aten.bitwise") and ctx.dtype(x) != "bool":
        raise ctx.error(f"bitwise_not of {ctx.dtype(x)} is not supported (bool only)")
    return R.equal(cast(x, "bool"), const(False, "bool"))


@converter("aten.logical_and.default", "aten.logical_or.default", "aten.bitwise_and.Tensor",
           "aten.bitwise_or.Tensor")
def _logical(ctx: NodeContext):
    a, b = ctx.tensor("self"), ctx.tensor("other")
    if ctx.overload.startswith("aten.bitwise") and (ctx.dtype(a), ctx.dtype(b)) != ("bool", "bool"):
        raise ctx.error("bitwise ops on integers are not supported (bool only)")
    name = "logical_and" if "and" in ctx.overload else "logical_or"
    return R.make_call(name, cast(a, "bool"), cast(b, "bool"))


@converter("aten.where.self", "aten.where.ScalarSelf", "aten.where.ScalarOther", "aten.where.Scalar")
def _where(ctx: NodeContext):
    dtype = ctx.out_dtype
    return R.where(cast(ctx.tensor("condition"), "bool"), as_tensor(ctx, ctx["self"], dtype),
                   as_tensor(ctx, ctx["other"], dtype))


@converter("aten.masked_fill.Scalar", "aten.masked_fill.Tensor")
def _masked_fill(ctx: NodeContext):
    x = ctx.tensor("self")
    return R.where(cast(ctx.tensor("mask"), "bool"), as_tensor(ctx, ctx["value"], ctx.dtype(x)), x)


# -- casts and identities -------------------------------------------------------------------------


@converter("aten._to_copy.default", "aten.to.dtype", "aten.to.dtype_layout", "aten.to.device",
           "aten.type_as.default")
def _to(ctx: NodeContext):
    return cast(ctx.tensor("self"), ctx.out_dtype)


@converter("aten.clone.default", "aten.contiguous.default", "aten.alias.default", "aten.detach.default",
           "aten.lift_fresh_copy.default")
def _identity(ctx: NodeContext):
    return ctx.tensor("self")


@converter("aten.dropout.default", "aten.feature_dropout.default", "aten.alpha_dropout.default")
def _dropout(ctx: NodeContext):
    if ctx["train"] and ctx["p"]:
        raise ctx.error("dropout in training mode is not supported: export the module in eval mode")
    return ctx.tensor("input")


@converter("aten._assert_tensor_metadata.default", "aten._assert_scalar.default",
           "aten.sym_constrain_range_for_size.default", "aten._assert_async.msg")
def _assertion(ctx: NodeContext):
    """torch's checks of what it traced; the IR checks shapes and dtypes itself."""
    return None


# -- tensors made from nothing --------------------------------------------------------------------


def _filled(ctx: NodeContext, shape, value):
    dtype = ctx.out_dtype
    if all(is_static(ctx, d) for d in shape):
        return Constant(np.full(tuple(ctx.analyzer.as_int(arith.as_expr(d)) for d in shape), value, dtype=dtype))
    if isinstance(value, arith.PrimExpr):
        raise ctx.error("a symbolic fill value with a symbolic shape is not supported")
    return R.full(list(shape), fill_value=value, dtype=dtype)


@converter("aten.full.default", "aten.new_full.default")
def _full(ctx: NodeContext):
    return _filled(ctx, ctx.ints("size"), ctx["fill_value"])


@converter("aten.zeros.default", "aten.new_zeros.default", "aten.ones.default", "aten.new_ones.default",
           "aten.empty.memory_format", "aten.new_empty.default")
def _zeros_ones(ctx: NodeContext):
    return _filled(ctx, ctx.ints("size"), 1 if "ones" in ctx.overload else 0)


@converter("aten.full_like.default", "aten.zeros_like.default", "aten.ones_like.default",
           "aten.empty_like.default")
def _like(ctx: NodeContext):
    value = ctx["fill_value"] if "full" in ctx.overload else (1 if "ones" in ctx.overload else 0)
    return _filled(ctx, ctx.dims(ctx.tensor("self")), value)


@converter("aten.scalar_tensor.default")
def _scalar_tensor(ctx: NodeContext):
    return as_tensor(ctx, ctx["s"], ctx.out_dtype)


@converter("aten.arange.default", "aten.arange.start", "aten.arange.start_step")
def _arange(ctx: NodeContext):
    dtype = ctx.out_dtype
    start, end, step = ctx["start"], ctx["end"], ctx["step"]
    start = 0 if start is None else start
    step = 1 if step is None else step
    values = [v.value if isinstance(v, arith.IntImm) else v for v in (start, end, step)]
    if all(isinstance(v, int | float) for v in values):
        return Constant(np.arange(*values, dtype=dtype))
    if not all(isinstance(v, int | arith.PrimExpr) for v in values) or not isinstance(values[2], int):
        raise ctx.error("arange with symbolic bounds needs integer start, end and a constant step")
    return cast(ctx.emit(R.arange(start=values[0], end=values[1], step=values[2], dtype="int64")), dtype)


@converter("aten.cumsum.default")
def _cumsum(ctx: NodeContext):
    """Prefix sums along ``dim`` in log2(n) steps: y += y shifted by 1, 2, 4 ... (static length)."""
    x = cast(ctx.tensor("self"), ctx.out_dtype)
    dims = ctx.dims(x)
    axis = ctx.axis(ctx["dim"], len(dims))
    length = ctx.analyzer.as_int(dims[axis])
    if length is None:
        raise ctx.error("cumsum along a symbolic dimension is not supported")
    y = x
    shift = 1
    while shift < length:
        pad_shape = list(dims)
        pad_shape[axis] = shift
        zeros = _filled(ctx, pad_shape, 0) if all(is_static(ctx, d) for d in pad_shape) \
            else R.zeros(pad_shape, dtype=ctx.dtype(x))
        kept = R.strided_slice(y, axes=(axis,), begin=(0,), end=(length - shift,))
        y = ctx.emit(R.add(y, R.concat([zeros, kept], axis=axis)))
        shift *= 2
    return y


@converter("aten.sign.default")
def _sign(ctx: NodeContext):
    x = ctx.tensor("self")
    dtype = ctx.dtype(x)
    zero = const(0, dtype)
    return R.where(R.greater(x, zero), const(1, dtype), R.where(R.less(x, zero), const(-1, dtype), zero))


@converter("aten.remainder.Scalar", "aten.remainder.Tensor", "aten.fmod.Scalar", "aten.fmod.Tensor")
def _remainder(ctx: NodeContext):
    """remainder takes the divisor's sign (a - floor(a / b)·b), fmod the dividend's (a - trunc(a / b)·b)."""
    dtype = ctx.out_dtype
    a, b = as_tensor(ctx, ctx["self"], dtype), as_tensor(ctx, ctx["other"], dtype)
    floats = dtype in ("float16", "float32", "float64")
    if ctx.overload.startswith("aten.remainder"):
        quotient = R.floor(R.divide(a, b)) if floats else R.floor_divide(a, b)
    elif floats:
        q = R.divide(a, b)
        quotient = R.where(R.less(q, const(0, dtype)), R.ceil(q), R.floor(q))
    else:  # integers: the floored remainder, moved to the dividend's sign where they differ
        a, b = ctx.emit(a), ctx.emit(b)
        floored = ctx.emit(R.subtract(a, R.multiply(R.floor_divide(a, b), b)))
        zero = const(0, dtype)
        differ = R.logical_and(R.not_equal(floored, zero), R.not_equal(R.less(floored, zero), R.less(a, zero)))
        return R.where(differ, R.subtract(floored, b), floored)
    return R.subtract(a, R.multiply(quotient, b))


@converter("aten.isnan.default")
def _isnan(ctx: NodeContext):
    x = ctx.tensor("self")
    return R.not_equal(x, x)


@converter("aten.isinf.default")
def _isinf(ctx: NodeContext):
    x = ctx.tensor("self")
    return R.equal(R.abs(x), const(np.inf, ctx.dtype(x)))


@converter("aten.log2.default", "aten.exp2.default")
def _log2_exp2(ctx: NodeContext):
    x = cast(ctx.tensor("self"), ctx.out_dtype)
    ln2 = const(np.log(2.0), ctx.out_dtype)
    return R.divide(R.log(x), ln2) if "log2" in ctx.overload else R.exp(R.multiply(x, ln2))


@converter("aten.clamp.Tensor")
def _clamp_tensor(ctx: NodeContext):
    dtype = ctx.out_dtype
    y = cast(ctx.tensor("self"), dtype)
    if ctx["min"] is not None:
        y = R.maximum(y, as_tensor(ctx, ctx["min"], dtype))
    if ctx["max"] is not None:
        y = R.minimum(y, as_tensor(ctx, ctx["max"], dtype))
    return y


@converter("aten.round.decimals")
def _round_decimals(ctx: NodeContext):
    x = ctx.tensor("self")
    scale = const(10.0 ** int(ctx["decimals"]), ctx.dtype(x))
    return R.divide(R.round(R.multiply(x, scale)), scale)
