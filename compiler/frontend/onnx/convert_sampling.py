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

import numpy as np

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


# -- RoiAlign ----------------------------------------------------------------------------------------


def _roi_axis(ctx: NodeContext, start, end, size, pooled: int, grid: int, half_pixel: bool, sample_axis: int):
    """One axis of RoiAlign's sampling points: ([low index, high index] as int64, [their weights],
    inside-mask), each shaped (R, 1, pooled, grid) (y) or (R, 1, 1, 1, pooled, grid) (x) by
    ``sample_axis``, the position of the pooled axis in the six-axis (R, C, PH, GH, PW, GW) layout."""
    extent = R.subtract(end, start)
    if not half_pixel:
        extent = R.maximum(extent, _f(1.0))
    shape = [1] * 6
    shape[0] = -1
    start, extent = R.reshape(start, shape), R.reshape(extent, shape)
    bin_size = R.divide(extent, _f(float(pooled)))
    layout = (1,) * sample_axis + (pooled, grid) + (1,) * (4 - sample_axis)
    # bin p, then the sample's place in it: start + p * bin + (g + 0.5) * bin / grid
    steps = np.broadcast_to(np.arange(pooled, dtype=np.float32)[:, None], (pooled, grid)).reshape(layout)
    fraction = np.broadcast_to(((np.arange(grid) + 0.5) / grid)[None, :], (pooled, grid)).reshape(layout)
    coord = R.add(R.add(start, R.multiply(const(steps, COORD), bin_size)), R.multiply(const(fraction, COORD), bin_size))
    coord = ctx.emit(coord)
    size_f = int_value(ctx, size, COORD)
    last = R.subtract(size_f, _f(1.0))
    inside = R.logical_and(R.greater_equal(coord, _f(-1.0)), R.less_equal(coord, size_f))
    coord = R.maximum(coord, _f(0.0))
    low = R.floor(coord)
    at_end = R.greater_equal(low, last)  # the last row is its own neighbour, at weight 0 past it
    low = ctx.emit(R.where(at_end, last, low))
    coord = R.where(at_end, last, coord)
    high = R.where(at_end, last, R.add(low, _f(1.0)))
    frac = ctx.emit(R.subtract(coord, low))
    weights = [R.subtract(_f(1.0), frac), frac]
    indices = [ctx.emit(R.astype(R.round(v), dtype="int64")) for v in (low, high)]
    return indices, weights, inside


def _roi_align(ctx: NodeContext, half_pixel: bool):
    x_dims = ctx.dims(0)
    if len(x_dims) != 4:
        raise ctx.error(f"X has rank {len(x_dims)}; RoiAlign takes (N, C, H, W)", "invalid")
    dtype = ctx.dtype(0)
    if dtype not in FLOATS or ctx.dtype(1) not in FLOATS:
        raise ctx.error("X and rois must be float tensors", "invalid")
    mode = _text(ctx.attr("mode", b"avg"))
    if mode not in ("avg", "max"):
        raise ctx.error(f"mode={mode!r} is not one of avg, max", "invalid")
    pooled_h, pooled_w = int(ctx.attr("output_height", 1)), int(ctx.attr("output_width", 1))
    ratio = int(ctx.attr("sampling_ratio", 0))
    if ratio <= 0:
        raise ctx.error("sampling_ratio=0 (as many samples as the box spans, which depends on the boxes at run "
                        "time) is not supported; give a positive sampling_ratio")
    if pooled_h < 1 or pooled_w < 1:
        raise ctx.error("output_height and output_width must be positive", "invalid")
    scale = float(ctx.attr("spatial_scale", 1.0))
    rois = ctx.input(1) if ctx.dtype(1) == COORD else R.astype(ctx.input(1), dtype=COORD)
    corners = R.multiply(rois, _f(scale))
    if half_pixel:
        corners = R.subtract(corners, _f(0.5))
    corners = ctx.emit(corners)

    def column(i):
        return R.reshape(R.take(corners, const([i], "int64"), axis=1), (-1,))

    ys, wys, inside_y = _roi_axis(ctx, column(1), column(3), x_dims[2], pooled_h, ratio, half_pixel, 2)
    xs, wxs, inside_x = _roi_axis(ctx, column(0), column(2), x_dims[3], pooled_w, ratio, half_pixel, 4)
    inside = R.astype(R.logical_and(inside_y, inside_x), dtype=COORD)
    height, width = x_dims[2], x_dims[3]
    plane = ctx.analyzer.simplify(height * width)
    batch = R.reshape(R.astype(ctx.input(2), dtype="int64"), (-1, 1, 1, 1, 1, 1))
    base = R.multiply(R.add(R.multiply(batch, int_value(ctx, x_dims[1])), positions(ctx, x_dims[1], 1, 6)),
                      int_value(ctx, plane))
    base = ctx.emit(base)
    flat = ctx.emit(R.reshape(ctx.input(0), (-1,)))
    terms = []
    for y, wy in zip(ys, wys):
        for x, wx in zip(xs, wxs):
            offset = R.add(base, R.add(R.multiply(y, int_value(ctx, width)), x))
            weight = R.multiply(R.multiply(wy, wx), inside)
            if dtype != COORD:
                weight = R.astype(weight, dtype=dtype)
            terms.append(R.multiply(weight, R.take(flat, offset, axis=0)))
    if mode == "avg":
        total = terms[0]
        for term in terms[1:]:
            total = R.add(total, term)
        pooled = R.divide(R.sum(total, axis=(3, 5)), const(float(ratio * ratio), dtype))
    else:  # ONNX's max takes the largest weighted corner of any sample
        best = terms[0]
        for term in terms[1:]:
            best = R.maximum(best, term)
        pooled = R.max(best, axis=(3, 5))
    return pooled


