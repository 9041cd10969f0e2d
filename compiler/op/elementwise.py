"""Elementwise operators: binary with broadcasting, unary math, astype, where."""

from __future__ import annotations

import math

import numpy as np

from ..ir.errors import DeductionError
from ..ir.struct_info import TensorStructInfo
from .common import (
    FLOAT_DTYPES,
    broadcast_shapes,
    require_float,
    result_tensor,
    same_dtype,
    same_vdevice,
    tensor_input,
)
from .registry import register_op

# -- binary -----------------------------------------------------------------


def _deduce_binary(out_dtype: str | None):
    def deduce(call, ctx):
        infos = [tensor_input(call, i, ctx) for i in range(2)]
        dtype = same_dtype(call, infos, ctx)
        shape = broadcast_shapes(call, [s.shape for s in infos], ctx)
        ndim = max(s.ndim for s in infos) if all(s.ndim >= 0 for s in infos) else -1
        return result_tensor(shape, out_dtype or dtype, ndim, same_vdevice(infos))

    return deduce


def _true_divide(a, b):
    if np.issubdtype(a.dtype, np.integer):
        # Integer division truncates toward zero, as in C, WGSL and TVM.
        quotient = np.abs(a) // np.abs(b)
        return (quotient * np.sign(a) * np.sign(b)).astype(a.dtype)
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


for _name, _fn in BINARY.items():
    register_op(_name, inputs=("x1", "x2"), deduce=_deduce_binary(None), reference=_binary_reference(_fn))
for _name, _fn in COMPARISON.items():
    register_op(_name, inputs=("x1", "x2"), deduce=_deduce_binary("bool"), reference=_binary_reference(_fn))


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


for _name, (_fn, _float_only) in UNARY.items():
    register_op(_name, inputs=("x",), deduce=_deduce_unary(_float_only), reference=_unary_reference(_fn))


# -- astype, where ------------------------------------------------------------


def _deduce_astype(call, ctx):
    x = tensor_input(call, 0, ctx)
    dtype = call.attr("dtype")
    if not dtype:
        raise DeductionError("invalid attribute", "astype needs a dtype")
    return TensorStructInfo(x.shape, dtype, x.ndim, x.vdevice)


register_op("astype", inputs=("x",), attrs={"dtype": ""}, deduce=_deduce_astype,
            reference=lambda x, dtype: x.astype(dtype))


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
    return result_tensor(shape, known.pop() if known else "", ndim, same_vdevice(infos))


register_op("where", inputs=("condition", "x1", "x2"), deduce=_deduce_where,
            reference=lambda c, a, b: np.where(c, a, b).astype(np.result_type(a, b)))
