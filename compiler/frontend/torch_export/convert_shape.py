"""Shape converters: views and reshapes, permutations, slicing and selection, joining and
splitting, gathers along an axis (index_select, embedding)."""

from __future__ import annotations

import numpy as np

from ... import arith
from ... import op as R
from ...ir.expr import Constant, TupleGetItem
from .convert_common import as_tensor, cast, const, product
from .registry import NodeContext, converter

BIG = 2**62  # torch writes an open slice end as INT64_MAX


@converter("aten.view.default", "aten.reshape.default", "aten._unsafe_view.default")
def _reshape(ctx: NodeContext):
    x = ctx.tensor("self")
    shape = ctx.ints("size") or ctx.ints("shape")
    if tuple(arith.as_expr(d) for d in shape) == ctx.dims(x):
        return x
    return R.reshape(x, list(shape))


@converter("aten.permute.default")
def _permute(ctx: NodeContext):
    x = ctx.tensor("self")
    rank = ctx.rank(x)
    return R.permute_dims(x, axes=tuple(ctx.axis(d, rank) for d in ctx.ints("dims")))


@converter("aten.transpose.int")
def _transpose(ctx: NodeContext):
    x = ctx.tensor("self")
    rank = ctx.rank(x)
    a, b = ctx.axis(ctx["dim0"], rank), ctx.axis(ctx["dim1"], rank)
    if a == b:
        return x
    axes = list(range(rank))
    axes[a], axes[b] = axes[b], axes[a]
    return R.permute_dims(x, axes=tuple(axes))


@converter("aten.t.default", "aten.numpy_T.default")
def _t(ctx: NodeContext):
    x = ctx.tensor("self")
    rank = ctx.rank(x)
    return x if rank < 2 else R.permute_dims(x, axes=tuple(reversed(range(rank))))


@converter("aten.unsqueeze.default")
def _unsqueeze(ctx: NodeContext):
    x = ctx.tensor("self")
    return R.expand_dims(x, axis=ctx.axis(ctx["dim"], ctx.rank(x) + 1))


@converter("aten.squeeze.dim", "aten.squeeze.dims", "aten.squeeze.default")
def _squeeze(ctx: NodeContext):
    """Only the listed axes of size 1 go (torch leaves an axis of another size alone)."""
    x = ctx.tensor("self")
    dims = ctx.dims(x)
    wanted = ctx.ints("dim") if ctx["dim"] is not None else tuple(range(len(dims)))
    axes = tuple(sorted({ctx.axis(a, len(dims)) for a in wanted if len(dims)}))
    axes = tuple(a for a in axes if ctx.analyzer.as_int(dims[a]) == 1)
    return R.squeeze(x, axis=axes) if axes else x


@converter("aten.flatten.using_ints")
def _flatten(ctx: NodeContext):
    x = ctx.tensor("self")
    dims = ctx.dims(x)
    if not dims:
        return R.reshape(x, [1])
    start, end = ctx.axis(ctx["start_dim"], len(dims)), ctx.axis(ctx["end_dim"], len(dims))
    if start >= end:
        return x
    return R.reshape(x, [*dims[:start], product(dims[start:end + 1]), *dims[end + 1:]])


@converter("aten.expand.default", "aten.broadcast_to.default")
def _expand(ctx: NodeContext):
    x = ctx.tensor("self")
    dims = ctx.dims(x)
    size = list(ctx.ints("size"))
    offset = len(size) - len(dims)
    if offset < 0:
        raise ctx.error(f"expand to {len(size)} dims from {len(dims)}", "invalid")
    shape = [dims[i - offset] if (isinstance(s, int) and s == -1) else s for i, s in enumerate(size)]
    if offset == 0 and all(ctx.analyzer.prove_equal(arith.as_expr(a), b) for a, b in zip(shape, dims)):
        return x
    return R.broadcast_to(x, shape)


@converter("aten.slice.Tensor")
def _slice(ctx: NodeContext):
    x = ctx.tensor("self")
    dims = ctx.dims(x)
    axis = ctx.axis(ctx["dim"] or 0, len(dims))
    start, end, step = ctx["start"], ctx["end"], ctx["step"] or 1
    start = 0 if start is None else start
    if end is None or (isinstance(end, int) and end >= BIG):
        end = dims[axis]
    if step <= 0:
        raise ctx.error(f"step {step} must be positive", "invalid")
    if isinstance(start, int) and start == 0 and step == 1 and ctx.analyzer.prove_equal(arith.as_expr(end), dims[axis]):
        return x
    return R.strided_slice(x, axes=(axis,), begin=(start,), end=(end,), strides=(step,))


@converter("aten.select.int")
def _select(ctx: NodeContext):
    x = ctx.tensor("self")
    dims = ctx.dims(x)
    axis = ctx.axis(ctx["dim"], len(dims))
    index = ctx["index"]
    if isinstance(index, int) and index < 0:
        index = dims[axis] + index
    one = R.strided_slice(x, axes=(axis,), begin=(index,), end=(arith.as_expr(index) + 1,))
    return R.squeeze(one, axis=(axis,))


