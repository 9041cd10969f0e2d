"""Reduction rules: one workgroup per output element (or row), tree reduction in workgroup memory.

``schedule_reduction`` covers sum/mean/max/min/prod, pooling and convolution
when the reduction is long; ``schedule_rows`` covers the multi-pass row
operators (softmax, log_softmax, rms_norm, layer_norm, argmax, argmin).
Barriers stay in workgroup-uniform control flow: every thread of a workgroup
runs every barrier, and only the final store is guarded.

Where a workgroup's threads run one after another on a CPU (``target.serial_threads``
and ``cpu_adapter``: C kernels) a tree is a loop per step over all threads, for a handful of live
values: there ``schedule_rows`` gives each row one thread that walks it in plain
loops, and long reductions take the injective rows rule (injective.py).
"""

from __future__ import annotations

import math

from ... import arith
from ..compute import ComputeDef, RowDef, accumulate_type, const, highest, lowest, unravel
from ..ir import (
    Assign,
    Barrier,
    Buffer,
    Builtin,
    Const,
    Declare,
    For,
    IfThen,
    Load,
    Local,
    PrimFunc,
    Store,
    binary,
    cast,
    from_prim,
    intrinsic,
    logical_and,
    minimum,
)
from .common import combine, grid_for, lower_reads, scalars_of, workgroup_linear_id

LID = Builtin("local_id", 0)


def _threads(target, extent: arith.PrimExpr) -> int:
    limit = min(256, target.limit("maxComputeInvocationsPerWorkgroup"))
    static = arith.Analyzer().as_int(extent)
    if static is not None and static < limit:
        return max(32, 1 << max(static - 1, 1).bit_length())
    return limit


def tree_combine(shared: Buffer, threads: int, combiner: str, extra: Buffer | None = None) -> list:
    """Halve the active threads each step; ``extra`` carries argmax/argmin indices along."""
    stmts = [Barrier()]
    step = threads // 2
    while step >= 1:
        other = binary("+", LID, Const(step))
        if extra is None:
            update = (Store(shared, LID, combine(combiner, Load(shared, LID), Load(shared, other))),)
        else:
            mine, theirs = Load(shared, LID), Load(shared, other)
            better = binary(">" if combiner == "argmax" else "<", theirs, mine)
            tie = logical_and(binary("==", theirs, mine), binary("<", Load(extra, other), Load(extra, LID)))
            take = binary("||", better, tie)
            update = (IfThen(take, (Store(shared, LID, theirs), Store(extra, LID, Load(extra, other)))),)
        stmts += [IfThen(binary("<", LID, Const(step)), update), Barrier()]
        step //= 2
    return stmts


def _subgroup_tree(shared: Buffer, threads: int, combiner: str, local: Local) -> tuple[list, Local]:
    """Combine within each subgroup in registers, then across the workgroup's subgroups.

    Lane 0 of each subgroup leaves its subgroup's result in workgroup memory; after one
    barrier every thread combines those few values itself, so no second barrier is needed
    before the result is used (a barrier still precedes any reuse of the scratch)."""
    lane, size = Builtin("subgroup_invocation_id", 0), Builtin("subgroup_size", 0)
    part = Local(f"{local.name}_part", local.dtype)
    total = Local(f"{local.name}_total", local.dtype)
    index = Local(f"{local.name}_i")
    # At most ``threads`` subgroups: the bound the verifier (and the scratch size) relies on.
    groups = minimum(binary("/", binary("+", Const(threads), binary("-", size, Const(1))), size), Const(threads))
    stmts = [Barrier(),  # the scratch may still be read by an earlier pass
             Declare(part, intrinsic({"sum": "subgroup_add", "max": "subgroup_max"}[combiner], local)),
             IfThen(binary("==", lane, Const(0)), (Store(shared, binary("/", LID, size), part),)),
             Barrier(),
             Declare(total, Load(shared, Const(0))),
             For(index, Const(1), groups, (Assign(total, combine(combiner, total, Load(shared, index))),))]
    return stmts, total


