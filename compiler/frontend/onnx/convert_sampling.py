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


def _cubic_weight(s):
    """Keys' cubic convolution weight at distance s in [0, 2] from the position."""
    a = CUBIC_ALPHA
    inner = R.add(R.multiply(R.multiply(R.subtract(R.multiply(_f(a + 2), s), _f(a + 3)), s), s), _f(1.0))
    outer = R.add(R.multiply(R.add(R.multiply(R.subtract(R.multiply(_f(a), s), _f(5 * a)), s), _f(8 * a)), s),
                  _f(-4 * a))
    return R.where(R.less_equal(s, _f(1.0)), inner, outer)


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


def _taps(mode: str, padding: str, axis: _Axis, coord, align_corners: bool, tap_axis: int, rank: int):
    """One axis's taps stacked along ``tap_axis`` (1, 2 or 4 of them): (pixel index, int64 and
    inside the axis; weight, or None for nearest; inside-mask, or None but for zeros padding).
    Stacked, not one tensor per tap, so that the fused kernel sums over the taps with one copy of
    each axis's expressions (a fused kernel inlines every read of a value)."""
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
        tap, weight = x, None
    else:
        first, count = (0, 2) if mode == "linear" else (-1, 4)
        shape = [1] * rank
        shape[tap_axis] = count
        tap = R.add(R.floor(x), const(np.arange(first, first + count, dtype=np.float32).reshape(shape), COORD))
        distance = R.abs(R.subtract(x, tap))
        weight = R.subtract(_f(1.0), distance) if mode == "linear" else _cubic_weight(distance)
    inside = None
    if padding == "zeros":
        inside = R.logical_and(R.greater_equal(tap, _f(0.0)), R.less_equal(tap, axis.last))
    elif padding == "reflection":
        tap = _reflect(tap, axis.low, axis.span)
    return R.astype(R.round(axis.clamp(tap)), dtype="int64"), weight, inside


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
    # Sampling layout (N, C, P, tap per spatial axis...): P the output's places flattened.
    rank = 3 + spatial
    places = ctx.analyzer.simplify(_product(grid_dims[1:-1]))
    grid = ctx.input(1) if ctx.dtype(1) == COORD else R.astype(ctx.input(1), dtype=COORD)
    grid = ctx.emit(R.permute_dims(R.reshape(grid, (grid_dims[0], places, spatial)), axes=(0, 2, 1)))  # (N, k, P)
    strides = [ctx.analyzer.simplify(_product(x_dims[a + 1:])) for a in range(len(x_dims))]
    offset = weight = inside = None
    for a in range(spatial):  # the grid lists coordinates innermost axis first (x, y, z)
        coord = R.take(grid, const([spatial - 1 - a], "int64"), axis=1)  # (N, 1, P)
        coord = ctx.emit(R.reshape(coord, (grid_dims[0], 1, places) + (1,) * spatial))
        index, w, mask = _taps(mode, padding, _Axis(ctx, x_dims[2 + a], align_corners), coord, align_corners,
                               3 + a, rank)
        term = index if a == spatial - 1 else R.multiply(index, int_value(ctx, strides[2 + a]))
        offset = term if offset is None else R.add(offset, term)
        if w is not None:
            weight = w if weight is None else R.multiply(weight, w)
        if mask is not None:
            inside = mask if inside is None else R.logical_and(inside, mask)
    for a in (0, 1):  # the offset of the (n, c) plane
        if ctx.analyzer.as_int(x_dims[a]) != 1:
            offset = R.add(offset, R.multiply(positions(ctx, x_dims[a], a, rank), int_value(ctx, strides[a])))
    value = R.take(ctx.emit(R.reshape(ctx.input(0), (-1,))), offset, axis=0)
    if inside is not None:
        value = R.where(inside, value, const(0, dtype))
    if weight is not None:
        value = R.multiply(value, weight if dtype == COORD else R.astype(weight, dtype=dtype))
        value = R.sum(value, axis=tuple(range(3, rank)))
    return R.reshape(value, (*x_dims[:2], *grid_dims[1:-1]))


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
    """One axis of RoiAlign's sampling points: (index as int64, weight, inside-mask) of its two
    bilinear taps stacked on axis 6 (y) or 7 (x) of the layout (R, C, PH, GH, PW, GW, y tap, x tap);
    ``sample_axis`` is the position of the pooled axis in it (2 or 4)."""
    extent = R.subtract(end, start)
    if not half_pixel:
        extent = R.maximum(extent, _f(1.0))
    shape = [1] * 8
    shape[0] = -1
    start, extent = R.reshape(start, shape), R.reshape(extent, shape)
    bin_size = R.divide(extent, _f(float(pooled)))
    layout = (1,) * sample_axis + (pooled, grid) + (1,) * (6 - sample_axis)
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
    frac = R.subtract(R.where(at_end, last, coord), low)
    tap_shape = [1] * 8
    tap_shape[6 if sample_axis == 2 else 7] = 2
    k = const(np.arange(2, dtype=np.float32).reshape(tap_shape), COORD)
    weight = R.subtract(_f(1.0), R.abs(R.subtract(frac, k)))  # 1 - frac, then frac
    index = R.minimum(R.add(low, k), last)  # the last row is its own neighbour (at weight 0)
    return R.astype(R.round(index), dtype="int64"), weight, inside


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

    y, wy, inside_y = _roi_axis(ctx, column(1), column(3), x_dims[2], pooled_h, ratio, half_pixel, 2)
    x, wx, inside_x = _roi_axis(ctx, column(0), column(2), x_dims[3], pooled_w, ratio, half_pixel, 4)
    inside = R.astype(R.logical_and(inside_y, inside_x), dtype=COORD)
    height, width = x_dims[2], x_dims[3]
    plane = ctx.analyzer.simplify(height * width)
    batch = R.reshape(R.astype(ctx.input(2), dtype="int64"), (-1, 1, 1, 1, 1, 1, 1, 1))
    base = R.multiply(R.add(R.multiply(batch, int_value(ctx, x_dims[1])), positions(ctx, x_dims[1], 1, 8)),
                      int_value(ctx, plane))
    base = ctx.emit(base)
    flat = ctx.emit(R.reshape(ctx.input(0), (-1,)))
    offset = R.add(base, R.add(R.multiply(y, int_value(ctx, width)), x))
    weight = R.multiply(R.multiply(wy, wx), inside)
    if dtype != COORD:
        weight = R.astype(weight, dtype=dtype)
    terms = R.multiply(weight, R.take(flat, offset, axis=0))  # (R, C, PH, GH, PW, GW, 2, 2)
    if mode == "avg":
        return R.divide(R.sum(terms, axis=(3, 5, 6, 7)), const(float(ratio * ratio), dtype))
    return R.max(terms, axis=(3, 5, 6, 7))  # ONNX's max takes the largest weighted corner of any sample


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