@converter("aten.cat.default", "aten.concat.default")
def _cat(ctx: NodeContext):
    tensors = [t for t in ctx["tensors"] if ctx.dims(t) != (arith.IntImm(0),) or len(ctx["tensors"]) == 1]
    rank = ctx.rank(tensors[0])
    axis = ctx.axis(ctx["dim"] or 0, rank)
    if len(tensors) == 1:
        return tensors[0]
    dtype = ctx.out_dtype
    tensors = [t if ctx.dtype(t) == dtype else R.astype(t, dtype=dtype) for t in tensors]
    return R.concat(tensors, axis=axis)


@converter("aten.stack.default")
def _stack(ctx: NodeContext):
    tensors = list(ctx["tensors"])
    axis = ctx.axis(ctx["dim"] or 0, ctx.rank(tensors[0]) + 1)
    return R.concat([R.expand_dims(t, axis=axis) for t in tensors], axis=axis)


def _split_at(ctx: NodeContext, x, axis: int, sizes: list):
    """``x`` cut along ``axis`` into pieces of ``sizes`` (ints or shape expressions)."""
    if len(sizes) == 1:
        return [x]
    cuts, total = [], arith.IntImm(0)
    for size in sizes[:-1]:
        total = ctx.analyzer.simplify(total + arith.as_expr(size))
        cuts.append(total)
    pieces = ctx.emit(R.split(x, indices_or_sections=tuple(cuts), axis=axis))
    return [TupleGetItem(pieces, i) for i in range(len(sizes))]


@converter("aten.split_with_sizes.default", "aten.split.sizes")
def _split_with_sizes(ctx: NodeContext):
    x = ctx.tensor("self")
    axis = ctx.axis(ctx["dim"] or 0, ctx.rank(x))
    return _split_at(ctx, x, axis, list(ctx.ints("split_sizes") or ctx.ints("split_size")))


@converter("aten.split.Tensor")
def _split(ctx: NodeContext):
    x = ctx.tensor("self")
    dims = ctx.dims(x)
    axis = ctx.axis(ctx["dim"] or 0, len(dims))
    length, size = ctx.analyzer.as_int(dims[axis]), ctx["split_size"]
    if length is None or not isinstance(size, int):
        raise ctx.error("split along a symbolic dimension is not supported")
    sizes = [min(size, length - start) for start in range(0, length, size)] or [0]
    return _split_at(ctx, x, axis, sizes)


