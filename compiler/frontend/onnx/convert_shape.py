"""Converters that make or move data: constants, shapes, reshapes, slices, splits, pads, gathers,
scatters, tiles and the small constructors."""

from __future__ import annotations

import numpy as np

from ... import arith
from ... import op as R
from ...ir.expr import Constant, TupleGetItem
from .convert_common import (
    FLOATS,
    _product,
    all_constant,
    axis_of,
    const,
    int_value,
    require_float,
    scalar_like,
)
from .convert_integer import is_infinite
from .convert_nn import _require_2d, conv3d, pool
from .convert_vision import spread, static_ints
from .loader import ir_dtype
from .registry import NodeContext, converter

# -- constants and shapes -------------------------------------------------------------------------


@converter("Constant", attrs=("value", "value_float", "value_floats", "value_int", "value_ints"))
def _constant(ctx: NodeContext):
    from .loader import tensor_to_array

    if "value" in ctx.attrs:
        return Constant(tensor_to_array(ctx.attrs["value"], None, f"{ctx.node.op_type} value"))
    for name, dtype in (("value_float", "float32"), ("value_floats", "float32"), ("value_int", "int64"),
                        ("value_ints", "int64")):
        if name in ctx.attrs:
            return const(ctx.attrs[name], dtype)
    raise ctx.error("the value is missing or of an unsupported kind (sparse_value, strings)")


@converter("Shape", attrs=())
def _shape_11(ctx: NodeContext):
    return const(ctx.static_dims(0, "Shape"), "int64")


@converter("Shape", since=15, attrs=("start", "end"))
def _shape_15(ctx: NodeContext):
    dims = ctx.static_dims(0, "Shape")
    start, end = ctx.attr("start", 0), ctx.attr("end", len(dims))
    return const(dims[slice(start, end)], "int64")


@converter("Size")
def _size(ctx: NodeContext):
    return const(int(np.prod(ctx.static_dims(0, "Size"))), "int64")


@converter("Gather", attrs=("axis",))
def _gather(ctx: NodeContext):
    rank = ctx.rank(0)
    axis = axis_of(ctx, ctx.attr("axis", 0), rank)
    if all_constant(ctx):
        return Constant(np.take(ctx.inputs[0].data, ctx.inputs[1].data, axis=axis))
    indices = ctx.input(1)
    if ctx.dtype(1) not in ("int32", "int64"):
        raise ctx.error(f"indices of dtype {ctx.dtype(1)} are not supported")
    size = ctx.dims(0)[axis]
    known = ctx.analyzer.as_int(size)
    if isinstance(indices, Constant) and (known is not None or (indices.data >= 0).all()):
        if known is not None:  # negative indices count from the end
            indices = Constant(np.where(indices.data < 0, indices.data + known, indices.data).astype(
                indices.data.dtype))
    else:  # negative indices count from the end: wrapped at run time
        size = int_value(ctx, size, ctx.dtype(1))
        indices = R.where(R.less(indices, const(0, ctx.dtype(1))), R.add(indices, size), indices)
    return R.take(ctx.input(0), indices, axis=axis)


# -- shape manipulation ---------------------------------------------------------------------------


@converter("Reshape", attrs=())
def _reshape_5(ctx: NodeContext):
    return _reshape(ctx, allowzero=False)


@converter("Reshape", since=14, attrs=("allowzero",))
def _reshape_14(ctx: NodeContext):
    return _reshape(ctx, allowzero=bool(ctx.attr("allowzero", 0)))


def _reshape(ctx: NodeContext, allowzero: bool):
    target = ctx.shape_value(1, "the shape")
    dims = ctx.dims(0)
    out = []
    for axis, value in enumerate(target):
        if ctx.analyzer.as_int(value) == 0 and not allowzero:
            if axis >= len(dims):
                raise ctx.error(f"shape {target} copies axis {axis}, which the input of rank {len(dims)} lacks",
                                "invalid")
            out.append(dims[axis])
        else:
            known = ctx.analyzer.as_int(value)
            out.append(known if known is not None else value)
    if isinstance(ctx.inputs[0], Constant) and all(isinstance(v, int) for v in out):
        return Constant(ctx.inputs[0].data.reshape(out))
    return R.reshape(ctx.input(0), out)


