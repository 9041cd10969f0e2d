"""Ops composed exactly of the IR's operators that no other module's kind fits: Det (elimination
with partial pivoting), GatherND with batch dimensions, BatchNormalization (inference, and training
mode's batch statistics), Dropout (whose deterministic cases are the identity), and the Optional
ops over plain tensors."""

from __future__ import annotations

import numpy as np

from ... import op as R
from ...ir.expr import Constant, ShapeExpr
from .convert_common import _product, const, int_vector, positions, require_float, scalar_like
from .registry import NodeContext, converter


def filled(ctx: NodeContext, dims, value, dtype: str):
    """A tensor of ``dims`` (shape expressions) holding ``value``: a constant when the dims are known."""
    known = [ctx.analyzer.as_int(d) for d in dims]
    if all(k is not None for k in known):
        return const(np.full(known, value), dtype)
    return R.full(ShapeExpr(tuple(dims)), fill_value=value, dtype=dtype)


def _outputs(ctx: NodeContext) -> int:
    """How many outputs the node names (trailing empty names do not count)."""
    names = list(ctx.node.output)
    while names and not names[-1]:
        names.pop()
    return len(names)


# -- Det ------------------------------------------------------------------------------------------

_DET_MAX = 64  # the elimination is unrolled, one step per row


@converter("Det")
def _det(ctx: NodeContext):
    """The determinant of each trailing n x n matrix, by Gaussian elimination with partial pivoting
    (the first row of largest magnitude, as LAPACK's getrf that numpy's det uses): the product of
    the pivots, negated for each row swap. A swap is a select, not a product with a permutation,
    so that it moves values exactly; a zero column gives a zero pivot and a zero determinant."""
    require_float(ctx)
    dims = ctx.dims(0)
    if len(dims) < 2:
        raise ctx.error(f"the input has rank {len(dims)}; Det takes matrices (rank 2 or more)", "invalid")
    n, other = (ctx.analyzer.as_int(d) for d in dims[-2:])
    if n is None or n != other:
        raise ctx.error(f"the matrices must be square with a static size, not {dims[-2]} x {dims[-1]}")
    if n > _DET_MAX:
        raise ctx.error(f"matrices of size {n} are not supported (the elimination is unrolled; at most {_DET_MAX})")
    rank, dtype = len(dims), ctx.dtype(0)
    rows, cols = rank - 2, rank - 1
    zero, one = scalar_like(ctx, 0.0), scalar_like(ctx, 1.0)
    batch = list(dims[:-2])
    if n == 0:
        return filled(ctx, batch, 1.0, dtype)
    det = None
    rest = ctx.input(0)
    for size in range(n, 0, -1):
        first = R.strided_slice(rest, axes=(rows,), begin=(0,), end=(1,))
        if size == 1:
            pivot = first
            det = pivot if det is None else R.multiply(det, pivot)
            break
        column = R.strided_slice(rest, axes=(cols,), begin=(0,), end=(1,))
        chosen = ctx.emit(R.argmax(R.abs(column), axis=rows, keepdims=True))
        is_chosen = ctx.emit(R.equal(const(np.arange(size).reshape(size, 1), "int64"), chosen))
        pivot_row = ctx.emit(R.sum(R.where(is_chosen, rest, zero), axis=(rows,), keepdims=True))
        # The other rows, the first row standing where the pivot row was.
        others = R.where(R.strided_slice(is_chosen, axes=(rows,), begin=(1,), end=(size,)), first,
                         R.strided_slice(rest, axes=(rows,), begin=(1,), end=(size,)))
        others = ctx.emit(others)
        pivot = ctx.emit(R.strided_slice(pivot_row, axes=(cols,), begin=(0,), end=(1,)))
        sign = R.where(R.equal(chosen, const(0, "int64")), one, scalar_like(ctx, -1.0))
        step = R.multiply(pivot, sign)
        det = ctx.emit(step if det is None else R.multiply(det, step))
        safe = R.where(R.equal(pivot, zero), one, pivot)  # a zero column: its factors are 0 anyway
        factors = R.divide(R.strided_slice(others, axes=(cols,), begin=(0,), end=(1,)), safe)
        rest = ctx.emit(R.subtract(R.strided_slice(others, axes=(cols,), begin=(1,), end=(size,)),
                                   R.multiply(factors, R.strided_slice(pivot_row, axes=(cols,), begin=(1,),
                                                                       end=(size,)))))
    return R.reshape(det, ShapeExpr(tuple(batch)))


