"""Elementwise converters: arithmetic with numpy broadcasting, activations, casts, comparisons,
and functions composed of exp and log."""

from __future__ import annotations

from ... import op as R
from ...ir.expr import Constant
from .convert_common import const, require_float, scalar_like
from .loader import ir_dtype
from .registry import NodeContext, converter

# -- elementwise ----------------------------------------------------------------------------------

_BINARY = {"Add": "add", "Sub": "subtract", "Mul": "multiply", "Div": "divide", "Equal": "equal",
           "Less": "less", "Greater": "greater", "LessOrEqual": "less_equal", "GreaterOrEqual": "greater_equal",
           "And": "logical_and", "Or": "logical_or"}


def _binary(name):
    def convert(ctx: NodeContext):
        return R.make_call(name, ctx.input(0), ctx.input(1))

    return convert


for _onnx, _ir in _BINARY.items():
    converter(_onnx)(_binary(_ir))


@converter("Pow")
def _pow(ctx: NodeContext):
    exponent = ctx.input(1)
    if ctx.dtype(1) != ctx.dtype(0):  # ONNX lets the exponent have a type of its own
        exponent = R.astype(exponent, dtype=ctx.dtype(0))
    return R.power(ctx.input(0), exponent)


_UNARY = {"Abs": "abs", "Neg": "negative", "Sqrt": "sqrt", "Exp": "exp", "Log": "log", "Relu": "nn.relu",
          "Sigmoid": "sigmoid", "Tanh": "tanh", "Erf": "erf", "Sin": "sin", "Cos": "cos", "Floor": "floor",
          "Ceil": "ceil", "Round": "round", "Asin": "asin", "Acos": "acos", "Atan": "atan"}
_FLOAT_ONLY = {"sqrt", "exp", "log", "sigmoid", "tanh", "erf", "sin", "cos", "floor", "ceil", "round", "asin", "acos",
               "atan"}


def _unary(name):
    def convert(ctx: NodeContext):
        if name in _FLOAT_ONLY:
            require_float(ctx)
        return R.make_call(name, ctx.input(0))

    return convert


for _onnx, _ir in _UNARY.items():
    converter(_onnx)(_unary(_ir))


@converter("Reciprocal")
def _reciprocal(ctx: NodeContext):
    require_float(ctx)
    return R.divide(scalar_like(ctx, 1.0), ctx.input(0))


@converter("Not")
def _not(ctx: NodeContext):
    return R.equal(ctx.input(0), const(False, "bool"))


@converter("LeakyRelu", attrs=("alpha",))
def _leaky_relu(ctx: NodeContext):
    require_float(ctx)
    x = ctx.input(0)
    alpha = scalar_like(ctx, ctx.attr("alpha", 0.01))
    return R.where(R.less(x, scalar_like(ctx, 0.0)), R.multiply(x, alpha), x)


@converter("PRelu")
def _prelu(ctx: NodeContext):
    x = ctx.input(0)
    return R.where(R.less(x, scalar_like(ctx, 0)), R.multiply(x, ctx.input(1)), x)


@converter("Elu", attrs=("alpha",))
def _elu(ctx: NodeContext):
    require_float(ctx)
    x = ctx.input(0)
    alpha = scalar_like(ctx, ctx.attr("alpha", 1.0))
    negative = R.multiply(alpha, R.subtract(R.exp(x), scalar_like(ctx, 1.0)))
    return R.where(R.less(x, scalar_like(ctx, 0.0)), negative, x)


@converter("Selu", attrs=("alpha", "gamma"))
def _selu(ctx: NodeContext):
    require_float(ctx)
    x = ctx.input(0)
    alpha = scalar_like(ctx, ctx.attr("alpha", 1.67326319217681884765625))
    gamma = scalar_like(ctx, ctx.attr("gamma", 1.05070102214813232421875))
    negative = R.multiply(alpha, R.subtract(R.exp(x), scalar_like(ctx, 1.0)))
    return R.multiply(gamma, R.where(R.less_equal(x, scalar_like(ctx, 0.0)), negative, x))


