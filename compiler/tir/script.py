"""Kernels as tir script: the one text of a kernel. ``func.script()`` prints it, ``IRModule.script()``
prints it inside a module, and ``tessera.script`` parses it back (compiler/script/tir_parser.py).
``func.script(brief=True)`` cuts a long body short, for reading; error messages quote expressions
in the same spelling (``print_texpr``).

The text has one parameter per line, then the launch, the attributes and the scratch buffers, then
one line per statement, and it spells every fact the kernel holds: storage dtypes, attributes,
constant dtypes, vector lanes, unrolling. The rules that decide how a fact is spelled live here,
and the parser imports them, so that the two sides cannot drift apart:

- A constant is a bare Python literal (``3``, ``0.5``, ``True``) when its dtype is the one its
  context gives it: the declared dtype of the local it initializes, the buffer's dtype for a
  stored value, ``i32`` for an index, ``bool`` for a condition, and for an operand of an
  operator the dtype of the first operand that is not a constant (``x & 255`` is a u32 mask when
  ``x`` is u32). Without such an operand, a literal has its Python type's dtype (int ``i32``,
  float ``f32``, bool ``bool``). Any other constant names its dtype: ``T.f16(0.5)``,
  ``T.f32("inf")``.
- A local is its bare name when the innermost preceding declaration of that name (a declared
  local, a loop variable, or ``sym_<scalar>`` for a scalar parameter) gives it the same dtype;
  otherwise ``T.var("name", "dtype")``.
- An operator whose result dtype is not the natural one (bool for comparisons and logic, the
  first operand's otherwise) adds ``dtype="..."``.
"""

from __future__ import annotations

import json
import keyword
import math

from .. import arith
from .ir import (
    COMPARISONS,
    INDEX,
    LOGICAL,
    SCALAR_DTYPES,
    SCALAR_PREFIX,
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
    ThreadLoop,
    Unary,
    vector_of,
)

INDENT = "    "
AXES = "xyz"
# Operators written with Python's own symbols; min and max are T.min / T.max.
SYMBOLS = {"+": "+", "-": "-", "*": "*", "/": "/", "%": "%", "&": "&", "|": "|", "^": "^", "<<": "<<",
           ">>": ">>", "<": "<", "<=": "<=", ">": ">", ">=": ">=", "==": "==", "!=": "!=",
           "&&": "and", "||": "or"}
THREAD_BUILTINS = ("local_id", "workgroup_id", "num_workgroups")
SUBGROUP_BUILTINS = ("subgroup_size", "subgroup_invocation_id")
# The tensor dtype a parameter of each kernel dtype holds unless it says otherwise.
DEFAULT_STORAGE = {"f32": "float32", "f16": "float16", "f64": "float64", "i32": "int32", "u32": "uint32",
                   "bool": "bool"}
# Names the format gives a meaning under T.; an intrinsic with one of them is written T.unary / T.call.
RESERVED = {"prim_func", "Input", "Output", "launch", "func_attr", "alloc_buffer", "serial", "unroll", "threads",
            "barrier", "assign", "declare", "var", "const", "builtin", "unary", "binary", "call", "cast",
            "select", "neg", "min", "max", "prim_expr", "call_extern", "address_of", "evaluate",
            *THREAD_BUILTINS, *SUBGROUP_BUILTINS}


def is_dtype(name: str) -> bool:
    """"f32", "u32", "f32x4": a scalar dtype with an optional lane count."""
    scalar, _, lanes = name.partition("x")
    return scalar in SCALAR_DTYPES and (not lanes or (lanes.isdigit() and int(lanes) > 1 and lanes[0] != "0"))


def is_name(name: str) -> bool:
    return name.isidentifier() and not keyword.iskeyword(name)


def literal_dtype(value) -> str | None:
    """The dtype a bare literal has on its own; None for values that cannot be bare."""
    if type(value) is bool:
        return "bool"
    if type(value) is int:
        return INDEX
    if type(value) is float and math.isfinite(value):
        return "f32"
    return None


def anchor_dtype(operands) -> str | None:
    """The dtype bare literals among ``operands`` take: that of the first non-constant operand."""
    for operand in operands:
        if not isinstance(operand, Const):
            return operand.dtype
    return None


def natural_dtype(op: str, first: TExpr | None) -> str:
    if op in COMPARISONS or op in LOGICAL:
        return "bool"
    return first.dtype if first is not None else INDEX


