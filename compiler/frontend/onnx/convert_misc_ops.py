"""Ops composed at import from the IR's operators: TopK, Einsum, QLinearConv and ConvInteger.

None needs a kernel of its own, so each runs on every target the compiler has."""

from __future__ import annotations

import copy
import string

import numpy as np

from ... import arith
from ... import op as R
from ...ir.expr import Constant, ShapeExpr
from .convert_common import _product, axis_of, const
from .convert_control import quantize
from .registry import NodeContext, converter, find_converter

# -- TopK -----------------------------------------------------------------------------------------

TOPK_PAIRWISE_AXIS = 2048  # elements along the axis for the ranks, which compare every pair of them
TOPK_SELECTIONS = 256  # K for the repeated selection, one pass over the axis per element chosen


@converter("TopK", attrs=("axis", "largest", "sorted"))
def _topk(ctx: NodeContext):
    """The K largest (or smallest) along ``axis``, sorted, ties to the lower index (as ONNX's
    reference), with no sort kernel: for a short axis or a large K, by ranks (each element's rank
    is the count of elements that beat it: greater, or equal at a lower index; output position r
    takes the element of rank r); for a long axis and a small K, by K selections (the best value
    left, then the first position holding it that is not taken yet). ``sorted=0`` allows any
    order; the sorted one is given."""
    rank = ctx.rank(0)
    axis = axis_of(ctx, int(ctx.attr("axis", -1)), rank)
    k_values = ctx.constant(1, "K").reshape(-1)
    if k_values.size != 1:
        raise ctx.error(f"K has {k_values.size} values, not 1", "invalid")
    k = int(k_values[0])
    n = ctx.static_dims(0, "TopK")[axis]  # only the axis must be static
    if not 0 <= k <= n:
        raise ctx.error(f"K={k} is not within the axis's {n} elements", "invalid")
    if ctx.dtype(0) == "bool":
        raise ctx.error("TopK of bool tensors is not supported")
    order = [a for a in range(rank) if a != axis] + [axis]
    x = ctx.input(0)
    moved = x if axis == rank - 1 else ctx.emit(R.permute_dims(x, axes=order))
    largest = bool(ctx.attr("largest", 1))
    if n <= TOPK_PAIRWISE_AXIS and (k > 16 or n <= 256):
        values, indices = _topk_by_ranks(ctx, moved, n, k, largest)
    elif k <= TOPK_SELECTIONS:
        values, indices = _topk_by_selection(ctx, moved, n, k, largest)
    else:
        raise ctx.error(f"K={k} of an axis of {n} elements (at most {TOPK_SELECTIONS} of a longer axis than "
                        f"{TOPK_PAIRWISE_AXIS}: the ranks compare every pair, a selection passes once per element)")
    if axis != rank - 1:
        back = [int(a) for a in np.argsort(order)]
        values, indices = R.permute_dims(values, axes=back), R.permute_dims(indices, axes=back)
    return [values, indices]


def _topk_by_ranks(ctx: NodeContext, moved, n: int, k: int, largest: bool):
    dtype = moved.struct_info.dtype
    rows_i = ctx.emit(R.expand_dims(moved, axis=-1))  # (..., N_i, 1)
    cols_j = ctx.emit(R.expand_dims(moved, axis=-2))  # (..., 1, N_j)
    beats = R.greater(rows_i, cols_j) if largest else R.less(rows_i, cols_j)
    earlier = const(np.tril(np.ones((n, n), bool), -1).T, "bool")  # [i, j]: i < j
    beats = R.logical_or(beats, R.logical_and(R.equal(rows_i, cols_j), earlier))
    ranks = ctx.emit(R.sum(R.astype(beats, dtype="int32"), axis=[-2]))  # (..., N_j)
    chosen = ctx.emit(R.equal(R.expand_dims(ranks, axis=-1), const(np.arange(k), "int32")))  # (..., N_j, K)
    # Exactly one element has each rank: a sum where the rest are 0 is its value, exactly (an infinity
    # too), and needs no "lowest value" constant (int64's is not a literal WGSL can hold).
    values = R.sum(R.where(chosen, rows_i, const(0, dtype)), axis=[-2])
    positions = const(np.arange(n).reshape(n, 1), "int64")
    return values, R.sum(R.where(chosen, positions, const(0, "int64")), axis=[-2])


