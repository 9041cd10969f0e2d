"""split_workgroups: a kernel for a language that runs a workgroup's threads one after another.

A GPU kernel describes one thread of a workgroup. On a CPU thread, a workgroup runs as loops over
its threads, and a barrier cannot be waited on, so the body is split at barriers (as PoCL and
others do): every stretch of statements without a barrier becomes a ``ThreadLoop``; a loop or an
if that holds a barrier stays at the workgroup level (the verifier guarantees its condition is
the same for every thread) and its body is split in turn. The barriers themselves go: the end of
one thread loop is the barrier.

Thread state that must survive from one thread loop to the next moves to workgroup memory with a
slot per thread: a local that one thread loop writes and another (or the workgroup level) reads
becomes a workgroup buffer of its name indexed by the thread; a private buffer becomes a workgroup
buffer with one copy per thread. At the workgroup level only uniform values are read, so thread
0's copy stands for everyone's. ``local_id`` becomes arithmetic on the thread loop's variable.
Locals used within one thread loop, loop counters and the kernel's scalars stay as they are.
"""

from __future__ import annotations

import math
from dataclasses import replace

from ... import arith
from ..ir import (
    Assign,
    Barrier,
    Buffer,
    Builtin,
    Const,
    Declare,
    Evaluate,
    For,
    IfThen,
    Load,
    Local,
    PrimFunc,
    Span,
    Stmt,
    Store,
    TExpr,
    ThreadLoop,
    binary,
    map_children,
    walk_expr,
    walk_stmts,
)
from .names import NameSupply


def split_workgroups(func: PrimFunc) -> PrimFunc:
    threads = math.prod(func.workgroup_size)
    lid = Local(NameSupply(func).fresh("lid"))
    across = _locals_across_barriers(func.body)
    slots: dict[str, Buffer] = {}  # per-thread locals, by name
    for stmt, _ in walk_stmts(func.body):
        if isinstance(stmt, Declare) and stmt.var.name in across:
            slot = slots.setdefault(stmt.var.name, Buffer(stmt.var.name, stmt.var.dtype, (arith.IntImm(threads),),
                                                          "workgroup"))
            if slot.dtype != stmt.var.dtype:
                raise NotImplementedError(f"kernel {func.name}: local {stmt.var.name} has two types")
    copies: dict[Buffer, tuple[Buffer, int]] = {}  # private buffer -> (its per-thread copies, its size)
    for buf in func.scratch:
        if buf.scope == "private":
            size = _static_size(buf)
            copies[buf] = (Buffer(buf.name, buf.dtype, (arith.IntImm(threads * size),), "workgroup"), size)

    def thread_index(e: Builtin) -> TExpr:
        # The flat index is x-major. (Keep `lid % x` even where it equals lid: clang builds slower
        # WASM for the gemm rule without it.)
        x, y, _ = func.workgroup_size
        if e.axis == 0:
            return binary("%", lid, Const(x))
        if e.axis == 1:
            return binary("%", binary("/", lid, Const(x)), Const(y))
        return binary("/", lid, Const(x * y))

    def expr(e: TExpr, thread: TExpr) -> TExpr:
        """``e`` as the thread ``thread`` computes it (``lid`` in a thread loop, 0 outside)."""
        if isinstance(e, Local) and e.name in slots:
            return Load(slots[e.name], thread)
        if isinstance(e, Builtin) and e.kind == "local_id":
            if thread is not lid:
                raise ValueError(f"kernel {func.name}: local_id decides control flow around a barrier")
            return thread_index(e)
        if isinstance(e, Load) and e.buffer in copies:
            return Load(*copy_of(e.buffer, expr(e.index, thread), thread, e.lanes), e.lanes)
        if isinstance(e, Span) and e.buffer in copies:
            return Span(*copy_of(e.buffer, expr(e.start, thread), thread, 1), expr(e.extent, thread))
        return map_children(e, lambda child: expr(child, thread))

    def copy_of(buf: Buffer, index: TExpr, thread: TExpr, lanes: int) -> tuple[Buffer, TExpr]:
        if lanes > 1:
            raise NotImplementedError(f"kernel {func.name}: vector access to private buffer {buf.name}")
        copy, size = copies[buf]
        return copy, binary("+", binary("*", thread, Const(size)), index)

    def in_thread(s: Stmt) -> Stmt:
        if isinstance(s, (Declare, Assign)) and s.var.name in slots:
            return Store(slots[s.var.name], lid, expr(s.value, lid))
        if isinstance(s, (Declare, Assign, Evaluate)):
            return replace(s, value=expr(s.value, lid))
        if isinstance(s, Store):
            buf, index = s.buffer, expr(s.index, lid)
            if buf in copies:
                buf, index = copy_of(buf, index, lid, s.lanes)
            return Store(buf, index, expr(s.value, lid), s.lanes)
        if isinstance(s, IfThen):
            return IfThen(expr(s.cond, lid), tuple(map(in_thread, s.then)), tuple(map(in_thread, s.otherwise)))
        if isinstance(s, For):
            return replace(s, start=expr(s.start, lid), stop=expr(s.stop, lid), body=tuple(map(in_thread, s.body)))
        raise TypeError(f"kernel {func.name}: cannot run {s!r} in a thread loop")

    def workgroup_level(body) -> tuple[Stmt, ...]:
        out: list[Stmt] = []
        run: list[Stmt] = []

        def close_run() -> None:
            if run:
                out.append(ThreadLoop(lid, threads, tuple(in_thread(s) for s in run)))
                run.clear()

        for s in body:
            if not _has_barrier(s):
                run.append(s)
                continue
            close_run()
            uniform = Const(0)
            if isinstance(s, For):
                out.append(replace(s, start=expr(s.start, uniform), stop=expr(s.stop, uniform),
                                   body=workgroup_level(s.body)))
            elif isinstance(s, IfThen):
                out.append(IfThen(expr(s.cond, uniform), workgroup_level(s.then), workgroup_level(s.otherwise)))
            # A Barrier itself: the thread loop just closed ends at it.
        close_run()
        return tuple(out)

    scratch = tuple(slots.values()) + tuple(copies[b][0] if b in copies else b for b in func.scratch)
    return replace(func, body=workgroup_level(func.body), scratch=scratch)