def _bilinear_taps(coord, size: int, tap_axis: int, rank: int):
    """The two bilinear taps of pixel coordinates ``coord`` on an axis of ``size``, stacked along
    ``tap_axis`` (of size 1 in ``coord``): (int64 index clamped inside, weight 1 - |coord - tap|,
    0 where the tap falls outside the axis, as GridSample's zeros padding reads it). Stacked, not
    one tensor per tap, so that a fused kernel sums over the taps with one copy of each expression."""
    shape = [1] * rank
    shape[tap_axis] = 2
    tap = R.add(R.floor(coord), const(np.arange(2, dtype=np.float32).reshape(shape), COORD))
    inside = R.logical_and(R.greater_equal(tap, _f(0.0)), R.less_equal(tap, _f(float(size - 1))))
    weight = R.where(inside, R.subtract(_f(1.0), R.abs(R.subtract(coord, tap))), _f(0.0))
    clamped = R.minimum(R.maximum(tap, _f(0.0)), _f(float(size - 1)))
    return R.astype(R.round(clamped), dtype="int64"), weight


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
    per_offset_group, taps, places = channels // offset_group, kh * kw, out_h * out_w
    # Sampling layout (N, G, C/G, kernel taps, output places, y tap, x tap); the last two are summed.
    offset = ctx.input(2) if ctx.dtype(2) == COORD else R.astype(ctx.input(2), dtype=COORD)
    offset = ctx.emit(R.reshape(offset, (n, offset_group, taps, 2, places)))
    kernel_y, kernel_x = np.divmod(np.arange(taps), kw)
    out_y, out_x = np.divmod(np.arange(places), out_w)
    per_axis = []
    for axis, (k, o, size) in enumerate(((kernel_y, out_y, height), (kernel_x, out_x, width))):
        place = k[:, None] * dilations[axis] + o[None, :] * strides[axis] - pads[axis]  # (taps, places)
        shape = (1, 1, 1, taps, places, 1, 1)
        moved = R.reshape(R.take(offset, const([axis], "int64"), axis=3), (n, offset_group, 1, taps, places, 1, 1))
        coord = ctx.emit(R.add(moved, const(place.reshape(shape).astype(np.float32), COORD)))
        per_axis.append(_bilinear_taps(coord, size, 5 + axis, 7))
    (y, wy), (x, wx) = per_axis
    channel = np.arange(n)[:, None, None] * channels + (
        np.arange(offset_group)[:, None] * per_offset_group + np.arange(per_offset_group)[None, :])[None]
    base = const((channel * (height * width)).reshape(n, offset_group, per_offset_group, 1, 1, 1, 1), "int64")
    index = R.add(base, R.add(R.multiply(y, const(width, "int64")), x))
    weight = R.multiply(wy, wx)
    if dtype != COORD:
        weight = R.astype(weight, dtype=dtype)
    flat = ctx.emit(R.reshape(ctx.input(0), (-1,)))
    sampled = R.sum(R.multiply(weight, R.take(flat, index, axis=0)), axis=(5, 6))  # (N, G, C/G, taps, places)
    if ctx.has_input(4):
        mask = ctx.input(4) if ctx.dtype(4) == dtype else R.astype(ctx.input(4), dtype=dtype)
        sampled = R.multiply(sampled, R.reshape(mask, (n, offset_group, 1, taps, places)))
    per_group = channels // group
    columns = R.reshape(sampled, (n, group, per_group * taps, places))
    weights = R.reshape(ctx.input(1), (1, group, out_channels // group, per_group * taps))
    out = R.reshape(R.matmul(weights, columns), (n, out_channels, out_h, out_w))
    if ctx.has_input(3):
        out = R.add(out, R.reshape(ctx.input(3), (1, out_channels, 1, 1)))
    return out


def _affine_axis(length: int, align_corners: bool) -> np.ndarray:
    """The normalized coordinates of ``length`` pixel centres (align_corners=0) or of the pixels
    from the first to the last edge (align_corners=1), in float64 as ONNX's reference builds them."""
    if align_corners:
        return np.array([-1.0]) if length == 1 else -1.0 + np.arange(length) * (2.0 / (length - 1))
    return -1.0 + (2.0 * np.arange(length) + 1.0) / length


@converter("AffineGrid", since=20, attrs=("align_corners",))
def _affine_grid(ctx: NodeContext):
    """The sampling grid of a batch of affine maps: each output position's homogeneous coordinates
    (x fastest, then y, then z, then 1) times theta transposed. The base grid is a constant built
    from ``size`` (a constant: the IR fixes output shapes at compile time)."""
    if ctx.dtype(0) not in FLOATS:
        raise ctx.error(f"theta is {ctx.dtype(0)}: a float tensor is needed", "invalid")
    size = [int(v) for v in np.asarray(ctx.constant(1, "size")).reshape(-1)]
    spatial = size[2:]
    if len(spatial) not in (2, 3) or min(spatial, default=0) < 1:
        raise ctx.error(f"size={size} must be (N, C, H, W) or (N, C, D, H, W) with positive sizes", "invalid")
    mesh = np.meshgrid(*(_affine_axis(n, bool(ctx.attr("align_corners", 0))) for n in spatial), indexing="ij")
    base = np.stack([m.reshape(-1) for m in reversed(mesh)] + [np.ones(mesh[0].size)], axis=1)
    theta = ctx.input(0)
    rank = len(spatial)
    theta_dims = ctx.static_dims(0, "AffineGrid's theta")
    if tuple(theta_dims) != (size[0], rank, rank + 1):
        raise ctx.error(f"theta has shape {theta_dims}; size={size} needs ({size[0]}, {rank}, {rank + 1})", "invalid")
    grid = R.matmul(const(base, ctx.dtype(0)), R.permute_dims(theta, axes=(0, 2, 1)))
    return R.reshape(grid, (size[0], *spatial, rank))