def is_intrinsic_name(name: str) -> bool:
    """An intrinsic that may be written ``T.name(...)``."""
    return is_name(name) and name not in RESERVED and not is_dtype(name)


def print_value(value) -> str:
    """An attribute value or a constant: Python literal syntax, tuples kept apart from lists."""
    if value is None or isinstance(value, bool):
        return repr(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return 'float("nan")'
        if math.isinf(value):
            return 'float("inf")' if value > 0 else 'float("-inf")'
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, tuple):
        inner = ", ".join(print_value(v) for v in value)
        return f"({inner},)" if len(value) == 1 else f"({inner})"
    if isinstance(value, list):
        return "[" + ", ".join(print_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{print_value(k)}: {print_value(v)}" for k, v in value.items()) + "}"
    if isinstance(value, arith.PrimExpr):
        return f"T.prim_expr({json.dumps(arith.to_source(value))})"
    raise TypeError(f"tir script cannot print the value {value!r} ({type(value).__name__})")


def print_prim(expr) -> str:
    return arith.to_source(expr, "T.")


# The statement lines ``brief`` keeps of a kernel's body; the header is always whole.
BRIEF_LINES = 12


def print_prim_func(func: PrimFunc, name: str | None = None, depth: int = 0, brief: bool = False) -> str:
    """``func`` as a ``@T.prim_func`` definition named ``name`` (its module name), indented ``depth`` levels.
    ``brief``: the header and the first ``BRIEF_LINES`` lines of the body, then a comment that counts
    the rest (a text for reading, which the parser does not take)."""
    printer = _KernelPrinter(func)
    printer.kernel(name or func.name, depth)
    lines = printer.lines
    if brief and len(lines) > printer.body_start + BRIEF_LINES:
        cut = printer.body_start + BRIEF_LINES
        lines = lines[:cut] + [f"{INDENT * (depth + 1)}# ... {len(lines) - cut} more lines"]
    return "\n".join(lines) + "\n"


def print_texpr(e: TExpr) -> str:
    """One expression in the kernel text's spelling, for error messages: locals by their bare names."""
    return _ExprQuoter().expr(e, top=True)