def schedule_reduction(defn: ComputeDef, target, name: str) -> PrimFunc:
    out = defn.output
    extent = arith.simplify(math.prod(defn.reduction.extents, start=arith.IntImm(1)))
    threads = _threads(target, extent)
    acc_dtype = defn.accumulate_dtype or accumulate_type(out.dtype)
    shared = Buffer("red", acc_dtype, (arith.IntImm(threads),), "workgroup")
    total = from_prim(arith.simplify(out.size))
    wg, acc, r = Local("wg"), Local("acc", acc_dtype), Local("r")
    axes = defn.axes()
    reduce_axes = defn.reduce_axes()
    body = [Declare(wg, workgroup_linear_id())]
    # Workgroups past the end compute a valid element and skip the store.
    clamped = minimum(wg, binary("-", total, Const(1)))
    body += [Declare(axis, value) for axis, value in zip(axes, unravel(clamped, out.shape))]
    body.append(Declare(acc, const(defn.reduction.init, acc_dtype)))
    decoded = [Declare(axis, value) for axis, value in zip(reduce_axes, unravel(r, defn.reduction.extents))]
    update = Assign(acc, combine(defn.reduction.combiner, acc,
                                 cast(lower_reads(defn.value(axes, reduce_axes)), acc_dtype)))
    body.append(For(r, LID, from_prim(extent), tuple(decoded) + (update,), step=threads))
    body.append(Store(shared, LID, acc))
    body += tree_combine(shared, threads, defn.reduction.combiner)
    result = Load(shared, Const(0))
    value = defn.finalize(result, axes) if defn.finalize else result
    done = logical_and(binary("==", LID, Const(0)), binary("<", wg, total))
    body.append(IfThen(done, (Store(out, wg, cast(lower_reads(value), out.dtype)),)))
    grid = grid_for(arith.simplify(out.size), target)
    return PrimFunc(name, defn.inputs, (out,), scalars_of(*defn.inputs, out), tuple(body), (threads, 1, 1),
                    grid, scratch=(shared,), attrs={"rule": "workgroup-reduction"})


def schedule_rows(defn: RowDef, target, name: str) -> PrimFunc:
    x = defn.inputs[0]
    out = defn.output
    serial = target.cpu_adapter and target.serial_threads  # cpu_adapter off asks for the GPU rule
    threads = 1 if serial else _threads(target, defn.row)
    acc_dtype = accumulate_type(x.dtype)
    shared = Buffer("red", acc_dtype, (arith.IntImm(threads),), "workgroup")
    scratch = [] if serial else [shared]
    rows = arith.simplify(defn.outer * defn.inner)
    row_id, base, r = Local("row_id"), Local("base"), Local("r")
    inner, row = from_prim(defn.inner), from_prim(defn.row)
    body = [Declare(row_id, minimum(workgroup_linear_id(), binary("-", from_prim(rows), Const(1))))]
    outer_index = binary("/", row_id, inner)
    inner_index = binary("%", row_id, inner)
    body.append(Declare(base, binary("+", binary("*", binary("*", outer_index, row), inner), inner_index)))

    def element(index):  # x[o, index, i]
        return binary("+", base, binary("*", index, inner))

    def x_at(index):
        return cast(Load(x, element(index)), acc_dtype)

    def over_row(stmts):
        return For(r, Const(0) if serial else LID, row, tuple(stmts), step=threads)

    def reduce_into(local: Local, init, combiner: str, value):
        """Statements combining ``value`` over the row, and the expression holding the result."""
        stmts = [Declare(local, const(init, acc_dtype)), over_row([Assign(local, combine(combiner, local, value))])]
        if serial:  # the thread saw the whole row
            return stmts, local
        if subgroups:
            more, result = _subgroup_tree(shared, threads, combiner, local)
            return stmts + more, result
        return stmts + [Store(shared, LID, local), *tree_combine(shared, threads, combiner)], Load(shared, Const(0))

    kind = defn.kind
    subgroups = not serial and target.subgroup_feature is not None and kind not in ("argmax", "argmin")
    if kind in ("argmax", "argmin"):
        best, best_index = Local("best", acc_dtype), Local("best_index")
        worst = lowest(acc_dtype) if kind == "argmax" else highest(acc_dtype)
        value = x_at(r)
        better = binary(">" if kind == "argmax" else "<", value, best)
        body += [Declare(best, const(worst, acc_dtype)), Declare(best_index, Const(2**31 - 1)),
                 over_row([IfThen(better, (Assign(best, value), Assign(best_index, r)))])]
        valid = binary("<", workgroup_linear_id(), from_prim(rows))
        if serial:  # one thread walked the row in order: the first of equal values won
            body.append(IfThen(valid, (Store(out, row_id, best_index),)))
        else:
            indices = Buffer("red_index", "i32", (arith.IntImm(threads),), "workgroup")
            scratch.append(indices)
            body += [Store(shared, LID, best), Store(indices, LID, best_index),
                     *tree_combine(shared, threads, kind, indices)]
            body.append(IfThen(logical_and(binary("==", LID, Const(0)), valid),
                               (Store(out, row_id, Load(indices, Const(0))),)))
    else:
        barrier = [] if serial else [Barrier()]
        body += _row_normalization(defn, acc_dtype, barrier, x_at, over_row, reduce_into, element, r)
    grid = grid_for(rows, target)
    attrs = {"rule": "serial-rows" if serial else "row-reduction"}
    if subgroups:
        attrs.update(subgroups=True)
    return PrimFunc(name, defn.inputs, (out,), scalars_of(*defn.inputs, out), tuple(body), (threads, 1, 1),
                    grid, scratch=tuple(scratch), attrs=attrs)


