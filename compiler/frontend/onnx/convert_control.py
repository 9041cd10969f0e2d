"""Control flow (If) and quantization (QDQ and the integer products)."""

from __future__ import annotations

import numpy as np

from ... import op as R
from ...ir.expr import Constant, ShapeExpr, Tuple, TupleGetItem
from .convert_common import axis_of, const, require_float, scalar_like
from .loader import ir_dtype
from .registry import NodeContext, converter

# -- control flow ---------------------------------------------------------------------------------


@converter("If", attrs=("then_branch", "else_branch"))
def _if(ctx: NodeContext):
    """Relax If: each branch's graph converted into an arm of its own; several outputs travel as
    a tuple."""
    cond = ctx.input(0)
    if ctx.dtype(0) != "bool":
        raise ctx.error(f"the condition is {ctx.dtype(0)}, not bool", "invalid")
    if isinstance(cond, Constant):  # known now: only the branch taken is imported (the other may not fit)
        graph = ctx.attrs["then_branch" if bool(cond.data.reshape(-1)[0]) else "else_branch"].g
        return ctx.importer.convert_subgraph(graph, ctx.env)
    if ctx.rank(0) != 0:
        cond = ctx.emit(R.reshape(cond, ()))
    bb = ctx.builder
    arms = []
    for name in ("then_branch", "else_branch"):
        graph = ctx.attrs[name].g
        with bb.branch() as arm:
            outputs = ctx.importer.convert_subgraph(graph, ctx.env)
            arm.result = outputs[0] if len(outputs) == 1 else Tuple(tuple(outputs))
        arms.append((arm, len(outputs)))
    (then_arm, count), (else_arm, other) = arms
    if count != other:
        raise ctx.error(f"the branches give {count} and {other} outputs", "invalid")
    result = bb.emit_if(cond, then_arm.seq, else_arm.seq)
    if count == 1:
        return result
    return [TupleGetItem(result, i) for i in range(count)]


# -- quantization (QDQ) ---------------------------------------------------------------------------

_INT_RANGES = {"uint8": (0, 255), "int8": (-128, 127), "uint16": (0, 65535), "int16": (-32768, 32767),
               "int32": (-2 ** 31, 2 ** 31 - 1)}


def _per_axis(ctx: NodeContext, value, value_index: int, rank: int):
    """A per-tensor (scalar or one-element), per-axis (1-D, along the ``axis`` attribute) or blocked
    (``block_size``) scale or zero point, shaped to broadcast against a tensor of ``rank``."""
    value_rank = ctx.rank(value_index)
    block = int(ctx.attr("block_size", 0) or 0)
    if block:
        return _blocked(ctx, value, value_index, rank, block)
    if value_rank == 0:
        return value
    if value_rank != 1:
        raise ctx.error("blocked quantization (a scale of rank 2 or more) is not supported")
    if rank <= 1:
        return value
    axis = axis_of(ctx, ctx.attr("axis", 1), rank)
    return R.reshape(value, [-1 if a == axis else 1 for a in range(rank)])


