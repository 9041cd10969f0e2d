"""The C-style kernel renderer that WGSL (and later MSL, OpenCL C and C) share.

A target language is a subclass that fills in small tables and a few hooks:
type names, literal spelling, how a local is declared, how thread indices and
barriers are written, and the kernel's signature and buffer declarations.
Expressions and statements are walked here, once.

Renderers only spell: they take kernels lowered for their language
(``tessera.tir.lower.lower_kernel`` with the subclass's ``lowering`` row), in
which storage types, unrolling and (for CPUs) the split at barriers are
already explicit tir.
"""

from __future__ import annotations

import math

from tessera.tir.ir import (
    Assign,
    Barrier,
    Binary,
    Buffer,
    Builtin,
    Call,
    Cast,
    Const,
    Declare,
    For,
    IfThen,
    Load,
    Local,
    PrimFunc,
    Select,
    Stmt,
    Store,
    TExpr,
    Unary,
    lanes_of,
)
from tessera.tir.lower import LoweringNeeds


class CStyleRenderer:
    types: dict[str, str] = {}
    intrinsics: dict[str, str] = {}  # tir name -> target function name
    reserved: frozenset[str] = frozenset()
    barrier = "barrier();"
    storage_barrier = "barrier();"
    indent = "  "
    lowering: LoweringNeeds  # what the language needs done before it is rendered

    def __init__(self, func: PrimFunc):
        for buf in func.params:
            if buf.storage_dtype not in self.lowering.storage_types:
                raise ValueError(f"kernel {func.name}: {buf.name} holds {buf.storage_dtype} tensors, which "
                                 f"{type(self).__name__} cannot store: lower the kernel first "
                                 "(tessera.tir.lower.lower_kernel)")
        self.func = func
        self.lines: list[str] = []
        self.helpers: dict[str, str] = {}  # helper functions the kernel needs, by name

    # -- hooks for dialects ---------------------------------------------------------

    def render(self) -> str:
        raise NotImplementedError

    def declare_local(self, var: Local, value: str) -> str:
        raise NotImplementedError

    def for_header(self, var: str, start: str, end: str, step: int) -> str:
        raise NotImplementedError

    def builtin(self, e: Builtin) -> str:
        raise NotImplementedError

    def literal(self, value, dtype: str) -> str:
        raise NotImplementedError

    def shift_count(self, e: TExpr, text: str) -> str:
        return text

    def select(self, cond: str, a: str, b: str) -> str:
        return f"({cond} ? {a} : {b})"

    def cast(self, x: str, dtype: str, source_dtype: str) -> str:
        return f"{self.type_name(dtype)}({x})"

    def type_name(self, dtype: str) -> str:
        scalar, lanes = lanes_of(dtype)
        return self.types[scalar] if lanes == 1 else self.vector_type(self.types[scalar], lanes)

    def vector_type(self, scalar: str, lanes: int) -> str:
        raise NotImplementedError

    def load(self, buffer: Buffer, index: str, lanes: int = 1) -> str:
        return f"{self.name(buffer.name)}[{index}]"

    def store(self, buffer: Buffer, index: str, value: str, lanes: int = 1) -> str:
        return f"{self.name(buffer.name)}[{index}] = {value};"

    def call_intrinsic(self, name: str, args: list[str], dtype: str) -> str:
        if name not in self.intrinsics:
            raise NotImplementedError(f"{type(self).__name__} has no intrinsic {name!r}")
        return f"{self.intrinsics[name]}({', '.join(args)})"

    # -- shared walk ----------------------------------------------------------------

    def name(self, name: str) -> str:
        return name + "_" if name in self.reserved else name

    def expr(self, e: TExpr) -> str:
        if isinstance(e, Const):
            return self.literal(e.value, e.dtype)
        if isinstance(e, Local):
            return self.name(e.name)
        if isinstance(e, Builtin):
            return self.builtin(e)
        if isinstance(e, Load):
            return self.load(e.buffer, self.expr(e.index), e.lanes)
        if isinstance(e, Binary):
            a, b = self.expr(e.a), self.expr(e.b)
            if e.op in ("min", "max"):
                return f"{e.op}({a}, {b})"
            if e.op in ("<<", ">>"):
                b = self.shift_count(e.b, b)
            return f"({a} {e.op} {b})"
        if isinstance(e, Unary):
            if e.op == "neg":
                return f"(-{self.expr(e.x)})"
            if e.op == "not":
                return f"(!{self.expr(e.x)})"
            return self.call_intrinsic(e.op, [self.expr(e.x)], e.dtype)
        if isinstance(e, Call):
            return self.call_intrinsic(e.name, [self.expr(a) for a in e.args], e.dtype)
        if isinstance(e, Cast):
            return self.cast(self.expr(e.x), e.dtype, e.x.dtype)
        if isinstance(e, Select):
            return self.select(self.expr(e.cond), self.expr(e.a), self.expr(e.b))
        raise TypeError(f"cannot render {e!r}")

    def emit(self, depth: int, text: str) -> None:
        self.lines.append(self.indent * depth + text)

    def stmts(self, body: tuple[Stmt, ...], depth: int) -> None:
        for s in body:
            self.stmt(s, depth)

    def stmt(self, s: Stmt, depth: int) -> None:
        if isinstance(s, Declare):
            self.emit(depth, self.declare_local(s.var, self.expr(s.value)))
        elif isinstance(s, Assign):
            self.emit(depth, f"{self.name(s.var.name)} = {self.expr(s.value)};")
        elif isinstance(s, Store):
            self.emit(depth, self.store(s.buffer, self.expr(s.index), self.expr(s.value), s.lanes))
        elif isinstance(s, IfThen):
            self.emit(depth, f"if ({self.expr(s.cond)}) {{")
            self.stmts(s.then, depth + 1)
            if s.otherwise:
                self.emit(depth, "} else {")
                self.stmts(s.otherwise, depth + 1)
            self.emit(depth, "}")
        elif isinstance(s, For):
            start = self.expr(s.start)
            end = self.expr(s.stop)
            self.emit(depth, self.for_header(self.name(s.var.name), start, end, s.step) + " {")
            self.stmts(s.body, depth + 1)
            self.emit(depth, "}")
        elif isinstance(s, Barrier):
            self.emit(depth, self.storage_barrier if s.scope == "storage" else self.barrier)
        else:
            raise TypeError(f"cannot render {s!r}")


def float_text(value: float) -> str | None:
    """Decimal text of a finite float that reads back exactly; None for inf/nan."""
    if math.isnan(value) or math.isinf(value):
        return None
    text = repr(float(value))
    return text if any(c in text for c in ".e") else text + ".0"
