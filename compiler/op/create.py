"""Tensor creation: full, zeros, ones, arange."""

from __future__ import annotations

import numpy as np

from .. import arith
from ..ir.errors import DeductionError
from ..tir.compute import ComputeDef, const
from ..tir.ir import Const, binary, from_prim
from .common import result_tensor, shape_input
from .lowering import as_value
from .registry import register_op


def _deduce_filled(call, ctx):
    shape = shape_input(call, 0, ctx)
    dtype = call.attr("dtype")
    if not dtype:
        raise DeductionError("invalid attribute", f"{call.op.name} needs a dtype")
    return result_tensor(shape.values, dtype, shape.ndim)


def _legalize_filled(call, ctx):
    out = ctx.output
    value = {"full": lambda: call.attr("fill_value"), "zeros": lambda: 0, "ones": lambda: 1}[call.op.name]()
    constant = const(value, out.dtype)
    return ComputeDef(ctx.kernel_name, (), out, lambda idx: constant)


register_op("full", inputs=("shape",), attrs={"fill_value": 0.0, "dtype": "float32"},
            deduce=_deduce_filled, legalize=_legalize_filled,
            reference=lambda shape, fill_value, dtype: np.full(tuple(shape), fill_value, dtype))
register_op("zeros", inputs=("shape",), attrs={"dtype": "float32"}, deduce=_deduce_filled,
            reference=lambda shape, dtype: np.zeros(tuple(shape), dtype), legalize=_legalize_filled)
register_op("ones", inputs=("shape",), attrs={"dtype": "float32"}, deduce=_deduce_filled,
            reference=lambda shape, dtype: np.ones(tuple(shape), dtype), legalize=_legalize_filled)


def _deduce_arange(call, ctx):
    start, end, step = (arith.as_expr(call.attr(k)) for k in ("start", "end", "step"))
    step_value = ctx.analyzer.as_int(step)
    if step_value is None or step_value == 0:
        raise DeductionError("invalid attribute", f"arange needs a non-zero constant step, got {step}")
    if step_value > 0:
        length = arith.max_expr((end - start + (step_value - 1)) // step_value, 0)
    else:
        length = arith.max_expr((start - end + (-step_value - 1)) // -step_value, 0)
    return result_tensor((ctx.simplify(length),), call.attr("dtype"))


def _legalize_arange(call, ctx):
    out = ctx.output
    start, step = from_prim(arith.as_expr(call.attr("start"))), Const(int(call.attr("step")))

    def body(idx):
        return as_value(binary("+", start, binary("*", idx[0], step)), out.dtype)

    return ComputeDef(ctx.kernel_name, (), out, body)


register_op("arange", inputs=(), attrs={"start": 0, "end": 0, "step": 1, "dtype": "int64"},
            deduce=_deduce_arange, legalize=_legalize_arange,
            reference=lambda start, end, step, dtype: np.arange(start, end, step, dtype=dtype))
