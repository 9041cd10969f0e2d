"""Image and sequence rearrangements composed of the IR's operators: CenterCropPad, ReverseSequence,
MaxUnpool and Col2Im."""

from __future__ import annotations

import numpy as np

from ... import op as R
from ...ir.expr import Constant
from .convert_common import axis_of, const, positions
from .convert_nn import conv3d, gather_elements, zero_pad
from .registry import NodeContext, converter


def static_ints(ctx: NodeContext, index: int, what: str) -> list[int]:
    """Input ``index`` as plain integers: a constant, or a shape value whose elements are all known."""
    values = ctx.shape_value(index, what)
    known = [ctx.analyzer.as_int(v) for v in values]
    if any(v is None for v in known):
        raise ctx.error(f"{what} (input {index}) is {', '.join(str(v) for v in values)}, which must be known "
                        "when compiling; fix the dimensions with shapes=")
    return known


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


def spread(ctx: NodeContext, x, dims: list[int], axis: int, stride: int):
    """``x`` with ``stride - 1`` zeros after each element along ``axis`` (none after the last): a
    take of each position's source and a constant mask (a concat with zeros and reshapes, fused,
    gave index expressions that grow with every spread axis, slow for a shader compiler)."""
    size = dims[axis]
    if stride == 1 or size <= 1:
        return x
    places = np.arange((size - 1) * stride + 1)
    along = [1] * len(dims)
    along[axis] = places.size
    taken = R.take(x, const(places // stride, "int64"), axis=axis)
    return R.where(Constant((places % stride == 0).reshape(along)), taken, const(0, ctx.dtype(0)))


@converter("Col2Im", since=18, attrs=("dilations", "pads", "strides"))
def _col2im(ctx: NodeContext):
    """A transposed convolution with one-hot kernels: the columns spread out by the strides, then a
    grouped convolution (one group per channel) whose kernel for block offset k is 1 at the
    flipped offset, so that each output pixel sums the column values that land on it. The padding
    is cropped off at the end."""
    n, channels_blocks, length = ctx.static_dims(0, "Col2Im")
    image = static_ints(ctx, 1, "image_shape")
    block = static_ints(ctx, 2, "block_shape")
    nd = len(image)
    if len(block) != nd or nd not in (1, 2, 3):
        raise ctx.error(f"image_shape {image} and block_shape {block} must give 1 to 3 spatial axes", "invalid")
    dilations = ctx.ints("dilations", (1,) * nd)
    pads = ctx.ints("pads", (0,) * (2 * nd))
    strides = ctx.ints("strides", (1,) * nd)
    taps = int(np.prod(block))
    padded = [image[i] + pads[i] + pads[i + nd] for i in range(nd)]
    counts = [(padded[i] - ((block[i] - 1) * dilations[i] + 1)) // strides[i] + 1 for i in range(nd)]
    if taps == 0 or channels_blocks % taps or int(np.prod(counts)) != length or min(counts) < 1:
        raise ctx.error(f"an input of {channels_blocks} x {length} columns does not fit image {image}, "
                        f"block {block}", "invalid")
    channels = channels_blocks // taps
    one_d = nd == 1
    if one_d:  # as 2-D of height 1
        image, block, counts, padded = [1, *image], [1, *block], [1, *counts], [1, *padded]
        dilations, strides, pads = (1, *dilations), (1, *strides), (0, pads[0], 0, pads[1])
        nd = 2
    dims = [n, channels_blocks, *counts]
    x = ctx.emit(R.reshape(ctx.input(0), dims))
    for i in range(nd):
        x = ctx.emit(spread(ctx, x, dims, 2 + i, strides[i]))
        dims[2 + i] = (counts[i] - 1) * strides[i] + 1
    weight = np.zeros((channels, taps, *block), dtype=ctx.dtype(0))
    for tap, offset in enumerate(np.ndindex(*block)):
        weight[(slice(None), tap, *(b - 1 - o for b, o in zip(block, offset)))] = 1
    reach = [(b - 1) * d for b, d in zip(block, dilations)]
    if nd == 3:
        y = conv3d(ctx, x, dims, Constant(weight), weight.shape, (1, 1, 1), (*reach, *reach), dilations, channels)
    else:
        y = R.nn.conv2d(x, Constant(weight), padding=(*reach, *reach), dilation=dilations, groups=channels)
    y = ctx.emit(y)
    full = [int(d.value) for d in y.struct_info.shape[2:]]  # the padded image, less rows no block reaches
    for i in range(nd):
        if full[i] < padded[i]:
            y = ctx.emit(zero_pad(ctx, y, [n, channels, *full], 2 + i, 0, padded[i] - full[i]))
            full[i] = padded[i]
    if any(pads):
        y = R.strided_slice(y, axes=tuple(range(2, 2 + nd)), begin=tuple(pads[:nd]),
                            end=tuple(pads[i] + image[i] for i in range(nd)))
    return R.squeeze(y, axis=(2,)) if one_d else y


@converter("ReverseSequence", attrs=("batch_axis", "time_axis"))
def _reverse_sequence(ctx: NodeContext):
    """A gather along the time axis: step t of batch b reads step len[b] - 1 - t where t < len[b],
    and step t otherwise (the lengths may be data)."""
    dims = ctx.dims(0)
    rank = len(dims)
    batch_axis = axis_of(ctx, int(ctx.attr("batch_axis", 1)), rank)
    time_axis = axis_of(ctx, int(ctx.attr("time_axis", 0)), rank)
    if rank < 2 or batch_axis == time_axis:
        raise ctx.error(f"batch_axis {batch_axis} and time_axis {time_axis} must be two axes of the input",
                        "invalid")
    steps = positions(ctx, dims[time_axis], time_axis, rank)
    along_batch = [1] * rank
    along_batch[batch_axis] = -1
    lengths = R.reshape(R.astype(ctx.input(1), dtype="int64"), along_batch)
    reversed_step = R.subtract(R.subtract(lengths, const(1, "int64")), steps)
    source = R.where(R.less(steps, lengths), reversed_step, steps)
    return gather_elements(ctx, ctx.input(0), dims, source, dims, time_axis)


_UNPOOL_LIMIT = 1 << 24  # elements of the (outputs x inputs) comparison MaxUnpool builds


@converter("MaxUnpool", since=11, attrs=("kernel_shape", "pads", "strides"))
def _max_unpool(ctx: NodeContext):
    """Y.flat[I.flat[i]] = X.flat[i] (the last write wins), zeros elsewhere. The indices are data,
    and the IR has no scatter: each output position takes the last input whose index names it,
    found by comparing every index with every position (hence the size limit)."""
    dims = list(ctx.static_dims(0, "MaxUnpool"))
    nd = len(dims) - 2
    kernel = ctx.ints("kernel_shape")
    strides = ctx.ints("strides", (1,) * nd)
    pads = ctx.ints("pads", (0,) * (2 * nd))
    if nd < 1 or len(kernel) != nd:
        raise ctx.error(f"kernel_shape {kernel} does not fit an input of rank {len(dims)}", "invalid")
    inferred = dims[:2] + [(dims[i + 2] - 1) * strides[i] - (pads[i] + pads[i + nd]) + kernel[i] for i in range(nd)]
    count_in, count_out = int(np.prod(dims)), int(np.prod(inferred))
    if count_in * count_out > _UNPOOL_LIMIT:
        raise ctx.error(f"{count_in} inputs into {count_out} outputs is over the {_UNPOOL_LIMIT} comparisons "
                        "this importer builds for a data-dependent scatter")
    indices = R.reshape(R.astype(ctx.input(1), dtype="int64"), (1, count_in))
    indices = R.where(R.less(indices, const(0, "int64")), R.add(indices, const(count_out, "int64")), indices)
    hits = R.equal(indices, const(np.arange(count_out).reshape(-1, 1), "int64"))
    order = const(np.arange(count_in).reshape(1, -1), "int64")
    source = ctx.emit(R.max(R.where(hits, order, const(-1, "int64")), axis=(1,)))
    written = R.greater_equal(source, const(0, "int64"))
    picked = R.take(R.reshape(ctx.input(0), (-1,)), R.where(written, source, const(0, "int64")), axis=0)
    y = ctx.emit(R.reshape(R.where(written, picked, const(0, ctx.dtype(0))), inferred))
    if ctx.has_input(2):
        wanted = static_ints(ctx, 2, "output_shape")
        if len(wanted) != len(dims) or wanted[:2] != inferred[:2] or any(w < i for w, i in zip(wanted, inferred)):
            raise ctx.error(f"output_shape {wanted} is smaller than the unpooled {inferred}", "invalid")
        for axis in range(2, len(dims)):
            y = zero_pad(ctx, y, inferred, axis, 0, wanted[axis] - inferred[axis])
            inferred[axis] = wanted[axis]
    return y