def _topk_by_selection(ctx: NodeContext, moved, n: int, k: int, largest: bool):
    # Taken positions hold the row's worst value, which no pick can beat (it may tie: see below).
    worst = ctx.emit(R.min(moved, axis=[-1], keepdims=True) if largest else R.max(moved, axis=[-1], keepdims=True))
    positions = const(np.arange(n), "int64")
    taken = None
    values, indices = [], []
    for _ in range(k):
        left = moved if taken is None else ctx.emit(R.where(taken, worst, moved))
        best = ctx.emit(R.max(left, axis=[-1], keepdims=True) if largest else R.min(left, axis=[-1], keepdims=True))
        # The first position not taken that holds the best value (a value equal to `worst` may also be taken).
        holds = R.equal(moved, best)
        if taken is not None:
            holds = R.logical_and(holds, R.equal(taken, const(False, "bool")))
        index = ctx.emit(R.argmax(R.astype(holds, dtype="int32"), axis=-1, keepdims=True))
        picked = ctx.emit(R.equal(positions, index))
        taken = picked if taken is None else ctx.emit(R.logical_or(taken, picked))
        values.append(best)
        indices.append(index)
    return ctx.emit(R.concat(values, axis=-1)), ctx.emit(R.concat(indices, axis=-1))


# -- Einsum ---------------------------------------------------------------------------------------


def _einsum_terms(ctx: NodeContext):
    """The equation as one label list per input and one for the output; '...' becomes labels of
    its own ('.0', '.1', ...: the broadcast dimensions, aligned on the right)."""
    equation = ctx.attr("equation")
    equation = (equation.decode() if isinstance(equation, bytes) else str(equation)).replace(" ", "")
    lhs, arrow, rhs = equation.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ctx.inputs):
        raise ctx.error(f"the equation '{equation}' has {len(terms)} inputs, the node {len(ctx.inputs)}", "invalid")
    letters = set(string.ascii_letters)
    ellipsis = 0
    labels = []
    for index, term in enumerate(terms):
        named = term.replace("...", "")
        if set(named) - letters or term.count("...") > 1:
            raise ctx.error(f"the equation '{equation}' is not valid", "invalid")
        count = ctx.rank(index) - len(named) if "..." in term else 0
        if count < 0 or (not term.count("...") and len(named) != ctx.rank(index)):
            raise ctx.error(f"term '{term}' does not fit input {index} of rank {ctx.rank(index)}", "invalid")
        ellipsis = max(ellipsis, count)
        head, _, tail = term.partition("...")
        labels.append([*head, *[f".{ellipsis - count + e}" for e in range(count)], *tail] if "..." in term
                      else list(term))
    broadcast = [f".{e}" for e in range(ellipsis)]
    if arrow:
        head, dots, tail = rhs.partition("...")
        output = [*head, *(broadcast if dots else []), *tail]
    else:
        once = sorted(letter for letter in set(lhs) & letters if lhs.count(letter) == 1)
        output = broadcast + once
    if len(set(output)) != len(output) or set(output) - {label for term in labels for label in term}:
        raise ctx.error(f"the output of '{equation}' repeats a label or names one no input has", "invalid")
    return labels, output


def _diagonal(ctx: NodeContext, x, labels: list, dims: list):
    """A label repeated within one input: its diagonal (the input times an identity, summed)."""
    while True:
        repeated = next((label for label in labels if labels.count(label) > 1), None)
        if repeated is None:
            return x, labels, dims
        first = labels.index(repeated)
        second = labels.index(repeated, first + 1)
        size = ctx.analyzer.as_int(dims[first])
        if size is None:
            raise ctx.error("a repeated label (a diagonal) needs a static size")
        eye = np.eye(size).reshape([size if a in (first, second) else 1 for a in range(len(labels))])
        dtype = x.struct_info.dtype
        x = ctx.emit(R.sum(R.multiply(x, const(eye, dtype)), axis=[second]))
        labels = labels[:second] + labels[second + 1:]
        dims = dims[:second] + dims[second + 1:]


