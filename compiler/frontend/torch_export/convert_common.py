"""Helpers the converter modules share: constants, scalars as tensors, dtype promotion, casts."""

from __future__ import annotations

import numpy as np

from ... import arith
from ... import op as R
from ...ir.expr import Constant, Expr, ShapeExpr
from .registry import NodeContext

FLOATS = ("float16", "float32", "float64")


def const(value, dtype: str) -> Constant:
    return Constant(np.asarray(value, dtype=dtype))


def cast(value: Expr, dtype: str) -> Expr:
    sinfo = value.struct_info
    return value if sinfo is not None and sinfo.dtype == dtype else R.astype(value, dtype=dtype)


def as_tensor(ctx: NodeContext, value, dtype: str) -> Expr:
    """A tensor operand in ``dtype``: a tensor cast to it, a Python number as a 0-d constant, a
    symbolic size (an arith expression) as a 0-d tensor computed at run time."""
    if isinstance(value, Expr):
        return cast(value, dtype)
    if isinstance(value, arith.IntImm):
        value = value.value
    if isinstance(value, arith.PrimExpr):
        one = R.arange(start=value, end=value + 1, step=1, dtype="int64")
        return cast(ctx.emit(R.reshape(one, ShapeExpr(()))), dtype)
    if isinstance(value, bool | int | float):
        return const(value, dtype)
    raise ctx.error(f"an operand is a {type(value).__name__}, not a tensor or a number", "invalid")


def compute_dtype(ctx: NodeContext, a, b) -> str:
    """The dtype torch computes ``a op b`` in: both tensors' promotion, or a tensor's own dtype
    against a number (a float number lifts an integer or bool tensor to float32)."""
    tensors = [v for v in (a, b) if isinstance(v, Expr)]
    if len(tensors) == 2:
        return str(np.result_type(tensors[0].struct_info.dtype, tensors[1].struct_info.dtype))
    if not tensors:
        raise ctx.error("neither operand is a tensor", "invalid")
    dtype = tensors[0].struct_info.dtype
    number = b if tensors[0] is a else a
    if dtype not in FLOATS and isinstance(number, float):
        return "float32"
    if dtype == "bool" and isinstance(number, int | arith.PrimExpr) and not isinstance(number, bool):
        return "int64"
    return dtype


def is_float(value: Expr) -> bool:
    return value.struct_info.dtype in FLOATS


def product(dims):
    total = arith.IntImm(1)
    for dim in dims:
        total = total * dim
    return total


def is_static(ctx: NodeContext, value) -> bool:
    return ctx.analyzer.as_int(arith.as_expr(value)) is not None
