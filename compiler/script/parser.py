"""Parse the TVMScript-style text format back into an IRModule.

The text is Python syntax, so Python's own ``ast`` does the tokenizing and
reports syntax errors with positions; this module walks the tree and rebuilds
the IR through the ``BlockBuilder``, so parsed modules get exactly the same
deduction as built ones. Nothing in the text is executed.
"""

from __future__ import annotations

import ast
from typing import Any

import numpy as np

from .. import arith
from ..ir.builder import BlockBuilder
from ..ir.errors import ScriptError, TesseraError
from ..ir.expr import (
    Call,
    Constant,
    DataflowVar,
    Expr,
    ExternFunc,
    GlobalVar,
    PrimValue,
    ShapeExpr,
    StringImm,
    Tuple,
    TupleGetItem,
    Var,
)
from ..ir.module import IRModule, VDevice
from ..ir.printer import elided_weight
from ..ir.struct_info import FuncStructInfo, ObjectStructInfo, StructInfo
from ..op import registry
from .syntax import PrimParser, SinfoParser, column, dotted, fail, literal
from .tir_parser import is_prim_func, parse_prim_func


def from_source(text: str) -> IRModule:
    """Parse a script (as printed by ``IRModule.script()``) into an IRModule."""
    try:
        tree = ast.parse(text)
    except SyntaxError as error:
        raise ScriptError(f"invalid syntax: {error.msg}", error.lineno, error.offset) from None
    classes = [node for node in tree.body if isinstance(node, ast.ClassDef)]
    if len(classes) != 1:
        raise ScriptError("expected exactly one `@I.ir_module class ...:`", 1, 1)
    return _ModuleParser(classes[0], text.splitlines()).parse()


def _decorator_name(node: ast.AST) -> str | None:
    return dotted(node.func) if isinstance(node, ast.Call) else dotted(node)


class _ModuleParser:
    def __init__(self, cls: ast.ClassDef, lines: list[str]):
        self.cls = cls
        self.lines = lines
        if not any(_decorator_name(d) == "I.ir_module" for d in cls.decorator_list):
            raise fail(cls, f"class {cls.name} needs the @I.ir_module decorator")

    def parse(self) -> IRModule:
        functions: list[ast.FunctionDef] = []
        vdevices: list[VDevice] = []
        for stmt in self.cls.body:
            if isinstance(stmt, ast.FunctionDef):
                functions.append(stmt)
            elif isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call) \
                    and dotted(stmt.value.func) == "I.module_global_infos":
                vdevices.extend(self._global_infos(stmt.value))
            elif isinstance(stmt, ast.Pass):
                continue
            else:
                raise fail(stmt, "a module holds only functions, kernels and I.module_global_infos(...)")
        # Signatures first, so that functions may call each other in any order. A kernel has none:
        # call_tir gives its results' struct info.
        # Every vdevice spec in the text becomes its canonical name (docs/vdevice.md), so that two
        # spellings of one device compare equal.
        resolve = IRModule({}, {"vdevice": vdevices}).resolve_vdevice
        signatures = {f.name: None if is_prim_func(f) else _FunctionParser.signature(f, resolve) for f in functions}
        builder = BlockBuilder(signatures=signatures)
        if vdevices:
            builder.set_global_infos("vdevice", vdevices)
        seen: set[str] = set()
        for func in functions:
            if func.name in seen:
                raise fail(func, f"the module defines '{func.name}' twice")
            seen.add(func.name)
            if is_prim_func(func):
                builder.add_func(parse_prim_func(func, self.lines), func.name)
            else:
                _FunctionParser(builder, func, signatures, resolve).parse()
        return builder.get()

    def _global_infos(self, call: ast.Call) -> list[VDevice]:
        if len(call.args) != 1 or not isinstance(call.args[0], ast.Dict):
            raise fail(call, 'I.module_global_infos takes one dict: {"vdevice": [...]}')
        devices = []
        for key, value in zip(call.args[0].keys, call.args[0].values):
            if not (isinstance(key, ast.Constant) and key.value == "vdevice"):
                raise fail(key or call, "only the 'vdevice' global info is known")
            if not isinstance(value, ast.List):
                raise fail(value, "vdevice needs a list of I.vdevice(...)")
            for item in value.elts:
                if not (isinstance(item, ast.Call) and dotted(item.func) == "I.vdevice"):
                    raise fail(item, "expected I.vdevice(kind, index, memory_scope)")
                devices.append(VDevice(*[literal(a) for a in item.args]))
        return devices


