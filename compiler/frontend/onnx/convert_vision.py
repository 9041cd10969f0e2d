"""Image and sequence rearrangements composed of the IR's operators: CenterCropPad, ReverseSequence,
MaxUnpool and Col2Im."""

from __future__ import annotations

import numpy as np

from ... import op as R
from ...ir.expr import Constant
from .convert_common import axis_of
from .registry import NodeContext, converter


def static_ints(ctx: NodeContext, index: int, what: str) -> list[int]:
    """Input ``index`` as plain integers: a constant, or a shape value whose elements are all known."""
    values = ctx.shape_value(index, what)
    known = [ctx.analyzer.as_int(v) for v in values]
    if any(v is None for v in known):
        raise ctx.error(f"{what} (input {index}) is {', '.join(str(v) for v in values)}, which must be known "
                        "when compiling; fix the dimensions with shapes=")
    return known


def zero_pad(ctx: NodeContext, x, dims: list[int], axis: int, before: int, after: int):
    """``x`` (static ``dims``) with ``before`` and ``after`` zeros along ``axis``."""
    parts = []
    for count in (before, after):
        block = list(dims)
        block[axis] = count
        parts.append(Constant(np.zeros(block, dtype=ctx.dtype(0))) if count > 0 else None)
    pieces = [p for p in (parts[0], x, parts[1]) if p is not None]
    return R.concat(pieces, axis=axis) if len(pieces) > 1 else x


@converter("CenterCropPad", since=18, attrs=("axes",))
def _center_crop_pad(ctx: NodeContext):
    """Per axis, the centered window of the wanted size: a slice where it is smaller (the extra
    row goes to the end), zeros around where it is larger (the extra one at the end)."""
    dims = list(ctx.static_dims(0, "CenterCropPad"))
    rank = len(dims)
    axes = [axis_of(ctx, int(a), rank) for a in ctx.ints("axes", tuple(range(rank)))]
    wanted = static_ints(ctx, 1, "shape")
    if len(wanted) != len(axes):
        raise ctx.error(f"shape has {len(wanted)} elements for {len(axes)} axes", "invalid")
    x = ctx.input(0)
    for axis, size in zip(axes, wanted):
        dim = dims[axis]
        if size < 0:
            raise ctx.error(f"shape {wanted} has a negative size", "invalid")
        if size < dim:
            start = (dim - size) // 2
            x = ctx.emit(R.strided_slice(x, axes=(axis,), begin=(start,), end=(start + size,)))
        elif size > dim:
            before = (size - dim) // 2
            x = ctx.emit(zero_pad(ctx, x, dims, axis, before, size - dim - before))
        dims[axis] = size
    return x
