"""GridSample: reading a tensor at positions that are data, composed of the IR's operators.

The positions come from a run-time grid, so the reads are ``take``s from the flattened input at
offsets computed per output element. Interpolation is separable: the value is the sum, over every
combination of one tap per spatial axis, of the product of the taps' weights times the element
they address (1 tap per axis for nearest, 2 for linear, 4 for cubic). Each axis's coordinate and
taps follow ONNX's definition (and its reference evaluator): the grid's normalized coordinate is
mapped to the input's pixels, moved inside by the padding mode where it lies outside the borders,
and each tap that still falls outside reads 0 (zeros), the nearest edge (border) or its mirror
image (reflection)."""

from __future__ import annotations

import itertools

from ... import op as R
from .convert_common import FLOATS, _product, const, int_value, positions
from .registry import NodeContext, converter

CUBIC_ALPHA = -0.75  # Keys' cubic convolution, as ONNX's GridSample fixes it
COORD = "float32"  # ONNX's reference maps coordinates in float32 whatever the data's dtype


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _f(value: float):
    return const(value, COORD)


def _reflect(x, low: float, span):
    """x mirrored at the borders ``low`` and ``low + span`` until it lies between them (span > 0).
    Mirroring is periodic with period 2 * span: with u = (x - low) mod 2 * span, the image is
    low + span - |u - span|, which keeps x inside and folds it outside as ONNX's repeated
    reflection does (written so that x is read once: a fused kernel inlines every read)."""
    period = R.multiply(span, _f(2.0))
    shifted = R.subtract(x, _f(low))
    u = R.subtract(shifted, R.multiply(R.floor(R.divide(shifted, period)), period))
    return R.subtract(R.add(_f(low), span), R.abs(R.subtract(u, span)))


def _linear_weights(t):
    return [R.subtract(_f(1.0), t), t]


def _cubic_weights(t):
    """Keys' weights of the taps at -1, 0, 1, 2 for a position t in [0, 1) past tap 0."""
    a = CUBIC_ALPHA

    def outer(s):  # |s| in [1, 2]
        return R.add(R.multiply(R.add(R.multiply(R.subtract(R.multiply(_f(a), s), _f(5 * a)), s), _f(8 * a)), s),
                     _f(-4 * a))

    def inner(s):  # |s| in [0, 1]
        return R.add(R.multiply(R.multiply(R.subtract(R.multiply(_f(a + 2), s), _f(a + 3)), s), s), _f(1.0))

    one_minus = R.subtract(_f(1.0), t)
    return [outer(R.add(t, _f(1.0))), inner(t), inner(one_minus), outer(R.add(one_minus, _f(1.0)))]


class _Axis:
    """One spatial axis: its size (as a float tensor and an int one) and its borders."""

    def __init__(self, ctx: NodeContext, size, align_corners: bool):
        self.size_f = int_value(ctx, size, COORD)
        self.last = R.subtract(self.size_f, _f(1.0))
        if align_corners:
            self.low, self.high = 0.0, self.last
            # A 1-pixel axis has no span to mirror over: every tap lands on pixel 0 after clamping.
            self.span = R.maximum(self.last, _f(1.0))
        else:
            self.low, self.high, self.span = -0.5, R.subtract(self.size_f, _f(0.5)), self.size_f

    def clamp(self, x):
        return R.minimum(R.maximum(x, _f(0.0)), self.last)


def _taps(mode: str, padding: str, axis: _Axis, coord, align_corners: bool):
    """[(pixel index as an integral float, weight or None, inside-mask or None)] of one axis."""
    if align_corners:
        x = R.multiply(R.multiply(R.add(coord, _f(1.0)), _f(0.5)), axis.last)
    else:
        x = R.multiply(R.subtract(R.multiply(R.add(coord, _f(1.0)), axis.size_f), _f(1.0)), _f(0.5))
    if mode == "nearest":
        x = R.round(x)  # halfway cases to even, as ONNX (after PyTorch) does
    if padding == "border":
        outside = R.logical_or(R.less(x, _f(axis.low)), R.greater(x, axis.high))
        x = R.where(outside, axis.clamp(x), x)
    elif padding == "reflection":
        x = _reflect(x, axis.low, axis.span)
    if mode == "nearest":
        starts, weights = [x], [None]
    else:
        base = R.floor(x)
        t = R.subtract(x, base)
        weights = _linear_weights(t) if mode == "linear" else _cubic_weights(t)
        first = 0 if mode == "linear" else -1
        starts = [base if first + k == 0 else R.add(base, _f(float(first + k))) for k in range(len(weights))]
    taps = []
    for index, weight in zip(starts, weights):
        inside = None
        if padding == "zeros":
            inside = R.logical_and(R.greater_equal(index, _f(0.0)), R.less_equal(index, axis.last))
        elif padding == "reflection":
            index = _reflect(index, axis.low, axis.span)
        taps.append((axis.clamp(index), weight, inside))
    return taps


