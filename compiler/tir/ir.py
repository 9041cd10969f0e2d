"""Loop-level kernels: typed scalar expressions, statements, buffers, PrimFunc.

A kernel (``PrimFunc``) is a loop nest over flat buffers whose shapes are
symbolic (``tessera.arith`` expressions). It is written once here; every
backend is a printer of it. Index arithmetic is 32-bit signed (``i32``), which
every GPU language has and which covers any tensor a WebGPU binding can hold.

Expressions carry a dtype. Statements are few: declare/assign a local
variable, store to a buffer, if, for, barrier, sequence. Workgroup and thread
indices are expressions (``Builtin``); loops are serial (the schedule rules
map work to threads themselves), optionally marked for unrolling. One more
statement, ``ThreadLoop``, exists only after lowering (``tessera.tir.lower``)
for languages that run a workgroup's threads one after another.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .. import arith

INDEX = "i32"
SCALAR_DTYPES = ("f32", "f16", "f64", "i32", "u32", "bool")
# Float kernel types. f64 exists only where a language has doubles (C); GPU targets refuse float64
# tensors before any kernel is written (Target.supports_dtype).
FLOAT_DTYPES = ("f32", "f16", "f64")


def is_float(dtype: str) -> bool:
    """Whether the kernel type ``dtype`` (or a vector of it) is a float."""
    return lanes_of(dtype)[0] in FLOAT_DTYPES


def vector_of(dtype: str, lanes: int) -> str:
    """"f32" with 4 lanes is "f32x4": vector dtypes are scalar dtypes with a lane count."""
    return dtype if lanes == 1 else f"{dtype}x{lanes}"


def lanes_of(dtype: str) -> tuple[str, int]:
    if "x" in dtype:
        scalar, lanes = dtype.split("x")
        return scalar, int(lanes)
    return dtype, 1


class TExpr:
    __slots__ = ()
    dtype: str

    # Operators build nodes, so schedule rules read like the math they emit.
    def __add__(self, other):
        return binary("+", self, other)

    def __radd__(self, other):
        return binary("+", other, self)

    def __sub__(self, other):
        return binary("-", self, other)

    def __rsub__(self, other):
        return binary("-", other, self)

    def __mul__(self, other):
        return binary("*", self, other)

    def __rmul__(self, other):
        return binary("*", other, self)

    def __truediv__(self, other):
        return binary("/", self, other)

    def __mod__(self, other):
        return binary("%", self, other)

    def __lt__(self, other):
        return binary("<", self, other)

    def __le__(self, other):
        return binary("<=", self, other)

    def __gt__(self, other):
        return binary(">", self, other)

    def __ge__(self, other):
        return binary(">=", self, other)


@dataclass(frozen=True, eq=False)
class Const(TExpr):
    value: Any
    dtype: str = INDEX


@dataclass(frozen=True, eq=False)
class Local(TExpr):
    """A named scalar: loop variable, local variable or kernel scalar parameter."""

    name: str
    dtype: str = INDEX


@dataclass(frozen=True, eq=False)
class Builtin(TExpr):
    """Thread coordinates: ``local_id``, ``workgroup_id``, ``num_workgroups`` along ``axis``;
    with subgroups, ``subgroup_size`` and ``subgroup_invocation_id`` (axis 0)."""

    kind: str
    axis: int
    dtype: str = INDEX


@dataclass(frozen=True, eq=False)
class Load(TExpr):
    """``buffer[index]``; with ``lanes`` > 1, the index counts groups of that many elements."""

    buffer: Buffer
    index: TExpr
    lanes: int = 1

    @property
    def dtype(self) -> str:
        return vector_of(self.buffer.dtype, self.lanes)


@dataclass(frozen=True, eq=False)
class Binary(TExpr):
    op: str  # + - * / % min max < <= > >= == != && ||
    a: TExpr
    b: TExpr
    dtype: str = INDEX


@dataclass(frozen=True, eq=False)
class Unary(TExpr):
    op: str  # neg, not, or a math intrinsic: exp log sqrt ...
    x: TExpr
    dtype: str = INDEX


@dataclass(frozen=True, eq=False)
class Cast(TExpr):
    x: TExpr
    dtype: str = INDEX


@dataclass(frozen=True, eq=False)
class Select(TExpr):
    cond: TExpr
    a: TExpr  # when cond holds
    b: TExpr
    dtype: str = INDEX


@dataclass(frozen=True, eq=False)
class Call(TExpr):
    """A math or subgroup intrinsic with several operands (pow, subgroup_add ...)."""

    name: str
    args: tuple[TExpr, ...]
    dtype: str = INDEX


@dataclass(frozen=True, eq=False)
class Span(TExpr):
    """The address of ``buffer[start]``, through which an ``Extern`` reads (or, for private scratch,
    writes) the ``extent`` elements ``buffer[start : start + extent]``; the verifier checks that
    whole range. Only an argument of an ``Extern`` (TVM's ``address_of``)."""

    buffer: Buffer
    start: TExpr
    extent: TExpr
    dtype: str = "handle"


@dataclass(frozen=True, eq=False)
class Extern(TExpr):
    """A call of a micro-kernel of the backend's kernel library (TVM's ``call_extern``): integer SIMD
    dot products no portable C loop turns into the instructions they need. A rule emits one only
    for targets whose kind lists ``name`` in ``TargetKind.externs``; a language without it refuses
    the kernel by name. Its ``Span`` arguments are the only memory it touches."""

    name: str
    args: tuple[TExpr, ...]
    dtype: str = "f32"


COMPARISONS = ("<", "<=", ">", ">=", "==", "!=")
LOGICAL = ("&&", "||")


def const(value, dtype: str = INDEX) -> Const:
    return Const(value, dtype)


def as_texpr(value, dtype: str = INDEX) -> TExpr:
    if isinstance(value, TExpr):
        return value
    if isinstance(value, arith.PrimExpr):
        return from_prim(value)
    if isinstance(value, bool):
        return Const(value, "bool")
    return Const(value, dtype)


def binary(op: str, a, b) -> TExpr:
    a = as_texpr(a, b.dtype if isinstance(b, TExpr) else INDEX)
    b = as_texpr(b, a.dtype)
    if a.dtype != b.dtype:
        raise TypeError(f"tir: {op} of {a.dtype} and {b.dtype}")
    dtype = "bool" if op in COMPARISONS or op in LOGICAL else a.dtype
    folded = _fold(op, a, b)
    if folded is not None:
        return folded
    return Binary(op, a, b, dtype)


def _fold(op: str, a: TExpr, b: TExpr) -> TExpr | None:
    """Constant folding and identities for index math; kernels stay readable."""
    if a.dtype != INDEX:
        return None
    ca = a.value if isinstance(a, Const) else None
    cb = b.value if isinstance(b, Const) else None
    if ca is not None and cb is not None:
        if op == "+":
            return Const(ca + cb)
        if op == "-":
            return Const(ca - cb)
        if op == "*":
            return Const(ca * cb)
        if op == "/" and cb > 0 and ca >= 0:
            return Const(ca // cb)
        if op == "%" and cb > 0 and ca >= 0:
            return Const(ca % cb)
        if op == "min":
            return Const(min(ca, cb))
        if op == "max":
            return Const(max(ca, cb))
        return None
    if op == "+" and cb == 0 or op == "-" and cb == 0 or op == "*" and cb == 1 or op == "/" and cb == 1:
        return a
    if op == "+" and ca == 0 or op == "*" and ca == 1:
        return b
    if op == "*" and (ca == 0 or cb == 0):
        return Const(0)
    if op == "%" and cb == 1:
        return Const(0)
    return None


def minimum(a, b) -> TExpr:
    return binary("min", a, b)


def maximum(a, b) -> TExpr:
    return binary("max", a, b)


def logical_and(a, b) -> TExpr:
    if isinstance(a, Const) and a.value is True:
        return b
    if isinstance(b, Const) and b.value is True:
        return a
    return Binary("&&", a, b, "bool")


def cast(x: TExpr, dtype: str) -> TExpr:
    if x.dtype == dtype:
        return x
    if isinstance(x, Const) and dtype in FLOAT_DTYPES:
        return Const(float(x.value), dtype)
    return Cast(x, dtype)


def select(cond, a, b) -> TExpr:
    return Select(cond, a, b, a.dtype)


def intrinsic(name: str, *args: TExpr) -> TExpr:
    if len(args) == 1:
        return Unary(name, args[0], args[0].dtype)
    return Call(name, tuple(args), args[0].dtype)


# Kernel scalar parameters live in their own namespace, so that a symbolic size
# named like a schedule's local (``m``, ``acc``) cannot collide with it.
SCALAR_PREFIX = "sym_"


def scalar_local(name: str) -> Local:
    return Local(SCALAR_PREFIX + name)


def from_prim(expr: arith.PrimExpr) -> TExpr:
    """A shape expression as i32 index math; its variables are kernel scalar parameters."""
    expr = arith.as_expr(expr)
    if isinstance(expr, arith.IntImm):
        return Const(expr.value)
    if isinstance(expr, arith.Var):
        return scalar_local(expr.name)
    ops = {arith.Add: "+", arith.Sub: "-", arith.Mul: "*", arith.FloorDiv: "/", arith.FloorMod: "%",
           arith.Min: "min", arith.Max: "max"}
    # Shape expressions are non-negative, where floor and truncating division agree.
    return binary(ops[type(expr)], from_prim(expr.a), from_prim(expr.b))


# -- statements -------------------------------------------------------------------


class Stmt:
    __slots__ = ()


@dataclass(frozen=True, eq=False)
class Declare(Stmt):
    """``var name: dtype = value`` (a mutable local)."""

    var: Local
    value: TExpr


@dataclass(frozen=True, eq=False)
class Assign(Stmt):
    var: Local
    value: TExpr


@dataclass(frozen=True, eq=False)
class Store(Stmt):
    buffer: Buffer
    index: TExpr
    value: TExpr
    lanes: int = 1


@dataclass(frozen=True, eq=False)
class Evaluate(Stmt):
    """``value`` for its effect: an ``Extern`` that fills private scratch through a ``Span``."""

    value: TExpr


@dataclass(frozen=True, eq=False)
class IfThen(Stmt):
    cond: TExpr
    then: tuple[Stmt, ...]
    otherwise: tuple[Stmt, ...] = ()


@dataclass(frozen=True, eq=False)
class For(Stmt):
    """``for (var = start; var < stop; var += step)``; ``unroll`` is a hint."""

    var: Local
    start: TExpr
    stop: TExpr
    body: tuple[Stmt, ...]
    step: int = 1
    unroll: bool = False


@dataclass(frozen=True, eq=False)
class ThreadLoop(Stmt):
    """``body`` once for each thread of the workgroup in turn, ``var`` the thread's flat index
    (0 .. ``threads`` - 1). Made by ``tessera.tir.lower.split_workgroups``: in a kernel of that
    form the top level runs once per workgroup, and each ThreadLoop is a stretch of the original
    body between two barriers."""

    var: Local
    threads: int
    body: tuple[Stmt, ...]


@dataclass(frozen=True, eq=False)
class Barrier(Stmt):
    """Workgroup barrier: memory of ``scope`` ("workgroup", or "storage" for buffers in
    device memory such as global scratch) written before it is visible after it."""

    scope: str = "workgroup"


# -- buffers and kernels ---------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class Buffer:
    """A flat array: a kernel parameter (scope "global"), or scratch in "workgroup"/"private".

    ``shape`` is symbolic for parameters (row-major, contiguous) and static for scratch.
    ``dtype`` is the element type as the kernel sees it. Where a language cannot hold
    ``storage_dtype`` (bool, int64), ``tessera.tir.lower.legalize_storage`` rewrites the
    buffer into 32-bit words; the rule lives in ``tessera.tir.lower.storage``.
    """

    name: str
    dtype: str
    shape: tuple[arith.PrimExpr, ...]
    scope: str = "global"
    storage_dtype: str = ""  # the tensor dtype it holds ("int64", "bool", "float16" ...)

    @property
    def size(self) -> arith.PrimExpr:
        total: arith.PrimExpr = arith.IntImm(1)
        for dim in self.shape:
            total = total * dim
        return arith.simplify(total)


@dataclass(frozen=True, eq=False)
class PrimFunc:
    """A compute kernel: buffers in and out, symbolic scalars, a body run by every thread.

    ``grid`` gives the number of workgroups along x, y, z as shape expressions of
    the scalar parameters; ``workgroup_size`` is static. A kernel that needs scratch
    in device memory declares it as trailing outputs, ``attrs["scratch_outputs"]`` of
    them: callers allocate them like any output, so scratch lives in the arena too.
    """

    name: str
    inputs: tuple[Buffer, ...]
    outputs: tuple[Buffer, ...]
    scalars: tuple[str, ...]
    body: tuple[Stmt, ...]
    workgroup_size: tuple[int, int, int]
    grid: tuple[arith.PrimExpr, arith.PrimExpr, arith.PrimExpr]
    scratch: tuple[Buffer, ...] = ()
    attrs: dict = field(default_factory=dict)

    @property
    def params(self) -> tuple[Buffer, ...]:
        return self.inputs + self.outputs

    def script(self, brief: bool = False) -> str:
        """The kernel as tir script (docs/script.md), the text that ``IRModule.script()`` holds and
        ``tessera.script`` parses back; ``brief``: the header and the start of the body only."""
        from .script import print_prim_func

        return print_prim_func(self, brief=brief)


# -- walking -----------------------------------------------------------------------------


def child_exprs(e: TExpr) -> tuple[TExpr, ...]:
    if isinstance(e, Load):
        return (e.index,)
    if isinstance(e, Binary):
        return (e.a, e.b)
    if isinstance(e, (Unary, Cast)):
        return (e.x,)
    if isinstance(e, Select):
        return (e.cond, e.a, e.b)
    if isinstance(e, (Call, Extern)):
        return e.args
    if isinstance(e, Span):
        return (e.start, e.extent)
    return ()


def map_children(e: TExpr, fn) -> TExpr:
    """``e`` with ``fn`` applied to each direct child expression (the index of a Load, the operands
    of an operator); leaves come back as they are. Rewrites recurse through it."""
    if isinstance(e, Load):
        return Load(e.buffer, fn(e.index), e.lanes)
    if isinstance(e, Binary):
        return Binary(e.op, fn(e.a), fn(e.b), e.dtype)
    if isinstance(e, Unary):
        return Unary(e.op, fn(e.x), e.dtype)
    if isinstance(e, Cast):
        return Cast(fn(e.x), e.dtype)
    if isinstance(e, Select):
        return Select(fn(e.cond), fn(e.a), fn(e.b), e.dtype)
    if isinstance(e, Call):
        return Call(e.name, tuple(fn(a) for a in e.args), e.dtype)
    if isinstance(e, Extern):
        return Extern(e.name, tuple(fn(a) for a in e.args), e.dtype)
    if isinstance(e, Span):
        return Span(e.buffer, fn(e.start), fn(e.extent))
    return e


def walk_expr(e: TExpr):
    """``e`` and every expression under it."""
    yield e
    for child in child_exprs(e):
        yield from walk_expr(child)


def walk_stmts(body):
    """Every statement, depth first, with the expressions it holds directly."""
    for s in body:
        if isinstance(s, (Declare, Assign, Evaluate)):
            yield s, (s.value,)
        elif isinstance(s, Store):
            yield s, (s.index, s.value)
        elif isinstance(s, IfThen):
            yield s, (s.cond,)
            yield from walk_stmts(s.then)
            yield from walk_stmts(s.otherwise)
        elif isinstance(s, For):
            yield s, (s.start, s.stop)
            yield from walk_stmts(s.body)
        elif isinstance(s, ThreadLoop):
            yield s, ()
            yield from walk_stmts(s.body)
        else:
            yield s, ()


def walk_dtypes(func: PrimFunc) -> set[str]:
    """Every scalar dtype the kernel computes with (buffers, locals, expressions)."""
    found = {b.dtype for b in func.params + func.scratch}
    for _, exprs in walk_stmts(func.body):
        for root in exprs:  # (a Span is an address, a void Extern no value: neither is a computed type)
            found.update(e.dtype for e in walk_expr(root) if not isinstance(e, Span) and e.dtype != "void")
    return found
