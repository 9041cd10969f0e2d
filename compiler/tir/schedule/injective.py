"""Injective rule: one thread per output element, on a flat 2-D grid of workgroups.

Covers elementwise, broadcast and other one-to-one operators, and small
reductions (each thread runs its reduction serially). Targets whose threads run
one after another (C kernels) take ``schedule_injective_rows`` instead.
"""

from __future__ import annotations

from ... import arith
from ...arith import simplify
from ..compute import ComputeDef, accumulate_type, const, unravel
from ..ir import Const, Declare, For, IfThen, Local, PrimFunc, Store, binary, cast, from_prim, minimum, vector_of
from .common import ceil_div, combine, global_thread_id, grid_for, lower_reads, scalars_of


def schedule_injective(defn: ComputeDef, target, name: str) -> PrimFunc:
    threads = min(256, target.limit("maxComputeInvocationsPerWorkgroup"))
    out = defn.output
    total = simplify(out.size)
    tid = Local("tid")
    axes = defn.axes()
    body = [Declare(tid, global_thread_id(threads))]
    inner = [Declare(axis, value) for axis, value in zip(axes, unravel(tid, out.shape))]
    if defn.reduction is None:
        value = lower_reads(defn.value(axes))
    else:
        inner += serial_reduction(defn, axes)
        value = lower_reads(_finalize(defn, Local("acc", _acc_dtype(defn)), axes))
    inner.append(Store(out, tid, cast(value, out.dtype)))
    body.append(IfThen(binary("<", tid, from_prim(total)), tuple(inner)))
    grid = grid_for(ceil_div(total, threads), target)
    return PrimFunc(name, defn.inputs, (out,), scalars_of(*defn.inputs, out), tuple(body),
                    (threads, 1, 1), grid, attrs={"rule": "injective"})


# Elements of a row one thread of schedule_injective_rows writes: long rows still split into
# enough pieces for a thread pool to share.
ROW_CHUNK = 256
ROW_THREADS = 4


def schedule_injective_rows(defn: ComputeDef, target, name: str) -> PrimFunc:
    """For CPU targets whose threads run one after another (``target.serial_threads`` and
    ``cpu_adapter``: C kernels).

    One element per thread decodes the output index into the axes at every element, a division
    by each dimension (symbolic ones included: the C compiler cannot make them shifts), which
    costs more than copying the element. Here a thread takes up to ``ROW_CHUNK`` consecutive
    elements of one row of the output's last axis: it decodes the row once and runs a loop over
    the last axis with contiguous stores, which the C compiler can vectorize where the reads
    allow. Reductions (``defn.reduction``) run serially for each element, as in
    ``schedule_injective``."""
    out = defn.output
    if not out.shape:
        return schedule_injective(defn, target, name)
    axes = defn.axes()
    last = simplify(out.shape[-1])
    rows = simplify(_product(out.shape[:-1]))
    static_last = arith.Analyzer().as_int(last)
    whole_rows = static_last is not None and static_last <= ROW_CHUNK
    chunks = arith.IntImm(1) if whole_rows else ceil_div(last, ROW_CHUNK)
    units = simplify(rows * chunks)
    unit, row, start, stop = Local("unit"), Local("row"), Local("start"), Local("stop")
    if whole_rows:
        decode = [Declare(row, unit), Declare(start, Const(0)), Declare(stop, from_prim(last))]
    else:
        count = from_prim(chunks)
        decode = [Declare(row, binary("/", unit, count)),
                  Declare(start, binary("*", binary("%", unit, count), Const(ROW_CHUNK))),
                  Declare(stop, minimum(binary("+", start, Const(ROW_CHUNK)), from_prim(last)))]
    decode += [Declare(axis, value) for axis, value in zip(axes[:-1], unravel(row, out.shape[:-1]))]
    inner = []
    if defn.reduction is None:
        value = lower_reads(defn.value(axes))
    else:
        inner += serial_reduction(defn, axes)
        value = lower_reads(_finalize(defn, Local("acc", _acc_dtype(defn)), axes))
    index = binary("+", binary("*", row, from_prim(last)), axes[-1])
    inner.append(Store(out, index, cast(value, out.dtype)))
    loop = For(axes[-1], start, stop, tuple(inner))
    body = (Declare(unit, global_thread_id(ROW_THREADS)),
            IfThen(binary("<", unit, from_prim(units)), (*decode, loop)))
    grid = grid_for(ceil_div(units, ROW_THREADS), target)
    return PrimFunc(name, defn.inputs, (out,), scalars_of(*defn.inputs, out), body, (ROW_THREADS, 1, 1), grid,
                    attrs={"rule": "injective-rows"})