class _KernelPrinter:
    def __init__(self, func: PrimFunc):
        self.func = func
        self.lines: list[str] = []
        self.body_start = 0  # the first line of the body, once the header is printed
        # The dtype each bare name stands for, in printing order (the parser keeps the same table).
        self.scope: dict[str, str] = {SCALAR_PREFIX + s: INDEX for s in func.scalars}

    def emit(self, depth: int, text: str) -> None:
        self.lines.append(INDENT * depth + text)

    # -- header -----------------------------------------------------------------------

    def kernel(self, name: str, depth: int) -> None:
        func = self.func
        self.emit(depth, "@T.prim_func" if name == func.name else f"@T.prim_func(name={json.dumps(func.name)})")
        self.emit(depth, f"def {name}(")
        for b in func.inputs:
            self.emit(depth + 1, f"{b.name}: {self.buffer(b, 'T.Input', DEFAULT_STORAGE.get(b.dtype))},")
        for b in func.outputs:
            self.emit(depth + 1, f"{b.name}: {self.buffer(b, 'T.Output', DEFAULT_STORAGE.get(b.dtype))},")
        for s in func.scalars:
            self.emit(depth + 1, f"{s}: T.{INDEX},")
        self.emit(depth, "):")
        grid = ", ".join(print_prim(g) for g in func.grid)
        size = ", ".join(str(s) for s in func.workgroup_size)
        self.emit(depth + 1, f"T.launch(grid=({grid}), workgroup_size=({size}))")
        if func.attrs:
            self.emit(depth + 1, f"T.func_attr({print_value(dict(func.attrs))})")
        for b in func.scratch:
            self.emit(depth + 1, f"{b.name} = {self.buffer(b, 'T.alloc_buffer', '')}")
        self.body_start = len(self.lines)
        self.block(func.body, depth + 1)

    def buffer(self, b: Buffer, constructor: str, default_storage: str | None) -> str:
        if not is_name(b.name):
            raise ValueError(f"tir script: buffer name {b.name!r} is not an identifier")
        dims = [print_prim(d) for d in b.shape]
        shape = "(" + ", ".join(dims) + ("," if len(dims) == 1 else "") + ")"
        parts = [shape, json.dumps(b.dtype)]
        if constructor == "T.alloc_buffer" or b.scope != "global":
            parts.append(f"scope={json.dumps(b.scope)}")
        if b.storage_dtype != default_storage:
            parts.append(f"storage={json.dumps(b.storage_dtype)}")
        return f"{constructor}({', '.join(parts)})"

    # -- statements ---------------------------------------------------------------------

    def block(self, body, depth: int) -> None:
        if not body:
            self.emit(depth, "pass")
        for s in body:
            self.stmt(s, depth)

    def stmt(self, s: Stmt, depth: int) -> None:
        if isinstance(s, Declare):
            value = self.expr(s.value, s.var.dtype, top=True)
            if is_name(s.var.name) and is_dtype(s.var.dtype):
                self.emit(depth, f"{s.var.name}: T.{s.var.dtype} = {value}")
            else:
                self.emit(depth, f"T.declare({json.dumps(s.var.name)}, {json.dumps(s.var.dtype)}, {value})")
            self.scope[s.var.name] = s.var.dtype
        elif isinstance(s, Assign):
            value = self.expr(s.value, s.var.dtype, top=True)
            if self.bare(s.var):
                self.emit(depth, f"{s.var.name} = {value}")
            else:
                self.emit(depth, f"T.assign({self.local(s.var)}, {value})")
        elif isinstance(s, Store):
            index = self.expr(s.index, INDEX, top=True)
            value = self.expr(s.value, vector_of(s.buffer.dtype, s.lanes), top=True)
            self.emit(depth, f"{self.view(s.buffer, s.lanes)}[{index}] = {value}")
        elif isinstance(s, IfThen):
            self.emit(depth, f"if {self.expr(s.cond, 'bool', top=True)}:")
            self.block(s.then, depth + 1)
            if s.otherwise:
                self.emit(depth, "else:")
                self.block(s.otherwise, depth + 1)
        elif isinstance(s, For):
            if not is_name(s.var.name):
                raise ValueError(f"tir script: loop variable {s.var.name!r} is not an identifier")
            args = [self.expr(s.start, s.var.dtype, top=True), self.expr(s.stop, s.var.dtype, top=True)]
            if s.step != 1:
                args.append(f"step={s.step!r}")
            if s.var.dtype != INDEX:
                args.append(f"dtype={json.dumps(s.var.dtype)}")
            self.scope[s.var.name] = s.var.dtype
            self.emit(depth, f"for {s.var.name} in T.{'unroll' if s.unroll else 'serial'}({', '.join(args)}):")
            self.block(s.body, depth + 1)
        elif isinstance(s, ThreadLoop):  # tessera.tir.lower.split_workgroups' form of a workgroup's threads
            if not is_name(s.var.name):
                raise ValueError(f"tir script: thread variable {s.var.name!r} is not an identifier")
            self.scope[s.var.name] = s.var.dtype
            self.emit(depth, f"for {s.var.name} in T.threads({s.threads}):")
            self.block(s.body, depth + 1)
        elif isinstance(s, Barrier):
            self.emit(depth, "T.barrier()" if s.scope == "workgroup" else f"T.barrier({json.dumps(s.scope)})")
        elif isinstance(s, Evaluate):
            self.emit(depth, f"T.evaluate({self.expr(s.value, top=True)})")
        else:
            raise TypeError(f"tir script cannot print the statement {s!r}")

    # -- expressions --------------------------------------------------------------------

    def bare(self, var: Local) -> bool:
        return is_name(var.name) and self.scope.get(var.name) == var.dtype

    def local(self, var: Local) -> str:
        return var.name if self.bare(var) else f"T.var({json.dumps(var.name)}, {json.dumps(var.dtype)})"

    def view(self, b: Buffer, lanes: int) -> str:
        return b.name if lanes == 1 else f"{b.name}.vec{lanes}"

    def expr(self, e: TExpr, context: str | None = None, top: bool = False) -> str:
        """``context``: the dtype a bare literal here would have (None: its Python type's);
        ``top``: a whole statement operand, which needs no parentheses."""
        if isinstance(e, Const):
            return self.const(e, context)
        if isinstance(e, Local):
            return self.local(e)
        if isinstance(e, Builtin):
            return self.builtin(e)
        if isinstance(e, Load):
            return f"{self.view(e.buffer, e.lanes)}[{self.expr(e.index, INDEX, top=True)}]"
        if isinstance(e, Binary):
            return self.binary(e, top)
        if isinstance(e, Unary):
            return self.unary(e)
        if isinstance(e, Call):
            args = self.operands(e.args)
            extra = self.dtype_keyword(e.dtype, e.args[0].dtype if e.args else INDEX)
            if is_intrinsic_name(e.name) and len(e.args) != 1:
                return f"T.{e.name}({', '.join(args + extra)})"
            return f"T.call({', '.join([json.dumps(e.name)] + args + extra)})"
        if isinstance(e, Cast):
            return f"T.cast({self.expr(e.x, top=True)}, {json.dumps(e.dtype)})"
        if isinstance(e, Extern):  # TVM's spelling: the result's dtype, the function, its arguments
            args = [self.expr(a, INDEX, top=True) for a in e.args]
            return f"T.call_extern({', '.join([json.dumps(e.dtype), json.dumps(e.name)] + args)})"
        if isinstance(e, Span):
            return (f"T.address_of({e.buffer.name}, {self.expr(e.start, INDEX, top=True)}, "
                    f"{self.expr(e.extent, INDEX, top=True)})")
        if isinstance(e, Select):
            args = [self.expr(e.cond, "bool", top=True)] + self.operands((e.a, e.b))
            return f"T.select({', '.join(args + self.dtype_keyword(e.dtype, e.a.dtype))})"
        raise TypeError(f"tir script cannot print the expression {e!r}")

    def const(self, e: Const, context: str | None) -> str:
        kind = literal_dtype(e.value)
        if kind is not None and e.dtype == (context or kind):
            return print_value(e.value)
        value = e.value
        if type(value) is float and not math.isfinite(value):
            text = json.dumps(repr(value))
        elif kind is not None:
            text = print_value(value)
        else:
            return f"T.const({print_value(value)}, {json.dumps(e.dtype)})"
        return f"T.{e.dtype}({text})" if is_dtype(e.dtype) else f"T.const({text}, {json.dumps(e.dtype)})"

    def builtin(self, e: Builtin) -> str:
        if e.dtype == INDEX and e.kind in THREAD_BUILTINS and 0 <= e.axis < 3:
            return f"T.{e.kind}.{AXES[e.axis]}"
        if e.dtype == INDEX and e.kind in SUBGROUP_BUILTINS and e.axis == 0:
            return f"T.{e.kind}"
        return f"T.builtin({json.dumps(e.kind)}, {e.axis}, {json.dumps(e.dtype)})"

    def operands(self, operands, top: bool = True) -> list[str]:
        """Operands of one operator: bare literals among them take the first other operand's dtype.
        ``top``: they are separated by commas (a call's arguments), not by an infix symbol."""
        context = anchor_dtype(operands)
        return [self.expr(x, context, top) for x in operands]

    def dtype_keyword(self, dtype: str, natural: str) -> list[str]:
        return [] if dtype == natural else [f"dtype={json.dumps(dtype)}"]

    def binary(self, e: Binary, top: bool) -> str:
        extra = self.dtype_keyword(e.dtype, natural_dtype(e.op, e.a))
        if e.op in SYMBOLS and not extra:
            a, b = self.operands((e.a, e.b), top=False)
            text = f"{a} {SYMBOLS[e.op]} {b}"
            return text if top else f"({text})"
        args = self.operands((e.a, e.b)) + extra
        if e.op in ("min", "max"):
            return f"T.{e.op}({', '.join(args)})"
        return f"T.binary({', '.join([json.dumps(e.op)] + args)})"

    def unary(self, e: Unary) -> str:
        extra = self.dtype_keyword(e.dtype, e.x.dtype)
        if e.op in ("neg", "not") and not extra:
            x = self.expr(e.x)
            if e.op == "not":
                return f"(not {x})"
            # ``-0.5`` is a negative literal, so the negation of a literal is spelled out.
            return f"T.neg({x})" if isinstance(e.x, Const) and not x.startswith("T.") else f"-{x}"
        x = self.expr(e.x, top=True)
        if is_intrinsic_name(e.op):
            return f"T.{e.op}({', '.join([x] + extra)})"
        return f"T.unary({', '.join([json.dumps(e.op), x] + extra)})"


class _ExprQuoter(_KernelPrinter):
    """The expression printer outside any kernel: every local that is a name is written bare."""

    def __init__(self):
        self.lines, self.scope = [], {}

    def bare(self, var: Local) -> bool:
        return is_name(var.name)
