"""Readable text of a kernel, for debugging and for error messages."""

from __future__ import annotations

from .. import arith
from .ir import (
    Assign,
    Barrier,
    Binary,
    Builtin,
    Call,
    Cast,
    Const,
    Declare,
    Evaluate,
    Extern,
    For,
    IfThen,
    Load,
    Local,
    PrimFunc,
    Select,
    Span,
    Store,
    TExpr,
    ThreadLoop,
    Unary,
)


def print_texpr(e: TExpr) -> str:
    if isinstance(e, Const):
        return str(e.value).lower() if e.dtype == "bool" else repr(e.value)
    if isinstance(e, Local):
        return e.name
    if isinstance(e, Builtin):
        return f"{e.kind}.{'xyz'[e.axis]}"
    if isinstance(e, Load):
        return f"{e.buffer.name}[{print_texpr(e.index)}]"
    if isinstance(e, Binary):
        if e.op in ("min", "max"):
            return f"{e.op}({print_texpr(e.a)}, {print_texpr(e.b)})"
        return f"({print_texpr(e.a)} {e.op} {print_texpr(e.b)})"
    if isinstance(e, Unary):
        return f"{e.op}({print_texpr(e.x)})"
    if isinstance(e, Call):
        return f"{e.name}({', '.join(print_texpr(a) for a in e.args)})"
    if isinstance(e, Extern):
        return f"extern {e.name}({', '.join(print_texpr(a) for a in e.args)}) -> {e.dtype}"
    if isinstance(e, Span):
        return f"&{e.buffer.name}[{print_texpr(e.start)} : +{print_texpr(e.extent)}]"
    if isinstance(e, Cast):
        return f"{e.dtype}({print_texpr(e.x)})"
    if isinstance(e, Select):
        return f"select({print_texpr(e.cond)}, {print_texpr(e.a)}, {print_texpr(e.b)})"
    raise TypeError(f"cannot print {e!r}")


def print_kernel(func: PrimFunc) -> str:
    lines: list[str] = []

    def emit(depth: int, text: str) -> None:
        lines.append("    " * depth + text)

    def stmts(body, depth):
        for s in body:
            if isinstance(s, Declare):
                emit(depth, f"{s.var.name}: {s.var.dtype} = {print_texpr(s.value)}")
            elif isinstance(s, Assign):
                emit(depth, f"{s.var.name} = {print_texpr(s.value)}")
            elif isinstance(s, Store):
                emit(depth, f"{s.buffer.name}[{print_texpr(s.index)}] = {print_texpr(s.value)}")
            elif isinstance(s, Evaluate):
                emit(depth, print_texpr(s.value))
            elif isinstance(s, IfThen):
                emit(depth, f"if {print_texpr(s.cond)}:")
                stmts(s.then, depth + 1)
                if s.otherwise:
                    emit(depth, "else:")
                    stmts(s.otherwise, depth + 1)
            elif isinstance(s, For):
                kind = "unroll" if s.unroll else "range"
                step = f", step={s.step}" if s.step != 1 else ""
                emit(depth, f"for {s.var.name} in {kind}({print_texpr(s.start)}, "
                     f"{print_texpr(s.stop)}{step}):")
                stmts(s.body, depth + 1)
            elif isinstance(s, ThreadLoop):
                emit(depth, f"for {s.var.name} in threads({s.threads}):")
                stmts(s.body, depth + 1)
            elif isinstance(s, Barrier):
                emit(depth, "barrier()" if s.scope == "workgroup" else f"barrier({s.scope!r})")
            else:
                raise TypeError(f"cannot print {s!r}")

    def buf(b):
        shape = ", ".join(arith.to_source(d) for d in b.shape)
        return f"{b.name}: {b.dtype}[{shape}]"

    emit(0, f"kernel {func.name}(")
    for b in func.inputs:
        emit(1, f"in {buf(b)},")
    for b in func.outputs:
        emit(1, f"out {buf(b)},")
    for s in func.scalars:
        emit(1, f"{s}: i32,")
    grid = ", ".join(arith.to_source(g) for g in func.grid)
    emit(0, f") workgroup_size={func.workgroup_size} grid=({grid}):")
    for b in func.scratch:
        emit(1, f"{b.scope} {buf(b)}")
    stmts(func.body, 1)
    return "\n".join(lines) + "\n"
