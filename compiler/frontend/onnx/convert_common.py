"""Helpers every converter module shares: constants, dtype checks, axes."""

from __future__ import annotations

import numpy as np

from ... import arith
from ... import op as R
from ...ir.expr import Constant, ShapeExpr
from .registry import NodeContext

FLOATS = ("float16", "float32", "float64")


def const(value, dtype: str) -> Constant:
    return Constant(np.asarray(value, dtype=dtype))


def scalar_like(ctx: NodeContext, value, index: int = 0) -> Constant:
    return const(value, ctx.dtype(index))


def require_float(ctx: NodeContext, index: int = 0) -> None:
    if ctx.dtype(index) not in FLOATS:
        raise ctx.error(f"input {index} is {ctx.dtype(index)}; the IR computes this op on floats only")


def axis_of(ctx: NodeContext, axis: int, rank: int) -> int:
    if not -rank <= axis < rank:
        raise ctx.error(f"axis {axis} is out of range for rank {rank}", "invalid")
    return axis + rank if axis < 0 else axis


def all_constant(ctx: NodeContext) -> bool:
    return all(isinstance(value, Constant) for value in ctx.inputs if value is not None)


def _product(dims):
    total = arith.IntImm(1)
    for dim in dims:
        total = total * dim
    return total


def int_value(ctx: NodeContext, value, dtype: str = "int64"):
    """A shape expression as a 0-d integer tensor: a constant when it is known, else computed from
    the shape variables (R.shape_to_tensor)."""
    known = ctx.analyzer.as_int(value)
    if known is not None:
        return const(known, dtype)
    scalar = R.reshape(R.shape_to_tensor(ShapeExpr((value,))), ShapeExpr(()))
    return scalar if dtype == "int64" else R.astype(scalar, dtype=dtype)


def int_vector(ctx: NodeContext, values, dtype: str = "int64"):
    """Shape expressions as a 1-D integer tensor (a constant when they are all known)."""
    known = [ctx.analyzer.as_int(v) for v in values]
    if all(k is not None for k in known):
        return const(np.asarray(known), dtype)
    vector = R.shape_to_tensor(ShapeExpr(tuple(values)))
    return vector if dtype == "int64" else R.astype(vector, dtype=dtype)


def positions(ctx: NodeContext, size, axis: int, rank: int):
    """0, 1, ..., size - 1 along ``axis`` (int64), shaped to broadcast against a tensor of ``rank``."""
    shape = [1] * rank
    shape[axis] = size
    known = ctx.analyzer.as_int(size)
    if known is not None:
        shape[axis] = known
        return const(np.arange(known).reshape(shape), "int64")
    return R.reshape(R.arange(end=size, dtype="int64"), shape)