class _FunctionParser:
    def __init__(self, builder: BlockBuilder, node: ast.FunctionDef, signatures: dict, resolve_vdevice,
                 enclosing: _FunctionParser | None = None):
        """``enclosing``: the parser of the function a nested ``def`` sits in; the nested function
        sees (captures) the variables and symbolic variables bound before it. ``resolve_vdevice``: the
        module's vdevice lookup (``IRModule.resolve_vdevice``)."""
        self.bb = builder
        self.node = node
        self.signatures = signatures
        self.resolve_vdevice = resolve_vdevice
        self.enclosing = enclosing
        self.sig = self.signature(node, resolve_vdevice) if enclosing else signatures[node.name]
        self.sym: dict[str, arith.Var] = dict(enclosing.sym) if enclosing else {}
        self.scope: dict[str, Var] = dict(enclosing.scope) if enclosing else {}
        self.dataflow_outputs: set[str] | None = None

    # -- signature ------------------------------------------------------------

    @staticmethod
    def signature(node: ast.FunctionDef, resolve_vdevice) -> FuncStructInfo:
        parser = SinfoParser(None, resolve_vdevice)
        params = []
        for arg in node.args.args:
            if arg.annotation is None:
                raise fail(arg, f"parameter '{arg.arg}' needs a struct info annotation")
            params.append(parser.parse(arg.annotation))
        ret = parser.parse(node.returns) if node.returns is not None else ObjectStructInfo()
        return FuncStructInfo(tuple(params), ret, _is_pure(node))

    def parse(self) -> None:
        node = self.node
        sig = self.sig
        params = []
        outer = set(self.scope)
        for arg, sinfo in zip(node.args.args, sig.params):
            var = Var(arg.arg, sinfo)
            if arg.arg in outer:
                raise fail(arg, f"parameter '{arg.arg}' of nested function '{node.name}' is already bound "
                            "in the enclosing function; every variable is bound once")
            if arg.arg in self.scope:
                raise fail(arg, f"parameter '{arg.arg}' is declared twice")
            self.scope[arg.arg] = var
            params.append(var)
        body = list(node.body)
        attrs: dict[str, Any] = {}
        while body and self._declares_symbol(body[0]) or body and self._is_func_attr(body[0]):
            stmt = body.pop(0)
            if self._is_func_attr(stmt):
                attrs.update(literal(stmt.value.args[0]))
            else:
                name = stmt.targets[0].id
                self.sym[name] = arith.Var(name)
        ret = sig.ret if node.returns is not None else None
        try:
            with self.bb.function(node.name, params, attrs=attrs, pure=sig.pure, ret_struct_info=ret,
                                  reserved_names=outer):
                self._statements(body, is_function_body=True)
        except ScriptError:
            raise
        except TesseraError as error:
            raise ScriptError(f"in function '{node.name}': {error}", node.lineno, column(node)) from None

    def _declares_symbol(self, stmt: ast.stmt) -> bool:
        return (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1
                and isinstance(stmt.targets[0], ast.Name) and isinstance(stmt.value, ast.Call)
                and dotted(stmt.value.func) == "T.int64" and not stmt.value.args)

    def _is_func_attr(self, stmt: ast.stmt) -> bool:
        return (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call)
                and dotted(stmt.value.func) == "R.func_attr")

    # -- statements -------------------------------------------------------------

    def _statements(self, stmts: list[ast.stmt], is_function_body: bool = False) -> None:
        for index, stmt in enumerate(stmts):
            if self._declares_symbol(stmt) or self._is_func_attr(stmt):
                raise fail(stmt, "T.int64() declarations and R.func_attr come first in a function")
            if isinstance(stmt, ast.Return):
                if not is_function_body or index != len(stmts) - 1:
                    raise fail(stmt, "return must be the last statement of the function")
                if stmt.value is None:
                    raise fail(stmt, "a function must return a value")
                result = self._expr(stmt.value)
                self._at(stmt, self.bb.emit_func_output, result)
                return
            if isinstance(stmt, ast.With):
                self._dataflow(stmt)
            elif isinstance(stmt, (ast.Assign, ast.AnnAssign)):
                self._assign(stmt)
            elif isinstance(stmt, ast.If):
                self._if(stmt)
            elif isinstance(stmt, ast.FunctionDef):
                self._nested_function(stmt)
            elif isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call) \
                    and dotted(stmt.value.func) == "R.output":
                raise fail(stmt, "R.output(...) belongs at the end of a dataflow block")
            else:
                raise fail(stmt, f"unexpected statement ({type(stmt).__name__})")
        if is_function_body:
            raise fail(self.node, f"function '{self.node.name}' has no return")

    def _dataflow(self, stmt: ast.With) -> None:
        if len(stmt.items) != 1 or not isinstance(stmt.items[0].context_expr, ast.Call) \
                or dotted(stmt.items[0].context_expr.func) != "R.dataflow":
            raise fail(stmt, "only `with R.dataflow():` blocks are allowed")
        body = list(stmt.body)
        last = body[-1] if body else None
        if not (isinstance(last, ast.Expr) and isinstance(last.value, ast.Call)
                and dotted(last.value.func) == "R.output"):
            raise fail(stmt, "a dataflow block must end with R.output(...)")
        outputs = []
        for arg in last.value.args:
            if not isinstance(arg, ast.Name):
                raise fail(arg, "R.output takes variable names")
            outputs.append(arg.id)
        self.dataflow_outputs = set(outputs)
        before = set(self.scope)
        with self.bb.dataflow():
            for inner in body[:-1]:
                if isinstance(inner, ast.FunctionDef):
                    raise fail(inner, "a nested function is defined in the function body, outside "
                                "dataflow blocks")
                if not isinstance(inner, (ast.Assign, ast.AnnAssign)):
                    raise fail(inner, "a dataflow block holds only bindings (no control flow)")
                self._assign(inner)
        self.dataflow_outputs = None
        for name in outputs:
            if name not in self.scope or name in before:
                raise fail(last, f"R.output names '{name}', which the block does not bind")
        # Dataflow variables are local to their block.
        for name in list(self.scope):
            if isinstance(self.scope[name], DataflowVar):
                del self.scope[name]

    def _target(self, stmt) -> tuple[str, ast.expr | None]:
        target = stmt.target if isinstance(stmt, ast.AnnAssign) else (
            stmt.targets[0] if len(stmt.targets) == 1 else None)
        if not isinstance(target, ast.Name):
            raise fail(stmt, "bind one variable per statement: `name: R.Tensor(...) = value`")
        annotation = stmt.annotation if isinstance(stmt, ast.AnnAssign) else None
        return target.id, annotation

    def _assign(self, stmt) -> None:
        name, annotation_node = self._target(stmt)
        if stmt.value is None:
            raise fail(stmt, f"'{name}' is annotated but not bound")
        if name in self.scope:
            raise fail(stmt, f"'{name}' is already bound; every variable is bound once")
        annotation = self._sinfo(annotation_node) if annotation_node is not None else None
        value = stmt.value
        if isinstance(value, ast.Call) and dotted(value.func) == "R.match_cast":
            if len(value.args) != 2:
                raise fail(value, "R.match_cast takes a value and a struct info")
            self._define_pattern_symbols(value.args[1])
            pattern = self._sinfo(value.args[1])
            source = self._expr(value.args[0])
            var = self._at(stmt, self.bb.match_cast, source, pattern, name)
        else:
            expr = self._expr(value)
            if self.dataflow_outputs is not None and name in self.dataflow_outputs:
                var = self._at(stmt, self.bb.emit_output, expr, name, annotation)
            else:
                var = self._at(stmt, self.bb.emit, expr, name, annotation)
        self.scope[name] = var

    def _define_pattern_symbols(self, node: ast.AST) -> None:
        # Names in a match_cast pattern may be new symbolic variables if declared by T.int64().
        for sub in ast.walk(node):
            if isinstance(sub, ast.Name) and sub.id not in self.sym and sub.id not in ("R", "T"):
                raise fail(sub, f"symbolic variable '{sub.id}' is not declared; add `{sub.id} = T.int64()`")

    def _if(self, stmt: ast.If) -> None:
        if self.dataflow_outputs is not None:
            raise fail(stmt, "dataflow blocks cannot contain control flow")
        cond = self._expr(stmt.test)
        branches = []
        result_name = None
        annotation = None
        for body in (stmt.body, stmt.orelse):
            if not body:
                raise fail(stmt, "an if needs both branches, each ending in the same binding")
            last = body[-1]
            if not isinstance(last, (ast.Assign, ast.AnnAssign)):
                raise fail(last, "each branch must end by binding the if's result variable")
            name, ann_node = self._target(last)
            if result_name is not None and name != result_name:
                raise fail(last, f"both branches must bind '{result_name}', this one binds '{name}'")
            result_name = name
            if ann_node is not None:
                annotation = self._sinfo(ann_node)
            saved = dict(self.scope)
            with self.bb.branch() as branch:
                for inner in body[:-1]:
                    if isinstance(inner, ast.If):
                        self._if(inner)
                    elif isinstance(inner, (ast.Assign, ast.AnnAssign)):
                        self._assign(inner)
                    elif isinstance(inner, ast.FunctionDef):
                        raise fail(inner, "a nested function is defined in the function body, not in a branch")
                    else:
                        raise fail(inner, "a branch holds bindings and ifs")
                branch.result = self._expr(last.value)
            self.scope = saved
            branches.append(branch.seq)
        var = self._at(stmt, self.bb.emit_if, cond, branches[0], branches[1], result_name, annotation)
        self.scope[result_name] = var

    def _nested_function(self, stmt: ast.FunctionDef) -> None:
        """A local function: built by a builder of its own, then bound to a variable named after it.

        Its parameters define their plain symbolic dims (as every signature does); any other
        symbolic variable or variable it uses comes from the enclosing function."""
        if stmt.name in self.scope:
            raise fail(stmt, f"'{stmt.name}' is already bound; every variable is bound once")
        builder = BlockBuilder(signatures=self.signatures)
        _FunctionParser(builder, stmt, self.signatures, self.resolve_vdevice, enclosing=self).parse()
        func = builder.get()[stmt.name]
        self.scope[stmt.name] = self._at(stmt, self.bb.emit, func, stmt.name)

    def _undefined(self, node: ast.AST, name: str) -> ScriptError:
        if self.enclosing is not None and name == self.node.name:
            return fail(node, f"nested function '{name}' cannot call itself; recursion needs a module-level "
                        f"function (cls.{name})")
        return fail(node, f"undefined variable '{name}'")

    def _at(self, stmt: ast.AST, action, *args):
        """Run a builder step; its errors get the statement's line and column."""
        try:
            return action(*args)
        except ScriptError:
            raise
        except (TesseraError, TypeError, ValueError, KeyError) as error:
            message = error.args[0] if isinstance(error, KeyError) and error.args else str(error)
            raise fail(stmt, message) from None

    # -- expressions ------------------------------------------------------------

    def _sinfo(self, node: ast.AST) -> StructInfo:
        return SinfoParser(self.sym, self.resolve_vdevice).parse(node)

    def _prim(self, node: ast.AST) -> arith.PrimExpr:
        return PrimParser(self.sym).parse(node)

    def _expr(self, node: ast.AST) -> Expr:
        if isinstance(node, ast.Name):
            if node.id in self.scope:
                return self.scope[node.id]
            if node.id in self.sym:
                raise fail(node, f"'{node.id}' is a symbolic variable; use R.prim_value({node.id}) "
                            "or R.shape([...]) to pass it as a value")
            raise self._undefined(node, node.id)
        if isinstance(node, ast.Tuple):
            return Tuple(tuple(self._expr(e) for e in node.elts))
        if isinstance(node, ast.Subscript):
            index = node.slice
            if not (isinstance(index, ast.Constant) and isinstance(index.value, int)):
                raise fail(node, "tuple indices are integer literals")
            return TupleGetItem(self._expr(node.value), index.value)
        if isinstance(node, ast.Attribute) and dotted(node) and dotted(node).startswith("cls."):
            return self._global(node, node.attr)
        if isinstance(node, ast.Call):
            return self._call(node)
        raise fail(node, f"unexpected expression ({type(node).__name__})")

    def _global(self, node: ast.AST, name: str) -> GlobalVar:
        if name not in self.signatures:
            raise fail(node, f"the module has no function '{name}'")
        return GlobalVar(name, self.signatures[name])

    def _call(self, node: ast.Call) -> Expr:
        name = dotted(node.func)
        if name is None:
            raise fail(node, "calls name a function: R.<op>, cls.<function> or a variable")
        if name.startswith("cls."):
            return Call(self._global(node.func, name[4:]), tuple(self._expr(a) for a in node.args))
        if not name.startswith("R."):
            if name in self.scope:
                return Call(self.scope[name], tuple(self._expr(a) for a in node.args))
            if self.enclosing is not None and name == self.node.name:
                raise self._undefined(node, name)
            raise fail(node, f"unknown function '{name}'")
        special = _SPECIAL.get(name[2:])
        if special is not None:
            return special(self, node)
        return self._op_call(node, name[2:])

    def _op_call(self, node: ast.Call, op_name: str) -> Call:
        try:
            op = registry.get_op(op_name)
        except TesseraError as error:
            raise fail(node, str(error)) from None
        # Attributes an operator takes positionally follow its inputs: R.to_vdevice(x, "webgpu:0").
        inputs = len(node.args) if op.variadic or not op.positional_attrs else len(op.inputs)
        args = [self._expr(a) for a in node.args[:inputs]]
        if len(node.args) - inputs > len(op.positional_attrs):
            raise fail(node, f"R.{op.name} takes {len(op.inputs)} inputs and the attributes "
                        f"{', '.join(op.positional_attrs)}, got {len(node.args)} arguments")
        attrs = {key: self._attr_value(a) for key, a in zip(op.positional_attrs, node.args[inputs:])}
        sinfo_args = ()
        for keyword in node.keywords:
            if keyword.arg in ("sinfo_args", "out_sinfo"):
                sinfo_args = self._sinfo_list(keyword.value)
            elif keyword.arg is None:
                raise fail(keyword, "** arguments are not part of the format")
            elif keyword.arg in attrs:
                raise fail(keyword, f"R.{op.name} got attribute '{keyword.arg}' twice")
            else:
                attrs[keyword.arg] = self._attr_value(keyword.value)
        if "vdevice" in attrs:  # an attribute of this name holds a vdevice (R.to_vdevice's target)
            attrs["vdevice"] = SinfoParser(None, self.resolve_vdevice).vdevice(node, attrs["vdevice"])
        try:
            return registry.make_call(op.name, *args, sinfo_args=sinfo_args, **attrs)
        except TypeError as error:
            raise fail(node, str(error)) from None

    def _sinfo_list(self, node: ast.AST) -> tuple[StructInfo, ...]:
        if isinstance(node, (ast.List, ast.Tuple)):
            return tuple(self._sinfo(e) for e in node.elts)
        return (self._sinfo(node),)

    def _attr_value(self, node: ast.AST):
        if isinstance(node, (ast.List, ast.Tuple)):
            return tuple(self._attr_value(e) for e in node.elts)
        if isinstance(node, (ast.Name, ast.BinOp)) or (
                isinstance(node, ast.Call) and dotted(node.func) in ("T.min", "T.max")):
            prim = self._prim(node)
            return prim.value if isinstance(prim, arith.IntImm) else prim
        return literal(node)

    # special forms of R.*

    def _shape(self, node: ast.Call) -> ShapeExpr:
        arg = _single_arg(node)
        if not isinstance(arg, (ast.List, ast.Tuple)):
            raise fail(node, "R.shape takes a list of dimensions")
        return ShapeExpr(tuple(self._prim(e) for e in arg.elts))

    def _prim_value(self, node: ast.Call) -> PrimValue:
        return PrimValue(self._prim(_single_arg(node)))

    def _str(self, node: ast.Call) -> StringImm:
        value = literal(_single_arg(node))
        if not isinstance(value, str):
            raise fail(node, "R.str takes a string literal")
        return StringImm(value)

    def _const(self, node: ast.Call) -> Constant:
        if len(node.args) != 2:
            raise fail(node, 'R.const takes data and a dtype: R.const([1.0, 2.0], "float32")')
        data, dtype = literal(node.args[0]), literal(node.args[1])
        shape, name = None, ""
        for keyword in node.keywords:
            if keyword.arg == "shape":
                shape = tuple(literal(keyword.value))
            elif keyword.arg == "name":
                name = literal(keyword.value)
            else:
                raise fail(keyword, f"R.const has no argument '{keyword.arg}'")
        if data is Ellipsis and (shape is None or not name):  # a weight left out (docs/script.md)
            raise fail(node, 'a weight without its values names its shape and name: '
                             'R.const(..., "float32", shape=[64], name="model.norm.weight")')
        try:
            if data is Ellipsis:
                return Constant(elided_weight(dtype, shape), name=name)
            array = np.array(data, dtype=dtype)
            return Constant(array.reshape(shape) if shape is not None else array, name=name)
        except (TypeError, ValueError) as error:
            raise fail(node, f"bad constant: {error}") from None

    def _tuple(self, node: ast.Call) -> Tuple:
        return Tuple(tuple(self._expr(a) for a in node.args))

    def _extern(self, node: ast.Call) -> ExternFunc:
        return ExternFunc(literal(_single_arg(node)))

    def _call_packed(self, node: ast.Call) -> Call:
        if not node.args:
            raise fail(node, "R.call_packed needs a function name")
        func = ExternFunc(literal(node.args[0]))
        sinfo_args = ()
        for keyword in node.keywords:
            if keyword.arg != "sinfo_args":
                raise fail(keyword, f"R.call_packed has no argument '{keyword.arg}'")
            sinfo_args = self._sinfo_list(keyword.value)
        return Call(func, tuple(self._expr(a) for a in node.args[1:]), (), sinfo_args)

    def _call_named(self, node: ast.Call, op_name: str, callee) -> Call:
        if not node.args:
            raise fail(node, f"R.{op_name} needs a callee first")
        first = callee(node.args[0])
        rest = [self._expr(a) for a in node.args[1:]]
        sinfo_args = ()
        for keyword in node.keywords:
            if keyword.arg not in ("out_sinfo", "sinfo_args"):
                raise fail(keyword, f"R.{op_name} has no argument '{keyword.arg}'")
            sinfo_args = self._sinfo_list(keyword.value)
        return registry.make_call(op_name, first, *rest, sinfo_args=sinfo_args)

    def _call_tir(self, node):
        return self._call_named(node, "call_tir", lambda a: self._expr(a))

    def _call_dps_library(self, node):
        return self._call_named(node, "call_dps_library", lambda a: StringImm(literal(a)))

    def _call_pure_packed(self, node):
        return self._call_named(node, "call_pure_packed", lambda a: ExternFunc(literal(a)))

    def _misplaced(self, node: ast.Call) -> Expr:
        raise fail(node, f"{dotted(node.func)} is a statement, not an expression")


