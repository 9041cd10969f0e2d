"""Selection by rank: topk, sort and argsort along a static axis, without a sort kernel.

Each element's rank is the count of elements that come before it (greater, for largest first;
equal ones by lower index, so ties keep their order); the k-th output is the element whose rank is
k. That is n² comparisons per row: meant for the rows a model ranks (classes, scores), not long ones."""

from __future__ import annotations

import numpy as np

from ... import op as R
from ...ir.expr import Constant
from .convert_common import const
from .registry import NodeContext, converter

MAX_LENGTH = 4096  # n² comparisons per row: beyond this the import refuses rather than build a huge graph


def _ranked(ctx: NodeContext, x, axis: int, k: int, largest: bool):
    """(values, int64 indices) of the k first elements along ``axis`` in rank order."""
    dims = ctx.dims(x)
    rank = len(dims)
    n = ctx.analyzer.as_int(dims[axis])
    if n is None:
        raise ctx.error(f"ranking along symbolic axis {axis} is not supported")
    if n > MAX_LENGTH:
        raise ctx.error(f"ranking {n} elements is not supported (at most {MAX_LENGTH}: it compares every pair)")
    if not 0 <= k <= n:
        raise ctx.error(f"k={k} is outside 0..{n}", "invalid")
    order = [a for a in range(rank) if a != axis] + [axis]
    last = x if axis == rank - 1 else ctx.emit(R.permute_dims(x, axes=tuple(order)))
    mine = R.expand_dims(last, axis=rank)  # (..., n, 1): element i
    other = R.expand_dims(last, axis=rank - 1)  # (..., 1, n): element j
    ahead = R.greater(other, mine) if largest else R.less(other, mine)
    earlier = Constant(np.tril(np.ones((n, n), dtype=bool), -1))  # j < i
    before = R.logical_or(ahead, R.logical_and(R.equal(other, mine), earlier))
    ranks = ctx.emit(R.sum(R.astype(before, dtype="int64"), axis=(rank,)))  # (..., n)
    slots = Constant(np.arange(k, dtype=np.int64).reshape(k, 1))
    chosen = ctx.emit(R.equal(R.expand_dims(ranks, axis=rank - 1), slots))  # (..., k, n)
    values = R.sum(R.where(chosen, R.expand_dims(last, axis=rank - 1), const(0, ctx.dtype(x))), axis=(rank,))
    positions = Constant(np.arange(n, dtype=np.int64))
    indices = R.sum(R.where(chosen, positions, const(0, "int64")), axis=(rank,))
    if axis != rank - 1:
        back = tuple(int(i) for i in np.argsort(order))
        values, indices = R.permute_dims(values, axes=back), R.permute_dims(indices, axes=back)
    return [values, indices]


@converter("aten.topk.default")
def _topk(ctx: NodeContext):
    x = ctx.tensor("self")
    axis = ctx.axis(-1 if ctx["dim"] is None else ctx["dim"], ctx.rank(x))
    return _ranked(ctx, x, axis, int(ctx["k"]), True if ctx["largest"] is None else bool(ctx["largest"]))


@converter("aten.sort.default", "aten.sort.stable")
def _sort(ctx: NodeContext):
    x = ctx.tensor("self")
    axis = ctx.axis(-1 if ctx["dim"] is None else ctx["dim"], ctx.rank(x))
    n = ctx.analyzer.as_int(ctx.dims(x)[axis])
    return _ranked(ctx, x, axis, 0 if n is None else n, bool(ctx["descending"]))


@converter("aten.argsort.default", "aten.argsort.stable")
def _argsort(ctx: NodeContext):
    x = ctx.tensor("self")
    axis = ctx.axis(-1 if ctx["dim"] is None else ctx["dim"], ctx.rank(x))
    n = ctx.analyzer.as_int(ctx.dims(x)[axis])
    return _ranked(ctx, x, axis, 0 if n is None else n, bool(ctx["descending"]))[1]
