"""Shared pieces of deduction: reading inputs, axes, broadcasting."""

from __future__ import annotations

from dataclasses import replace

from .. import arith
from ..ir.deduce import DeduceContext
from ..ir.errors import DeductionError
from ..ir.expr import Call
from ..ir.struct_info import (
    ObjectStructInfo,
    ShapeStructInfo,
    TensorStructInfo,
    TupleStructInfo,
    describe,
    tensor_paths,
)

FLOAT_DTYPES = ("float64", "float32", "float16", "bfloat16")
INT_DTYPES = ("int64", "int32", "int16", "int8", "uint64", "uint32", "uint16", "uint8")


def tensor_input(call: Call, index: int, ctx: DeduceContext) -> TensorStructInfo:
    arg = call.args[index]
    sinfo = arg.sinfo
    if isinstance(sinfo, TensorStructInfo):
        return sinfo
    if isinstance(sinfo, ObjectStructInfo):  # nothing known: any tensor
        return TensorStructInfo()
    raise DeductionError("type mismatch", f"{ctx.show(arg)} is a {describe(sinfo)}, "
                         f"but {call.op.name} needs a tensor for '{call.op.inputs[index]}'")


def tuple_of_tensors(call: Call, index: int, ctx: DeduceContext) -> list[TensorStructInfo]:
    arg = call.args[index]
    sinfo = arg.sinfo
    if not isinstance(sinfo, TupleStructInfo):
        raise DeductionError("type mismatch", f"{ctx.show(arg)} is a {describe(sinfo)}, "
                             f"but {call.op.name} needs a tuple of tensors")
    for field in sinfo.fields:
        if not isinstance(field, TensorStructInfo):
            raise DeductionError("type mismatch", f"{call.op.name} needs tensors, got {describe(field)}")
    return list(sinfo.fields)


def shape_input(call: Call, index: int, ctx: DeduceContext) -> ShapeStructInfo:
    arg = call.args[index]
    sinfo = arg.sinfo
    if not isinstance(sinfo, ShapeStructInfo):
        raise DeductionError("type mismatch", f"{ctx.show(arg)} is a {describe(sinfo)}, "
                             f"but {call.op.name} needs a shape for '{call.op.inputs[index]}'")
    return sinfo


def require_float(call: Call, sinfo: TensorStructInfo, ctx: DeduceContext, index: int = 0) -> None:
    if sinfo.dtype and sinfo.dtype not in FLOAT_DTYPES:
        raise DeductionError("dtype mismatch", f"{call.op.name} needs a float tensor, "
                             f"{ctx.show(call.args[index])} is {sinfo.dtype}")


def same_dtype(call: Call, infos: list[TensorStructInfo], ctx: DeduceContext) -> str:
    known = {s.dtype for s in infos if s.dtype}
    if len(known) > 1:
        names = ", ".join(f"{ctx.show(a)} is {s.dtype or 'unknown'}" for a, s in zip(call.args, infos))
        raise DeductionError("dtype mismatch", names)
    return known.pop() if known else ""


def same_vdevice(infos: list[TensorStructInfo], call: Call | None = None, ctx: DeduceContext | None = None
                 ) -> str | None:
    """The vdevice of an op whose operands ``infos`` must share one: an operand that names none (a
    constant, a weight) goes where the others are. Two different ones are an error: data moves
    between devices only through R.to_vdevice. ``call`` and ``ctx`` name the operands in the message
    when ``infos`` are the call's arguments, in order."""
    if call is not None and ctx is not None and len(call.args) == len(infos):
        return _shared_vdevice([(s.vdevice, _namer(ctx, a)) for s, a in zip(infos, call.args)])
    return _shared_vdevice([(s.vdevice, None) for s in infos])


def operands_vdevice(call: Call, ctx: DeduceContext) -> str | None:
    """The vdevice every tensor among ``call``'s operands (tuple fields included) shares, as
    ``same_vdevice``: for ops whose kernel reads all of them on one device."""
    placed = []
    for arg in call.args:
        for path, tensor in tensor_paths(arg.sinfo) if arg.sinfo is not None else ():
            placed.append((tensor.vdevice, _namer(ctx, arg, path)))
    return _shared_vdevice(placed)


