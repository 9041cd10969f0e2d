"""Parse a ``@T.prim_func`` definition of a module script back into a ``PrimFunc``.

The syntax and the rules for bare literals and bare names are those of the printer,
``tessera.tir.script``, whose tables this module shares. Nodes are built as they are written,
with no folding, so that printing and parsing give back an equal kernel. Errors carry the line
and column and quote the offending line.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Any

from .. import arith
from ..arith.parse import parse_expr
from ..ir.errors import ScriptError
from ..tir.ir import (
    INDEX,
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
from ..tir.script import (
    AXES,
    DEFAULT_STORAGE,
    RESERVED,
    SUBGROUP_BUILTINS,
    SYMBOLS,
    THREAD_BUILTINS,
    anchor_dtype,
    is_dtype,
    literal_dtype,
    natural_dtype,
)
from .syntax import PrimParser, column, dotted

_PY_OPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.Mod: "%", ast.BitAnd: "&",
           ast.BitOr: "|", ast.BitXor: "^", ast.LShift: "<<", ast.RShift: ">>", ast.Lt: "<", ast.LtE: "<=",
           ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!=", ast.And: "&&", ast.Or: "||"}
assert set(_PY_OPS.values()) == set(SYMBOLS)
_NONFINITE = {"inf": float("inf"), "-inf": float("-inf"), "nan": float("nan")}


def is_prim_func(node: ast.FunctionDef) -> bool:
    return any(dotted(d.func if isinstance(d, ast.Call) else d) == "T.prim_func" for d in node.decorator_list)


def parse_prim_func(node: ast.FunctionDef, lines: list[str]) -> PrimFunc:
    """``lines``: the script's lines, for quoting in errors."""
    return _KernelParser(node, lines).parse()


@dataclass(frozen=True)
class _Literal:
    """A bare literal before its context gives it a dtype."""

    value: Any


def _resolve(value: TExpr | _Literal, context: str | None) -> TExpr:
    if isinstance(value, _Literal):
        return Const(value.value, context or literal_dtype(value.value))
    return value