@converter("Transpose", attrs=("perm",))
def _transpose(ctx: NodeContext):
    rank = ctx.rank(0)
    perm = ctx.ints("perm", tuple(reversed(range(rank))))
    return R.permute_dims(ctx.input(0), axes=perm)


@converter("Flatten", attrs=("axis",))
def _flatten(ctx: NodeContext):
    dims = ctx.dims(0)
    axis = ctx.attr("axis", 1)
    if not -len(dims) <= axis <= len(dims):
        raise ctx.error(f"axis {axis} is out of range for rank {len(dims)}", "invalid")
    axis = axis + len(dims) if axis < 0 else axis
    return R.reshape(ctx.input(0), [_product(dims[:axis]), _product(dims[axis:])])


@converter("Concat", attrs=("axis",))
def _concat(ctx: NodeContext):
    rank = ctx.rank(0)
    axis = axis_of(ctx, ctx.attr("axis"), rank) if "axis" in ctx.attrs else None
    if axis is None:
        raise ctx.error("the axis attribute is required", "invalid")
    if all_constant(ctx):
        return Constant(np.concatenate([v.data for v in ctx.inputs], axis=axis))
    return R.concat([ctx.input(i) for i in range(len(ctx.inputs))], axis=axis)


def _axes_11(ctx: NodeContext):
    return ctx.ints("axes")


def _axes_13(ctx: NodeContext):
    if not ctx.has_input(1):
        return None
    return tuple(int(v) for v in ctx.constant(1, "axes").reshape(-1))


def _unsqueeze(axes_of):
    def convert(ctx: NodeContext):
        axes = axes_of(ctx)
        if axes is None:
            raise ctx.error("axes are required", "invalid")
        rank = ctx.rank(0) + len(axes)
        axes = tuple(sorted(axis_of(ctx, a, rank) for a in axes))
        if isinstance(ctx.inputs[0], Constant):
            data = ctx.inputs[0].data
            for a in axes:
                data = np.expand_dims(data, a)
            return Constant(data)
        return R.expand_dims(ctx.input(0), axis=axes)

    return convert


def _squeeze(axes_of):
    def convert(ctx: NodeContext):
        axes = axes_of(ctx)
        rank = ctx.rank(0)
        if axes is None:
            dims = ctx.static_dims(0, "Squeeze without axes")
            axes = tuple(i for i, d in enumerate(dims) if d == 1)
        axes = tuple(sorted(axis_of(ctx, a, rank) for a in axes))
        if isinstance(ctx.inputs[0], Constant):
            return Constant(np.squeeze(ctx.inputs[0].data, axis=axes))
        return R.squeeze(ctx.input(0), axis=axes)

    return convert


converter("Unsqueeze", attrs=("axes",))(_unsqueeze(_axes_11))
converter("Unsqueeze", since=13)(_unsqueeze(_axes_13))
converter("Squeeze", attrs=("axes",))(_squeeze(_axes_11))
converter("Squeeze", since=13)(_squeeze(_axes_13))


@converter("Expand")
def _expand(ctx: NodeContext):
    """Bidirectional broadcast to the shape (constant or symbolic): each output dim is the larger
    of the input's and the target's, one of which is 1 (or both equal)."""
    target = ctx.shape_value(1, "the shape")
    dims = list(ctx.dims(0))
    analyzer = ctx.analyzer
    rank = max(len(dims), len(target))
    dims = [arith.IntImm(1)] * (rank - len(dims)) + dims
    target = [arith.IntImm(1)] * (rank - len(target)) + target
    out = []
    for dim, want in zip(dims, target):
        if analyzer.as_int(want) == 1 or analyzer.prove_equal(dim, want):
            out.append(dim)
        elif analyzer.as_int(dim) == 1:
            out.append(want)
        else:
            raise ctx.error(f"cannot expand a dimension of {dim} to {want}: neither is 1, and they are not "
                            "provably equal (bounds on the shape variables, dims=, may prove them equal)")
    if isinstance(ctx.inputs[0], Constant) and all(analyzer.as_int(d) is not None for d in out):
        return Constant(np.broadcast_to(ctx.inputs[0].data, [analyzer.as_int(d) for d in out]).copy())
    return R.broadcast_to(ctx.input(0), out)


# -- more: shapes from constants, slicing, normalization ------------------------------------------