@converter("aten.chunk.default")
def _chunk(ctx: NodeContext):
    x = ctx.tensor("self")
    dims = ctx.dims(x)
    axis = ctx.axis(ctx["dim"] or 0, len(dims))
    length = ctx.analyzer.as_int(dims[axis])
    if length is None:
        raise ctx.error("chunk along a symbolic dimension is not supported")
    size = -(-length // ctx["chunks"])
    return _split_at(ctx, x, axis, [min(size, length - start) for start in range(0, length, size)])


@converter("aten.unbind.int")
def _unbind(ctx: NodeContext):
    x = ctx.tensor("self")
    dims = ctx.dims(x)
    axis = ctx.axis(ctx["dim"] or 0, len(dims))
    length = ctx.analyzer.as_int(dims[axis])
    if length is None:
        raise ctx.error("unbind along a symbolic dimension is not supported")
    pieces = _split_at(ctx, x, axis, [1] * length)
    return [R.squeeze(ctx.emit(p), axis=(axis,)) for p in pieces]


@converter("aten.index_select.default")
def _index_select(ctx: NodeContext):
    x = ctx.tensor("self")
    return R.take(x, ctx.tensor("index"), axis=ctx.axis(ctx["dim"], ctx.rank(x)))


@converter("aten.embedding.default")
def _embedding(ctx: NodeContext):
    return R.take(ctx.tensor("weight"), ctx.tensor("indices"), axis=0)


@converter("aten.index.Tensor")
def _index(ctx: NodeContext):
    """x[..., i, j, ...] with index tensors on consecutive axes (None on the others): those axes
    flattened into one and read at the broadcast offsets, negative indices counting from the end.
    Index tensors on axes apart (torch then moves their dims to the front) and boolean masks are
    refused."""
    x = ctx.tensor("self")
    dims = ctx.dims(x)
    indices = list(ctx["indices"])
    given = [i for i, value in enumerate(indices) if value is not None]
    if not given or given != list(range(given[0], given[-1] + 1)):
        raise ctx.error("index tensors on axes that are not next to each other are not supported")
    first, count = given[0], len(given)
    offset = None
    for axis in given:
        index = indices[axis]
        if ctx.dtype(index) == "bool":
            raise ctx.error("indexing with a boolean mask is not supported (its result's size depends on the data)")
        index = cast(index, "int64")
        size = as_tensor(ctx, dims[axis], "int64")
        index = R.where(R.less(index, const(0, "int64")), R.add(index, size), index)
        stride = ctx.analyzer.simplify(product(dims[axis + 1:first + count]))
        term = R.multiply(index, as_tensor(ctx, stride, "int64")) if ctx.analyzer.as_int(stride) != 1 else index
        offset = term if offset is None else R.add(offset, term)
    flat = x if count == 1 else R.reshape(x, [*dims[:first], product(dims[first:first + count]), *dims[first + count:]])
    return R.take(flat, ctx.emit(offset), axis=first)


@converter("aten.gather.default")
def _gather(ctx: NodeContext):
    """out[..., i, ...] = x[..., index[..., i, ...], ...] along ``dim``: ``x`` flattened and read at
    index · stride(dim) plus each other axis's position · its stride (sizes may be symbolic)."""
    x, index = ctx.tensor("self"), cast(ctx.tensor("index"), "int64")
    x_dims, index_dims = ctx.dims(x), ctx.dims(index)
    rank = len(x_dims)
    axis = ctx.axis(ctx["dim"], rank)
    if len(index_dims) != rank:
        raise ctx.error(f"index has rank {len(index_dims)}, the input {rank}", "invalid")
    strides = [product(x_dims[a + 1:]) for a in range(rank)]
    offset = R.multiply(index, as_tensor(ctx, ctx.analyzer.simplify(strides[axis]), "int64"))
    for a in range(rank):
        if a == axis:
            continue
        shape = [1] * rank
        shape[a] = index_dims[a]
        position = R.reshape(R.arange(start=0, end=index_dims[a], step=1, dtype="int64"), shape)
        stride = as_tensor(ctx, ctx.analyzer.simplify(strides[a]), "int64")
        offset = R.add(offset, R.multiply(position, stride))
    return R.take(R.reshape(x, [-1]), ctx.emit(offset), axis=0)


@converter("aten.constant_pad_nd.default")
def _constant_pad(ctx: NodeContext):
    """Pads (before, after) per axis, the last axis first, as in torch; a negative pad crops."""
    x = ctx.tensor("self")
    pads = list(ctx.ints("pad"))
    value = ctx["value"] or 0
    rank = ctx.rank(x)
    if len(pads) % 2 or len(pads) // 2 > rank:
        raise ctx.error(f"pad {pads} does not fit rank {rank}", "invalid")
    dtype = ctx.dtype(x)
    for pair in range(len(pads) // 2):
        axis = rank - 1 - pair
        before, after = pads[2 * pair], pads[2 * pair + 1]
        if before < 0 or after < 0:
            dims = ctx.dims(x)
            x = ctx.emit(R.strided_slice(x, axes=(axis,), begin=(max(-before, 0),),
                                         end=(arith.as_expr(dims[axis]) - max(-after, 0),)))
        parts = []
        for size in (before, after):
            if size <= 0:
                parts.append(None)
                continue
            shape = list(ctx.dims(x))
            shape[axis] = arith.IntImm(size)
            ints = [ctx.analyzer.as_int(d) for d in shape]
            parts.append(Constant(np.full(ints, value, dtype=dtype)) if None not in ints
                         else R.full(shape, fill_value=value, dtype=dtype))
        if parts[0] is not None or parts[1] is not None:
            x = ctx.emit(R.concat([p for p in (parts[0], x, parts[1]) if p is not None], axis=axis))
    return x


@converter("aten.repeat.default")
def _repeat(ctx: NodeContext):
    """Each axis tiled ``repeats`` times: a new axis before it broadcast to the count, then merged."""
    x = ctx.tensor("self")
    repeats = list(ctx.ints("repeats"))
    dims = list(ctx.dims(x))
    if len(repeats) < len(dims):
        raise ctx.error(f"repeats {repeats} has fewer entries than the rank {len(dims)}", "invalid")
    lead = len(repeats) - len(dims)
    if lead:
        x = ctx.emit(R.reshape(x, [1] * lead + dims))
        dims = [arith.IntImm(1)] * lead + dims
    for axis, times in enumerate(repeats):
        if isinstance(times, int) and times == 1:
            continue
        widened = ctx.emit(R.expand_dims(x, axis=axis))
        shape = list(ctx.dims(widened))
        shape[axis] = times
        tiled = ctx.emit(R.broadcast_to(widened, shape))
        dims[axis] = arith.as_expr(times) * dims[axis]
        x = ctx.emit(R.reshape(tiled, list(dims)))
    return x


@converter("aten.flip.default")
def _flip(ctx: NodeContext):
    x = ctx.tensor("self")
    rank = ctx.rank(x)
    for axis in sorted({ctx.axis(d, rank) for d in ctx.ints("dims")}):
        size = ctx.analyzer.as_int(ctx.dims(x)[axis])
        if size is None:
            raise ctx.error(f"flip along symbolic axis {axis} is not supported")
        x = ctx.emit(R.take(x, Constant(np.arange(size - 1, -1, -1, dtype=np.int64)), axis=axis))
    return x