def _locals_across_barriers(body: tuple) -> set[str]:
    """Names of locals that one thread loop writes and another (or the workgroup level) reads."""
    regions: list[set[str]] = []
    workgroup: set[str] = set()

    def names(stmts) -> set[str]:
        found = set()
        for stmt, exprs in walk_stmts(stmts):
            if isinstance(stmt, (Declare, Assign)):
                found.add(stmt.var.name)
            for root in exprs:
                found.update(e.name for e in walk_expr(root) if isinstance(e, Local))
        return found

    def split(stmts) -> None:
        run: list = []
        for stmt in stmts:
            if not _has_barrier(stmt):
                run.append(stmt)
                continue
            regions.append(names(run))
            run = []
            if isinstance(stmt, For):
                workgroup.update(e.name for root in (stmt.start, stmt.stop) for e in walk_expr(root)
                                 if isinstance(e, Local))
                split(stmt.body)
            elif isinstance(stmt, IfThen):
                workgroup.update(e.name for e in walk_expr(stmt.cond) if isinstance(e, Local))
                split(stmt.then)
                split(stmt.otherwise)
        regions.append(names(run))

    split(body)
    seen: set[str] = set()
    across = set(workgroup)
    for region in regions:
        across |= region & seen
        seen |= region
    return across


def _has_barrier(stmt: Stmt) -> bool:
    return any(isinstance(s, Barrier) for s, _ in walk_stmts((stmt,)))


def _static_size(buf: Buffer) -> int:
    size = arith.Analyzer().as_int(buf.size)
    if size is None:
        raise ValueError(f"scratch buffer {buf.name} needs a static size, has {buf.shape}")
    return size
