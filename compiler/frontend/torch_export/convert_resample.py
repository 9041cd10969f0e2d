"""Resampling converters: nearest and bilinear 2-D upsampling (F.interpolate) over static spatial
sizes, as index takes (nearest) and one interpolation matrix per axis (bilinear)."""

from __future__ import annotations

import numpy as np

from ... import op as R
from ...ir.expr import Constant
from .registry import NodeContext, converter


def _geometry(ctx: NodeContext, x):
    """(input sizes, output sizes, torch's scale per axis: output position · scale = input position)."""
    if ctx.rank(x) != 4:
        raise ctx.error(f"upsampling over rank {ctx.rank(x)} is not supported (2-D, rank 4, only)")
    spatial = ctx.static_dims(x, "upsampling", 2)
    val = ctx.node.meta.get("val")
    out = tuple(int(d) for d in val.shape[2:]) if val is not None and all(
        isinstance(d, int) for d in val.shape[2:]) else None
    if out is None:
        raise ctx.error("upsampling to a symbolic size is not supported")
    factors = ctx["scale_factors"]
    if factors is None and (ctx["scales_h"] is not None or ctx["scales_w"] is not None):
        factors = (ctx["scales_h"], ctx["scales_w"])
    scales = []
    for axis in range(2):
        factor = factors[axis] if factors is not None else None
        scales.append(1.0 / factor if factor else spatial[axis] / out[axis])
    return spatial, out, scales


def _nearest(exact: bool):
    def convert(ctx: NodeContext):
        x = ctx.tensor("input") if ctx["input"] is not None else ctx.tensor("self")
        spatial, out, scales = _geometry(ctx, x)
        y = x
        for axis in range(2):
            if spatial[axis] == out[axis] and scales[axis] == 1.0:
                continue
            position = np.arange(out[axis], dtype=np.float64) + (0.5 if exact else 0.0)
            source = np.minimum(np.floor(position * np.float32(scales[axis])), spatial[axis] - 1).astype(np.int64)
            y = ctx.emit(R.take(y, Constant(source), axis=axis + 2))
        return y

    return convert


converter("aten.upsample_nearest2d.vec", "aten.upsample_nearest2d.default")(_nearest(False))
converter("aten._upsample_nearest_exact2d.vec", "aten._upsample_nearest_exact2d.default")(_nearest(True))


def _linear_matrix(size: int, out: int, scale: float, align_corners: bool, dtype: str) -> np.ndarray:
    """(out, size): row i mixes the two input positions around i's source position."""
    matrix = np.zeros((out, size), dtype=np.float64)
    for i in range(out):
        if align_corners:
            source = i * (size - 1) / (out - 1) if out > 1 else 0.0
        else:
            source = max((i + 0.5) * scale - 0.5, 0.0)
        low = min(int(np.floor(source)), size - 1)
        high = min(low + 1, size - 1)
        weight = source - low
        matrix[i, low] += 1.0 - weight
        matrix[i, high] += weight
    return matrix.astype(dtype)


@converter("aten.upsample_bilinear2d.vec", "aten.upsample_bilinear2d.default")
def _bilinear(ctx: NodeContext):
    x = ctx.tensor("input") if ctx["input"] is not None else ctx.tensor("self")
    spatial, out, scales = _geometry(ctx, x)
    align = bool(ctx["align_corners"])
    dtype = ctx.dtype(x)
    rows = Constant(_linear_matrix(spatial[0], out[0], scales[0], align, dtype))
    columns = Constant(np.ascontiguousarray(_linear_matrix(spatial[1], out[1], scales[1], align, dtype).T))
    return R.matmul(ctx.emit(R.matmul(rows, x)), columns)