@converter("HardSigmoid", attrs=("alpha", "beta"))
def _hard_sigmoid(ctx: NodeContext):
    require_float(ctx)
    x = ctx.input(0)
    y = R.add(R.multiply(x, scalar_like(ctx, ctx.attr("alpha", 0.2))), scalar_like(ctx, ctx.attr("beta", 0.5)))
    return R.clip(y, min=0.0, max=1.0)


@converter("HardSwish", since=14)
def _hard_swish(ctx: NodeContext):
    require_float(ctx)
    x = ctx.input(0)
    gate = R.clip(R.add(R.multiply(x, scalar_like(ctx, 1.0 / 6.0)), scalar_like(ctx, 0.5)), min=0.0, max=1.0)
    return R.multiply(x, gate)


# Below this, log(1 + u) is its series, to u^4 (relative error under u^4 / 5, 2e-9: below float32's
# precision) or, in float64, to u^8 (1e-17); above, 1 + u rounds by under 6e-6 of u in float32 and
# 1e-14 in float64.
LOG1P_SERIES_BELOW = 0.01


def _log1p(ctx: NodeContext, u):
    """log(1 + u) for u >= 0 without losing u's digits where 1 + u rounds them away."""
    c = lambda v: scalar_like(ctx, v)  # noqa: E731
    terms = 8 if ctx.dtype(0) == "float64" else 4
    series = c((-1.0) ** (terms + 1) / terms)  # Horner: u (1 - u (1/2 - u (1/3 - ...)))
    for k in range(terms - 1, 0, -1):
        series = R.add(c((-1.0) ** (k + 1) / k), R.multiply(u, series))
    series = R.multiply(u, series)
    return R.where(R.less(u, c(LOG1P_SERIES_BELOW)), series, R.log(R.add(u, c(1.0))))


@converter("Softplus")
def _softplus(ctx: NodeContext):
    """log(1 + e^x) as max(x, 0) + log1p(e^-|x|): no overflow for large x, and large negative x keep
    their digits (Mish's expansion is x * tanh(Softplus(x)))."""
    require_float(ctx)
    x = ctx.input(0)
    return R.add(R.maximum(x, scalar_like(ctx, 0.0)), _log1p(ctx, R.exp(R.negative(R.abs(x)))))


@converter("Softsign")
def _softsign(ctx: NodeContext):
    require_float(ctx)
    x = ctx.input(0)
    return R.divide(x, R.add(R.abs(x), scalar_like(ctx, 1.0)))


@converter("Gelu", since=20, attrs=("approximate",))
def _gelu(ctx: NodeContext):
    require_float(ctx)
    approximate = ctx.attr("approximate", b"none")
    approximate = approximate.decode() if isinstance(approximate, bytes) else approximate
    if approximate not in ("none", "tanh"):
        raise ctx.error(f"approximate={approximate!r} is not supported (none, tanh)")
    return (R.nn.gelu_tanh if approximate == "tanh" else R.nn.gelu)(ctx.input(0))


@converter("Sign")
def _sign(ctx: NodeContext):
    x = ctx.input(0)
    zero, one = scalar_like(ctx, 0), scalar_like(ctx, 1)
    negative = R.where(R.less(x, zero), scalar_like(ctx, -1), zero)
    return R.where(R.greater(x, zero), one, negative)


def _variadic(name):
    def convert(ctx: NodeContext):
        inputs = [ctx.input(i) for i in range(len(ctx.inputs))]
        result = inputs[0]
        for other in inputs[1:]:
            result = R.make_call(name, result, other)
        if ctx.node.op_type == "Mean":
            require_float(ctx)
            result = R.divide(result, scalar_like(ctx, float(len(inputs))))
        elif len(inputs) == 1:  # a lone input is passed through as a new value
            result = R.add(result, scalar_like(ctx, 0))
        return result

    return convert


converter("Sum")(_variadic("add"))
converter("Mean")(_variadic("add"))
converter("Max")(_variadic("maximum"))
converter("Min")(_variadic("minimum"))