def _blocked(ctx: NodeContext, value, value_index: int, rank: int, block: int):
    """Blocked quantization: the scale (or zero point) has the input's rank, and along ``axis`` one
    entry per ``block`` consecutive elements (the last block may be short); each element takes its
    block's entry."""
    if block < 0:
        raise ctx.error(f"block_size={block} is negative", "invalid")
    if ctx.rank(value_index) != rank:
        raise ctx.error(f"with block_size, input {value_index} must have the input's rank {rank}, not "
                        f"{ctx.rank(value_index)}", "invalid")
    axis = axis_of(ctx, ctx.attr("axis", 1), rank)
    size = ctx.dims(0)[axis]
    known, blocks = ctx.analyzer.as_int(size), ctx.analyzer.as_int(ctx.dims(value_index)[axis])
    if known is not None and blocks is not None and blocks != -(-known // block):
        raise ctx.error(f"input {value_index} has {blocks} blocks along axis {axis}, but {known} elements in "
                        f"blocks of {block} make {-(-known // block)}", "invalid")
    if known is not None:
        which = const(np.arange(known) // block, "int64")
    else:
        which = R.floor_divide(R.arange(end=size, dtype="int64"), const(block, "int64"))
    return R.take(value, which, axis=axis)


@converter("DequantizeLinear", attrs=("axis", "block_size", "output_dtype"))
def _dequantize(ctx: NodeContext):
    rank = ctx.rank(0)
    scale_dtype = ctx.dtype(1)
    x = R.astype(ctx.input(0), dtype=scale_dtype)
    if ctx.has_input(2):
        zero = R.astype(_per_axis(ctx, ctx.input(2), 2, rank), dtype=scale_dtype)
        x = R.subtract(x, zero)
    y = R.multiply(x, _per_axis(ctx, ctx.input(1), 1, rank))
    if "output_dtype" in ctx.attrs and ctx.attr("output_dtype"):
        y = R.astype(y, dtype=ir_dtype(int(ctx.attr("output_dtype")), "output_dtype"))
    return y


def quantize(ctx: NodeContext, x, scale, zero, dtype: str):
    """saturate(round_half_even(x / scale) + zero) in ``dtype``."""
    low, high = _INT_RANGES[dtype]
    x_dtype = x.struct_info.dtype if hasattr(x, "struct_info") and x.struct_info is not None else "float32"
    y = R.round(R.divide(x, scale))
    if zero is not None:
        y = R.add(y, R.astype(zero, dtype=x_dtype))
    return R.astype(R.clip(y, min=float(low), max=float(high)), dtype=dtype)


@converter("QuantizeLinear", attrs=("axis", "block_size", "output_dtype", "precision", "saturate"))
def _quantize(ctx: NodeContext):
    require_float(ctx)
    rank = ctx.rank(0)
    if ctx.has_input(2):
        dtype = ctx.dtype(2)
    elif ctx.attr("output_dtype"):
        dtype = ir_dtype(int(ctx.attr("output_dtype")), "output_dtype")
    else:
        dtype = "uint8"
    if dtype not in _INT_RANGES:
        raise ctx.error(f"quantizing to {dtype} is not supported")
    scale = R.astype(_per_axis(ctx, ctx.input(1), 1, rank), dtype=ctx.dtype(0))
    zero = _per_axis(ctx, ctx.input(2), 2, rank) if ctx.has_input(2) else None
    x = ctx.input(0)
    return quantize(ctx, x, ctx.emit(scale), zero, dtype)


@converter("DynamicQuantizeLinear")
def _dynamic_quantize(ctx: NodeContext):
    """uint8 with a scale and zero point from the tensor's range (which always includes 0)."""
    require_float(ctx)
    x = ctx.input(0)
    zero = scalar_like(ctx, 0.0)
    # Computed as one-element vectors, made scalars at the end (the IR's 0-d casts give numpy scalars).
    high = R.maximum(R.reshape(R.max(x), (1,)), zero)
    low = R.minimum(R.reshape(R.min(x), (1,)), zero)
    scale = ctx.emit(R.divide(R.subtract(high, low), scalar_like(ctx, 255.0)))
    zero_point = ctx.emit(R.astype(R.clip(R.round(R.subtract(zero, R.divide(low, scale))), min=0.0, max=255.0),
                                   dtype="uint8"))
    scalar = ShapeExpr(())
    return [quantize(ctx, x, scale, zero_point, "uint8"), R.reshape(scale, scalar), R.reshape(zero_point, scalar)]


@converter("QLinearMatMul")
def _qlinear_matmul(ctx: NodeContext):
    """Dequantize both sides, multiply in float32, quantize to the output's scale and zero point."""
    def dequantized(value, scale, zero):
        return R.multiply(R.subtract(R.astype(ctx.input(value), dtype="float32"),
                                     R.astype(ctx.input(zero), dtype="float32")),
                          R.astype(ctx.input(scale), dtype="float32"))

    product = ctx.emit(R.matmul(dequantized(0, 1, 2), dequantized(3, 4, 5)))
    return quantize(ctx, product, R.astype(ctx.input(6), dtype="float32"), ctx.input(7), ctx.dtype(7))


@converter("MatMulInteger")
def _matmul_integer(ctx: NodeContext):
    def widened(value, zero):
        x = R.astype(ctx.input(value), dtype="int32")
        if ctx.has_input(zero):
            x = R.subtract(x, R.astype(ctx.input(zero), dtype="int32"))
        return x

    return R.matmul(widened(0, 2), widened(1, 3))