def _sum_out(ctx: NodeContext, x, labels, dims, keep):
    gone = [a for a, label in enumerate(labels) if label not in keep]
    if gone:
        x = ctx.emit(R.sum(x, axis=gone))
    return x, [label for label in labels if label in keep], [d for label, d in zip(labels, dims) if label in keep]


def _permuted(ctx: NodeContext, x, labels, order):
    axes = [labels.index(label) for label in order]
    return x if axes == list(range(len(axes))) else ctx.emit(R.permute_dims(x, axes=axes))


@converter("Einsum", since=12, attrs=("equation",))
def _einsum(ctx: NodeContext):
    """Each input's diagonals taken and its own labels summed out, then the inputs folded left to
    right: each pair as one batched matmul (batch, kept, contracted labels), reshaped back."""
    labels, output = _einsum_terms(ctx)
    operands = []
    for index, term in enumerate(labels):
        x, term, dims = _diagonal(ctx, ctx.input(index), list(term), list(ctx.dims(index)))
        operands.append((x, term, dims))
    x, left, left_dims = operands[0]
    for position in range(len(operands) + 1):
        later = {label for _, term, _ in operands[position + 1:] for label in term} | set(output)
        if position == 0:
            x, left, left_dims = _sum_out(ctx, x, left, left_dims, later)
            continue
        if position == len(operands):
            break
        y, right, right_dims = operands[position]
        # A label neither input shares and nothing later reads is summed out before the product.
        y, right, right_dims = _sum_out(ctx, y, right, right_dims, later | set(left))
        x, left, left_dims = _sum_out(ctx, x, left, left_dims, later | set(right))
        batch = [label for label in left if label in right and label in later]
        contracted = [label for label in left if label in right and label not in later]
        only_left = [label for label in left if label not in right]
        only_right = [label for label in right if label not in left]
        size = dict(zip(left, left_dims)) | dict(zip(right, right_dims))
        for label in batch + contracted:  # a broadcast dimension of size 1 on one side
            a, b = dict(zip(left, left_dims))[label], dict(zip(right, right_dims))[label]
            if ctx.analyzer.as_int(a) == 1 and ctx.analyzer.as_int(b) != 1:
                size[label] = b
        x = _broadcast(ctx, _permuted(ctx, x, left, batch + only_left + contracted), batch + only_left + contracted,
                       size)
        y = _broadcast(ctx, _permuted(ctx, y, right, batch + contracted + only_right),
                       batch + contracted + only_right, size)

        groups = {name: arith.simplify(_product([size[label] for label in group])) for name, group in
                  (("batch", batch), ("left", only_left), ("contracted", contracted), ("right", only_right))}
        x = R.reshape(x, ShapeExpr((groups["batch"], groups["left"], groups["contracted"])))
        y = R.reshape(y, ShapeExpr((groups["batch"], groups["contracted"], groups["right"])))
        left = batch + only_left + only_right
        left_dims = [size[label] for label in left]
        x = ctx.emit(R.reshape(R.matmul(x, y), ShapeExpr(tuple(left_dims))))
    x, left, left_dims = _sum_out(ctx, x, left, left_dims, set(output))
    return _permuted(ctx, x, left, output)


def _broadcast(ctx: NodeContext, x, labels, size):
    dims = tuple(size[label] for label in labels)
    have = tuple(x.struct_info.shape)
    if all(ctx.analyzer.as_int(a) == ctx.analyzer.as_int(b) for a, b in zip(have, dims)):
        return x
    return ctx.emit(R.broadcast_to(x, ShapeExpr(dims)))


# -- quantized convolutions -----------------------------------------------------------------------

CONV_ATTRS = ("auto_pad", "dilations", "group", "kernel_shape", "pads", "strides")


