"""unroll_loops: a loop marked ``unroll`` with constant bounds becomes straight-line code, in tir.

Each iteration is the loop body with the loop variable replaced by its value (constant index
arithmetic folds). The iterations share one scope, so each iteration's own declarations get a
name of their own (``a0`` in the third iteration becomes ``a0_2``). Loops with symbolic bounds
or more than ``MAX_UNROLL`` iterations stay loops, their hint kept for a language that can
spell it.
"""

from __future__ import annotations

from dataclasses import replace

from ..ir import Const, Declare, For, IfThen, Local, PrimFunc, Stmt, ThreadLoop
from ..substitute import substitute_locals
from .names import NameSupply

MAX_UNROLL = 64


def static_trip(loop: For, limit: int = MAX_UNROLL) -> range | None:
    """The loop's iterations when its bounds are constants and there are at most ``limit`` of them."""
    if isinstance(loop.start, Const) and isinstance(loop.stop, Const):
        trip = range(int(loop.start.value), int(loop.stop.value), loop.step)
        if len(trip) <= limit:
            return trip
    return None


def unroll_loops(func: PrimFunc, limit: int = MAX_UNROLL) -> PrimFunc:
    names = NameSupply(func)

    def stmts(body) -> tuple[Stmt, ...]:
        return tuple(out for s in body for out in stmt(s))

    def stmt(s: Stmt) -> tuple[Stmt, ...]:
        if isinstance(s, For):
            loop = replace(s, body=stmts(s.body))  # inner loops first
            trip = static_trip(loop, limit) if loop.unroll else None
            return (loop,) if trip is None else expand(loop, trip)
        if isinstance(s, IfThen):
            return (IfThen(s.cond, stmts(s.then), stmts(s.otherwise)),)
        if isinstance(s, ThreadLoop):
            return (replace(s, body=stmts(s.body)),)
        return (s,)

    def expand(loop: For, trip: range) -> tuple[Stmt, ...]:
        out: list[Stmt] = []
        for iteration, value in enumerate(trip):
            mapping = {loop.var.name: Const(value, loop.var.dtype)}
            for s in loop.body:
                if isinstance(s, Declare):  # renamed from here on: declarations are once per scope
                    mapping[s.var.name] = Local(names.fresh(f"{s.var.name}_{iteration}"), s.var.dtype)
                out.extend(substitute_locals((s,), mapping))
        return tuple(out)

    return replace(func, body=stmts(func.body))