@converter("Where")
def _where(ctx: NodeContext):
    return R.where(ctx.input(0), ctx.input(1), ctx.input(2))


@converter("Clip")
def _clip(ctx: NodeContext):
    """Opset 11 took min and max as inputs (optional); as tensors they may broadcast, so they are
    maximum/minimum, which also keeps integer inputs integer."""
    x = ctx.input(0)
    if ctx.has_input(1):
        x = R.maximum(x, ctx.input(1))
    if ctx.has_input(2):
        x = R.minimum(x, ctx.input(2))
    if not ctx.has_input(1) and not ctx.has_input(2):
        x = R.add(x, scalar_like(ctx, 0))
    return x


@converter("Cast", attrs=("to", "saturate", "round_mode"))
def _cast(ctx: NodeContext):
    dtype = ir_dtype(int(ctx.attr("to")), f"{ctx.node.op_type} 'to'")
    if isinstance(ctx.inputs[0], Constant):
        return Constant(ctx.inputs[0].data.astype(dtype))
    return R.astype(ctx.input(0), dtype=dtype)


@converter("CastLike", since=15, attrs=("saturate", "round_mode"))
def _cast_like(ctx: NodeContext):
    dtype = ctx.dtype(1)
    if isinstance(ctx.inputs[0], Constant):
        return Constant(ctx.inputs[0].data.astype(dtype))
    return R.astype(ctx.input(0), dtype=dtype)


@converter("Identity")
def _identity(ctx: NodeContext):
    return ctx.input(0)


# -- functions of exp and log ---------------------------------------------------------------------


def _composed(build):
    def convert(ctx: NodeContext):
        require_float(ctx)
        return build(ctx, ctx.input(0), lambda v: scalar_like(ctx, v))

    return convert


_COMPOSED = {
    "Sinh": lambda ctx, x, c: R.multiply(R.subtract(R.exp(x), R.exp(R.negative(x))), c(0.5)),
    "Cosh": lambda ctx, x, c: R.multiply(R.add(R.exp(x), R.exp(R.negative(x))), c(0.5)),
    "Tan": lambda ctx, x, c: R.divide(R.sin(x), R.cos(x)),
    "Asinh": lambda ctx, x, c: R.log(R.add(x, R.sqrt(R.add(R.multiply(x, x), c(1.0))))),
    "Acosh": lambda ctx, x, c: R.log(R.add(x, R.sqrt(R.subtract(R.multiply(x, x), c(1.0))))),
    "Atanh": lambda ctx, x, c: R.multiply(R.log(R.divide(R.add(c(1.0), x), R.subtract(c(1.0), x))), c(0.5)),
    "Mish": lambda ctx, x, c: _mish_in_float32(x, c) if ctx.dtype(0) == "float16" else _mish(x, c),
}


# Past this, tanh(softplus(x)) is 1 in float32 (and e^x squared would overflow): Mish is x.
MISH_LINEAR_FROM = 20.0


def _mish_in_float32(x, c):
    """float16's Mish computed in float32 and rounded once: n = e^x (e^x + 2) passes float16's
    65504 from x = 5.5, where n / (n + 2) would be inf / inf."""
    return R.astype(_mish(R.astype(x, dtype="float32"), lambda v: const(v, "float32")), dtype="float16")


def _mish(x, c):
    """x * tanh(log(1 + e^x)), as x * n / (n + 2) with n = e^x (e^x + 2), which it equals: no
    log(1 + tiny) losing the digits of large negative x, only exp's own error."""
    e = R.exp(R.minimum(x, c(MISH_LINEAR_FROM)))  # (the branch not taken overflows no more)
    n = R.multiply(e, R.add(e, c(2.0)))
    return R.where(R.greater(x, c(MISH_LINEAR_FROM)), x, R.multiply(x, R.divide(n, R.add(n, c(2.0)))))
for _onnx, _build in _COMPOSED.items():
    converter(_onnx)(_composed(_build))