def _product(dims):
    total = arith.IntImm(1)
    for d in dims:
        total = total * d
    return total


def _acc_dtype(defn: ComputeDef) -> str:
    return defn.accumulate_dtype or accumulate_type(defn.output.dtype)


def _finalize(defn: ComputeDef, acc, axes):
    return defn.finalize(acc, axes) if defn.finalize else acc


def serial_reduction(defn: ComputeDef, axes) -> list:
    """``acc`` = combination of the body over every reduction index, in one thread."""
    from ..ir import Assign, For

    acc_dtype = _acc_dtype(defn)
    acc = Local("acc", acc_dtype)
    reduce_axes = defn.reduce_axes()
    stmts = [Declare(acc, const(defn.reduction.init, acc_dtype))]
    update = Assign(acc, combine(defn.reduction.combiner, acc,
                                 cast(lower_reads(defn.value(axes, reduce_axes)), acc_dtype)))
    loop = (update,)
    for axis, extent in reversed(list(zip(reduce_axes, defn.reduction.extents))):
        loop = (For(axis, const(0, "i32"), from_prim(extent), loop),)
    return stmts + list(loop)


# -- vectorized elementwise ------------------------------------------------------------------

LANES = 4
# Storage a 4-lane vector can view directly (int64 is two words per element: no).
VECTOR_STORAGE = ("float32", "float16", "int32", "uint32", "bool")


def vectorize_elementwise(defn: ComputeDef, target, name: str) -> PrimFunc | None:
    """One thread per 4 consecutive elements, as vec4 loads and stores, when that is legal:
    every read is elementwise (same shape, same indices), no index is used as a value, the
    storage can be viewed as vectors and the element count is a multiple of 4."""
    from ... import arith

    if not target.vector_lanes:  # e.g. C kernels: the C compiler vectorizes their thread loops itself
        return None
    out = defn.output
    buffers = list(defn.inputs) + [out]
    if any(b.storage_dtype not in VECTOR_STORAGE for b in buffers):
        return None
    total = simplify(out.size)
    if arith.Analyzer(nonnegative=True).as_int(simplify(total % LANES)) != 0:
        return None
    group = Local("group")
    value = _vectorize(defn.value(defn.axes()), group, {a.name for a in defn.axes()})
    if value is None:
        return None
    threads = min(256, target.limit("maxComputeInvocationsPerWorkgroup"))
    groups = simplify(total // LANES)
    store_value = value if value.dtype == vector_of(out.dtype, LANES) else _vector_cast(value, out.dtype)
    body = (Declare(group, global_thread_id(threads)),
            IfThen(binary("<", group, from_prim(groups)), (Store(out, group, store_value, LANES),)))
    grid = grid_for(ceil_div(groups, threads), target)
    return PrimFunc(name, defn.inputs, (out,), scalars_of(*defn.inputs, out), body, (threads, 1, 1), grid,
                    attrs={"rule": "vectorized-elementwise"})


def _vector_cast(e, dtype):
    from ..ir import Cast

    return Cast(e, vector_of(dtype, LANES))


def _vectorize(e, group: Local, axes: set[str]):
    """The same expression over 4-lane vectors, or None where that is not legal."""
    from ..compute import TensorRead
    from ..ir import Binary, Cast, Const, Load, Select, Unary, lanes_of

    if isinstance(e, TensorRead):
        return Load(e.buffer, group, LANES)
    if isinstance(e, Const):
        return Const(e.value, vector_of(e.dtype, LANES))
    if isinstance(e, Local):
        return None  # an index used as a value (arange): not elementwise over data
    parts = None
    if isinstance(e, Binary):
        parts = [_vectorize(e.a, group, axes), _vectorize(e.b, group, axes)]
        if None in parts:
            return None
        op = {"&&": "&", "||": "|"}.get(e.op, e.op)  # component-wise on bool vectors
        return Binary(op, parts[0], parts[1], vector_of(e.dtype, LANES))
    if isinstance(e, Unary):
        x = _vectorize(e.x, group, axes)
        return None if x is None else Unary(e.op, x, vector_of(e.dtype, LANES))
    if isinstance(e, Cast):
        x = _vectorize(e.x, group, axes)
        return None if x is None else Cast(x, vector_of(lanes_of(e.dtype)[0], LANES))
    if isinstance(e, Select):
        parts = [_vectorize(p, group, axes) for p in (e.cond, e.a, e.b)]
        return None if None in parts else Select(*parts, vector_of(e.dtype, LANES))
    return None  # calls with several operands (pow, floordiv) and anything else stay scalar
