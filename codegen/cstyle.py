"""The C-style kernel renderer that C, OpenCL C, MSL and WGSL share.

A target language is a subclass that fills in small tables and a few hooks:
type names, how thread coordinates and barriers are written, the kernel's
signature and buffer declarations. Expressions and statements are walked here,
once, and the hooks' defaults spell C (locals, loops, literals, helper
functions), which OpenCL C and MSL keep and WGSL overrides.

Renderers only spell: they take kernels lowered for their language
(``tessera.tir.lower.lower_kernel`` with the subclass's ``lowering`` row), in
which storage types, unrolling and (for CPUs) the split at barriers are
already explicit tir.
"""

from __future__ import annotations

import math

from tessera.tir.ir import (
    COMPARISONS,
    LOGICAL,
    Assign,
    Barrier,
    Binary,
    Buffer,
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
    Stmt,
    Store,
    TExpr,
    Unary,
    lanes_of,
    vector_of,
)
from tessera.tir.lower import LoweringNeeds

from . import CodegenError

# Integer division rounding toward negative infinity (numpy's //), for languages whose / truncates.
# INT32 is the language's name for a 32-bit int.
FLOORDIV = """static inline INT32 tsr_floordiv(INT32 a, INT32 b) {
  INT32 q = a / b;
  return (a % b != 0) && ((a < 0) != (b < 0)) ? q - 1 : q;
}"""

# erf by Abramowitz & Stegun 7.1.26 (|error| < 1.5e-7), for languages without one:
# erf(x) = sign(x) * (1 - (a1 t - a2 t^2 + a3 t^3 - a4 t^4 + a5 t^5) exp(-x^2)), t = 1 / (1 + p |x|).
# Magnitudes; a2 and a4 enter with a minus sign. A language's erf helper names them ERF_P, ERF_A1 ...
ERF_CONSTANTS = {"ERF_P": "0.3275911", "ERF_A1": "0.254829592", "ERF_A2": "0.284496736", "ERF_A3": "1.421413741",
                 "ERF_A4": "1.453152027", "ERF_A5": "1.061405429"}


def helper_text(template: str, **names: str) -> str:
    """``template`` with each NAME replaced (a helper function's name, its types, ERF_CONSTANTS)."""
    for name, text in names.items():
        template = template.replace(name, text)
    return template


class CStyleRenderer:
    language = "C"  # for messages
    types: dict[str, str] = {}
    intrinsics: dict[str, str] = {}  # tir name -> target function name
    # tir builtin kind -> its spelling, with {axis} (0, 1, 2) or {xyz} (x, y, z) for the axis
    builtins: dict[str, str] = {}
    reserved: frozenset[str] = frozenset()
    barrier = "barrier();"
    storage_barrier = "barrier();"
    indent = "  "
    # `if ((a == b))` draws clang's "extraneous parentheses" warning: dialects clang checks with
    # -Werror write a comparison's condition without its own pair.
    bare_conditions = False
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
        self.used_builtins: set[str] = set()  # builtin kinds the kernel reads

    def error(self, message: str) -> CodegenError:
        return CodegenError(f"kernel {self.func.name}: {message}")

    # -- hooks for dialects (defaults spell C) ----------------------------------------

    def render(self) -> str:
        raise NotImplementedError

    def declare_local(self, var: Local, value: str) -> str:
        return f"{self.type_name(var.dtype)} {self.name(var.name)} = {value};"

    def for_header(self, var: str, start: str, end: str, step: int) -> str:
        return f"for ({self.types['i32']} {var} = {start}; {var} < {end}; {var} += {step})"

    def condition(self, e: TExpr) -> str:
        """The text inside ``if (...)``."""
        text = self.expr(e)
        if self.bare_conditions and isinstance(e, Binary) and e.op in COMPARISONS + LOGICAL:
            return text[1:-1]  # the walk parenthesizes every binary expression
        return text

    def builtin(self, e: Builtin) -> str:
        if e.kind not in self.builtins:
            raise self.error(f"{self.language} has no builtin {e.kind}")
        self.used_builtins.add(e.kind)
        return self.builtins[e.kind].format(axis=e.axis, xyz="xyz"[e.axis])

    def literal(self, value, dtype: str) -> str:
        scalar, lanes = lanes_of(dtype)
        if lanes > 1:
            return self.splat(self.literal(value, scalar), dtype)
        if dtype == "bool":
            return "true" if value else "false"
        if dtype == "i32":
            # A cast, not a bare negative literal: -2147483648 is the negation of a wider integer.
            return f"(({self.types['i32']}){int(value)})" if value < 0 else str(int(value))
        if dtype == "u32":
            return f"{int(value)}u"
        return self.float_literal(float(value), dtype)

    def float_literal(self, value: float, dtype: str) -> str:
        text = float_text(value)
        if text is None:
            return "NAN" if value != value else ("INFINITY" if value > 0 else "(-INFINITY)")
        return f"{text}f" if not text.startswith("-") else f"({text}f)"

    def splat(self, scalar: str, dtype: str) -> str:
        """A vector of ``dtype`` with ``scalar`` (literal text) in every lane."""
        return f"{self.type_name(dtype)}({scalar})"

    def floordiv_helper(self) -> str:
        return helper_text(FLOORDIV, INT32=self.types["i32"])

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

    def f32_helper_call(self, name: str, template: str, arg: str, dtype: str) -> str:
        """A call of the helper function ``template`` (a language's erf or tanh) computed in f32: one
        helper per lane count, named ``tsr_<name>[_v<lanes>]``; an f16 value is widened, then narrowed."""
        scalar, lanes = lanes_of(dtype)
        wide = self.type_name(vector_of("f32", lanes))
        fn = f"tsr_{name}" + ("" if lanes == 1 else f"_v{lanes}")
        self.helpers[fn] = helper_text(template, NAME=fn, TYPE=wide, **ERF_CONSTANTS)
        if scalar == "f16":
            return f"{self.type_name(dtype)}({fn}({wide}({arg})))"
        return f"{fn}({arg})"

    def call_intrinsic(self, name: str, args: list[str], dtype: str) -> str:
        if name == "floordiv" and name not in self.intrinsics:
            self.helpers["tsr_floordiv"] = self.floordiv_helper()
            return f"tsr_floordiv({args[0]}, {args[1]})"
        if name not in self.intrinsics:
            raise self.error(f"{self.language} has no intrinsic {name!r}")
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
        if isinstance(e, Extern):
            return self.extern_call(e.name, [self.expr(a) for a in e.args])
        if isinstance(e, Span):
            return f"(&{self.load(e.buffer, self.expr(e.start), 1)})"
        raise TypeError(f"cannot render {e!r}")

    def extern_call(self, name: str, args: list[str]) -> str:
        """A micro-kernel of the backend's library; a language without one refuses the kernel by name."""
        raise self.error(f"{self.language} has no micro-kernel {name!r} (a rule for another target chose it)")

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
        elif isinstance(s, Evaluate):
            self.emit(depth, f"(void){self.expr(s.value)};")
        elif isinstance(s, IfThen):
            self.emit(depth, f"if ({self.condition(s.cond)}) {{")
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