# -- GatherND ---------------------------------------------------------------------------------------


@converter("GatherND", attrs=("batch_dims",))
def _gather_nd(ctx: NodeContext):
    """A take from the flattened data at offsets computed from the index tuples (dims may be
    symbolic; the index tuples' length must be known). With ``batch_dims`` b, the first b axes of
    data and indices are walked together: each tuple's offset is moved to its batch's block."""
    batch_dims = int(ctx.attr("batch_dims", 0))
    data_dims = ctx.dims(0)
    index_dims = ctx.dims(1)
    if not 0 <= batch_dims < min(len(data_dims), len(index_dims)):
        raise ctx.error(f"batch_dims={batch_dims} is out of range for ranks {len(data_dims)} and "
                        f"{len(index_dims)}", "invalid")
    depth = ctx.analyzer.as_int(index_dims[-1])
    if depth is None:
        raise ctx.error(f"the length of the index tuples ({index_dims[-1]}) must be known")
    if batch_dims + depth > len(data_dims):
        raise ctx.error(f"index tuples of length {depth} after {batch_dims} batch axes exceed the data's "
                        f"rank {len(data_dims)}", "invalid")
    looked_up = data_dims[batch_dims:batch_dims + depth]
    inner = data_dims[batch_dims + depth:]
    strides = [ctx.analyzer.simplify(_product(looked_up[a + 1:])) for a in range(depth)]
    indices = R.astype(ctx.input(1), dtype="int64")
    sizes = int_vector(ctx, looked_up)
    indices = R.where(R.less(indices, const(0, "int64")), R.add(indices, sizes), indices)
    rows = R.sum(R.multiply(indices, int_vector(ctx, strides)), axis=(len(index_dims) - 1,))
    if batch_dims:
        block = ctx.analyzer.simplify(_product(looked_up))
        batch_index = None  # each tuple's batch, counted row-major over the batch axes
        index_rank = len(index_dims) - 1
        for axis in range(batch_dims):
            place = positions(ctx, index_dims[axis], axis, index_rank)
            batch_index = place if batch_index is None else R.add(
                R.multiply(batch_index, int_vector(ctx, [index_dims[axis]])), place)
        rows = R.add(rows, R.multiply(batch_index, int_vector(ctx, [block])))
    table_rows = ctx.analyzer.simplify(_product(data_dims[:batch_dims + depth]))
    table = R.reshape(ctx.input(0), (table_rows, *inner))
    return R.take(table, rows, axis=0)


# -- BatchNormalization ---------------------------------------------------------------------------


@converter("BatchNormalization", attrs=("epsilon", "momentum"))
def _batch_norm_11(ctx: NodeContext):
    return _batch_norm(ctx)


@converter("BatchNormalization", since=14, attrs=("epsilon", "momentum", "training_mode"))
def _batch_norm_14(ctx: NodeContext):
    if ctx.attr("training_mode", 0):
        return _batch_norm_training(ctx)
    return _batch_norm(ctx)


def _channel_shape(ctx: NodeContext):
    rank = ctx.rank(0)
    return rank, (1, -1) + (1,) * (rank - 2)


def _normalized(ctx: NodeContext, mean, var):
    """(x - mean) / sqrt(var + epsilon) * scale + bias, per channel (axis 1)."""
    rank, shape = _channel_shape(ctx)

    def channel(value):
        return R.reshape(value, shape) if rank != 2 else value

    epsilon = scalar_like(ctx, ctx.attr("epsilon", 1e-5))
    normed = R.divide(R.subtract(ctx.input(0), channel(mean)), R.sqrt(R.add(channel(var), epsilon)))
    return R.add(R.multiply(normed, channel(ctx.input(1))), channel(ctx.input(2)))


