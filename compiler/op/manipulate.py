"""Shape manipulation: reshape, transpose, expand/squeeze, concat/split, take, slicing."""

from __future__ import annotations

import math

import numpy as np

from .. import arith
from ..ir.errors import DeductionError
from ..ir.expr import ShapeExpr
from ..ir.interpreter import ShapeValue
from ..ir.struct_info import ShapeStructInfo, TupleStructInfo, describe
from ..tir.compute import ComputeDef, TransposeInfo, read, row_major_index, unravel
from ..tir.ir import Const, binary, cast, from_prim, select
from .common import (
    INT_DTYPES,
    normalize_axes,
    normalize_axis,
    operands_vdevice,
    product,
    result_tensor,
    shape_input,
    tensor_input,
    tuple_of_tensors,
)
from .lowering import clamp_index
from .registry import register_op


def _text(dims) -> str:
    return "(" + ", ".join(str(d) for d in dims) + (",)" if len(dims) == 1 else ")")


# -- reshape ----------------------------------------------------------------


def _legalize_same_order(call, ctx):
    """reshape, flatten, expand_dims, squeeze: the elements keep their row-major order."""
    x, out = ctx.inputs[0], ctx.output

    def body(idx):
        return read(x, *unravel(row_major_index(idx, out.shape), x.shape))

    return ComputeDef(ctx.kernel_name, (x,), out, body)


