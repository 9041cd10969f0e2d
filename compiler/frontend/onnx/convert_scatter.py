"""ScatterElements and ScatterND over constant indices: each written position picks its update,
the others keep the data."""

from __future__ import annotations

import numpy as np

from ... import op as R
from ...ir.expr import Constant
from .convert_common import axis_of, const
from .registry import NodeContext, converter


def _scatter(ctx: NodeContext, data_dims, targets: np.ndarray):
    """``data`` with the flat positions ``targets`` (one per update, in order) replaced by the
    updates: the last write to a position wins, as ONNX's reduction 'none' requires no repeats."""
    reduction = ctx.attr("reduction", b"none")
    reduction = reduction.decode() if isinstance(reduction, bytes) else reduction
    if reduction != "none":
        raise ctx.error(f"reduction={reduction!r} is not supported (only 'none')")
    count = int(np.prod(data_dims))
    source = np.full(count, -1, dtype=np.int64)
    source[targets.reshape(-1)] = np.arange(targets.size)
    written = source >= 0
    picked = R.take(R.reshape(ctx.input(2), (-1,)), const(np.where(written, source, 0), "int64"), axis=0)
    flat = R.where(Constant(written), picked, R.reshape(ctx.input(0), (-1,)))
    return R.reshape(flat, list(data_dims))


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