def _batch_norm(ctx: NodeContext):
    """Inference: normalized by the running mean and variance (inputs 3 and 4)."""
    require_float(ctx)
    if _outputs(ctx) > 1:
        raise ctx.error("the running statistics outputs are not supported (inference only)")
    return _normalized(ctx, ctx.input(3), ctx.input(4))


def _batch_norm_training(ctx: NodeContext):
    """Training mode (opset 14 on): normalized by the batch's own mean and (biased) variance over
    every axis but the channels; the outputs running_mean and running_var are the inputs' running
    statistics moved towards the batch's by 1 - momentum, as ONNX defines them."""
    require_float(ctx)
    dtype = ctx.dtype(0)
    rank, shape = _channel_shape(ctx)
    axes = tuple(a for a in range(rank) if a != 1)
    x = ctx.input(0)
    mean = ctx.emit(R.mean(x, axis=axes, keepdims=True))
    centered = R.subtract(x, mean)
    var = ctx.emit(R.mean(R.multiply(centered, centered), axis=axes))
    mean = ctx.emit(R.reshape(mean, (-1,)))
    y = _normalized(ctx, mean, var)
    momentum = ctx.attr("momentum", 0.9)

    def running(index, batch):
        value = ctx.input(index)
        if ctx.dtype(index) != dtype:
            batch = R.astype(batch, dtype=ctx.dtype(index))
        kept = R.multiply(value, scalar_like(ctx, momentum, index))
        return R.add(kept, R.multiply(batch, scalar_like(ctx, 1.0 - momentum, index)))

    return [y, running(3, mean), running(4, var)][:max(_outputs(ctx), 1)]


# -- Dropout ------------------------------------------------------------------------------------------


def _kept(ctx: NodeContext):
    """Dropout that drops nothing: the input, and a mask that keeps every element."""
    x = ctx.input(0)
    if _outputs(ctx) < 2:
        return x
    return [x, filled(ctx, ctx.dims(0), True, "bool")]


@converter("Dropout", attrs=("ratio",))
def _dropout_10(ctx: NodeContext):
    """Before opset 12 Dropout has no training input: in inference it is the identity."""
    return _kept(ctx)


@converter("Dropout", since=12, attrs=("seed",))
def _dropout(ctx: NodeContext):
    """The identity, and a mask of trues, unless training_mode is a true constant: then a ratio of 0
    still keeps everything, and any other ratio drops random elements, which cannot match ONNX's
    own random generator (refused)."""
    training = ctx.has_input(2) and bool(np.asarray(ctx.constant(2, "training_mode")).reshape(-1)[0])
    if training:
        ratio = float(np.asarray(ctx.constant(1, "ratio")).reshape(-1)[0]) if ctx.has_input(1) else 0.5
        if ratio != 0.0:
            raise ctx.error(f"training_mode=True with ratio {ratio:g} drops random elements, which cannot "
                            "match ONNX's random generator (only ratio 0 or inference is supported)")
    return _kept(ctx)


# -- Optional over plain tensors ------------------------------------------------------------------


@converter("OptionalHasElement", since=15)
def _optional_has_element(ctx: NodeContext):
    """A plain tensor input has its element; an omitted input has none."""
    if ctx.has_input(0):
        ctx.tensor(0)  # (a sequence or an optional value is refused as not a tensor)
        return Constant(np.asarray(True))
    return Constant(np.asarray(False))


@converter("OptionalGetElement", since=15)
def _optional_get_element(ctx: NodeContext):
    """A plain tensor input is its own element."""
    if not ctx.has_input(0):
        raise ctx.error("the input is omitted: an empty optional has no element", "invalid")
    ctx.tensor(0)
    return ctx.input(0)