@converter("ConstantOfShape", attrs=("value",))
def _constant_of_shape(ctx: NodeContext):
    from .loader import tensor_to_array

    shape = ctx.shape_value(0, "the shape")
    value = np.zeros(1, "float32")
    if "value" in ctx.attrs:
        value = tensor_to_array(ctx.attrs["value"], None, f"{ctx.node.op_type} value").reshape(-1)
    known = [ctx.analyzer.as_int(d) for d in shape]
    if all(k is not None for k in known):
        return Constant(np.full(known, value[0], dtype=value.dtype))
    fill = value[0].item()
    return R.full(shape, fill_value=fill, dtype=str(value.dtype))


@converter("Range")
def _range(ctx: NodeContext):
    """A constant when the bounds are; from symbolic bounds (a length from Shape) an arange with a
    constant step."""
    start, limit, delta = (ctx.shape_value(i, name) if ctx.dtype(i) in ("int32", "int64") else None
                           for i, name in enumerate(("start", "limit", "delta")))
    if start is None or limit is None or delta is None:  # floats: constants only
        bounds = [ctx.constant(i, name).reshape(-1)[0] for i, name in enumerate(("start", "limit", "delta"))]
        return Constant(np.arange(*bounds).astype(ctx.dtype(0)))
    start, limit, delta = start[0], limit[0], delta[0]
    known = [ctx.analyzer.as_int(v) for v in (start, limit, delta)]
    if all(k is not None for k in known):
        return Constant(np.arange(*known).astype(ctx.dtype(0)))
    if known[2] is None or known[2] == 0:
        raise ctx.error("a symbolic range needs a constant, non-zero delta")
    return R.arange(start=start, end=limit, step=known[2], dtype=ctx.dtype(0))


@converter("Mod", attrs=("fmod",))
def _mod(ctx: NodeContext):
    a, b = ctx.input(0), ctx.input(1)
    is_float = ctx.dtype(0) in FLOATS
    if ctx.attr("fmod", 0):  # the sign of the dividend: a - b * trunc(a / b)
        quotient = R.divide(a, b)
        if is_float:
            zero = scalar_like(ctx, 0.0)
            quotient = R.where(R.less(quotient, zero), R.ceil(quotient), R.floor(quotient))
        return R.subtract(a, R.multiply(b, quotient))
    if not is_float:  # the sign of the divisor, as Python's %
        return R.subtract(a, R.multiply(b, R.floor_divide(a, b)))
    rest = R.subtract(a, R.multiply(b, R.floor(R.divide(a, b))))
    # An infinite divisor leaves a (same sign, or zero) or gives the divisor, where the formula gives nan.
    zero = scalar_like(ctx, 0.0)
    signs_differ = R.logical_and(R.not_equal(R.less(a, zero), R.less(b, zero)), R.not_equal(a, zero))
    infinite = is_infinite(b, ctx.dtype(1))  # (from its bits: WGSL has no infinity constant)
    return R.where(infinite, R.where(signs_differ, b, a), rest)


@converter("Slice")
def _slice(ctx: NodeContext):
    """starts/ends as constants or shape values (symbolic), axes/steps as constants. ONNX clamps
    them to the axis, which is done here so that the IR's Python-style slice sees in-range values."""
    dims = ctx.dims(0)
    analyzer = ctx.analyzer
    starts = ctx.shape_value(1, "starts")
    ends = ctx.shape_value(2, "ends")
    axes = ctx.constant(3, "axes").reshape(-1).tolist() if ctx.has_input(3) else list(range(len(starts)))
    steps = ctx.constant(4, "steps").reshape(-1).tolist() if ctx.has_input(4) else [1] * len(starts)
    out_axes, begins, finals, strides = [], [], [], []
    for axis, start, end, step in zip(axes, starts, ends, steps):
        axis = axis_of(ctx, int(axis), len(dims))
        if step == 0:
            raise ctx.error("a step of 0", "invalid")
        size = dims[axis]
        values = [analyzer.as_int(v) for v in (size, start, end)]
        if None in values:
            if step < 0:
                raise ctx.error(f"a negative step over a symbolic axis or bounds ({size}, {start}, {end}) "
                                "is not supported")
            begin, final = (_clamp_symbolic(analyzer, v, size) for v in (start, end))
        else:
            begin, final = _clamp_static(*values, step)
        out_axes.append(axis)
        begins.append(begin)
        finals.append(final)
        strides.append(int(step))
    if isinstance(ctx.inputs[0], Constant) and all(isinstance(v, int) for v in begins + finals):
        index = [slice(None)] * len(dims)
        for axis, b, e, s in zip(out_axes, begins, finals, strides):
            index[axis] = slice(b, e, s)
        return Constant(np.asarray(ctx.inputs[0].data[tuple(index)], order="C"))
    return R.strided_slice(ctx.input(0), axes=tuple(out_axes), begin=tuple(begins), end=tuple(finals),
                           strides=tuple(strides))


