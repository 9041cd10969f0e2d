"""The kernel verifier: accesses in bounds, barriers in uniform control flow.

``verify_kernel(func, sizes)`` checks, for one assignment of the symbolic
sizes, that every access to a parameter or scratch buffer stays inside it,
for every thread of every workgroup the grid launches. It runs an interval
analysis over the kernel: thread and workgroup indices range over the launch,
loop variables over their loops, and an ``if a < b`` narrows ``a`` inside.
An access it cannot prove in bounds is an error; a kernel passes only when
its indexing is in bounds by construction (clamps, modulo) or guarded.

Barriers must be reached by all threads of a workgroup together: a barrier
under an ``if`` or inside a loop whose condition depends on the thread's
index (``local_id``) is an error, whatever the sizes.
"""

from __future__ import annotations

from .. import arith
from ..arith import Interval
from .ir import (
    SCALAR_PREFIX,
    Assign,
    Barrier,
    Binary,
    Buffer,
    Builtin,
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
    binary,
    walk_expr,
)


class KernelVerifyError(ValueError):
    """A kernel that may read or write outside a buffer, or that may deadlock at a barrier."""


def verify_kernel(func: PrimFunc, sizes: dict[str, int] | None = None) -> None:
    sizes = dict(sizes or {})
    _check_names(func)
    _check_barriers(func)
    grid = [arith.evaluate(g, sizes) for g in func.grid]
    env: dict[str, Interval] = {f"{SCALAR_PREFIX}{name}": Interval.point(sizes[name]) for name in func.scalars}
    checker = _BoundsChecker(func, sizes, grid)
    checker.stmts(func.body, env)


def _check_names(func: PrimFunc) -> None:
    """A local is declared once in its scope, and not under a buffer's or a scalar's name."""
    taken = {b.name for b in func.params + func.scratch} | {f"{SCALAR_PREFIX}{name}" for name in func.scalars}

    def walk(body, scope: set[str]):
        scope = set(scope)
        for s in body:
            if isinstance(s, (Declare, For, ThreadLoop)):
                name = s.var.name
                if name in scope:
                    raise KernelVerifyError(f"kernel {func.name}: '{name}' is declared twice")
                if isinstance(s, Declare):
                    scope.add(name)
                else:
                    walk(s.body, scope | {name})
            elif isinstance(s, IfThen):
                walk(s.then, scope)
                walk(s.otherwise, scope)

    walk(func.body, taken)


# -- barriers --------------------------------------------------------------------------


def _check_barriers(func: PrimFunc) -> None:
    varying: set[str] = set()

    def thread_dependent(e: TExpr) -> bool:
        return any(isinstance(x, Builtin) and x.kind == "local_id" or isinstance(x, Local) and x.name in varying
                   or isinstance(x, (Load, Extern)) for x in walk_expr(e))

    def walk(body, divergent: str | None):
        for s in body:
            if isinstance(s, Declare) and thread_dependent(s.value):
                varying.add(s.var.name)
            elif isinstance(s, Assign) and thread_dependent(s.value):
                varying.add(s.var.name)
            elif isinstance(s, Barrier) and divergent:
                raise KernelVerifyError(f"kernel {func.name}: barrier under {divergent}, which depends on the "
                                        "thread index: threads of a workgroup could wait forever")
            elif isinstance(s, IfThen):
                cause = divergent or (f"`if {_text(s.cond)}`" if thread_dependent(s.cond) else None)
                walk(s.then, cause)
                walk(s.otherwise, cause)
            elif isinstance(s, For):
                bound_varies = thread_dependent(s.start) or thread_dependent(s.stop)
                if bound_varies:
                    varying.add(s.var.name)
                cause = divergent or (f"loop `{s.var.name}`" if bound_varies else None)
                walk(s.body, cause)
            elif isinstance(s, ThreadLoop):
                varying.add(s.var.name)
                walk(s.body, divergent or f"thread loop `{s.var.name}`")

    walk(func.body, None)