class _KernelParser:
    def __init__(self, node: ast.FunctionDef, lines: list[str]):
        self.node = node
        self.lines = lines
        self.buffers: dict[str, Buffer] = {}
        self.scope: dict[str, str] = {}  # as the printer's: the dtype each bare name stands for
        self.prims = PrimParser(None)

    def fail(self, node: ast.AST, problem: str) -> ScriptError:
        line = getattr(node, "lineno", None)
        quoted = self.lines[line - 1].strip() if line is not None and 0 < line <= len(self.lines) else ""
        return ScriptError(f"{problem} in `{quoted}`" if quoted else problem, line, column(node))

    # -- header -----------------------------------------------------------------------

    def parse(self) -> PrimFunc:
        node = self.node
        name = self._decorator()
        args = node.args
        if args.vararg or args.kwarg or args.kwonlyargs or args.posonlyargs or args.defaults:
            raise self.fail(node, "kernel parameters are plain `name: annotation` pairs")
        inputs, outputs, scalars = [], [], []
        for arg in args.args:
            kind = dotted(arg.annotation.func) if isinstance(arg.annotation, ast.Call) else dotted(arg.annotation)
            if kind == f"T.{INDEX}":
                scalars.append(arg.arg)
                self.scope[SCALAR_PREFIX + arg.arg] = INDEX
                continue
            if kind not in ("T.Input", "T.Output"):
                raise self.fail(arg, f"kernel parameter '{arg.arg}' needs T.Input(...), T.Output(...) or T.i32")
            buffer = self._buffer(arg.arg, arg.annotation, DEFAULT_STORAGE.get(self._dtype_of(arg.annotation)))
            (inputs if kind == "T.Input" else outputs).append(buffer)
        body = list(node.body)
        if not body or not self._is_call(body[0], "T.launch"):
            raise self.fail(body[0] if body else node,
                            "a kernel starts with T.launch(grid=(...), workgroup_size=(...))")
        grid, workgroup_size = self._launch(body.pop(0).value)
        attrs: dict = {}
        if body and self._is_call(body[0], "T.func_attr"):
            call = body.pop(0).value
            if len(call.args) != 1 or call.keywords or not isinstance(call.args[0], ast.Dict):
                raise self.fail(call, "T.func_attr takes one dict")
            attrs = self._value(call.args[0])
        scratch = []
        while body and isinstance(body[0], ast.Assign) and isinstance(body[0].value, ast.Call) \
                and dotted(body[0].value.func) == "T.alloc_buffer":
            stmt = body.pop(0)
            if len(stmt.targets) != 1 or not isinstance(stmt.targets[0], ast.Name):
                raise self.fail(stmt, "a scratch buffer is bound to one name")
            scratch.append(self._buffer(stmt.targets[0].id, stmt.value, ""))
        return PrimFunc(name, tuple(inputs), tuple(outputs), tuple(scalars), self._block(body), workgroup_size,
                        grid, tuple(scratch), attrs)

    def _decorator(self) -> str:
        for decorator in self.node.decorator_list:
            if isinstance(decorator, ast.Call):
                if decorator.args or [k.arg for k in decorator.keywords] != ["name"]:
                    raise self.fail(decorator, '@T.prim_func takes only name="..."')
                return self._string(decorator.keywords[0].value)
        return self.node.name

    def _dtype_of(self, call: ast.AST) -> str | None:
        if isinstance(call, ast.Call) and len(call.args) >= 2 and isinstance(call.args[1], ast.Constant):
            return call.args[1].value
        return None

    def _buffer(self, name: str, call: ast.AST, default_storage: str | None) -> Buffer:
        constructor = dotted(call.func) if isinstance(call, ast.Call) else dotted(call)
        if not isinstance(call, ast.Call) or len(call.args) != 2 or not isinstance(call.args[0], (ast.Tuple, ast.List)):
            raise self.fail(call, f"{constructor} takes a shape tuple and a dtype: {constructor}((n, 4), \"f32\")")
        shape = tuple(self._prim(d) for d in call.args[0].elts)
        dtype = self._dtype(call.args[1])
        options = {"scope": "workgroup" if constructor == "T.alloc_buffer" else "global", "storage": default_storage}
        for kw in call.keywords:
            if kw.arg not in options:
                raise self.fail(kw, f"{constructor} has no argument '{kw.arg}'")
            options[kw.arg] = self._string(kw.value)
        if constructor == "T.alloc_buffer" and not any(kw.arg == "scope" for kw in call.keywords):
            raise self.fail(call, 'a scratch buffer names its scope: scope="workgroup" or "private"')
        if options["storage"] is None:
            raise self.fail(call, f"a {dtype} buffer names the tensor dtype it holds: storage=\"...\"")
        if name in self.buffers:
            raise self.fail(call, f"buffer '{name}' is declared twice")
        self.buffers[name] = Buffer(name, dtype, shape, options["scope"], options["storage"])
        return self.buffers[name]

    def _launch(self, call: ast.Call):
        found = {kw.arg: kw.value for kw in call.keywords}
        if call.args or set(found) != {"grid", "workgroup_size"}:
            raise self.fail(call, "T.launch takes grid=(x, y, z) and workgroup_size=(x, y, z)")
        grid, size = found["grid"], found["workgroup_size"]
        if not (isinstance(grid, ast.Tuple) and len(grid.elts) == 3):
            raise self.fail(grid, "the grid has three dimensions")
        if not (isinstance(size, ast.Tuple) and len(size.elts) == 3
                and all(isinstance(e, ast.Constant) and type(e.value) is int for e in size.elts)):
            raise self.fail(size, "the workgroup size is three integers")
        return tuple(self._prim(g) for g in grid.elts), tuple(e.value for e in size.elts)

    # -- statements ---------------------------------------------------------------------

    def _block(self, stmts: list[ast.stmt]) -> tuple[Stmt, ...]:
        out: list[Stmt] = []
        for stmt in stmts:
            if not isinstance(stmt, ast.Pass):
                out.append(self._stmt(stmt))
        return tuple(out)

    def _stmt(self, stmt: ast.stmt) -> Stmt:
        value = getattr(stmt, "value", None)
        if isinstance(value, ast.Call) and dotted(value.func) in ("T.launch", "T.func_attr", "T.alloc_buffer"):
            raise self.fail(stmt, "T.launch, T.func_attr and T.alloc_buffer come first in a kernel, in this order")
        if isinstance(stmt, ast.AnnAssign):
            if not isinstance(stmt.target, ast.Name) or stmt.value is None:
                raise self.fail(stmt, "a declaration is `name: T.<dtype> = value`")
            dtype = self._annotation_dtype(stmt.annotation)
            return self._declare(stmt.target.id, dtype, stmt.value)
        if isinstance(stmt, ast.Assign):
            if len(stmt.targets) != 1:
                raise self.fail(stmt, "assign one target per statement")
            target = stmt.targets[0]
            if isinstance(target, ast.Name):
                if target.id not in self.scope:
                    raise self.fail(target, f"'{target.id}' is not declared; declare it with "
                                    f"`{target.id}: T.i32 = ...` (or the dtype it holds)")
                var = Local(target.id, self.scope[target.id])
                return Assign(var, self._expr(stmt.value, var.dtype))
            if isinstance(target, ast.Subscript):
                buffer, lanes = self._view(target.value)
                index = self._expr(target.slice, INDEX)
                return Store(buffer, index, self._expr(stmt.value, vector_of(buffer.dtype, lanes)), lanes)
            raise self.fail(stmt, "assign to a local (`name = ...`) or a buffer element (`buf[i] = ...`)")
        if isinstance(stmt, ast.If):
            cond = self._expr(stmt.test, "bool")
            return IfThen(cond, self._block(stmt.body), self._block(stmt.orelse))
        if isinstance(stmt, ast.For):
            return self._for(stmt)
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
            name = dotted(stmt.value.func)
            call = stmt.value
            if name == "T.barrier":
                if call.keywords or len(call.args) > 1:
                    raise self.fail(call, 'T.barrier takes at most a scope: T.barrier("storage")')
                return Barrier(self._string(call.args[0])) if call.args else Barrier()
            if name == "T.evaluate":
                self._arity(call, 1)
                return Evaluate(self._expr(call.args[0]))
            if name == "T.assign":
                self._arity(call, 2)
                var = self._expr(call.args[0])
                if not isinstance(var, Local):
                    raise self.fail(call, "T.assign assigns to a local: T.assign(T.var(\"name\", \"f32\"), value)")
                return Assign(var, self._expr(call.args[1], var.dtype))
            if name == "T.declare":
                self._arity(call, 3)
                return self._declare(self._string(call.args[0]), self._dtype(call.args[1]), call.args[2])
        raise self.fail(stmt, f"unexpected statement in a kernel ({type(stmt).__name__})")

    def _declare(self, name: str, dtype: str, value: ast.AST) -> Declare:
        stmt = Declare(Local(name, dtype), self._expr(value, dtype))
        self.scope[name] = dtype
        return stmt

    def _for(self, stmt: ast.For) -> For | ThreadLoop:
        loop = stmt.iter
        kind = dotted(loop.func) if isinstance(loop, ast.Call) else None
        if not isinstance(stmt.target, ast.Name) or kind not in ("T.serial", "T.unroll", "T.threads") or stmt.orelse:
            raise self.fail(stmt, "loops are `for i in T.serial(start, stop):`, T.unroll(...) or T.threads(count)")
        if kind == "T.threads":  # each thread of the workgroup in turn (tessera.tir.lower.split_workgroups)
            if len(loop.args) != 1 or loop.keywords:
                raise self.fail(loop, "T.threads takes the workgroup's thread count")
            self.scope[stmt.target.id] = INDEX
            return ThreadLoop(Local(stmt.target.id), self._int(loop.args[0]), self._block(stmt.body))
        if len(loop.args) != 2:
            raise self.fail(loop, f"{kind} takes start and stop, then optionally step= and dtype=")
        options: dict[str, Any] = {"step": 1, "dtype": INDEX}
        for kw in loop.keywords:
            if kw.arg == "step":
                options["step"] = self._int(kw.value)
            elif kw.arg == "dtype":
                options["dtype"] = self._dtype(kw.value)
            else:
                raise self.fail(kw, f"{kind} has no argument '{kw.arg}'")
        var = Local(stmt.target.id, options["dtype"])
        start, stop = (self._expr(a, var.dtype) for a in loop.args)
        self.scope[var.name] = var.dtype
        return For(var, start, stop, self._block(stmt.body), options["step"], kind == "T.unroll")

    # -- expressions --------------------------------------------------------------------

    def _expr(self, node: ast.AST, context: str | None = None) -> TExpr:
        """An expression; a bare literal gets ``context`` as its dtype (None: its Python type's)."""
        return _resolve(self._operand(node), context)

    def _operands(self, nodes) -> list[TExpr]:
        values = [self._operand(n) for n in nodes]
        context = anchor_dtype([v for v in values if not isinstance(v, _Literal)])
        return [_resolve(v, context) for v in values]

    def _operand(self, node: ast.AST):
        """An expression, or a bare literal still without a dtype."""
        if isinstance(node, ast.Constant) and literal_dtype(node.value) is not None:
            return _Literal(node.value)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            inner = node.operand
            if isinstance(inner, ast.Constant) and type(inner.value) in (int, float):
                return _Literal(-inner.value)
            return self._unary("neg", self._expr(inner), None)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            return self._unary("not", self._expr(node.operand), None)
        if isinstance(node, ast.BinOp) and type(node.op) in _PY_OPS:
            return self._binary(_PY_OPS[type(node.op)], node.left, node.right, None)
        if isinstance(node, ast.Compare):
            if len(node.ops) != 1 or type(node.ops[0]) not in _PY_OPS:
                raise self.fail(node, "compare two values at a time: (a < b) and (b < c)")
            return self._binary(_PY_OPS[type(node.ops[0])], node.left, node.comparators[0], None)
        if isinstance(node, ast.BoolOp):
            op = _PY_OPS[type(node.op)]
            result = self._binary(op, node.values[0], node.values[1], None)
            for more in node.values[2:]:
                right = self._expr(more, "bool")
                result = Binary(op, result, right, natural_dtype(op, result))
            return result
        if isinstance(node, ast.Name):
            if node.id not in self.scope:
                what = "a buffer; index it" if node.id in self.buffers else "not declared"
                raise self.fail(node, f"'{node.id}' is {what}")
            return Local(node.id, self.scope[node.id])
        if isinstance(node, ast.Subscript):
            buffer, lanes = self._view(node.value)
            return Load(buffer, self._expr(node.slice, INDEX), lanes)
        if isinstance(node, ast.Attribute):
            return self._builtin(node)
        if isinstance(node, ast.Call):
            return self._call(node)
        raise self.fail(node, f"unexpected expression in a kernel ({type(node).__name__})")

    def _view(self, node: ast.AST) -> tuple[Buffer, int]:
        lanes = 1
        if isinstance(node, ast.Attribute) and node.attr.startswith("vec") and node.attr[3:].isdigit():
            node, lanes = node.value, int(node.attr[3:])
        if not isinstance(node, ast.Name) or node.id not in self.buffers:
            raise self.fail(node, f"unknown buffer '{dotted(node) or ast.unparse(node)}'")
        return self.buffers[node.id], lanes

    def _builtin(self, node: ast.Attribute) -> Builtin:
        name = dotted(node) or ""
        parts = name.split(".")
        if len(parts) == 3 and parts[0] == "T" and parts[1] in THREAD_BUILTINS and parts[2] in AXES:
            return Builtin(parts[1], AXES.index(parts[2]))
        if len(parts) == 2 and parts[0] == "T" and parts[1] in SUBGROUP_BUILTINS:
            return Builtin(parts[1], 0)
        raise self.fail(node, f"unknown name '{name}'; thread indices are T.local_id.x, T.workgroup_id.y, "
                        "T.num_workgroups.z, T.subgroup_size, T.subgroup_invocation_id")

    def _binary(self, op: str, left: ast.AST, right: ast.AST, dtype: str | None) -> Binary:
        a, b = self._operands((left, right))
        return Binary(op, a, b, dtype or natural_dtype(op, a))

    def _unary(self, op: str, x: TExpr, dtype: str | None) -> Unary:
        return Unary(op, x, dtype or x.dtype)

    def _call(self, node: ast.Call) -> TExpr:
        name = dotted(node.func)
        if name is None or not name.startswith("T.") or name.count(".") != 1:
            raise self.fail(node, f"unknown function '{name or ast.unparse(node.func)}'; kernels call T.<intrinsic>")
        name = name[2:]
        keywords = {kw.arg: kw.value for kw in node.keywords}
        dtype = self._dtype(keywords.pop("dtype")) if "dtype" in keywords else None
        if keywords:
            raise self.fail(node, f"T.{name} has no argument '{next(iter(keywords))}'")
        args = node.args
        if is_dtype(name) or name == "const":
            return self._const(node, name)
        if name in ("min", "max"):
            self._arity(node, 2)
            return self._binary(name, args[0], args[1], dtype)
        if name == "binary":
            self._arity(node, 3)
            return self._binary(self._string(args[0]), args[1], args[2], dtype)
        if name in ("neg", "unary"):
            self._arity(node, 1 if name == "neg" else 2)
            op = "neg" if name == "neg" else self._string(args[0])
            return self._unary(op, self._expr(args[-1]), dtype)
        if name == "cast":
            self._arity(node, 2)
            return Cast(self._expr(args[0]), self._dtype(args[1]))
        if name == "select":
            self._arity(node, 3)
            cond = self._expr(args[0], "bool")
            a, b = self._operands(args[1:])
            return Select(cond, a, b, dtype or a.dtype)
        if name == "var":
            self._arity(node, 2)
            return Local(self._string(args[0]), self._dtype(args[1]))
        if name == "builtin":
            self._arity(node, 3)
            return Builtin(self._string(args[0]), self._int(args[1]), self._dtype(args[2]))
        if name == "call_extern":
            if len(args) < 2:
                raise self.fail(node, 'T.call_extern names the dtype and the function first: '
                                'T.call_extern("f32", "name", args...)')
            operands = tuple(self._expr(a, INDEX) for a in args[2:])
            result = "void" if self._string(args[0]) == "void" else self._dtype(args[0])
            return Extern(self._string(args[1]), operands, result)
        if name == "address_of":
            self._arity(node, 3)
            buffer, lanes = self._view(args[0])
            if lanes != 1:
                raise self.fail(node, "T.address_of takes a buffer, not a vector view of one")
            return Span(buffer, self._expr(args[1], INDEX), self._expr(args[2], INDEX))
        if name == "call":
            if not args:
                raise self.fail(node, 'T.call names the intrinsic first: T.call("name", args...)')
            return self._intrinsic(self._string(args[0]), args[1:], dtype, force_call=True)
        if name in RESERVED:
            raise self.fail(node, f"T.{name}(...) is not an expression")
        return self._intrinsic(name, args, dtype)

    def _intrinsic(self, name: str, args, dtype: str | None, force_call: bool = False) -> TExpr:
        operands = self._operands(args)
        if len(operands) == 1 and not force_call:
            return self._unary(name, operands[0], dtype)
        return Call(name, tuple(operands), dtype or (operands[0].dtype if operands else INDEX))

    def _const(self, node: ast.Call, name: str) -> Const:
        if name == "const":
            self._arity(node, 2)
            return Const(self._value(node.args[0]), self._dtype(node.args[1]))
        self._arity(node, 1)
        arg = node.args[0]
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
            if arg.value not in _NONFINITE:
                raise self.fail(arg, f"T.{name} takes a number, or \"inf\", \"-inf\" or \"nan\"")
            return Const(_NONFINITE[arg.value], name)
        value = self._operand(arg)
        if not isinstance(value, _Literal):
            raise self.fail(arg, f"T.{name}(...) is a constant; convert a value with T.cast(x, \"{name}\")")
        return Const(value.value, name)

    # -- pieces -------------------------------------------------------------------------

    def _arity(self, node: ast.Call, count: int) -> None:
        if len(node.args) != count:
            raise self.fail(node, f"{dotted(node.func)} takes {count} argument{'s' if count != 1 else ''}")

    def _is_call(self, stmt: ast.stmt, name: str) -> bool:
        return isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call) and dotted(stmt.value.func) == name

    def _string(self, node: ast.AST) -> str:
        if not (isinstance(node, ast.Constant) and isinstance(node.value, str)):
            raise self.fail(node, "expected a string")
        return node.value

    def _int(self, node: ast.AST) -> int:
        value = self._value(node)
        if type(value) is not int:
            raise self.fail(node, "expected an integer")
        return value

    def _dtype(self, node: ast.AST) -> str:
        dtype = self._string(node)
        if not is_dtype(dtype):
            raise self.fail(node, f"unknown dtype '{dtype}'; kernel dtypes are f32, f16, f64, i32, u32, bool "
                            "and vectors such as f32x4")
        return dtype

    def _annotation_dtype(self, node: ast.AST) -> str:
        name = dotted(node)
        if name is None or not name.startswith("T.") or not is_dtype(name[2:]):
            raise self.fail(node, "a local's annotation is its dtype: T.f32, T.i32, T.u32, T.f32x4 ...")
        return name[2:]

    def _prim(self, node: ast.AST) -> arith.PrimExpr:
        try:
            return self.prims.parse(node)
        except ScriptError as error:
            raise self.fail(node, str(error).split(": ", 1)[-1]) from None

    def _value(self, node: ast.AST):
        """An attribute value: a Python literal with tuples kept as tuples."""
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Tuple):
            return tuple(self._value(e) for e in node.elts)
        if isinstance(node, ast.List):
            return [self._value(e) for e in node.elts]
        if isinstance(node, ast.Dict) and None not in node.keys:
            return {self._value(k): self._value(v) for k, v in zip(node.keys, node.values)}
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant) \
                and type(node.operand.value) in (int, float):
            return -node.operand.value
        if isinstance(node, ast.Call) and dotted(node.func) == "float" and len(node.args) == 1 \
                and isinstance(node.args[0], ast.Constant) and node.args[0].value in _NONFINITE:
            return _NONFINITE[node.args[0].value]
        if isinstance(node, ast.Call) and dotted(node.func) == "T.prim_expr" and len(node.args) == 1:
            try:
                return parse_expr(self._string(node.args[0]))
            except ValueError as error:
                raise self.fail(node, str(error)) from None
        raise self.fail(node, "expected a literal value")