def _namer(ctx: DeduceContext, arg, path=()):
    """How the error names an operand, made only if there is an error: showing an operand prints it,
    and a weight's constant prints every value (seconds for a model's embedding)."""
    return lambda: ctx.show(arg) + "".join(f"[{i}]" for i in path)


def _shared_vdevice(placed: list[tuple[str | None, object]]) -> str | None:
    named = [(device, name) for device, name in placed if device]
    devices = list(dict.fromkeys(device for device, _ in named))
    if len(devices) <= 1:
        return devices[0] if devices else None
    shown = []
    for device in devices[:2]:
        name = next(name for d, name in named if d == device)
        shown.append(f"{device} ({name()})" if name else device)
    raise DeductionError("device mismatch", f"operands are on different devices: {shown[0]} and {shown[1]}; "
                         "move one with R.to_vdevice")


def on_vdevice(sinfo: TensorStructInfo, vdevice: str | None) -> TensorStructInfo:
    """``sinfo`` placed on ``vdevice`` (for ops whose result is one of their operands' infos)."""
    return sinfo if sinfo.vdevice == vdevice else replace(sinfo, vdevice=vdevice)


def normalize_axis(call: Call, axis: int, ndim: int, ctx: DeduceContext) -> int:
    if not isinstance(axis, int):
        raise DeductionError("invalid attribute", f"{call.op.name} needs an integer axis, got {axis!r}")
    if ndim < 0:
        return axis
    if not -ndim <= axis < ndim:
        raise DeductionError("invalid attribute", f"axis {axis} is out of range for "
                             f"{ctx.show(call.args[0])} of rank {ndim}")
    return axis + ndim if axis < 0 else axis


def normalize_axes(call: Call, axes, ndim: int, ctx: DeduceContext) -> tuple[int, ...]:
    """Axes attribute (None: all axes) as sorted non-negative ints; repeats are an error."""
    if axes is None:
        return tuple(range(ndim))
    if isinstance(axes, int):
        axes = (axes,)
    out = tuple(normalize_axis(call, a, ndim, ctx) for a in axes)
    if len(set(out)) != len(out):
        raise DeductionError("invalid attribute", f"{call.op.name} got repeated axes {tuple(axes)}")
    return tuple(sorted(out))


def broadcast_shapes(call: Call, shapes: list[tuple | None], ctx: DeduceContext):
    """Numpy broadcasting over symbolic dims; None when the result cannot be known exactly."""
    if any(s is None for s in shapes):
        return None
    ndim = max(len(s) for s in shapes)
    padded = [(arith.IntImm(1),) * (ndim - len(s)) + tuple(s) for s in shapes]
    out = []
    for axis in range(ndim):
        dims = [s[axis] for s in padded]
        result = None
        for dim in dims:
            value = ctx.analyzer.as_int(dim)
            if value == 1:
                continue
            if result is None:
                result = dim
            elif not ctx.analyzer.prove_equal(result, dim):
                a, b = ctx.analyzer.as_int(result), value
                if a is not None and b is not None:
                    shown = " and ".join(f"{ctx.show(arg)} has {describe(arg.sinfo)}" for arg in call.args)
                    raise DeductionError("shape mismatch", f"cannot broadcast {shown} (axis {axis})")
                return None  # n against m: equal only at run time
        out.append(result if result is not None else arith.IntImm(1))
    return tuple(out)


def result_tensor(shape, dtype: str, ndim: int = -1, vdevice: str | None = None) -> TensorStructInfo:
    if shape is not None:
        return TensorStructInfo(tuple(shape), dtype, -1, vdevice)
    return TensorStructInfo(None, dtype, ndim, vdevice)


def product(dims) -> arith.PrimExpr:
    total: arith.PrimExpr = arith.IntImm(1)
    for dim in dims:
        total = total * dim
    return total