def _key(e: TExpr) -> str | None:
    """The name under which an if can narrow ``e``: locals and thread indices."""
    if isinstance(e, Local):
        return e.name
    if isinstance(e, Builtin):
        return f"{e.kind}.{e.axis}"
    return None


# The comparison that holds where another one fails.
NEGATED = {"<": ">=", "<=": ">", ">": "<=", ">=": "<"}


def _negated(cond: TExpr) -> TExpr | None:
    if isinstance(cond, Binary) and cond.op in NEGATED:
        return binary(NEGATED[cond.op], cond.a, cond.b)
    return None


def _text(e: TExpr) -> str:
    from .script import print_texpr

    return print_texpr(e)


# -- bounds ----------------------------------------------------------------------------


class _BoundsChecker:
    def __init__(self, func: PrimFunc, sizes: dict[str, int], grid: list[int]):
        self.func, self.sizes, self.grid = func, sizes, grid

    def size_of(self, buf: Buffer) -> int:
        return arith.evaluate(buf.size, self.sizes)

    def stmts(self, body, env: dict[str, Interval]) -> None:
        for s in body:
            if isinstance(s, Declare):
                self.check_reads(s.value, env)
                env[s.var.name] = self.interval(s.value, env)
            elif isinstance(s, Assign):
                self.check_reads(s.value, env)
                if s.var.name in env:
                    env[s.var.name] = env[s.var.name].union(self.interval(s.value, env))
            elif isinstance(s, Store):
                self.check_reads(s.index, env)
                self.check_reads(s.value, env)
                self.check_access(s.buffer, s.index, env, "write", s.lanes)
            elif isinstance(s, Evaluate):
                self.check_reads(s.value, env)
            elif isinstance(s, IfThen):
                self.check_reads(s.cond, env)
                self.stmts(s.then, self.narrow(s.cond, dict(env)))
                otherwise = _negated(s.cond)  # `else` of `if col < 64`: col >= 64 there
                self.stmts(s.otherwise, self.narrow(otherwise, dict(env)) if otherwise is not None else dict(env))
            elif isinstance(s, For):
                start, stop = self.interval(s.start, env), self.interval(s.stop, env)
                inner = dict(env)
                inner[s.var.name] = Interval(start.lo, None if stop.hi is None else stop.hi - 1)
                # Locals assigned in the loop may take any value they reach; two passes widen them.
                self.stmts(s.body, inner)
                self.stmts(s.body, inner)
                for name in env:
                    env[name] = inner[name]
            elif isinstance(s, ThreadLoop):
                inner = dict(env)
                inner[s.var.name] = Interval(0, s.threads - 1)
                self.stmts(s.body, inner)
                self.stmts(s.body, inner)
                for name in env:
                    env[name] = inner[name]

    def narrow(self, cond: TExpr, env: dict[str, Interval]) -> dict[str, Interval]:
        if isinstance(cond, Binary) and cond.op == "&&":
            return self.narrow(cond.b, self.narrow(cond.a, env))
        if isinstance(cond, Binary) and cond.op in ("<", "<=") and _key(cond.a) is not None:
            bound = self.interval(cond.b, env)
            if bound.hi is not None:
                hi = bound.hi - 1 if cond.op == "<" else bound.hi
                old = self.interval(cond.a, env)
                env[_key(cond.a)] = Interval(old.lo, hi if old.hi is None else min(old.hi, hi))
        if isinstance(cond, Binary) and cond.op in (">", ">=") and _key(cond.a) is not None:
            bound = self.interval(cond.b, env)
            if bound.lo is not None:
                lo = bound.lo + 1 if cond.op == ">" else bound.lo
                old = self.interval(cond.a, env)
                env[_key(cond.a)] = Interval(lo if old.lo is None else max(old.lo, lo), old.hi)
        return env

    def check_reads(self, e: TExpr, env) -> None:
        for x in walk_expr(e):
            if isinstance(x, Load):
                self.check_access(x.buffer, x.index, env, "read", x.lanes)
            elif isinstance(x, Span):  # a micro-kernel's whole range: its first and its last element
                if x.buffer.scope == "global" and x.buffer in self.func.outputs:
                    raise KernelVerifyError(f"kernel {self.func.name}: the output {x.buffer.name} is passed to a "
                                            f"micro-kernel; kernels store their outputs themselves (a binding's "
                                            f"access is known from its stores)")
                extent = self.interval(x.extent, env)
                if extent.lo is None or extent.lo < 1:
                    raise KernelVerifyError(f"kernel {self.func.name}: the span of {x.buffer.name} at "
                                            f"[{_text(x.start)}] may be empty or negative")
                self.check_access(x.buffer, x.start, env, "span")
                self.check_access(x.buffer, binary("-", binary("+", x.start, x.extent), Const(1)), env, "span")

    def check_access(self, buf: Buffer, index: TExpr, env, kind: str, lanes: int = 1) -> None:
        size = self.size_of(buf) // lanes  # a vector access indexes groups of ``lanes`` elements
        got = self.interval(index, env)
        if got.lo is None or got.hi is None or got.lo < 0 or got.hi >= size:
            where = ", ".join(f"{k} = {v}" for k, v in self.sizes.items()) or "static sizes"
            raise KernelVerifyError(
                f"kernel {self.func.name}: {kind} of {buf.name}[{_text(index)}] may fall outside "
                f"[0, {size}) (index in [{got.lo}, {got.hi}] with {where})")

    def interval(self, e: TExpr, env) -> Interval:
        if isinstance(e, Const):
            return Interval.point(int(e.value)) if e.dtype in ("i32", "u32") else Interval()
        if isinstance(e, Local):
            return env.get(e.name, Interval())
        if isinstance(e, Builtin):
            axis = e.axis
            if _key(e) in env:  # narrowed by an enclosing if
                return env[_key(e)]
            if e.kind == "local_id":
                return Interval(0, self.func.workgroup_size[axis] - 1)
            if e.kind == "workgroup_id":
                return Interval(0, max(self.grid[axis] - 1, 0))
            if e.kind == "subgroup_size":  # WebGPU subgroups hold 4 to 128 invocations
                return Interval(4, 128)
            if e.kind == "subgroup_invocation_id":
                return Interval(0, 127)
            return Interval.point(self.grid[axis])
        if isinstance(e, Cast):
            return self.interval(e.x, env) if e.dtype == "i32" and e.x.dtype == "i32" else Interval()
        if isinstance(e, Select):
            return self.interval(e.a, env).union(self.interval(e.b, env))
        if isinstance(e, Binary):
            a, b = self.interval(e.a, env), self.interval(e.b, env)
            if e.op == "+":
                return a + b
            if e.op == "-":
                return a + b.scale(-1)
            if e.op == "*":
                return a * b
            if e.op == "min":
                return a.minimum(b)
            if e.op == "max":
                return a.maximum(b)
            if e.op == "/" and b.lo is not None and b.lo > 0 and a.lo is not None and a.lo >= 0:
                return Interval(a.lo // b.hi if b.hi else 0, None if a.hi is None else a.hi // b.lo)
            if e.op == ">>" and b.is_point and a.lo is not None and a.lo >= 0:
                return Interval(a.lo >> b.lo, None if a.hi is None else a.hi >> b.lo)
            if e.op == "<<" and b.is_point and a.lo is not None and a.lo >= 0:
                return Interval(a.lo << b.lo, None if a.hi is None else a.hi << b.lo)
            if e.op == "&" and b.is_point and b.lo >= 0:
                return Interval(0, b.lo if a.hi is None or a.lo is None or a.lo < 0 else min(a.hi, b.lo))
            if e.op == "%" and b.lo is not None and b.lo > 0 and a.lo is not None and a.lo >= 0:
                hi = None if b.hi is None else b.hi - 1
                if a.hi is not None:
                    hi = a.hi if hi is None else min(hi, a.hi)
                return Interval(0, hi)
        return Interval()