def _clamp_static(size: int, start: int, end: int, step: int) -> tuple[int, int]:
    start = start + size if start < 0 else start
    end = end + size if end < 0 else end
    if step > 0:
        return min(max(start, 0), size), min(max(end, 0), size)
    start, end = min(max(start, -1), size - 1), min(max(end, -1), size - 1)
    if end == -1:
        end = -size - 1  # before index 0, in Python's terms
    if start == -1:
        start, end = 0, 0
    return start, end


def _clamp_symbolic(analyzer, value, size):
    """A bound of a forward slice clamped to [0, size], as simple as the bounds let it be."""
    known = analyzer.as_int(value)
    if known is not None and known < 0:
        value = size + known
    if analyzer.prove_greater_equal(value, size):
        return size
    if analyzer.prove_greater_equal(value, 0):
        if analyzer.prove_less_equal(value, size):
            return analyzer.simplify(value)
        return analyzer.simplify(arith.min_expr(value, size))
    return analyzer.simplify(arith.min_expr(arith.max_expr(value, 0), size))


def _split(ctx: NodeContext, sizes, num_outputs=None):
    rank = ctx.rank(0)
    axis = axis_of(ctx, ctx.attr("axis", 0), rank)
    count = len([o for o in ctx.node.output])
    size = ctx.analyzer.as_int(ctx.dims(0)[axis])
    if sizes is None:
        if size is None:
            raise ctx.error(f"Split into equal parts needs the static size of axis {axis}, which is "
                            f"{ctx.dims(0)[axis]}; give the sizes, or fix it with shapes=")
        parts = num_outputs or count
        chunk = -(-size // parts)
        sizes = [min(chunk, size - chunk * i) for i in range(parts)]
    sizes = [int(s) for s in sizes]
    if size is not None and sum(sizes) != size:
        raise ctx.error(f"split sizes {sizes} do not add up to {size}", "invalid")
    cuts = tuple(int(c) for c in np.cumsum(sizes)[:-1])
    pieces = R.split(ctx.input(0), indices_or_sections=cuts, axis=axis)
    return [TupleGetItem(pieces, i) for i in range(len(sizes))]


@converter("Split", attrs=("axis", "split"))
def _split_11(ctx: NodeContext):
    return _split(ctx, ctx.ints("split"))


@converter("Split", since=13, attrs=("axis",))
def _split_13(ctx: NodeContext):
    return _split(ctx, ctx.constant(1, "split").reshape(-1).tolist() if ctx.has_input(1) else None)


@converter("Split", since=18, attrs=("axis", "num_outputs"))
def _split_18(ctx: NodeContext):
    sizes = ctx.constant(1, "split").reshape(-1).tolist() if ctx.has_input(1) else None
    return _split(ctx, sizes, ctx.attr("num_outputs"))


@converter("LayerNormalization", since=17, attrs=("axis", "epsilon", "stash_type"))
def _layer_norm(ctx: NodeContext):
    """Normalized over the axes from ``axis`` on; Mean and InvStdDev (kept dims) as the optional
    outputs. Computed in the input's dtype (stash_type float32 is what the IR does for float32)."""
    require_float(ctx)
    rank = ctx.rank(0)
    axis = axis_of(ctx, ctx.attr("axis", -1), rank)
    axes = tuple(range(axis, rank))
    x = ctx.input(0)
    mean = R.mean(x, axis=axes, keepdims=True)
    centered = R.subtract(x, mean)
    var = R.mean(R.multiply(centered, centered), axis=axes, keepdims=True)
    inv_std = R.divide(scalar_like(ctx, 1.0), R.sqrt(R.add(var, scalar_like(ctx, ctx.attr("epsilon", 1e-5)))))
    y = R.multiply(R.multiply(centered, inv_std), ctx.input(1))
    if ctx.has_input(2):
        y = R.add(y, ctx.input(2))
    return [y, mean, inv_std]


@converter("Swish", since=24, attrs=("alpha",))
def _swish(ctx: NodeContext):
    require_float(ctx)
    x = ctx.input(0)
    return R.multiply(x, R.sigmoid(R.multiply(x, scalar_like(ctx, ctx.attr("alpha", 1.0)))))


@converter("Tile")
def _tile(ctx: NodeContext):
    repeats = ctx.shape_value(1, "repeats")
    dims = ctx.dims(0)
    if len(repeats) != len(dims):
        raise ctx.error(f"{len(repeats)} repeats for rank {len(dims)}", "invalid")
    # Tile = broadcast along a new axis before each one, then merge the pairs.
    x = ctx.input(0)
    expanded = R.expand_dims(x, axis=tuple(range(0, 2 * len(dims), 2)))
    target = [v for pair in zip(repeats, dims) for v in pair]
    out = [ctx.analyzer.simplify(r * d) for r, d in zip(repeats, dims)]
    return R.reshape(R.broadcast_to(expanded, target), out)


@converter("CumSum", attrs=("exclusive", "reverse"))
def _cumsum(ctx: NodeContext):
    """Prefix sums in log2(n) steps (each adds the running sum shifted by 1, 2, 4, ... with zeros
    shifted in): no constant grows with the axis, as a triangular matrix would (static size)."""
    rank = ctx.rank(0)
    axis = axis_of(ctx, int(ctx.constant(1, "axis").reshape(-1)[0]), rank)
    dims = list(ctx.static_dims(0, "CumSum"))
    size = dims[axis]
    x = ctx.input(0)

    def flip(value):
        return R.strided_slice(value, axes=(axis,), begin=(size - 1,), end=(-size - 1,), strides=(-1,))

    def shifted(value, shift):
        zeros = list(dims)
        zeros[axis] = shift
        kept = R.strided_slice(value, axes=(axis,), begin=(0,), end=(size - shift,))
        return R.concat([Constant(np.zeros(zeros, dtype=ctx.dtype(0))), kept], axis=axis)

    if size == 0:
        return x
    reverse = ctx.attr("reverse", 0)
    if reverse:
        x = ctx.emit(flip(x))
    if ctx.attr("exclusive", 0):
        x = ctx.emit(shifted(x, 1))
    shift = 1
    while shift < size:
        x = ctx.emit(R.add(x, shifted(x, shift)))
        shift *= 2
    return flip(x) if reverse else R.add(x, const(0, ctx.dtype(0))) if x is ctx.inputs[0] else x


@converter("Hardmax", since=13, attrs=("axis",))
def _hardmax(ctx: NodeContext):
    rank = ctx.rank(0)
    axis = axis_of(ctx, ctx.attr("axis", -1), rank)
    size = ctx.static_dims(0, "Hardmax")[axis]
    first = R.argmax(ctx.input(0), axis=axis, keepdims=True)
    positions = const(np.arange(size).reshape([size if a == axis else 1 for a in range(rank)]), "int64")
    return R.astype(R.equal(positions, first), dtype=ctx.dtype(0))


@converter("InstanceNormalization", attrs=("epsilon",))
def _instance_norm(ctx: NodeContext):
    require_float(ctx)
    rank = ctx.rank(0)
    axes = tuple(range(2, rank))
    shape = (1, -1) + (1,) * (rank - 2)
    return _normalize(ctx, axes, R.reshape(ctx.input(1), shape), R.reshape(ctx.input(2), shape))


def _normalize(ctx: NodeContext, axes, scale, bias, x=None):
    x = ctx.input(0) if x is None else x
    mean = R.mean(x, axis=axes, keepdims=True)
    centered = R.subtract(x, mean)
    var = R.mean(R.multiply(centered, centered), axis=axes, keepdims=True)
    normed = R.divide(centered, R.sqrt(R.add(var, scalar_like(ctx, ctx.attr("epsilon", 1e-5)))))
    if scale is not None:
        normed = R.multiply(normed, scale)
    return R.add(normed, bias) if bias is not None else normed


@converter("MeanVarianceNormalization", attrs=("axes",))
def _mvn(ctx: NodeContext):
    require_float(ctx)
    rank = ctx.rank(0)
    axes = tuple(sorted(axis_of(ctx, a, rank) for a in ctx.ints("axes", (0, 2, 3))))
    x = ctx.input(0)
    mean = R.mean(x, axis=axes, keepdims=True)
    centered = R.subtract(x, mean)
    var = R.mean(R.multiply(centered, centered), axis=axes, keepdims=True)
    return R.divide(centered, R.add(R.sqrt(var), scalar_like(ctx, 1e-9)))


@converter("GroupNormalization", since=21, attrs=("epsilon", "num_groups", "stash_type"))
def _group_norm(ctx: NodeContext):
    require_float(ctx)
    dims = ctx.static_dims(0, "GroupNormalization")
    groups = int(ctx.attr("num_groups"))
    n, c = dims[0], dims[1]
    grouped = R.reshape(ctx.input(0), (n, groups, -1))
    normed = R.reshape(_normalize(ctx, (2,), None, None, grouped), dims)
    shape = (1, c) + (1,) * (len(dims) - 2)
    return R.add(R.multiply(normed, R.reshape(ctx.input(1), shape)), R.reshape(ctx.input(2), shape))


@converter("Pad", attrs=("mode",))
def _pad(ctx: NodeContext):
    """Per axis: a crop for negative pads, then the pad concatenated before and after: a constant
    block (symbolic dims allowed), the edge row repeated, the reflection or the wrapped-around rows
    (these three need the padded axis's size)."""
    mode = ctx.attr("mode", b"constant")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    if mode not in ("constant", "reflect", "edge", "wrap"):
        raise ctx.error(f"mode={mode!r} is not supported")
    analyzer = ctx.analyzer
    dims = [analyzer.as_int(d) if analyzer.as_int(d) is not None else d for d in ctx.dims(0)]
    rank = len(dims)
    pads = [int(v) for v in static_ints(ctx, 1, "pads")]  # a constant, or computed from known shapes
    axes = list(range(rank))
    if ctx.has_input(3):
        axes = [axis_of(ctx, int(a), rank) for a in ctx.constant(3, "axes").reshape(-1)]
    if len(pads) != 2 * len(axes):
        raise ctx.error(f"{len(pads)} pads for {len(axes)} axes", "invalid")
    fill = 0
    if ctx.has_input(2):
        fill = ctx.constant(2, "constant_value").reshape(-1)[0]
    x = ctx.input(0)
    for i, axis in enumerate(axes):
        before, after = pads[i], pads[i + len(axes)]
        if before == 0 and after == 0:
            continue
        if before < 0 or after < 0:  # a negative pad crops
            start, stop = max(-before, 0), analyzer.simplify(dims[axis] - max(-after, 0))
            stop = analyzer.as_int(stop) if analyzer.as_int(stop) is not None else stop
            x = ctx.emit(R.strided_slice(x, axes=(axis,), begin=(start,), end=(stop,)))
            dims[axis] = x.struct_info.shape[axis] if analyzer.as_int(x.struct_info.shape[axis]) is None \
                else analyzer.as_int(x.struct_info.shape[axis])
            before, after = max(before, 0), max(after, 0)
        if before == 0 and after == 0:
            continue
        size = dims[axis]
        if mode != "constant" and not isinstance(size, int):
            raise ctx.error(f"mode={mode!r} pads axis {axis} of symbolic size {size}; fix it with shapes=")
        if mode != "constant" and size == 0:
            raise ctx.error(f"mode={mode!r} pads an empty axis", "invalid")
        if mode == "reflect" and max(before, after) >= size:
            raise ctx.error(f"reflect pads of {before}, {after} on an axis of {size}", "invalid")
        parts = []
        for count, at_start in ((before, True), (after, False)):
            if count == 0:
                parts.append(None)
                continue
            block = list(dims)
            block[axis] = count
            if mode == "constant":
                if all(isinstance(d, int) for d in block):
                    part = Constant(np.full(block, fill, dtype=ctx.dtype(0)))
                else:
                    part = R.full(block, fill_value=fill.item() if hasattr(fill, "item") else fill,
                                  dtype=ctx.dtype(0))
            elif mode == "edge":
                edge = (0, 1) if at_start else (size - 1, size)
                row = R.strided_slice(x, axes=(axis,), begin=(edge[0],), end=(edge[1],))
                part = R.broadcast_to(row, block)
            elif mode == "reflect":
                begin, end = (count, 0) if at_start else (size - 2, size - 2 - count)
                part = R.strided_slice(x, axes=(axis,), begin=(begin,), end=(end if end >= 0 else -size - 1,),
                                       strides=(-1,))
            else:  # wrap
                if count > size:
                    raise ctx.error(f"wrap pads of {count} on an axis of {size}")
                begin, end = (size - count, size) if at_start else (0, count)
                part = R.strided_slice(x, axes=(axis,), begin=(begin,), end=(end,))
            parts.append(part)
        pieces = [p for p in (parts[0], x, parts[1]) if p is not None]
        x = ctx.emit(R.concat(pieces, axis=axis))
        dims[axis] = size + before + after if isinstance(size, int) else analyzer.simplify(size + before + after)
    return x


# -- small constructors and selections -----------------------------------------------------------


@converter("OneHot", attrs=("axis",))
def _one_hot(ctx: NodeContext):
    depth = int(np.asarray(ctx.constant(1, "depth")).reshape(-1)[0])
    values = ctx.input(2)
    rank = ctx.rank(0) + 1
    axis = axis_of(ctx, ctx.attr("axis", -1), rank)
    indices = R.astype(ctx.input(0), dtype="int64")
    indices = R.where(R.less(indices, const(0, "int64")), R.add(indices, const(depth, "int64")), indices)
    positions = const(np.arange(depth).reshape([depth if a == axis else 1 for a in range(rank)]), "int64")
    hot = R.equal(R.expand_dims(indices, axis=axis), positions)
    dtype = ctx.dtype(2)
    off = R.strided_slice(values, axes=(0,), begin=(0,), end=(1,))  # shape (1,): broadcasts as a scalar
    on = R.strided_slice(values, axes=(0,), begin=(1,), end=(2,))
    return R.where(hot, R.astype(on, dtype=dtype), R.astype(off, dtype=dtype))


@converter("EyeLike", attrs=("dtype", "k"))
def _eye_like(ctx: NodeContext):
    rows, cols = ctx.static_dims(0, "EyeLike")
    dtype = ir_dtype(int(ctx.attr("dtype")), "EyeLike dtype") if "dtype" in ctx.attrs else ctx.dtype(0)
    return Constant(np.eye(rows, cols, k=int(ctx.attr("k", 0)), dtype=dtype))


@converter("NonZero")
def _non_zero(ctx: NodeContext):
    if isinstance(ctx.inputs[0], Constant):
        return Constant(np.array(np.nonzero(ctx.inputs[0].data), dtype=np.int64))
    return R.nonzero(ctx.input(0))


@converter("LpPool", since=18, attrs=("auto_pad", "ceil_mode", "dilations", "kernel_shape", "p", "pads",
                                     "strides"))
def _lp_pool(ctx: NodeContext):
    """(sum over the window of |x|^p)^(1/p)."""
    require_float(ctx)
    p = float(ctx.attr("p", 2))
    powered = ctx.emit(R.power(R.abs(ctx.input(0)), scalar_like(ctx, p)))
    return R.power(pool(ctx, "sum", powered, count_include_pad=True), scalar_like(ctx, 1.0 / p))


@converter("Compress", attrs=("axis",))
def _compress(ctx: NodeContext):
    condition = np.asarray(ctx.constant(1, "condition")).reshape(-1).astype(bool)
    x = ctx.input(0)
    if "axis" not in ctx.attrs:
        x = R.reshape(x, (-1,))
        axis = 0
    else:
        axis = axis_of(ctx, ctx.attr("axis"), ctx.rank(0))
    return R.take(x, const(np.nonzero(condition)[0], "int64"), axis=axis)


def _window_function(coefficients):
    def convert(ctx: NodeContext):
        size = int(np.asarray(ctx.constant(0, "size")).reshape(-1)[0])
        dtype = ir_dtype(int(ctx.attr("output_datatype", 1)), "output_datatype")
        span = size if ctx.attr("periodic", 1) else size - 1
        n = np.arange(size, dtype=np.float64)
        angle = 2.0 * np.pi * n / max(span, 1)
        values = sum(c * np.cos(k * angle) for k, c in enumerate(coefficients))
        return Constant(values.astype(dtype))

    return convert


converter("HannWindow", since=17, attrs=("output_datatype", "periodic"))(_window_function((0.5, -0.5)))
converter("HammingWindow", since=17, attrs=("output_datatype", "periodic"))(
    _window_function((25.0 / 46.0, -(1.0 - 25.0 / 46.0))))
converter("BlackmanWindow", since=17, attrs=("output_datatype", "periodic"))(_window_function((0.42, -0.5, 0.08)))


@converter("ConvTranspose", attrs=("auto_pad", "dilations", "group", "kernel_shape", "output_padding",
                                   "output_shape", "pads", "strides"))
def _conv_transpose(ctx: NodeContext):
    """A stride-1 convolution over the input spread out by the strides (zeros between the rows and
    columns), padded by (kernel extent - 1 - pad), with the kernel flipped and its in/out swapped."""
    one_d = _require_2d(ctx)
    x_dims = list(ctx.static_dims(0, "ConvTranspose"))
    w_dims = ctx.static_dims(1, "ConvTranspose")
    c_in = x_dims[1]
    groups = int(ctx.attr("group", 1))
    kernel = tuple(w_dims[2:])
    nd = len(kernel)
    strides = ctx.ints("strides", (1,) * nd)
    dilations = ctx.ints("dilations", (1,) * nd)
    extra = ctx.ints("output_padding", (0,) * nd)
    spatial = tuple(x_dims[2:])
    extents = [(k - 1) * d + 1 for k, d in zip(kernel, dilations)]
    full = [s * (size - 1) + e + o for s, size, e, o in zip(strides, spatial, extents, extra)]
    auto_pad = ctx.attr("auto_pad", b"NOTSET")
    auto_pad = auto_pad.decode() if isinstance(auto_pad, bytes) else auto_pad
    wanted = ctx.ints("output_shape")
    if wanted is None and auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        wanted = tuple(size * s for size, s in zip(spatial, strides))
    if wanted is not None:
        wanted = tuple(wanted[-nd:])
        totals = [f - w for f, w in zip(full, wanted)]
        if auto_pad == "SAME_UPPER":
            pads = tuple(t // 2 for t in totals) + tuple(t - t // 2 for t in totals)
        else:
            pads = tuple(t - t // 2 for t in totals) + tuple(t // 2 for t in totals)
    elif auto_pad in ("NOTSET", "", "VALID"):
        pads = ctx.ints("pads", (0,) * (2 * nd)) if auto_pad != "VALID" else (0,) * (2 * nd)
    else:
        raise ctx.error(f"auto_pad={auto_pad!r} is not supported")
    x = ctx.input(0)
    for i, stride in enumerate(strides):  # spread: each row followed by stride - 1 rows of zeros
        x = spread(ctx, x, x_dims, 2 + i, stride)
        x_dims[2 + i] = (x_dims[2 + i] - 1) * stride + 1 if x_dims[2 + i] > 1 else x_dims[2 + i]
        x = ctx.emit(x)
    weight = R.reshape(ctx.input(1), (groups, c_in // groups, w_dims[1], *kernel))
    weight = R.permute_dims(weight, axes=(0, 2, 1, *range(3, 3 + nd)))
    weight = R.reshape(weight, (groups * w_dims[1], c_in // groups, *kernel))
    spatial_axes = tuple(range(2, 2 + nd))
    weight = ctx.emit(R.strided_slice(weight, axes=spatial_axes, begin=tuple(k - 1 for k in kernel),
                                      end=tuple(-k - 1 for k in kernel), strides=(-1,) * nd))
    begin = [e - 1 - p for e, p in zip(extents, pads[:nd])]
    end = [e - 1 - p + o for e, p, o in zip(extents, pads[nd:], extra)]
    padding = tuple(max(b, 0) for b in begin) + tuple(max(e, 0) for e in end)
    if nd == 3:
        y = conv3d(ctx, x, x_dims, weight, (groups * w_dims[1], c_in // groups, *kernel), (1, 1, 1), padding,
                   dilations, groups)
    else:
        y = R.nn.conv2d(x, weight, padding=padding, dilation=dilations, groups=groups)
    y = ctx.emit(y)
    out = [int(d.value) for d in y.struct_info.shape[2:]]
    crops = [(max(-b, 0), size - max(-e, 0)) for b, e, size in zip(begin, end, out)]
    if crops != [(0, size) for size in out]:
        y = R.strided_slice(y, axes=spatial_axes, begin=tuple(c[0] for c in crops), end=tuple(c[1] for c in crops))
    if ctx.has_input(2):
        y = R.add(y, R.reshape(ctx.input(2), (1, -1) + (1,) * nd))
    return R.squeeze(y, axis=(2,)) if one_d else y
