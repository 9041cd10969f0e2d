"""Helpers every converter module shares: constants, dtype checks, axes."""

from __future__ import annotations

import numpy as np

from ... import arith
from ...ir.expr import Constant
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
