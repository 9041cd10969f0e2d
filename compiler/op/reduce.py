"""Reductions over axes (sum, mean, max, min, prod, argmax, argmin) and softmax."""

from __future__ import annotations

import math

import numpy as np

from .. import arith
from ..tir.compute import RowDef, accumulate_type, highest, lowest
from ..tir.ir import binary, cast, from_prim
from .common import normalize_axes, normalize_axis, require_float, result_tensor, tensor_input
from .lowering import as_value, reduce_def
from .registry import register_op


def _reduced(call, ctx, x, axes_attr, keepdims: bool, dtype: str):
    if x.ndim < 0:
        return result_tensor(None, dtype, -1, x.vdevice)
    axes = normalize_axes(call, axes_attr, x.ndim, ctx)
    ndim = x.ndim if keepdims else x.ndim - len(axes)
    if x.shape is None:
        return result_tensor(None, dtype, ndim, x.vdevice)
    if keepdims:
        dims = [arith.IntImm(1) if i in axes else d for i, d in enumerate(x.shape)]
    else:
        dims = [d for i, d in enumerate(x.shape) if i not in axes]
    return result_tensor(dims, dtype, vdevice=x.vdevice)


def _deduce_reduce(call, ctx):
    x = tensor_input(call, 0, ctx)
    if call.op.name == "mean":
        require_float(call, x, ctx)
    return _reduced(call, ctx, x, call.attr("axis"), call.attr("keepdims"), x.dtype)


def _reduce_reference(fn):
    def reference(x, axis, keepdims):
        axis = None if axis is None else (axis if isinstance(axis, int) else tuple(axis))
        wide = x.astype(np.float64) if np.issubdtype(x.dtype, np.floating) else x
        return np.asarray(fn(wide, axis=axis, keepdims=keepdims)).astype(x.dtype)

    return reference


def _legalize_reduce(call, ctx):
    x = ctx.inputs[0]
    ndim = len(x.shape)
    axis = call.attr("axis")
    axes = tuple(range(ndim)) if axis is None else tuple(sorted(a % ndim for a in (
        (axis,) if isinstance(axis, int) else axis)))
    name = call.op.name
    acc = accumulate_type(x.dtype)
    combiner = {"sum": "sum", "mean": "sum", "prod": "prod", "max": "max", "min": "min"}[name]
    if x.dtype == "bool" and combiner in ("max", "min"):  # any / all: over 0 and 1 in u32 (no bool max)
        defn = reduce_def(ctx, x, axes, call.attr("keepdims"), combiner, 0 if combiner == "max" else 1,
                          lambda total, idx: as_value(total, "bool"))
        read_bool = defn.body
        defn.body = lambda idx, ridx: as_value(read_bool(idx, ridx), "u32")
        defn.accumulate_dtype = "u32"
        return defn
    init = {"sum": 0, "prod": 1, "max": lowest(acc), "min": highest(acc)}[combiner]
    finalize = None
    if name == "mean":
        count = arith.simplify(math.prod((x.shape[a] for a in axes), start=arith.IntImm(1)))
        finalize = lambda total, idx: binary("/", total, cast(from_prim(count), acc))  # noqa: E731
    defn = reduce_def(ctx, x, axes, call.attr("keepdims"), combiner, init, finalize)
    defn.accumulate_dtype = acc
    return defn


for _name, _fn in {"sum": np.sum, "mean": np.mean, "max": np.max, "min": np.min,
                   "prod": np.prod}.items():
    register_op(_name, inputs=("x",), attrs={"axis": None, "keepdims": False},
                deduce=_deduce_reduce, reference=_reduce_reference(_fn), legalize=_legalize_reduce)


def _deduce_arg_reduce(call, ctx):
    x = tensor_input(call, 0, ctx)
    axis = call.attr("axis")
    axes = None if axis is None else (axis,)
    return _reduced(call, ctx, x, axes, call.attr("keepdims"), "int64")


def _arg_reference(fn):
    def reference(x, axis, keepdims):
        out = fn(x, axis=axis, keepdims=keepdims) if axis is not None else fn(x)
        if axis is None and keepdims:
            out = np.reshape(out, (1,) * x.ndim)
        return np.asarray(out).astype(np.int64)

    return reference


def _row_view(x, axis: int | None):
    """(outer, row, inner) sizes of ``x`` around ``axis`` (None: the whole tensor is one row)."""
    one = arith.IntImm(1)
    if axis is None:
        return one, x.size, one
    axis %= len(x.shape)
    outer = math.prod(x.shape[:axis], start=one)
    inner = math.prod(x.shape[axis + 1:], start=one)
    return arith.simplify(outer), x.shape[axis], arith.simplify(inner)


def _legalize_row(kind_of=lambda call: call.op.name.split(".")[-1]):
    def legalize(call, ctx):
        x = ctx.inputs[0]
        outer, row, inner = _row_view(x, call.attr("axis"))
        return RowDef(ctx.kernel_name, kind_of(call), (x,), ctx.output, outer, row, inner)

    return legalize


register_op("argmax", inputs=("x",), attrs={"axis": None, "keepdims": False},
            deduce=_deduce_arg_reduce, reference=_arg_reference(np.argmax), legalize=_legalize_row())
register_op("argmin", inputs=("x",), attrs={"axis": None, "keepdims": False},
            deduce=_deduce_arg_reduce, reference=_arg_reference(np.argmin), legalize=_legalize_row())


def _deduce_softmax(call, ctx):
    x = tensor_input(call, 0, ctx)
    require_float(call, x, ctx)
    if x.ndim >= 0:
        normalize_axis(call, call.attr("axis"), x.ndim, ctx)
    return x


def _softmax_reference(x, axis):
    wide = x.astype(np.float64)
    shifted = np.exp(wide - wide.max(axis=axis, keepdims=True))
    return (shifted / shifted.sum(axis=axis, keepdims=True)).astype(x.dtype)


def _log_softmax_reference(x, axis):
    wide = x.astype(np.float64)
    shifted = wide - wide.max(axis=axis, keepdims=True)
    return (shifted - np.log(np.exp(shifted).sum(axis=axis, keepdims=True))).astype(x.dtype)


register_op("nn.softmax", inputs=("x",), attrs={"axis": -1}, deduce=_deduce_softmax,
            reference=_softmax_reference, legalize=_legalize_row())
register_op("nn.log_softmax", inputs=("x",), attrs={"axis": -1}, deduce=_deduce_softmax,
            reference=_log_softmax_reference, legalize=_legalize_row())