@converter("RoiAlign", since=11, attrs=("mode", "output_height", "output_width", "sampling_ratio", "spatial_scale"))
def _roi_align_10(ctx: NodeContext):
    return _roi_align(ctx, half_pixel=False)  # before opset 16, the boxes' corners are not shifted


@converter("RoiAlign", since=16, attrs=("coordinate_transformation_mode", "mode", "output_height", "output_width",
                                        "sampling_ratio", "spatial_scale"))
def _roi_align_16(ctx: NodeContext):
    transform = _text(ctx.attr("coordinate_transformation_mode", b"half_pixel"))
    if transform not in ("half_pixel", "output_half_pixel"):
        raise ctx.error(f"coordinate_transformation_mode={transform!r} is not one of half_pixel, output_half_pixel",
                        "invalid")
    return _roi_align(ctx, half_pixel=transform == "half_pixel")


# -- DeformConv --------------------------------------------------------------------------------------


def _deform_taps(coord, size: int):
    """Bilinear taps of pixel coordinates ``coord`` on an axis of ``size``: [(int64 index, weight
    that is 0 where the tap falls outside the axis)], as GridSample's zeros padding reads them."""
    low = R.floor(coord)
    frac = R.subtract(coord, low)
    taps = []
    for index, weight in ((low, R.subtract(_f(1.0), frac)), (R.add(low, _f(1.0)), frac)):
        inside = R.logical_and(R.greater_equal(index, _f(0.0)), R.less_equal(index, _f(float(size - 1))))
        weight = R.where(inside, weight, _f(0.0))
        clamped = R.minimum(R.maximum(index, _f(0.0)), _f(float(size - 1)))
        taps.append((R.astype(R.round(clamped), dtype="int64"), weight))
    return taps


