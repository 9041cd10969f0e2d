"""Neural-network converters: matrix products, convolution and pooling, normalization, softmax,
losses, Resize and LRN."""

from __future__ import annotations

import numpy as np

from ... import op as R
from ...ir.expr import Constant
from .convert_common import _product, axis_of, const, int_value, positions, require_float, scalar_like
from .convert_integer import is_infinite, is_nan
from .registry import NodeContext, converter

# -- linear algebra -------------------------------------------------------------------------------


@converter("MatMul")
def _matmul(ctx: NodeContext):
    return R.matmul(ctx.input(0), ctx.input(1))


@converter("Gemm", attrs=("alpha", "beta", "transA", "transB"))
def _gemm(ctx: NodeContext):
    a, b = ctx.input(0), ctx.input(1)
    if ctx.attr("transA", 0):
        a = R.permute_dims(a, axes=(1, 0))
    if ctx.attr("transB", 0):
        b = R.permute_dims(b, axes=(1, 0))
    y = R.matmul(a, b)
    alpha, beta = float(ctx.attr("alpha", 1.0)), float(ctx.attr("beta", 1.0))
    if alpha != 1.0:
        y = R.multiply(y, scalar_like(ctx, alpha))
    if ctx.has_input(2):
        c = ctx.input(2)
        if beta != 1.0:
            c = R.multiply(c, scalar_like(ctx, beta, 2))
        y = R.add(y, c)
    return y


# -- convolution and pooling ----------------------------------------------------------------------