def _grid_sample(ctx: NodeContext, mode: str, padding: str, align_corners: bool, max_spatial: int | None):
    x_dims, grid_dims = ctx.dims(0), ctx.dims(1)
    spatial = len(x_dims) - 2
    if spatial < 1 or (max_spatial is not None and spatial != max_spatial):
        raise ctx.error(f"input X of rank {len(x_dims)} is not supported "
                        f"({'4-D only at this opset' if max_spatial else 'needs rank 3 or more'})", "invalid")
    if len(grid_dims) != len(x_dims) or ctx.analyzer.as_int(grid_dims[-1]) != spatial:
        raise ctx.error(f"the grid must have rank {len(x_dims)} and last dimension {spatial}", "invalid")
    if ctx.dtype(1) not in FLOATS:
        raise ctx.error(f"the grid is {ctx.dtype(1)}; it must be a float tensor", "invalid")
    dtype = ctx.dtype(0)
    if mode != "nearest" and dtype not in FLOATS:
        raise ctx.error(f"{mode} interpolation of {dtype} data is not supported (floats only)")
    rank = len(x_dims)
    grid = ctx.input(1) if ctx.dtype(1) == COORD else R.astype(ctx.input(1), dtype=COORD)
    # (N, H..., k) -> (N, k, H...): axis 1 then picks one coordinate as (N, 1, H...).
    grid = ctx.emit(R.permute_dims(grid, axes=(0, rank - 1, *range(1, rank - 1))))
    strides = [ctx.analyzer.simplify(_product(x_dims[a + 1:])) for a in range(rank)]
    per_axis = []
    for a in range(spatial):  # the grid lists coordinates innermost axis first (x, y, z)
        coord = R.take(grid, const([spatial - 1 - a], "int64"), axis=1)
        axis = _Axis(ctx, x_dims[2 + a], align_corners)
        per_axis.append([(ctx.emit(R.astype(R.round(index), dtype="int64")), weight, inside)
                         for index, weight, inside in _taps(mode, padding, axis, ctx.emit(coord), align_corners)])
    base = None  # the offset of the (n, c) plane, broadcast to (N, C, 1...)
    for a in (0, 1):
        if ctx.analyzer.as_int(x_dims[a]) != 1:
            term = R.multiply(positions(ctx, x_dims[a], a, rank), int_value(ctx, strides[a]))
            base = term if base is None else R.add(base, term)
    flat = ctx.emit(R.reshape(ctx.input(0), (-1,)))
    zero = const(0, dtype)
    total = None
    for combo in itertools.product(*per_axis):
        offset = base
        weight = inside = None
        for a, (index, w, mask) in enumerate(combo):
            term = index if a == spatial - 1 else R.multiply(index, int_value(ctx, strides[2 + a]))
            offset = term if offset is None else R.add(offset, term)
            if w is not None:
                weight = w if weight is None else R.multiply(weight, w)
            if mask is not None:
                inside = mask if inside is None else R.logical_and(inside, mask)
        value = R.take(flat, offset, axis=0)
        if inside is not None:
            value = R.where(inside, value, zero)
        if weight is not None:
            value = R.multiply(value, weight if dtype == COORD else R.astype(weight, dtype=dtype))
        total = value if total is None else R.add(total, value)
    return total  # (N, C, H...): the indices are (N, 1, H...), the plane offsets (N, C, 1...)


def _attributes(ctx: NodeContext, modes: dict, default_mode: str):
    mode = _text(ctx.attr("mode", default_mode.encode()))
    padding = _text(ctx.attr("padding_mode", b"zeros"))
    if mode not in modes:
        raise ctx.error(f"mode={mode!r} is not one of {', '.join(modes)}", "invalid")
    if padding not in ("zeros", "border", "reflection"):
        raise ctx.error(f"padding_mode={padding!r} is not one of zeros, border, reflection", "invalid")
    return modes[mode], padding, bool(ctx.attr("align_corners", 0))


@converter("GridSample", since=16, attrs=("align_corners", "mode", "padding_mode"))
def _grid_sample_16(ctx: NodeContext):
    mode, padding, align = _attributes(ctx, {"bilinear": "linear", "nearest": "nearest", "bicubic": "cubic"},
                                       "bilinear")
    return _grid_sample(ctx, mode, padding, align, max_spatial=2)


@converter("GridSample", since=20, attrs=("align_corners", "mode", "padding_mode"))
def _grid_sample_20(ctx: NodeContext):
    mode, padding, align = _attributes(ctx, {"linear": "linear", "nearest": "nearest", "cubic": "cubic"}, "linear")
    return _grid_sample(ctx, mode, padding, align, max_spatial=None)