_SPECIAL = {
    "shape": _FunctionParser._shape,
    "prim_value": _FunctionParser._prim_value,
    "str": _FunctionParser._str,
    "const": _FunctionParser._const,
    "tuple": _FunctionParser._tuple,
    "ExternFunc": _FunctionParser._extern,
    "call_packed": _FunctionParser._call_packed,
    "call_tir": _FunctionParser._call_tir,
    "call_dps_library": _FunctionParser._call_dps_library,
    "call_pure_packed": _FunctionParser._call_pure_packed,
    "match_cast": _FunctionParser._misplaced,
    "output": _FunctionParser._misplaced,
    "dataflow": _FunctionParser._misplaced,
}


def _single_arg(node: ast.Call) -> ast.AST:
    if len(node.args) != 1 or node.keywords:
        raise fail(node, f"{dotted(node.func)} takes one argument")
    return node.args[0]


def _is_pure(node: ast.FunctionDef) -> bool:
    for decorator in node.decorator_list:
        name = _decorator_name(decorator)
        if name != "R.function":
            raise fail(decorator, f"functions are decorated with @R.function, not @{name}")
        if isinstance(decorator, ast.Call):
            for keyword in decorator.keywords:
                if keyword.arg != "pure":
                    raise fail(keyword, f"@R.function has no argument '{keyword.arg}'")
                return bool(literal(keyword.value))
    if not node.decorator_list:
        raise fail(node, f"function '{node.name}' needs the @R.function decorator")
    return True