def _window(ctx: NodeContext, kernel: tuple[int, ...], spatial: tuple[int, ...]):
    """Strides, dilations and (top, left, bottom, right) padding of a 2-D window op."""
    strides = ctx.ints("strides", (1,) * len(kernel))
    dilations = ctx.ints("dilations", (1,) * len(kernel))
    auto_pad = ctx.attr("auto_pad", b"NOTSET")
    auto_pad = auto_pad.decode() if isinstance(auto_pad, bytes) else auto_pad
    if auto_pad in ("NOTSET", ""):
        pads = ctx.ints("pads", (0,) * (2 * len(kernel)))
    elif auto_pad == "VALID":
        pads = (0,) * (2 * len(kernel))
    elif auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        begins, ends = [], []
        for size, k, s, d in zip(spatial, kernel, strides, dilations):
            out = -(-size // s)
            total = max(0, (out - 1) * s + (k - 1) * d + 1 - size)
            small, large = total // 2, total - total // 2
            begins.append(small if auto_pad == "SAME_UPPER" else large)
            ends.append(large if auto_pad == "SAME_UPPER" else small)
        pads = tuple(begins) + tuple(ends)
    else:
        raise ctx.error(f"auto_pad={auto_pad!r} is not supported")
    return strides, dilations, pads


def _require_2d(ctx: NodeContext) -> bool:
    """True for a 1-D op (rank 3), which is made 2-D here: a height of 1 on the data and weight,
    and the window attributes given a leading 1 (or 0 for pads). The caller squeezes it back."""
    rank = ctx.rank(0)
    if rank in (4, 5):
        return False
    if rank != 3:
        raise ctx.error(f"only 1-D, 2-D and 3-D (rank 3 to 5) inputs are supported, input 0 has rank {rank}")
    ctx.inputs = list(ctx.inputs)
    ctx.inputs[0] = ctx.emit(R.expand_dims(ctx.input(0), axis=2))
    if ctx.node.op_type in ("Conv", "ConvTranspose"):
        weight = ctx.inputs[1]
        ctx.inputs[1] = Constant(weight.data[:, :, None]) if isinstance(weight, Constant) \
            else ctx.emit(R.expand_dims(weight, axis=2))
    ctx.attrs = dict(ctx.attrs)
    for name in ("kernel_shape", "strides", "dilations", "output_shape"):
        if name in ctx.attrs:
            ctx.attrs[name] = (1, *ctx.attrs[name])
    if "output_padding" in ctx.attrs:
        ctx.attrs["output_padding"] = (0, *ctx.attrs["output_padding"])
    if "pads" in ctx.attrs:
        begin, end = ctx.attrs["pads"]
        ctx.attrs["pads"] = (0, begin, 0, end)
    return True


@converter("Conv", attrs=("auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"))
def _conv(ctx: NodeContext):
    one_d = _require_2d(ctx)
    kernel = ctx.static_dims(1, "Conv")[2:]
    spatial = ctx.static_dims(0, "Conv")[2:] if ctx.attr("auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET") \
        else (0, 0)
    strides, dilations, pads = _window(ctx, kernel, spatial)
    groups = int(ctx.attr("group", 1))
    if len(kernel) == 3:
        y = conv3d(ctx, ctx.input(0), ctx.static_dims(0, "Conv"), ctx.input(1), ctx.static_dims(1, "Conv"),
                   strides, pads, dilations, groups)
    else:
        y = R.nn.conv2d(ctx.input(0), ctx.input(1), strides=strides, padding=pads, dilation=dilations, groups=groups)
    if ctx.has_input(2):
        y = R.add(y, R.reshape(ctx.input(2), (1, -1) + (1,) * len(kernel)))
    return R.squeeze(y, axis=(2,)) if one_d else y


def conv3d(ctx: NodeContext, x, x_dims, weight, w_dims, strides, pads, dilations, groups: int):
    """A 3-D convolution as the sum over the kernel's depth taps of 2-D ones: tap k convolves the
    depth slices k * dilation + s * stride (the depth folded into the batch) with the kernel's
    plane k."""
    n, c, depth, height, width = x_dims
    out_channels, _, taps = w_dims[:3]
    begin, end = pads[0], pads[3]
    padded = ctx.emit(zero_pad(ctx, x, list(x_dims), 2, begin, end))
    out_d = (depth + begin + end - ((taps - 1) * dilations[0] + 1)) // strides[0] + 1
    total = None
    for k in range(taps):
        start = k * dilations[0]
        slab = R.strided_slice(padded, axes=(2,), begin=(start,), end=(start + (out_d - 1) * strides[0] + 1,),
                               strides=(strides[0],))
        slab = R.reshape(R.permute_dims(slab, axes=(0, 2, 1, 3, 4)), (n * out_d, c, height, width))
        plane = R.reshape(R.strided_slice(weight, axes=(2,), begin=(k,), end=(k + 1,)),
                          (out_channels, w_dims[1], *w_dims[3:]))
        y = ctx.emit(R.nn.conv2d(slab, plane, strides=strides[1:], padding=(pads[1], pads[2], pads[4], pads[5]),
                                 dilation=dilations[1:], groups=groups))
        total = y if total is None else ctx.emit(R.add(total, y))
    out_h, out_w = (int(d.value) for d in total.struct_info.shape[2:])
    return R.permute_dims(R.reshape(total, (n, out_d, out_channels, out_h, out_w)), axes=(0, 2, 1, 3, 4))


def zero_pad(ctx: NodeContext, x, dims: list[int], axis: int, before: int, after: int):
    """``x`` (static ``dims``) with ``before`` and ``after`` zeros along ``axis``."""
    parts = []
    for count in (before, after):
        block = list(dims)
        block[axis] = count
        parts.append(Constant(np.zeros(block, dtype=ctx.dtype(0))) if count > 0 else None)
    pieces = [p for p in (parts[0], x, parts[1]) if p is not None]
    return R.concat(pieces, axis=axis) if len(pieces) > 1 else x


def _pool(kind: str):
    def convert(ctx: NodeContext):
        if len([o for o in ctx.node.output if o]) > 1:
            if kind != "max":
                raise ctx.error("the Indices output is not supported")
            return max_pool_with_indices(ctx)
        return pool(ctx, kind, ctx.input(0), count_include_pad=bool(ctx.attr("count_include_pad", 0)))

    return convert


converter("MaxPool", since=12, attrs=("auto_pad", "ceil_mode", "dilations", "kernel_shape", "pads",
                                      "storage_order", "strides"))(_pool("max"))
converter("AveragePool", since=11, attrs=("auto_pad", "ceil_mode", "count_include_pad", "kernel_shape", "pads",
                                          "strides"))(_pool("avg"))
converter("AveragePool", since=19, attrs=("auto_pad", "ceil_mode", "count_include_pad", "dilations",
                                          "kernel_shape", "pads", "strides"))(_pool("avg"))


def pool(ctx: NodeContext, kind: str, x, count_include_pad: bool):
    """A 1-D, 2-D or 3-D max, average or sum pool of ``x`` (input 0's shape) by the node's window
    attributes. 1-D runs as 2-D of height 1. 3-D is separable, as a box window is: a 2-D pool over
    (H, W) with the depth folded into the channels, then a pool of width 1 over the depth. For an
    average the divisor is then the product of the per-axis counts, which is the count of the box
    (with or without the padding), so the result is exact up to float rounding."""
    rank = ctx.rank(0)
    if rank not in (3, 4, 5):
        raise ctx.error(f"only 1-D, 2-D and 3-D (rank 3 to 5) inputs are supported, input 0 has rank {rank}")
    kernel = tuple(ctx.ints("kernel_shape"))
    if len(kernel) != rank - 2:
        raise ctx.error(f"kernel_shape {kernel} does not fit an input of rank {rank}", "invalid")
    ceil = bool(ctx.attr("ceil_mode", 0))
    needs_static = ceil or rank == 5 or ctx.attr("auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET")
    dims = ctx.static_dims(0, ctx.node.op_type) if needs_static else None
    spatial = dims[2:] if dims else (0,) * len(kernel)
    strides, dilations, pads = _window(ctx, kernel, spatial)
    half = len(kernel)
    begins, ends = list(pads[:half]), list(pads[half:])
    if rank == 3:
        y = _pool2d(ctx, kind, R.expand_dims(x, axis=2), (1, *spatial), (1, *kernel), (1, *strides),
                    (1, *dilations), (0, begins[0], 0, ends[0]), ceil, count_include_pad)
        return R.squeeze(y, axis=(2,))
    if rank == 4:
        return _pool2d(ctx, kind, x, spatial, kernel, strides, dilations, (*begins, *ends), ceil, count_include_pad)
    n, c, depth, height, width = dims
    planes = ctx.emit(_pool2d(ctx, kind, R.reshape(x, (n, c * depth, height, width)), (height, width), kernel[1:],
                              strides[1:], dilations[1:], (begins[1], begins[2], ends[1], ends[2]), ceil,
                              count_include_pad))
    out_h, out_w = (int(d.value) for d in planes.struct_info.shape[2:])
    columns = R.reshape(planes, (n, c, depth, out_h * out_w))
    y = ctx.emit(_pool2d(ctx, kind, columns, (depth, 1), (kernel[0], 1), (strides[0], 1), (dilations[0], 1),
                         (begins[0], 0, ends[0], 0), ceil, count_include_pad))
    return R.reshape(y, (n, c, int(y.struct_info.shape[2].value), out_h, out_w))


def _pool2d(ctx: NodeContext, kind, x, spatial, kernel, strides, dilations, pads, ceil, count_include_pad):
    attrs = dict(pool_size=tuple(kernel), strides=tuple(strides), padding=tuple(pads), dilation=tuple(dilations),
                 ceil_mode=ceil)
    if kind == "max":
        y = R.nn.max_pool2d(x, **attrs)
    elif ceil and count_include_pad:
        # ONNX counts the padding but not a ceil-mode window's overhang past it: pad with zeros
        # here and count only what is inside the padded input.
        x = ctx.emit(x)
        dims = [int(d.value) for d in x.struct_info.shape]
        for axis in (2, 3):
            before, after = pads[axis - 2], pads[axis]
            parts = []
            for count in (before, after):
                block = list(dims)
                block[axis] = count
                parts.append(Constant(np.zeros(block, dtype=ctx.dtype(0))) if count else None)
            x = R.concat([p for p in (parts[0], x, parts[1]) if p is not None], axis=axis)
            dims[axis] += before + after
        y = R.nn.avg_pool2d(x, count_include_pad=False, **{**attrs, "padding": (0, 0, 0, 0)})
    elif kind == "sum":  # the IR's average counting the padding divides by the window's size, always
        y = R.multiply(R.nn.avg_pool2d(x, count_include_pad=True, **attrs),
                       scalar_like(ctx, float(np.prod(kernel))))
    else:
        y = R.nn.avg_pool2d(x, count_include_pad=count_include_pad, **attrs)
    return drop_windows_in_padding(y, spatial, kernel, strides, dilations, pads) if ceil else y


def drop_windows_in_padding(y, spatial, kernel, strides, dilations, pads):
    """ONNX's ceil mode drops a last window that would start in the end padding; the IR's keeps
    it, so the extra row or column is sliced off (static shapes only)."""
    axes, ends = [], []
    for axis, (size, k, s, d) in enumerate(zip(spatial, kernel, strides, dilations)):
        begin, end = pads[axis], pads[axis + len(kernel)]
        out = -(-(size + begin + end - ((k - 1) * d + 1)) // s) + 1
        if (out - 1) * s >= size + begin:
            axes.append(axis + 2)
            ends.append(out - 1)
    if not axes:
        return y
    return R.strided_slice(y, axes=tuple(axes), begin=(0,) * len(axes), end=tuple(ends))


@converter("GlobalAveragePool")
def _global_average_pool(ctx: NodeContext):
    require_float(ctx)
    return R.mean(ctx.input(0), axis=tuple(range(2, ctx.rank(0))), keepdims=True)


@converter("GlobalMaxPool")
def _global_max_pool(ctx: NodeContext):
    return R.max(ctx.input(0), axis=tuple(range(2, ctx.rank(0))), keepdims=True)


# -- normalization over an axis -------------------------------------------------------------------


def _softmax(name: str, legacy: bool):
    def convert(ctx: NodeContext):
        require_float(ctx)
        rank = ctx.rank(0)
        if not legacy:
            return R.make_call(name, ctx.input(0), axis=axis_of(ctx, ctx.attr("axis", -1), rank))
        # Before opset 13 the input is seen as 2-D: dims before axis, and the rest flattened.
        axis = axis_of(ctx, ctx.attr("axis", 1), rank)
        dims = ctx.dims(0)
        inner = _product(dims[axis:])
        flat = R.reshape(ctx.input(0), (-1, inner))
        return R.reshape(R.make_call(name, flat, axis=-1), list(dims))

    return convert


for _onnx, _ir in (("Softmax", "nn.softmax"), ("LogSoftmax", "nn.log_softmax")):
    converter(_onnx, attrs=("axis",))(_softmax(_ir, legacy=True))
    converter(_onnx, since=13, attrs=("axis",))(_softmax(_ir, legacy=False))





# -- masks, norms and small activations -----------------------------------------------------------


@converter("Trilu", since=14, attrs=("upper",))
def _trilu(ctx: NodeContext):
    dims = ctx.static_dims(0, "Trilu")
    if len(dims) < 2:
        raise ctx.error("the input needs rank 2 or more", "invalid")
    k = int(ctx.constant(1, "k").reshape(-1)[0]) if ctx.has_input(1) else 0
    ones = np.ones(dims[-2:], dtype=bool)
    mask = np.triu(ones, k) if ctx.attr("upper", 1) else np.tril(ones, k)
    return R.where(Constant(mask), ctx.input(0), scalar_like(ctx, 0))


@converter("RMSNormalization", since=23, attrs=("axis", "epsilon", "stash_type"))
def _rms_norm(ctx: NodeContext):
    require_float(ctx)
    rank = ctx.rank(0)
    axes = tuple(range(axis_of(ctx, ctx.attr("axis", -1), rank), rank))
    x = ctx.input(0)
    mean_square = R.mean(R.multiply(x, x), axis=axes, keepdims=True)
    scale = R.sqrt(R.add(mean_square, scalar_like(ctx, ctx.attr("epsilon", 1e-5))))
    return R.multiply(R.divide(x, scale), ctx.input(1))


@converter("IsInf", attrs=("detect_negative", "detect_positive"))
def _is_inf(ctx: NodeContext):
    """From the bits (convert_integer.is_infinite): WGSL has no infinity constant."""
    require_float(ctx)
    positive = is_infinite(ctx.input(0), ctx.dtype(0), 1)
    negative = is_infinite(ctx.input(0), ctx.dtype(0), -1)
    want_positive, want_negative = ctx.attr("detect_positive", 1), ctx.attr("detect_negative", 1)
    if want_positive and want_negative:
        return R.logical_or(positive, negative)
    if want_positive:
        return positive
    if want_negative:
        return negative
    return R.logical_and(positive, negative)  # never true


@converter("IsNaN")
def _is_nan(ctx: NodeContext):
    """From the bits (convert_integer.is_nan): llvmpipe folds x != x to false."""
    require_float(ctx)
    return is_nan(ctx.input(0), ctx.dtype(0))


@converter("ThresholdedRelu", attrs=("alpha",))
def _thresholded_relu(ctx: NodeContext):
    require_float(ctx)
    x = ctx.input(0)
    return R.where(R.greater(x, scalar_like(ctx, ctx.attr("alpha", 1.0))), x, scalar_like(ctx, 0.0))


@converter("Celu", since=12, attrs=("alpha",))
def _celu(ctx: NodeContext):
    require_float(ctx)
    x = ctx.input(0)
    alpha = scalar_like(ctx, ctx.attr("alpha", 1.0))
    negative = R.multiply(alpha, R.subtract(R.exp(R.divide(x, alpha)), scalar_like(ctx, 1.0)))
    return R.where(R.less(x, scalar_like(ctx, 0.0)), negative, x)


@converter("LpNormalization", attrs=("axis", "p"))
def _lp_normalization(ctx: NodeContext):
    require_float(ctx)
    x = ctx.input(0)
    axis = axis_of(ctx, ctx.attr("axis", -1), ctx.rank(0))
    p = ctx.attr("p", 2)
    if p == 1:
        norm = R.sum(R.abs(x), axis=(axis,), keepdims=True)
    elif p == 2:
        norm = R.sqrt(R.sum(R.multiply(x, x), axis=(axis,), keepdims=True))
    else:
        raise ctx.error(f"p={p} is not supported (1 or 2)", "invalid")
    zero = scalar_like(ctx, 0.0)
    return R.where(R.equal(norm, zero), zero, R.divide(x, norm))


def _space_depth(to_depth: bool):
    def convert(ctx: NodeContext):
        n, c, h, w = ctx.static_dims(0, ctx.node.op_type)
        b = int(ctx.attr("blocksize"))
        x = ctx.input(0)
        mode = ctx.attr("mode", b"DCR")
        mode = mode.decode() if isinstance(mode, bytes) else mode
        if mode not in ("DCR", "CRD"):
            raise ctx.error(f"mode={mode!r} is not supported (DCR or CRD)", "invalid")
        if to_depth:  # DCR: the block offsets before the channel; CRD: after it
            y = R.reshape(x, (n, c, h // b, b, w // b, b))
            y = R.permute_dims(y, axes=(0, 3, 5, 1, 2, 4) if mode == "DCR" else (0, 1, 3, 5, 2, 4))
            return R.reshape(y, (n, c * b * b, h // b, w // b))
        if mode == "DCR":
            y = R.permute_dims(R.reshape(x, (n, b, b, c // (b * b), h, w)), axes=(0, 3, 4, 1, 5, 2))
        else:
            y = R.permute_dims(R.reshape(x, (n, c // (b * b), b, b, h, w)), axes=(0, 1, 4, 2, 5, 3))
        return R.reshape(y, (n, c // (b * b), h * b, w * b))

    return convert


converter("SpaceToDepth", attrs=("blocksize",))(_space_depth(True))
converter("SpaceToDepth", since=28, attrs=("blocksize", "mode"))(_space_depth(True))
converter("DepthToSpace", attrs=("blocksize", "mode"))(_space_depth(False))


# -- gathers along an axis, and the losses built on them ------------------------------------------


def gather_elements(ctx: NodeContext, data, data_dims, indices, index_dims, axis: int):
    """out[..., i, ...] = data[..., indices[..., i, ...], ...] along ``axis``: the data flattened and
    read at the index times the axis's stride plus, for every other axis, the output position times
    its stride (positions broadcast along their axes, so no constant grows with the tensor; dims may
    be symbolic)."""
    rank = len(data_dims)
    strides = [ctx.analyzer.simplify(_product(data_dims[a + 1:])) for a in range(rank)]
    indices = R.astype(indices, dtype="int64")
    wrapped = R.add(indices, int_value(ctx, data_dims[axis]))
    indices = R.where(R.less(indices, const(0, "int64")), wrapped, indices)
    flat = R.multiply(indices, int_value(ctx, strides[axis]))
    for a in range(len(index_dims)):
        if a == axis or ctx.analyzer.as_int(index_dims[a]) == 1:
            continue
        flat = R.add(flat, R.multiply(positions(ctx, index_dims[a], a, rank), int_value(ctx, strides[a])))
    return R.take(R.reshape(data, (-1,)), flat, axis=0)


@converter("GatherElements", attrs=("axis",))
def _gather_elements(ctx: NodeContext):
    data_dims = ctx.dims(0)
    index_dims = ctx.dims(1)
    axis = axis_of(ctx, ctx.attr("axis", 0), len(data_dims))
    return gather_elements(ctx, ctx.input(0), data_dims, ctx.input(1), index_dims, axis)


def _nll(ctx: NodeContext, log_prob, dims, target_index: int, weight_index: int):
    """Negative log-likelihood of ``log_prob`` (N, C, d...) at the classes ``target`` (N, d...)."""
    reduction = ctx.attr("reduction", b"mean")
    reduction = reduction.decode() if isinstance(reduction, bytes) else reduction
    if reduction not in ("none", "sum", "mean"):
        raise ctx.error(f"reduction={reduction!r} is not supported", "invalid")
    target = ctx.input(target_index)
    target_dims = ctx.static_dims(target_index, ctx.node.op_type)
    ignore = ctx.attr("ignore_index")
    kept = None
    if ignore is not None:
        kept = R.not_equal(target, const(ignore, ctx.dtype(target_index)))
        target = R.where(kept, target, const(0, ctx.dtype(target_index)))
    index_dims = (target_dims[0], 1, *target_dims[1:])
    picked = gather_elements(ctx, log_prob, dims, R.expand_dims(target, axis=1), index_dims, 1)
    loss = R.negative(R.squeeze(picked, axis=(1,)))
    dtype = ctx.dtype(0)
    weight = None
    if ctx.has_input(weight_index):
        weight = R.take(ctx.input(weight_index), target, axis=0)
    if kept is not None:
        mask = R.astype(kept, dtype=dtype)
        weight = mask if weight is None else R.multiply(weight, mask)
    if weight is not None:
        loss = R.multiply(loss, weight)
    if reduction == "none":
        return loss
    total = R.sum(loss)
    if reduction == "sum":
        return total
    count = R.sum(weight) if weight is not None else const(float(np.prod(target_dims)), dtype)
    return R.divide(total, count)


@converter("NegativeLogLikelihoodLoss", since=13, attrs=("ignore_index", "reduction"))
def _nll_loss(ctx: NodeContext):
    require_float(ctx)
    return _nll(ctx, ctx.input(0), ctx.static_dims(0, "NegativeLogLikelihoodLoss"), 1, 2)


@converter("SoftmaxCrossEntropyLoss", since=13, attrs=("ignore_index", "reduction"))
def _softmax_cross_entropy(ctx: NodeContext):
    require_float(ctx)
    log_prob = ctx.emit(R.nn.log_softmax(ctx.input(0), axis=1))
    dims = ctx.static_dims(0, "SoftmaxCrossEntropyLoss")
    return [_nll(ctx, log_prob, dims, 1, 2), log_prob]


# -- Resize: one interpolation matrix per axis ----------------------------------------------------

_RESIZE_MODES = ("half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel", "half_pixel_symmetric",
                 "tf_crop_and_resize")


def _source_position(mode: str, x: int, scale: float, size_in: int, size_out: int, roi=(0.0, 1.0)) -> float:
    """Where output index ``x`` samples the input, by coordinate_transformation_mode."""
    width = scale * size_in  # the output's length before rounding
    if mode == "align_corners":
        return 0.0 if width == 1 else x * (size_in - 1) / (width - 1)
    if mode == "asymmetric":
        return x / scale
    if mode == "pytorch_half_pixel":
        return -0.5 if width == 1 else (x + 0.5) / scale - 0.5
    if mode == "half_pixel_symmetric":
        offset = size_in / 2 * (1 - size_out / width)
        return offset + (x + 0.5) / scale - 0.5
    if mode == "tf_crop_and_resize":
        start, end = roi
        span = (end - start) * (size_in - 1)
        return (span / 2 if width == 1 else x * span / (width - 1)) + start * (size_in - 1)
    return (x + 0.5) / scale - 0.5


def _keys(a: float, distance: np.ndarray) -> np.ndarray:
    """The cubic convolution kernel (Keys) at ``distance`` from the sample."""
    d = np.abs(distance)
    near = ((a + 2) * d - (a + 3)) * d * d + 1
    far = ((a * d - 5 * a) * d + 8 * a) * d - 4 * a
    return np.where(d <= 1, near, np.where(d < 2, far, 0.0))


def _taps(kind: str, ratio: float, nearest_mode: str, a: float, scale: float = 1.0,
          antialias: bool = False) -> np.ndarray:
    """Weights of the taps from floor(position) + first, for ``first`` = 1 - len(taps) / 2. With
    antialias a downscale widens the kernel by 1 / scale (stretched, then normalized to sum to 1)."""
    if kind == "nearest":
        if ratio == 1.0:
            return np.array([0.0, 1.0])
        prefer = {"round_prefer_floor": ratio <= 0.5, "round_prefer_ceil": ratio < 0.5,
                  "floor": True, "ceil": False}[nearest_mode]
        return np.array([1.0, 0.0]) if prefer else np.array([0.0, 1.0])
    if antialias:
        stretch = min(scale, 1.0)
        reach = 1 if kind == "linear" else 2
        first = int(np.floor(-reach / stretch) + 1)
        distance = (np.arange(first, 2 - first) - ratio) * stretch
        taps = np.clip(1 - np.abs(distance), 0, 1) if kind == "linear" else _keys(a, distance)
        return taps / taps.sum()
    if kind == "linear":
        return np.array([1.0 - ratio, ratio])
    return _keys(a, np.arange(-1, 3) - ratio)  # cubic: taps at -1, 0, 1, 2 from the floor


def resize_matrix(kind: str, mode: str, size_in: int, size_out: int, scale: float, nearest_mode: str = "",
                  a: float = -0.75, exclude_outside: bool = False, antialias: bool = False,
                  roi=(0.0, 1.0)) -> tuple[np.ndarray, np.ndarray]:
    """(size_out, size_in) weights: output x = sum_i M[x, i] * input i along one axis, and which
    outputs tf_crop_and_resize places outside the input (their rows are zero: they take the
    extrapolation value). The taps before the first and after the last input repeat the edge, as
    ONNX's edge padding does."""
    matrix = np.zeros((size_out, size_in))
    outside = np.zeros(size_out, dtype=bool)
    for x in range(size_out):
        position = _source_position(mode, x, scale, size_in, size_out, roi)
        if mode == "tf_crop_and_resize" and not 0 <= position <= size_in - 1:
            outside[x] = True
            continue
        left = int(np.ceil(position)) - 1  # the tap at or left of the position; an exact hit weighs 1 right of it
        ratio = position - left
        taps = _taps(kind, ratio, nearest_mode, a, scale, antialias)
        first = left - len(taps) // 2 + 1
        indices = np.arange(first, first + len(taps))
        if exclude_outside:
            taps = np.where((indices >= 0) & (indices < size_in), taps, 0.0)
            taps = taps / (taps.sum() or 1.0)
        for index, weight in zip(np.clip(indices, 0, size_in - 1), taps):
            matrix[x, index] += weight
    return matrix, outside


@converter("Resize", since=13, attrs=("coordinate_transformation_mode", "cubic_coeff_a", "exclude_outside",
                                      "extrapolation_value", "mode", "nearest_mode"))
def _resize_13(ctx: NodeContext):
    return _resize(ctx)


@converter("Resize", since=18, attrs=("antialias", "axes", "coordinate_transformation_mode", "cubic_coeff_a",
                                      "exclude_outside", "extrapolation_value", "keep_aspect_ratio_policy", "mode",
                                      "nearest_mode"))
def _resize_18(ctx: NodeContext):
    return _resize(ctx)


def _text_attr(ctx: NodeContext, name: str, default: str) -> str:
    value = ctx.attr(name, default)
    return value.decode() if isinstance(value, bytes) else value


def _resize(ctx: NodeContext):
    """Separable: each resized axis is a matrix product with its interpolation matrix (linear,
    cubic), or a take of the nearest indices (any dtype). Scales or sizes must be constants."""
    kind = _text_attr(ctx, "mode", "nearest")
    mode = _text_attr(ctx, "coordinate_transformation_mode", "half_pixel")
    nearest_mode = _text_attr(ctx, "nearest_mode", "round_prefer_floor")
    if kind not in ("nearest", "linear", "cubic"):
        raise ctx.error(f"mode={kind!r} is not supported", "invalid")
    if mode not in _RESIZE_MODES:
        raise ctx.error(f"coordinate_transformation_mode={mode!r} is not supported")
    antialias = bool(ctx.attr("antialias", 0))
    if antialias and kind == "nearest":
        raise ctx.error("antialias=1 needs mode linear or cubic", "invalid")
    policy = _text_attr(ctx, "keep_aspect_ratio_policy", "stretch")
    if policy not in ("stretch", "not_larger", "not_smaller"):
        raise ctx.error(f"keep_aspect_ratio_policy={policy!r} is not supported", "invalid")
    full = ctx.dims(0)  # only the resized axes need static sizes (a dynamic batch passes through)
    rank = len(full)
    axes = [axis_of(ctx, a, rank) for a in ctx.ints("axes", tuple(range(rank)))]
    scales = sizes = None
    if ctx.has_input(3):
        sizes = ctx.shape_value(3, "sizes")
    elif ctx.has_input(2) and ctx.constant(2, "scales").size:
        scales = [float(v) for v in ctx.constant(2, "scales").reshape(-1)]
    else:
        raise ctx.error("neither scales nor sizes is given", "invalid")
    if sizes is not None:
        kept = [ctx.analyzer.prove_equal(size, full[axis]) for size, axis in zip(sizes, axes)]
    else:
        kept = [scale == 1.0 for scale in scales]
    rois = [(0.0, 1.0)] * len(axes)
    if mode == "tf_crop_and_resize":  # the region of interest per resized axis: starts, then ends
        roi = [float(v) for v in ctx.constant(1, "roi").reshape(-1)] if ctx.has_input(1) else []
        if len(roi) != 2 * len(axes):
            raise ctx.error(f"roi has {len(roi)} values for {len(axes)} axes", "invalid")
        rois = list(zip(roi[:len(axes)], roi[len(axes):]))
        kept = [keep and np.isclose(r[0], 0.0) and np.isclose(r[1], 1.0) for keep, r in zip(kept, rois)]

    def static(axis, value, what):
        known = ctx.analyzer.as_int(value)
        if known is None:
            raise ctx.error(f"Resize needs the static {what} of axis {axis}, which is {value}; fix it with shapes=")
        return known

    dims = [None if keep and policy == "stretch" else static(axis, full[axis], "size")
            for keep, axis in zip(kept, axes)]
    dims = {axis: d for axis, d in zip(axes, dims)}
    if sizes is not None:
        sizes = [None if keep and policy == "stretch" else static(axis, size, "output size")
                 for keep, size, axis in zip(kept, sizes, axes)]
    if sizes is not None and policy != "stretch":  # one scale for every axis, the sizes a bound
        ratios = [size / dims[axis] for size, axis in zip(sizes, axes)]
        common = min(ratios) if policy == "not_larger" else max(ratios)
        fixed_sizes = [int(np.floor(dims[axis] * common + 0.5)) for axis in axes]
        scales, sizes = [common] * len(axes), None
        kept = [False] * len(axes)
    else:
        fixed_sizes = None
    x = ctx.input(0)
    if kind != "nearest":
        require_float(ctx)
    for position, axis in enumerate(axes):
        if kept[position]:
            continue
        size_in = dims[axis]
        if sizes is not None:
            size_out, scale = sizes[position], sizes[position] / size_in
        else:
            scale = scales[position]
            size_out = fixed_sizes[position] if fixed_sizes else int(np.floor(size_in * scale))
        if size_out == size_in and scale == 1.0 and rois[position] == (0.0, 1.0):
            continue
        matrix, outside = resize_matrix(kind, mode, size_in, size_out, scale, nearest_mode,
                                        float(ctx.attr("cubic_coeff_a", -0.75)), bool(ctx.attr("exclude_outside", 0)),
                                        antialias, rois[position])
        # tf_crop_and_resize's outputs outside the input take the extrapolation value (their rows are zero)
        fill = outside.astype(ctx.dtype(0)) * np.asarray(ctx.attr("extrapolation_value", 0.0), dtype=ctx.dtype(0))
        along = [size_out if a == axis else 1 for a in range(rank)]
        if kind == "nearest":
            x = R.take(x, const(np.argmax(matrix, axis=1), "int64"), axis=axis)
            if outside.any():
                x = R.where(Constant(outside.reshape(along)), Constant(fill.reshape(along)), x)
            x = ctx.emit(x)
            continue
        perm = [a for a in range(rank) if a != axis] + [axis]
        moved = R.permute_dims(x, axes=tuple(perm)) if axis != rank - 1 else x
        y = R.matmul(moved, Constant(matrix.T.astype(ctx.dtype(0))))
        x = R.permute_dims(y, axes=tuple(int(v) for v in np.argsort(perm))) if axis != rank - 1 else y
        if outside.any():
            x = R.add(x, Constant(fill.reshape(along)))
        x = ctx.emit(x)
    return x


@converter("CumProd", since=26, attrs=("exclusive", "reverse"))
def _cumprod(ctx: NodeContext):
    """Prefix products in log2(n) steps (each multiplies by the running product shifted by 1, 2,
    4, ... with ones shifted in), so zeros and signs need no special case."""
    rank = ctx.rank(0)
    axis = axis_of(ctx, int(np.asarray(ctx.constant(1, "axis")).reshape(-1)[0]), rank)
    dims = list(ctx.static_dims(0, "CumProd"))
    size = dims[axis]
    x = ctx.input(0)

    def flip(value):
        return R.strided_slice(value, axes=(axis,), begin=(size - 1,), end=(-size - 1,), strides=(-1,))

    def shifted(value, shift):
        ones = list(dims)
        ones[axis] = shift
        kept = R.strided_slice(value, axes=(axis,), begin=(0,), end=(size - shift,))
        return R.concat([Constant(np.ones(ones, dtype=ctx.dtype(0))), kept], axis=axis)

    if size == 0:
        return x
    if ctx.attr("reverse", 0):
        x = flip(x)
    if ctx.attr("exclusive", 0):
        x = shifted(x, 1)
    shift = 1
    while shift < size:
        x = ctx.emit(R.multiply(x, shifted(x, shift)))
        shift *= 2
    return flip(x) if ctx.attr("reverse", 0) else x


@converter("LRN", attrs=("alpha", "beta", "bias", "size"))
def _lrn(ctx: NodeContext):
    """x / (bias + alpha / size * sum of squares over the ``size`` nearest channels) ** beta: the
    channel window as a product with a band matrix."""
    require_float(ctx)
    dims = ctx.static_dims(0, "LRN")
    channels, size = dims[1], int(ctx.attr("size"))
    c, d = np.indices((channels, channels))
    band = ((d >= c - (size - 1) // 2) & (d <= c + int(np.ceil((size - 1) / 2)))).astype(ctx.dtype(0))
    x = ctx.input(0)
    rank = len(dims)
    perm = (0, *range(2, rank), 1)
    squares = R.permute_dims(R.multiply(x, x), axes=perm)
    summed = R.matmul(squares, Constant(band.T.copy()))
    summed = R.permute_dims(summed, axes=tuple(int(v) for v in np.argsort(perm)))
    alpha, beta, bias = ctx.attr("alpha", 1e-4), ctx.attr("beta", 0.75), ctx.attr("bias", 1.0)
    scale = R.add(scalar_like(ctx, bias), R.multiply(scalar_like(ctx, alpha / size), summed))
    return R.divide(x, R.power(scale, scalar_like(ctx, beta)))


def max_pool_with_indices(ctx: NodeContext):
    """2-D MaxPool's values and Indices: each window's first position (in row-major scan order,
    the smallest row-major index) that holds the maximum, flattened over the whole input
    (storage_order 1: that position's index column-major within the plane), as ONNX's reference
    scans. One take reads every window's taps onto a last axis and a min over it finds the first
    match (one chain of minimums per tap fused into an expression that doubled with each tap);
    positions outside the input never match."""
    if ctx.rank(0) != 4:
        raise ctx.error(f"the Indices output is supported for 2-D (rank-4) inputs, input 0 has rank {ctx.rank(0)}")
    n, c, height, width = ctx.static_dims(0, "MaxPool's Indices")
    kernel = tuple(ctx.ints("kernel_shape"))
    strides, dilations, pads = _window(ctx, kernel, (height, width))
    x = ctx.input(0)
    values = ctx.emit(pool(ctx, "max", x, count_include_pad=False))
    out_h, out_w = (int(d.value) for d in values.struct_info.shape[2:])
    planes = ctx.emit(R.reshape(x, (n, c, height * width)))
    # every window's taps at once, the tap on a last axis: (out_h, out_w, taps) positions
    tap_rows = (np.arange(out_h)[:, None] * strides[0] - pads[0]) + np.arange(kernel[0])[None, :] * dilations[0]
    tap_cols = (np.arange(out_w)[:, None] * strides[1] - pads[1]) + np.arange(kernel[1])[None, :] * dilations[1]
    row = np.broadcast_to(tap_rows[:, None, :, None], (out_h, out_w, kernel[0], kernel[1])).reshape(out_h, out_w, -1)
    col = np.broadcast_to(tap_cols[None, :, None, :], (out_h, out_w, kernel[0], kernel[1])).reshape(out_h, out_w, -1)
    inside = (row >= 0) & (row < height) & (col >= 0) & (col < width)
    read = np.clip(row, 0, height - 1) * width + np.clip(col, 0, width - 1)
    none = height * width  # beyond any position: padding never wins
    stored = np.where(inside, row * width + col, none)
    taps = R.reshape(R.take(planes, const(read.reshape(-1), "int64"), axis=2), (n, c, out_h, out_w, row.shape[2]))
    hit = R.logical_and(Constant(inside), R.equal(taps, R.expand_dims(values, axis=4)))
    best = ctx.emit(R.min(R.where(hit, const(stored, "int64"), const(none, "int64")), axis=(4,)))
    column_major = bool(ctx.attr("storage_order", 0))
    if column_major:  # the same first maximum (ONNX scans row-major), its index stored column-major
        row, col = R.floor_divide(best, const(width, "int64")), R.subtract(best, R.multiply(
            R.floor_divide(best, const(width, "int64")), const(width, "int64")))
        best = R.add(row, R.multiply(col, const(height, "int64")))
    plane = R.add(R.multiply(positions(ctx, n, 0, 4), const(c, "int64")), positions(ctx, c, 1, 4))
    return [values, R.add(best, R.multiply(plane, const(height * width, "int64")))]