def _row_normalization(defn, acc_dtype, barrier, x_at, over_row, reduce_into, element, r):
    """The passes of a row operator; ``barrier`` (empty for serial threads) separates a pass that
    reads the scratch from the next one that writes it."""
    out, kind = defn.output, defn.kind
    row = from_prim(defn.row)
    count = cast(row, acc_dtype)
    stmts = []
    if kind in ("softmax", "log_softmax"):
        peak, total = Local("peak", acc_dtype), Local("total", acc_dtype)
        more, result = reduce_into(Local("m", acc_dtype), -math.inf, "max", x_at(r))
        stmts += more + [Declare(peak, result), *barrier]
        shifted = binary("-", x_at(r), peak)
        more, result = reduce_into(Local("s", acc_dtype), 0.0, "sum", intrinsic("exp", shifted))
        stmts += more + [Declare(total, result)]
        if kind == "softmax":
            value = binary("/", intrinsic("exp", shifted), total)
        else:
            value = binary("-", shifted, intrinsic("log", total))
    elif kind == "rms_norm":
        scale = Local("scale", acc_dtype)
        more, result = reduce_into(Local("ss", acc_dtype), 0.0, "sum", binary("*", x_at(r), x_at(r)))
        stmts += more
        mean_square = binary("/", result, count)
        stmts.append(Declare(scale, intrinsic("rsqrt", binary("+", mean_square, const(defn.epsilon, acc_dtype)))))
        weight = cast(Load(defn.inputs[1], r), acc_dtype)
        value = binary("*", binary("*", x_at(r), scale), weight)
    elif kind == "layer_norm":
        mean, scale = Local("mean", acc_dtype), Local("scale", acc_dtype)
        more, result = reduce_into(Local("s1", acc_dtype), 0.0, "sum", x_at(r))
        stmts += more + [Declare(mean, binary("/", result, count)), *barrier]
        centered = binary("-", x_at(r), mean)
        more, result = reduce_into(Local("s2", acc_dtype), 0.0, "sum", binary("*", centered, centered))
        stmts += more
        variance = binary("/", result, count)
        stmts.append(Declare(scale, intrinsic("rsqrt", binary("+", variance, const(defn.epsilon, acc_dtype)))))
        gamma = cast(Load(defn.inputs[1], r), acc_dtype)
        beta = cast(Load(defn.inputs[2], r), acc_dtype)
        value = binary("+", binary("*", binary("*", centered, scale), gamma), beta)
    else:
        raise ValueError(f"unknown row operator {kind}")
    valid = binary("<", workgroup_linear_id(), from_prim(arith.simplify(defn.outer * defn.inner)))
    stmts.append(IfThen(valid, (over_row([Store(out, element(r), cast(value, out.dtype))]),)))
    return stmts