def _conv(ctx: NodeContext, x, w):
    """ONNX Conv's converter on other inputs: its padding, strides, 1-D inputs and errors."""
    conv = copy.copy(ctx)
    conv.inputs = [x, w]
    conv.attrs = {name: value for name, value in ctx.attrs.items() if name in CONV_ATTRS}
    return find_converter("Conv", ctx.opset).fn(conv)


def _channel_axis(ctx: NodeContext, value, index: int, rank: int):
    """A per-tensor or per-output-channel (1-D) weight scale or zero point, shaped for OIHW."""
    if ctx.rank(index) == 0 or ctx.static_dims(index, "a quantization parameter") == (1,):
        return R.reshape(value, ShapeExpr(())) if ctx.rank(index) else value
    return R.reshape(value, [-1] + [1] * (rank - 1))


@converter("QLinearConv", attrs=CONV_ATTRS)
def _qlinear_conv(ctx: NodeContext):
    """Dequantize the input and the weights (per tensor, or per output channel), convolve in
    float32, add the int32 bias at the input's times the weights' scale, quantize to the output's
    scale and zero point (as QLinearMatMul)."""
    rank = ctx.rank(3)

    def dequantized(value, scale, zero, per_channel):
        scale_value, zero_value = ctx.input(scale), ctx.input(zero)
        if per_channel:
            scale_value = _channel_axis(ctx, scale_value, scale, rank)
            zero_value = _channel_axis(ctx, zero_value, zero, rank)
        centered = R.subtract(R.astype(ctx.input(value), dtype="float32"), R.astype(zero_value, dtype="float32"))
        return R.multiply(centered, R.astype(scale_value, dtype="float32"))

    x = ctx.emit(dequantized(0, 1, 2, False))
    w = dequantized(3, 4, 5, True)
    w = Constant(_fold_weight(ctx, w)) if _all_constant(ctx, (3, 4, 5)) else ctx.emit(w)
    y = ctx.emit(_conv(ctx, x, w))
    if ctx.has_input(8):
        scale = R.multiply(R.astype(ctx.input(1), dtype="float32"),
                           R.reshape(R.astype(ctx.input(4), dtype="float32"), [-1]))
        bias = R.multiply(R.astype(ctx.input(8), dtype="float32"), scale)
        y = ctx.emit(R.add(y, R.reshape(bias, [1, -1] + [1] * (ctx.rank(0) - 2))))
    return quantize(ctx, y, R.astype(ctx.input(6), dtype="float32"), ctx.input(7), ctx.dtype(7))


def _all_constant(ctx: NodeContext, indices) -> bool:
    return all(isinstance(ctx.inputs[i], Constant) for i in indices if ctx.has_input(i))


def _fold_weight(ctx: NodeContext, expr) -> np.ndarray:
    """A dequantized constant weight, computed now (the Conv converter reads a 1-D weight's value)."""
    from ...ir import BlockBuilder, interpret

    bb = BlockBuilder()
    with bb.function("fold", []):
        bb.emit_func_output(bb.emit(expr))
    return np.asarray(interpret(bb.get(), "fold"))


@converter("ConvInteger", attrs=CONV_ATTRS)
def _conv_integer(ctx: NodeContext):
    """In int32 exactly: both sides widened, their zero points (per tensor, or the weights' per
    output channel) subtracted, convolved with int32 accumulation."""
    rank = ctx.rank(1)
    x = R.astype(ctx.input(0), dtype="int32")
    if ctx.has_input(2):
        x = R.subtract(x, R.astype(ctx.input(2), dtype="int32"))
    w = R.astype(ctx.input(1), dtype="int32")
    if ctx.has_input(3):
        w = R.subtract(w, R.astype(_channel_axis(ctx, ctx.input(3), 3, rank), dtype="int32"))
    w = Constant(_fold_weight(ctx, w)) if _all_constant(ctx, (1, 3)) else ctx.emit(w)
    return _conv(ctx, ctx.emit(x), w)