@converter("DeformConv", since=19, attrs=("dilations", "group", "kernel_shape", "offset_group", "pads", "strides"))
def _deform_conv(ctx: NodeContext):
    """Each kernel tap reads the input bilinearly at its place moved by the offsets (zero outside),
    scaled by the mask; the samples, laid out as im2col columns, are multiplied by the weights."""
    x_dims, w_dims, off_dims = (ctx.static_dims(i, "DeformConv") for i in range(3))
    if len(x_dims) != 4:
        raise ctx.error(f"X has rank {len(x_dims)}; only 2-D DeformConv (rank 4) is supported")
    dtype = ctx.dtype(0)
    if dtype not in FLOATS:
        raise ctx.error(f"X is {dtype}; DeformConv takes floats", "invalid")
    n, channels, height, width = x_dims
    out_channels = w_dims[0]
    kernel = ctx.ints("kernel_shape", tuple(w_dims[2:]))
    strides, dilations = ctx.ints("strides", (1, 1)), ctx.ints("dilations", (1, 1))
    pads = ctx.ints("pads", (0, 0, 0, 0))
    group, offset_group = int(ctx.attr("group", 1)), int(ctx.attr("offset_group", 1))
    kh, kw = kernel
    out_h, out_w = off_dims[2], off_dims[3]
    if (channels != w_dims[1] * group or out_channels % group or channels % offset_group
            or off_dims[:2] != (n, offset_group * 2 * kh * kw) or tuple(w_dims[2:]) != tuple(kernel)):
        raise ctx.error(f"the shapes of X {x_dims}, W {w_dims} and offset {off_dims} disagree with "
                        f"group={group}, offset_group={offset_group}, kernel_shape={kernel}", "invalid")
    extents = [(k - 1) * d + 1 for k, d in zip(kernel, dilations)]
    expected = tuple((size + pads[a] + pads[a + 2] - extents[a]) // strides[a] + 1
                     for a, size in enumerate((height, width)))
    if expected != (out_h, out_w):
        raise ctx.error(f"the offsets are {out_h}x{out_w} but the convolution's output is "
                        f"{expected[0]}x{expected[1]}", "invalid")
    if height < 2 or width < 2:
        raise ctx.error("an input of height or width 1 is not supported (ONNX maps positions through "
                        "size - 1)")
    per_offset_group = channels // offset_group
    layout = (n, offset_group, 1, kh, kw, out_h, out_w)  # sampling in (N, G, C/G, kh, kw, OH, OW)
    offset = ctx.input(2) if ctx.dtype(2) == COORD else R.astype(ctx.input(2), dtype=COORD)
    offset = ctx.emit(R.reshape(offset, (n, offset_group, kh, kw, 2, out_h, out_w)))
    per_axis = []
    for axis, (taps, outs, size) in enumerate(((kh, out_h, height), (kw, out_w, width))):
        stride, dilation, pad = strides[axis], dilations[axis], pads[axis]
        place = np.arange(taps)[:, None] * dilation + np.arange(outs)[None, :] * stride - pad
        place = place.reshape((1, 1, 1, taps, 1, outs, 1) if axis == 0 else (1, 1, 1, 1, taps, 1, outs))
        moved = R.reshape(R.take(offset, const([axis], "int64"), axis=4), layout)
        per_axis.append(_deform_taps(ctx.emit(R.add(moved, const(place.astype(np.float32), COORD))), size))
    channel = (np.arange(offset_group)[:, None] * per_offset_group + np.arange(per_offset_group)[None, :])
    batch = np.arange(n).reshape(-1, 1, 1) * channels
    base = ((batch + channel[None]) * (height * width)).reshape(n, offset_group, per_offset_group, 1, 1, 1, 1)
    base = const(base, "int64")
    flat = ctx.emit(R.reshape(ctx.input(0), (-1,)))
    sampled = None
    for y, wy in per_axis[0]:
        for x, wx in per_axis[1]:
            index = R.add(base, R.add(R.multiply(y, const(width, "int64")), x))
            weight = R.multiply(wy, wx)
            if dtype != COORD:
                weight = R.astype(weight, dtype=dtype)
            term = R.multiply(weight, R.take(flat, index, axis=0))
            sampled = term if sampled is None else R.add(sampled, term)
    if ctx.has_input(4):
        mask = ctx.input(4) if ctx.dtype(4) == dtype else R.astype(ctx.input(4), dtype=dtype)
        sampled = R.multiply(sampled, R.reshape(mask, layout))
    per_group = channels // group
    columns = R.reshape(sampled, (n, group, per_group * kh * kw, out_h * out_w))
    weights = R.reshape(ctx.input(1), (1, group, out_channels // group, per_group * kh * kw))
    out = R.reshape(R.matmul(weights, columns), (n, out_channels, out_h, out_w))
    if ctx.has_input(3):
        out = R.add(out, R.reshape(ctx.input(3), (1, out_channels, 1, 1)))
    return out
