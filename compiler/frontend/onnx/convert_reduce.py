"""Reductions: the axes an attribute before opset 13 (18 for most), an input after."""

from __future__ import annotations

import numpy as np

from ... import op as R
from ...ir.expr import ShapeExpr
from .convert_common import axis_of, const, require_float, scalar_like
from .convert_shape import _axes_13
from .registry import NodeContext, converter

# -- reductions -----------------------------------------------------------------------------------


def _reduce(kind: str, axes_from_input: bool):
    def convert(ctx: NodeContext):
        keepdims = bool(ctx.attr("keepdims", 1))
        axes = _axes_13(ctx) if axes_from_input else ctx.ints("axes")
        rank = ctx.rank(0)
        if axes is None or len(axes) == 0:
            if ctx.attr("noop_with_empty_axes", 0):
                return R.add(ctx.input(0), scalar_like(ctx, 0))
            axes = tuple(range(rank))
        axes = tuple(sorted({axis_of(ctx, a, rank) for a in axes}))
        x = ctx.input(0)
        if kind in ("max", "min", "log_sum_exp") and any(ctx.analyzer.as_int(ctx.dims(0)[a]) == 0 for a in axes):
            return _empty_extreme(ctx, kind, axes, keepdims)
        if kind in ("mean", "log_sum", "log_sum_exp", "l2"):
            require_float(ctx)
        if kind in ("sum", "mean", "max", "min", "prod"):
            return R.make_call(kind, x, axis=axes, keepdims=keepdims)
        if kind == "sum_square":
            return R.sum(R.multiply(x, x), axis=axes, keepdims=keepdims)
        if kind == "l1":
            return R.sum(R.abs(x), axis=axes, keepdims=keepdims)
        if kind == "l2":
            return R.sqrt(R.sum(R.multiply(x, x), axis=axes, keepdims=keepdims))
        if kind == "log_sum":
            return R.log(R.sum(x, axis=axes, keepdims=keepdims))
        # log_sum_exp, stable: max + log(sum(exp(x - max)))
        peak = R.max(x, axis=axes, keepdims=True)
        total = R.log(R.sum(R.exp(R.subtract(x, peak)), axis=axes, keepdims=keepdims))
        return R.add(total, peak if keepdims else R.squeeze(peak, axis=axes))

    return convert


def _empty_extreme(ctx: NodeContext, kind: str, axes: tuple, keepdims: bool):
    """A max, min or log-sum-exp over an empty axis is the identity of the reduction, as ONNX
    defines it: -inf for max and log-sum-exp, +inf for min (a dtype's lowest or highest value for
    integers, False or True for bool), in the reduced shape."""
    dtype = ctx.dtype(0)
    if kind == "log_sum_exp":
        require_float(ctx)
    if dtype == "bool":
        value = kind == "min"
    elif np.dtype(dtype).kind in "iu":
        info = np.iinfo(dtype)
        value = info.max if kind == "min" else info.min
    else:
        value = np.inf if kind == "min" else -np.inf
    dims = [1 if a in axes else d for a, d in enumerate(ctx.dims(0)) if keepdims or a not in axes]
    known = [ctx.analyzer.as_int(d) for d in dims]
    if all(k is not None for k in known):
        return const(np.full(known, value), dtype)
    return R.full(ShapeExpr(tuple(dims)), fill_value=value, dtype=dtype)


_REDUCE = {"ReduceSum": ("sum", 13), "ReduceMean": ("mean", 18), "ReduceMax": ("max", 18),
           "ReduceMin": ("min", 18), "ReduceProd": ("prod", 18), "ReduceSumSquare": ("sum_square", 18),
           "ReduceL1": ("l1", 18), "ReduceL2": ("l2", 18), "ReduceLogSum": ("log_sum", 18),
           "ReduceLogSumExp": ("log_sum_exp", 18)}
for _onnx, (_kind, _moved) in _REDUCE.items():
    converter(_onnx, attrs=("axes", "keepdims"))(_reduce(_kind, axes_from_input=False))
    converter(_onnx, since=_moved, attrs=("keepdims", "noop_with_empty_axes"))(_reduce(_kind, axes_from_input=True))


@converter(("ArgMax", "ArgMin"), attrs=("axis", "keepdims", "select_last_index"))
def _arg(ctx: NodeContext):
    name = "argmax" if ctx.node.op_type == "ArgMax" else "argmin"
    axis = axis_of(ctx, ctx.attr("axis", 0), ctx.rank(0))
    keepdims = bool(ctx.attr("keepdims", 1))
    if not ctx.attr("select_last_index", 0):
        return R.make_call(name, ctx.input(0), axis=axis, keepdims=keepdims)
    # The last of equal extremes: the first one in the reversed axis, counted from the end.
    size = ctx.static_dims(0, "select_last_index=1")[axis]
    flipped = R.strided_slice(ctx.input(0), axes=(axis,), begin=(size - 1,), end=(-size - 1,), strides=(-1,))
    first = R.make_call(name, flipped, axis=axis, keepdims=keepdims)
    return R.subtract(const(size - 1, "int64"), first)
