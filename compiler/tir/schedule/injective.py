"""Injective rule: one thread per output element, on a flat 2-D grid of workgroups.

Covers elementwise, broadcast and other one-to-one operators, and small
reductions (each thread runs its reduction serially).
"""

from __future__ import annotations

from ...arith import simplify
from ..compute import ComputeDef, unravel
from ..ir import Declare, IfThen, Local, PrimFunc, Store, binary, cast, from_prim
from .common import (
    accumulate_type,
    ceil_div,
    combine,
    const,
    global_thread_id,
    grid_for,
    lower_reads,
    scalars_of,
)


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
