"""ScatterElements and ScatterND over constant indices: each written position picks its update,
the others keep the data; with a reduction, each position folds in its updates in order."""

from __future__ import annotations

import numpy as np

from ... import op as R
from ...ir.expr import Constant
from .convert_common import axis_of, const
from .registry import NodeContext, converter

_COMBINE = {"add": R.add, "mul": R.multiply, "max": R.maximum, "min": R.minimum}


def _scatter(ctx: NodeContext, data_dims, targets: np.ndarray):
    """``data`` with the flat positions ``targets`` (one per update element, in order) written."""
    reduction = ctx.attr("reduction", b"none")
    reduction = reduction.decode() if isinstance(reduction, bytes) else reduction
    if reduction != "none" and reduction not in _COMBINE:
        raise ctx.error(f"reduction={reduction!r} is not supported (only 'none', 'add', 'mul', 'max', 'min')",
                        "invalid")
    targets = targets.reshape(-1)
    data = R.reshape(ctx.input(0), (-1,))
    updates = R.reshape(ctx.input(2), (-1,))
    count = int(np.prod(data_dims))
    if reduction == "none":  # the last write to a position wins (ONNX's 'none' requires no repeats)
        source = np.full(count, -1, dtype=np.int64)
        source[targets] = np.arange(targets.size)
        written = source >= 0
        picked = R.take(updates, const(np.where(written, source, 0), "int64"), axis=0)
        return R.reshape(R.where(Constant(written), picked, data), list(data_dims))
    folded, slots = _fold(ctx, _COMBINE[reduction], data, updates, targets)
    source = np.full(count, -1, dtype=np.int64)
    source[slots[0]] = slots[1]
    written = source >= 0
    picked = R.take(folded, const(np.where(written, source, 0), "int64"), axis=0)
    return R.reshape(R.where(Constant(written), picked, data), list(data_dims))


def _fold(ctx: NodeContext, combine, data, updates, targets: np.ndarray):
    """Each written position's data value combined with its updates in order, exactly as ONNX's
    loop does (``((d op u0) op u1) ...``): round r combines each position with its r-th update.
    The positions are ordered by how many updates they get, most first, so that the positions
    round r touches are a prefix of them; every constant is then of the updates' size (the rounds'
    indices together hold each update once). Returns the folded values, one per written position,
    and (the positions, their slot in the folded values)."""
    order = np.argsort(targets, kind="stable")
    distinct, starts, counts = np.unique(targets[order], return_index=True, return_counts=True)
    occurrence = np.empty(targets.size, dtype=np.int64)  # which of its position's updates each one is
    occurrence[order] = np.arange(targets.size) - np.repeat(starts, counts)
    by_count = np.argsort(-counts, kind="stable")
    slot_of_distinct = np.empty(distinct.size, dtype=np.int64)
    slot_of_distinct[by_count] = np.arange(distinct.size)
    slot = slot_of_distinct[np.searchsorted(distinct, targets)]  # each update's position's slot
    acc = R.take(data, const(distinct[by_count], "int64"), axis=0)
    for round_ in range(int(counts.max())):
        chosen = np.flatnonzero(occurrence == round_)
        chosen = chosen[np.argsort(slot[chosen])]  # slots 0 .. len(chosen) - 1, in order
        head = acc if chosen.size == distinct.size else R.strided_slice(acc, axes=(0,), begin=(0,),
                                                                          end=(int(chosen.size),))
        head = combine(head, R.take(updates, const(chosen, "int64"), axis=0))
        if chosen.size < distinct.size:
            tail = R.strided_slice(acc, axes=(0,), begin=(int(chosen.size),), end=(int(distinct.size),))
            head = R.concat([head, tail], axis=0)
        acc = ctx.emit(head)
    return acc, (distinct[by_count], np.arange(distinct.size))


@converter("ScatterElements", since=11, attrs=("axis", "reduction"))
def _scatter_elements(ctx: NodeContext):
    data_dims = ctx.static_dims(0, "ScatterElements")
    indices = np.asarray(ctx.constant(1, "indices")).astype(np.int64)
    axis = axis_of(ctx, ctx.attr("axis", 0), len(data_dims))
    indices = np.where(indices < 0, indices + data_dims[axis], indices)
    coords = list(np.indices(indices.shape))
    coords[axis] = indices
    return _scatter(ctx, data_dims, np.ravel_multi_index(tuple(coords), data_dims))


@converter("ScatterND", since=11, attrs=("reduction",))
def _scatter_nd(ctx: NodeContext):
    data_dims = ctx.static_dims(0, "ScatterND")
    indices = np.asarray(ctx.constant(1, "indices")).astype(np.int64)
    depth = indices.shape[-1]
    prefix = indices.reshape(-1, depth)
    prefix = np.where(prefix < 0, prefix + np.array(data_dims[:depth]), prefix)
    inner = int(np.prod(data_dims[depth:]))
    starts = np.ravel_multi_index(tuple(prefix.T), data_dims[:depth]) * inner
    return _scatter(ctx, data_dims, (starts[:, None] + np.arange(inner)[None, :]).reshape(-1))


