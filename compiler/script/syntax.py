"""Pieces of the text format below statements: positions, literals, symbolic
integers and struct-info annotations (used by ``parser.py``)."""

from __future__ import annotations

import ast

from .. import arith
from ..arith.parse import from_ast
from ..ir.errors import ScriptError, TesseraError
from ..ir.struct_info import (
    FuncStructInfo,
    ObjectStructInfo,
    PrimStructInfo,
    ShapeStructInfo,
    StructInfo,
    TensorStructInfo,
    TupleStructInfo,
    defining_vars,
)

LITERAL_FLOATS = {"inf": float("inf"), "-inf": float("-inf"), "nan": float("nan")}


def fail(node: ast.AST, message: str) -> ScriptError:
    return ScriptError(message, getattr(node, "lineno", None), column(node))


def column(node: ast.AST) -> int | None:
    offset = getattr(node, "col_offset", None)
    return None if offset is None else offset + 1


def dotted(node: ast.AST) -> str | None:
    """``R.nn.softmax`` -> "R.nn.softmax"; None for anything that is not a dotted name."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = dotted(node.value)
        return None if base is None else f"{base}.{node.attr}"
    return None


def literal(node: ast.AST):
    """A Python literal, plus float("inf") / float("nan"); nothing is evaluated."""
    if isinstance(node, ast.Call) and dotted(node.func) == "float" and len(node.args) == 1:
        text = literal(node.args[0])
        if text in LITERAL_FLOATS:
            return LITERAL_FLOATS[text]
    if isinstance(node, (ast.List, ast.Tuple)):
        return [literal(e) for e in node.elts]
    if isinstance(node, ast.Dict):
        return {literal(k): literal(v) for k, v in zip(node.keys, node.values)}
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        value = literal(node.operand)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return -value
    if isinstance(node, ast.Constant):
        return node.value
    raise fail(node, "expected a literal value")


class PrimParser:
    """Symbolic integer expressions; ``symbols`` None means names declare themselves (signatures)."""

    def __init__(self, symbols: dict[str, arith.Var] | None):
        self.symbols = symbols

    def parse(self, node: ast.AST) -> arith.PrimExpr:
        where = node
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            try:
                node = ast.parse(node.value.strip(), mode="eval").body
            except SyntaxError:
                raise fail(where, f"bad symbolic expression {node.value!r}") from None
        try:
            return from_ast(node, lambda name: self._resolve(name, where))
        except ValueError:
            raise fail(where, "expected a symbolic integer expression") from None

    def _resolve(self, name: str, where: ast.AST) -> arith.Var:
        if self.symbols is None:
            return arith.Var(name)
        if name not in self.symbols:
            raise fail(where, f"symbolic variable '{name}' is not declared; add "
                        f"`{name} = T.int64()` or bind it in a parameter")
        return self.symbols[name]


class SinfoParser:
    def __init__(self, symbols: dict[str, arith.Var] | None, resolve_vdevice=None):
        """``resolve_vdevice``: the module's spec -> canonical name lookup (``IRModule.resolve_vdevice``);
        None keeps vdevice specs as written."""
        self.prims = PrimParser(symbols)
        self.resolve_vdevice = resolve_vdevice

    def parse(self, node: ast.AST) -> StructInfo:
        name = dotted(node.func) if isinstance(node, ast.Call) else dotted(node)
        args = node.args if isinstance(node, ast.Call) else []
        kwargs = {k.arg: k.value for k in node.keywords} if isinstance(node, ast.Call) else {}
        if name == "R.Object":
            return ObjectStructInfo()
        if name == "R.Tensor":
            return self._tensor(node, args, kwargs)
        if name == "R.Shape":
            if args:
                return ShapeStructInfo(tuple(self._dims(args[0])))
            return ShapeStructInfo(None, literal(kwargs["ndim"]) if "ndim" in kwargs else -1)
        if name == "R.Prim":
            if "value" in kwargs:
                return PrimStructInfo("int64", self.prims.parse(kwargs["value"]))
            return PrimStructInfo(literal(args[0]) if args else literal(kwargs.get("dtype")))
        if name == "R.Tuple":
            return TupleStructInfo(tuple(self.parse(a) for a in args))
        if name == "R.Callable":
            return self._callable(node, args, kwargs)
        raise fail(node, "expected a struct info: R.Tensor, R.Shape, R.Prim, R.Tuple, R.Callable "
                    "or R.Object")

    def _callable(self, node, args, kwargs) -> FuncStructInfo:
        pure = literal(kwargs["pure"]) if "pure" in kwargs else True
        params_node = args[0] if args and isinstance(args[0], (ast.Tuple, ast.List)) else None
        ret_node = kwargs.get("ret", args[1] if len(args) > 1 else None)
        if ret_node is None:
            raise fail(node, "R.Callable needs a result: R.Callable((params...), ret) or R.Callable(ret=...)")
        inner = self
        if params_node is not None and self.prims.symbols is not None:
            # A callable's parameters define their plain dims, as a function's signature does
            # (`R.Callable((R.Tensor((k, 2, 2)),), R.Tensor((k * 4,)))` needs no `k = T.int64()`).
            own = [v for p in params_node.elts for v in defining_vars(SinfoParser(None).parse(p))]
            inner = SinfoParser({**self.prims.symbols, **{v.name: v for v in own}}, self.resolve_vdevice)
        ret = inner.parse(ret_node)
        if params_node is None:
            return FuncStructInfo(None, ret, pure)
        return FuncStructInfo(tuple(inner.parse(p) for p in params_node.elts), ret, pure)

    def vdevice(self, node: ast.AST, spec) -> str:
        """The canonical name of the vdevice ``spec`` names; a spec that names none fails at ``node``."""
        if not isinstance(spec, str):
            raise fail(node, f"a vdevice is named by a string such as \"webgpu:0\", not {spec!r}")
        try:
            return self.resolve_vdevice(spec)
        except TesseraError as error:
            raise fail(node, str(error)) from None

    def _dims(self, node: ast.AST) -> list[arith.PrimExpr]:
        if not isinstance(node, (ast.Tuple, ast.List)):
            raise fail(node, "a shape is a tuple of dimensions")
        return [self.prims.parse(e) for e in node.elts]

    def _tensor(self, node, args, kwargs) -> TensorStructInfo:
        unknown = set(kwargs) - {"dtype", "ndim", "vdevice"}
        if unknown:
            raise fail(node, f"R.Tensor has no argument {', '.join(sorted(unknown))}")
        shape = None
        dtype = literal(kwargs["dtype"]) if "dtype" in kwargs else ""
        vdevice = literal(kwargs["vdevice"]) if "vdevice" in kwargs else None
        if len(args) > 3:
            raise fail(node, "R.Tensor takes at most a shape, a dtype and a vdevice as positional arguments")
        if args:
            first = args[0]
            if isinstance(first, ast.Constant) and isinstance(first.value, str) and len(args) == 1:
                dtype = first.value  # R.Tensor("float32")
            else:
                shape = tuple(self._dims(first))
                if len(args) > 1:
                    dtype = literal(args[1])
                if len(args) > 2:  # R.Tensor((2, 3), "float32", "webgpu"), as TVMScript allows
                    vdevice = literal(args[2])
        ndim = literal(kwargs["ndim"]) if "ndim" in kwargs else -1
        if vdevice is not None and self.resolve_vdevice is not None:
            vdevice = self.vdevice(node, vdevice)
        if shape is not None and ndim not in (-1, len(shape)):
            raise fail(node, f"R.Tensor with {len(shape)} dims cannot have ndim={ndim}")
        try:
            return TensorStructInfo(shape, dtype, ndim, vdevice)
        except ValueError as error:
            raise fail(node, str(error)) from None