def _deduce_reshape(call, ctx):
    x = tensor_input(call, 0, ctx)
    target = shape_input(call, 1, ctx)
    if target.values is None:
        return result_tensor(None, x.dtype, target.ndim, x.vdevice)
    dims = list(target.values)
    inferred = [i for i, d in enumerate(dims) if ctx.analyzer.as_int(d) == -1]
    if len(inferred) > 1:
        raise DeductionError("invalid attribute", f"reshape to {_text(dims)} has more than one -1")
    if x.shape is None:
        if inferred:
            return result_tensor(None, x.dtype, len(dims), x.vdevice)
        return result_tensor(dims, x.dtype, vdevice=x.vdevice)
    size = product(x.shape)
    if inferred:
        known = product(d for i, d in enumerate(dims) if i != inferred[0])
        dims[inferred[0]] = ctx.simplify(size // known)
        if not ctx.analyzer.prove_equal(product(dims), size):
            if ctx.analyzer.as_int(size % known) not in (None, 0):
                raise DeductionError("shape mismatch", f"cannot reshape {ctx.show(call.args[0])} of "
                                     f"{_text(x.shape)} to {_text(target.values)}")
    else:
        diff = ctx.analyzer.as_int(product(dims) - size)
        if diff is not None and diff != 0:
            raise DeductionError("shape mismatch", f"cannot reshape {ctx.show(call.args[0])} of "
                                 f"{_text(x.shape)} ({ctx.simplify(size)} elements) to {_text(dims)}")
    return result_tensor(dims, x.dtype, vdevice=x.vdevice)


def _reshape_reference(x, shape):
    shape = tuple(int(d) for d in shape)
    try:
        return np.reshape(x, shape)
    except ValueError:
        # numpy's words drop a -1 ("cannot reshape array of size 30 into shape (4)"): say both counts.
        holds = "" if -1 in shape else f", which holds {math.prod(shape)}"
        raise ValueError(f"{x.size} elements cannot take the shape {_text(shape)}{holds}") from None


def unproven_reshape_counts(call, analyzer: arith.Analyzer) -> tuple[arith.PrimExpr, arith.PrimExpr] | None:
    """(the element count of x, that of the result) of a deduced ``reshape`` call whose two counts
    ``analyzer`` cannot prove equal: deduction lets such a reshape through (a shape the caller
    passes, dims of other symbolic variables), so it is a run-time check's to compare them, before a
    kernel reads past x or leaves the result half written. None when they are provably equal or
    either shape is unknown."""
    x, out = call.args[0].struct_info, call.struct_info
    if getattr(x, "shape", None) is None or getattr(out, "shape", None) is None:
        return None
    size, count = analyzer.simplify(product(x.shape)), analyzer.simplify(product(out.shape))
    return None if analyzer.prove_equal(size, count) else (size, count)


register_op("reshape", inputs=("x", "shape"), deduce=_deduce_reshape, reference=_reshape_reference,
            legalize=_legalize_same_order)


def _deduce_flatten(call, ctx):
    x = tensor_input(call, 0, ctx)
    if x.shape is None:
        return result_tensor(None, x.dtype, 1, x.vdevice)
    return result_tensor((product(x.shape),), x.dtype, vdevice=x.vdevice)


register_op("flatten", inputs=("x",), deduce=_deduce_flatten, reference=lambda x: x.reshape(-1),
            legalize=_legalize_same_order)


# -- axes -------------------------------------------------------------------


def _deduce_permute_dims(call, ctx):
    x = tensor_input(call, 0, ctx)
    axes = call.attr("axes")
    if x.ndim < 0:
        return result_tensor(None, x.dtype, len(axes) if axes is not None else -1, x.vdevice)
    order = tuple(reversed(range(x.ndim))) if axes is None else tuple(
        normalize_axis(call, a, x.ndim, ctx) for a in axes)
    if sorted(order) != list(range(x.ndim)):
        raise DeductionError("invalid attribute", f"axes {axes} are not a permutation of "
                             f"{x.ndim} axes of {ctx.show(call.args[0])}")
    if x.shape is None:
        return result_tensor(None, x.dtype, x.ndim, x.vdevice)
    return result_tensor([x.shape[a] for a in order], x.dtype, vdevice=x.vdevice)


def _legalize_permute_dims(call, ctx):
    x, out = ctx.inputs[0], ctx.output
    ndim = len(x.shape)
    axes = call.attr("axes")
    order = tuple(reversed(range(ndim))) if axes is None else tuple(a % ndim for a in axes)

    def body(idx):
        indices = [None] * ndim
        for out_axis, in_axis in enumerate(order):
            indices[in_axis] = idx[out_axis]
        return read(x, *indices)

    attrs = {}
    if ndim >= 2 and order == tuple(range(ndim - 2)) + (ndim - 1, ndim - 2):
        # Swapping the last two axes: the tiled transpose rule keeps both sides contiguous.
        batch = arith.simplify(math.prod(x.shape[:-2], start=arith.IntImm(1)))
        attrs["transpose"] = TransposeInfo(batch, x.shape[-2], x.shape[-1])
    return ComputeDef(ctx.kernel_name, (x,), out, body, attrs=attrs)


register_op("permute_dims", inputs=("x",), attrs={"axes": None}, deduce=_deduce_permute_dims,
            reference=lambda x, axes: np.transpose(x, axes), legalize=_legalize_permute_dims)


def _deduce_expand_dims(call, ctx):
    x = tensor_input(call, 0, ctx)
    axis = call.attr("axis")
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    if x.ndim < 0:
        return result_tensor(None, x.dtype, -1, x.vdevice)
    out_ndim = x.ndim + len(axes)
    # The axes name positions in the output, so they are checked against its rank.
    positions = set(normalize_axes(call, axes, out_ndim, ctx))
    if x.shape is None:
        return result_tensor(None, x.dtype, out_ndim, x.vdevice)
    rest = iter(x.shape)
    dims = [arith.IntImm(1) if i in positions else next(rest) for i in range(out_ndim)]
    return result_tensor(dims, x.dtype, vdevice=x.vdevice)


register_op("expand_dims", inputs=("x",), attrs={"axis": 0}, deduce=_deduce_expand_dims,
            reference=lambda x, axis: np.expand_dims(x, axis), legalize=_legalize_same_order)


def _deduce_squeeze(call, ctx):
    x = tensor_input(call, 0, ctx)
    axis = call.attr("axis")
    if x.shape is None:
        if axis is None or x.ndim < 0:
            return result_tensor(None, x.dtype, -1, x.vdevice)
        count = 1 if isinstance(axis, int) else len(axis)
        return result_tensor(None, x.dtype, x.ndim - count, x.vdevice)
    if axis is None:
        # Only dims known to be 1 are removed; a symbolic dim might be 1 at run time.
        if any(ctx.analyzer.as_int(d) is None for d in x.shape):
            return result_tensor(None, x.dtype, -1, x.vdevice)
        return result_tensor([d for d in x.shape if ctx.analyzer.as_int(d) != 1], x.dtype,
                             vdevice=x.vdevice)
    axes = normalize_axes(call, axis, x.ndim, ctx)
    for a in axes:
        value = ctx.analyzer.as_int(x.shape[a])
        if value is not None and value != 1:
            raise DeductionError("shape mismatch", f"cannot squeeze axis {a} of {ctx.show(call.args[0])}: "
                                 f"it has size {value}")
    return result_tensor([d for i, d in enumerate(x.shape) if i not in axes], x.dtype, vdevice=x.vdevice)


register_op("squeeze", inputs=("x",), attrs={"axis": None}, deduce=_deduce_squeeze,
            reference=lambda x, axis: np.squeeze(x, axis), legalize=_legalize_same_order)


# -- concat / split -----------------------------------------------------------


def _deduce_concat(call, ctx):
    infos = tuple_of_tensors(call, 0, ctx)
    if not infos:
        raise DeductionError("invalid attribute", "concat needs at least one tensor")
    dtypes = {s.dtype for s in infos if s.dtype}
    if len(dtypes) > 1:
        raise DeductionError("dtype mismatch", f"concat of {', '.join(sorted(dtypes))}")
    dtype = dtypes.pop() if dtypes else ""
    vdevice = operands_vdevice(call, ctx)
    ndims = {s.ndim for s in infos if s.ndim >= 0}
    if len(ndims) > 1:
        raise DeductionError("rank mismatch", f"concat of ranks {sorted(ndims)}")
    if not ndims:
        return result_tensor(None, dtype, -1, vdevice)
    ndim = ndims.pop()
    axis = normalize_axis(call, call.attr("axis"), ndim, ctx)
    if any(s.shape is None for s in infos):
        return result_tensor(None, dtype, ndim, vdevice)
    dims = []
    for i in range(ndim):
        if i == axis:
            dims.append(ctx.simplify(sum((s.shape[i] for s in infos), arith.IntImm(0))))
            continue
        dim = infos[0].shape[i]
        for other in infos[1:]:
            if not ctx.analyzer.prove_equal(dim, other.shape[i]):
                if ctx.analyzer.as_int(dim - other.shape[i]) is not None:
                    raise DeductionError("shape mismatch", f"concat on axis {axis}: "
                                         + ", ".join(describe(s) for s in infos))
                return result_tensor(None, dtype, ndim, vdevice)
        dims.append(dim)
    return result_tensor(dims, dtype, vdevice=vdevice)


def _legalize_concat(call, ctx):
    parts, out = ctx.inputs, ctx.output
    axis = call.attr("axis") % len(out.shape)
    limit = ctx.target.limit("maxStorageBuffersPerShaderStage") if ctx.target is not None else len(parts) + 1
    if len(parts) + 1 > limit:
        return _split_concat(call, ctx, limit)

    def body(idx):
        # Later parts first; each branch reads in bounds whichever is selected.
        offsets, total = [], arith.IntImm(0)
        for part in parts:
            offsets.append(total)
            total = arith.simplify(total + part.shape[axis])
        value = None
        for part, offset in reversed(list(zip(parts, offsets))):
            local = clamp_index(binary("-", idx[axis], from_prim(offset)), part.shape[axis])
            indices = list(idx)
            indices[axis] = local
            here = read(part, *indices)
            if value is None:
                value = here
            else:
                value = select(binary("<", idx[axis], from_prim(arith.simplify(offset + part.shape[axis]))),
                               here, value)
        return value

    return ComputeDef(ctx.kernel_name, tuple(parts), out, body)


def _split_concat(call, ctx, limit):
    """Too many inputs for one dispatch's bindings: concatenate the first ones, then the rest onto them,
    as a graph rewrite that legalization lowers again."""
    from ..ir.expr import Tuple
    from .registry import make_call

    fields = list(call.args[0].fields)
    head = make_call("concat", Tuple(tuple(fields[: limit - 1])), axis=call.attr("axis"))
    return make_call("concat", Tuple((head, *fields[limit - 1:])), axis=call.attr("axis"))


register_op("concat", inputs=("tensors",), attrs={"axis": 0}, deduce=_deduce_concat,
            reference=lambda tensors, axis: np.concatenate(tensors, axis), legalize=_legalize_concat)


def _deduce_split(call, ctx):
    x = tensor_input(call, 0, ctx)
    spec = call.attr("indices_or_sections")
    if isinstance(spec, int):
        if spec <= 0:
            raise DeductionError("invalid attribute", f"split into {spec} sections")
        count = spec
    else:
        count = len(spec) + 1
    if x.ndim < 0:
        return TupleStructInfo(tuple(result_tensor(None, x.dtype, -1, x.vdevice) for _ in range(count)))
    axis = normalize_axis(call, call.attr("axis"), x.ndim, ctx)
    if x.shape is None:
        return TupleStructInfo(tuple(result_tensor(None, x.dtype, x.ndim, x.vdevice) for _ in range(count)))
    dim = x.shape[axis]
    if isinstance(spec, int):
        size = ctx.simplify(dim // spec)
        if not ctx.analyzer.prove_equal(size * spec, dim):
            if ctx.analyzer.as_int(dim % spec) not in (None, 0):
                raise DeductionError("shape mismatch", f"axis {axis} of {ctx.show(call.args[0])} has size "
                                     f"{dim}, not divisible into {spec} sections")
        sizes = [size] * spec
    else:
        bounds = [arith.IntImm(0)] + [arith.as_expr(i) for i in spec] + [dim]
        sizes = [ctx.simplify(b - a) for a, b in zip(bounds, bounds[1:])]
    fields = []
    for size in sizes:
        shape = list(x.shape)
        shape[axis] = size
        fields.append(result_tensor(shape, x.dtype, vdevice=x.vdevice))
    return TupleStructInfo(tuple(fields))


def _split_reference(x, indices_or_sections, axis):
    return tuple(np.split(x, indices_or_sections if isinstance(indices_or_sections, int)
                          else list(indices_or_sections), axis))


def _legalize_split(call, ctx):
    x = ctx.inputs[0]
    axis = call.attr("axis") % len(x.shape)
    defs, start = [], arith.IntImm(0)
    for number, out in enumerate(ctx.outputs):
        def body(idx, start=start):
            indices = list(idx)
            indices[axis] = binary("+", idx[axis], from_prim(start))
            return read(x, *indices)

        defs.append(ComputeDef(f"{ctx.kernel_name}_{number}", (x,), out, body))
        start = arith.simplify(start + out.shape[axis])
    return defs


register_op("split", inputs=("x",), attrs={"indices_or_sections": 2, "axis": 0},
            deduce=_deduce_split, reference=_split_reference, legalize=_legalize_split)


# -- take / strided_slice / broadcast_to -------------------------------------


def _deduce_take(call, ctx):
    x, indices = tensor_input(call, 0, ctx), tensor_input(call, 1, ctx)
    if indices.dtype and indices.dtype not in INT_DTYPES:
        raise DeductionError("dtype mismatch", f"take needs integer indices, "
                             f"{ctx.show(call.args[1])} is {indices.dtype}")
    vdevice = operands_vdevice(call, ctx)
    if x.ndim < 0 or indices.ndim < 0:
        return result_tensor(None, x.dtype, -1, vdevice)
    axis = normalize_axis(call, call.attr("axis"), x.ndim, ctx)
    if x.shape is None or indices.shape is None:
        return result_tensor(None, x.dtype, x.ndim - 1 + indices.ndim, vdevice)
    return result_tensor(x.shape[:axis] + indices.shape + x.shape[axis + 1:], x.dtype, vdevice=vdevice)


def _take_reference(x, indices, axis):
    if np.any(indices < 0) or np.any(indices >= x.shape[axis]):
        raise IndexError(f"take: an index is outside [0, {x.shape[axis]})")
    return np.take(x, indices, axis)


def _legalize_take(call, ctx):
    x, indices = ctx.inputs
    out = ctx.output
    axis = call.attr("axis") % len(x.shape)
    rank = len(indices.shape)

    def body(idx):
        # A GPU cannot raise: an index outside the axis reads the nearest row.
        picked = clamp_index(cast(read(indices, *idx[axis:axis + rank]), "i32"), x.shape[axis])
        return read(x, *idx[:axis], picked, *idx[axis + rank:])

    return ComputeDef(ctx.kernel_name, (x, indices), out, body)


register_op("take", inputs=("x", "indices"), attrs={"axis": 0}, deduce=_deduce_take,
            reference=_take_reference, legalize=_legalize_take)


def _slice_length(ctx, dim, begin, end, stride):
    """Length of x[begin:end:stride] along a dim; begin and end may be symbolic."""
    values = [ctx.analyzer.as_int(v) for v in (dim, begin, end)]
    if None not in values:
        return arith.IntImm(len(range(*slice(values[1], values[2], stride).indices(values[0]))))
    if stride <= 0:
        return None
    # Symbolic: negative static offsets count from the end, as in Python.
    begin, end = (dim + v if ctx.analyzer.as_int(v) is not None and ctx.analyzer.as_int(v) < 0 else v
                  for v in (begin, end))
    begin = arith.min_expr(arith.max_expr(begin, 0), dim)
    end = arith.min_expr(arith.max_expr(end, 0), dim)
    return ctx.simplify(arith.max_expr((end - begin + (stride - 1)) // stride, 0))


def _deduce_strided_slice(call, ctx):
    x = tensor_input(call, 0, ctx)
    axes, begin, end = call.attr("axes"), call.attr("begin"), call.attr("end")
    strides = call.attr("strides") or (1,) * len(axes)
    if not len(axes) == len(begin) == len(end) == len(strides):
        raise DeductionError("invalid attribute", "strided_slice needs as many begin, end and strides "
                             f"as axes ({len(axes)})")
    if any(not isinstance(s, int) or s == 0 for s in strides):
        raise DeductionError("invalid attribute", f"strided_slice strides must be non-zero ints: {strides}")
    if x.shape is None:
        return result_tensor(None, x.dtype, x.ndim, x.vdevice)
    dims = list(x.shape)
    for a, b, e, s in zip(axes, begin, end, strides):
        axis = normalize_axis(call, a, x.ndim, ctx)
        length = _slice_length(ctx, x.shape[axis], arith.as_expr(b), arith.as_expr(e), s)
        if length is None:
            return result_tensor(None, x.dtype, x.ndim, x.vdevice)
        dims[axis] = length
    return result_tensor(dims, x.dtype, vdevice=x.vdevice)


def _strided_slice_reference(x, axes, begin, end, strides):
    index = [slice(None)] * x.ndim
    strides = strides or (1,) * len(axes)
    for axis, b, e, s in zip(axes, begin, end, strides):
        index[axis] = slice(int(b), int(e), int(s))
    return x[tuple(index)]


def _legalize_strided_slice(call, ctx):
    x, out = ctx.inputs[0], ctx.output
    strides = call.attr("strides") or (1,) * len(call.attr("axes"))
    starts = {}
    analyzer = arith.Analyzer(nonnegative=True)
    for a, b, s in zip(call.attr("axes"), call.attr("begin"), strides):
        axis = a % len(x.shape)
        dim, begin = x.shape[axis], arith.as_expr(b)
        value = analyzer.as_int(begin)
        if value is not None and value < 0:
            begin = dim + begin
        if s > 0:
            start = arith.min_expr(arith.max_expr(begin, 0), dim)
        else:
            start = arith.min_expr(arith.max_expr(begin, -1), dim - 1)
        starts[axis] = (analyzer.simplify(start), s)

    def body(idx):
        indices = list(idx)
        for axis, (start, step) in starts.items():
            indices[axis] = binary("+", from_prim(start), binary("*", idx[axis], Const(step)))
        return read(x, *indices)

    return ComputeDef(ctx.kernel_name, (x,), out, body)


register_op("strided_slice", inputs=("x",),
            attrs={"axes": (), "begin": (), "end": (), "strides": None},
            deduce=_deduce_strided_slice, reference=_strided_slice_reference, legalize=_legalize_strided_slice)


def _deduce_broadcast_to(call, ctx):
    x = tensor_input(call, 0, ctx)
    target = shape_input(call, 1, ctx)
    if target.values is None or x.shape is None:
        return result_tensor(target.values, x.dtype, target.ndim, x.vdevice)
    if x.ndim > target.ndim:
        raise DeductionError("rank mismatch", f"cannot broadcast {ctx.show(call.args[0])} of rank "
                             f"{x.ndim} to rank {target.ndim}")
    for have, want in zip(reversed(x.shape), reversed(target.values)):
        h, w = ctx.analyzer.as_int(have), ctx.analyzer.as_int(want)
        if h is not None and w is not None and h != 1 and h != w:
            raise DeductionError("shape mismatch", f"cannot broadcast {ctx.show(call.args[0])} of "
                                 f"{_text(x.shape)} to {_text(target.values)}")
    return result_tensor(target.values, x.dtype, vdevice=x.vdevice)


register_op("broadcast_to", inputs=("x", "shape"), deduce=_deduce_broadcast_to,
            reference=lambda x, shape: np.broadcast_to(x, tuple(shape)).copy(),
            legalize=lambda call, ctx: ctx.elementwise(lambda x: x, ctx.inputs[:1]))


def _deduce_shape_of(call, ctx):
    x = tensor_input(call, 0, ctx)
    return ShapeStructInfo(x.shape, x.ndim)


def _legalize_shape_of(call, ctx):
    sinfo = call.args[0].struct_info
    if sinfo.shape is None:
        raise ctx.fail("the shape of a tensor of unknown shape is only known at run time")
    return ShapeExpr(sinfo.shape)  # no kernel: the shape is known symbolically


register_op("shape_of", inputs=("x",), deduce=_deduce_shape_of, reference=lambda x: ShapeValue(x.shape),
            legalize=_legalize_shape_of)
