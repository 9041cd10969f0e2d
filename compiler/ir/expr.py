"""Graph-level expressions, bindings and blocks (Relax's AST).

Nodes are frozen. Variables compare by identity (two variables may share a
name hint); every other node compares structurally. ``struct_info`` on a
non-variable node is filled in by the normalizer (``BlockBuilder``) and takes
no part in comparisons.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from ..arith import PrimExpr
from .struct_info import (
    FuncStructInfo,
    ObjectStructInfo,
    PrimStructInfo,
    ShapeStructInfo,
    StructInfo,
    TensorStructInfo,
    TupleStructInfo,
    as_dim,
)


class Expr:
    __slots__ = ()

    @property
    def sinfo(self) -> StructInfo | None:
        return getattr(self, "struct_info", None)


@dataclass(frozen=True, eq=False)
class Var(Expr):
    name_hint: str
    struct_info: StructInfo = field(default_factory=ObjectStructInfo)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name_hint})"


@dataclass(frozen=True, eq=False)
class DataflowVar(Var):
    """A variable local to one dataflow block."""


@dataclass(frozen=True, eq=False)
class Constant(Expr):
    """A tensor known at compile time; ``name`` is kept for weights (their tensor-cache name)."""

    data: np.ndarray
    struct_info: StructInfo | None = None
    name: str = ""

    def __post_init__(self):
        data = np.asarray(self.data)
        object.__setattr__(self, "data", data)
        object.__setattr__(self, "struct_info", TensorStructInfo(data.shape, str(data.dtype)))

    def __eq__(self, other):
        return (isinstance(other, Constant) and self.data.dtype == other.data.dtype
                and np.array_equal(self.data, other.data))

    def __hash__(self):
        return hash((self.data.dtype.str, self.data.shape, self.data.tobytes()))


@dataclass(frozen=True)
class ShapeExpr(Expr):
    values: tuple[PrimExpr, ...]
    struct_info: StructInfo | None = field(default=None, compare=False)

    def __post_init__(self):
        values = tuple(as_dim(v) for v in self.values)
        object.__setattr__(self, "values", values)
        object.__setattr__(self, "struct_info", ShapeStructInfo(values))


@dataclass(frozen=True)
class PrimValue(Expr):
    value: PrimExpr
    struct_info: StructInfo | None = field(default=None, compare=False)

    def __post_init__(self):
        value = as_dim(self.value)
        object.__setattr__(self, "value", value)
        object.__setattr__(self, "struct_info", PrimStructInfo("int64", value))


@dataclass(frozen=True)
class StringImm(Expr):
    value: str
    struct_info: StructInfo | None = field(default_factory=ObjectStructInfo, compare=False)


@dataclass(frozen=True)
class Tuple(Expr):
    fields: tuple[Expr, ...]
    struct_info: StructInfo | None = field(default=None, compare=False)

    def __post_init__(self):
        object.__setattr__(self, "fields", tuple(self.fields))
        if self.struct_info is None and all(f.sinfo is not None for f in self.fields):
            object.__setattr__(self, "struct_info", TupleStructInfo(tuple(f.sinfo for f in self.fields)))


@dataclass(frozen=True)
class TupleGetItem(Expr):
    tuple_value: Expr
    index: int
    struct_info: StructInfo | None = field(default=None, compare=False)


@dataclass(frozen=True)
class GlobalVar(Expr):
    """A reference to a function of the enclosing module, by name."""

    name: str
    struct_info: StructInfo | None = field(default=None, compare=False)


@dataclass(frozen=True)
class ExternFunc(Expr):
    """A function provided by the runtime, by its global symbol."""

    global_symbol: str
    struct_info: StructInfo | None = field(
        default_factory=lambda: FuncStructInfo(None, ObjectStructInfo(), pure=False), compare=False)


@dataclass(frozen=True, eq=False)
class Op(Expr):
    """A registered operator. Its behaviour lives with its definition in ``tessera.op``.

    ``deduce(call, ctx)`` returns the struct info of a call; ``reference(*values, **attrs)``
    computes it in numpy (None when the op has no reference); ``legalize(call, ctx)``
    describes it as a kernel computation (``tessera.op.lowering``); ``inputs`` name the
    positional arguments and ``attrs`` maps each attribute to its default.
    """

    name: str
    inputs: tuple[str, ...]
    attrs: tuple[tuple[str, Any], ...]
    deduce: Callable
    reference: Callable | None = None
    pure: bool = True
    variadic: bool = False
    legalize: Callable | None = None
    struct_info: StructInfo | None = None
    # What a float16 build does with the op (transform/mixed_precision.py): "always" computes it
    # in float16 (its kernels accumulate in float32), "follow" in float16 when every computed
    # input is, "never" in float32, "keep" takes its inputs as they come (its kernel mixes them).
    precision: str = "follow"
    # Attributes the text format writes as positional arguments after the inputs, in this order:
    # `R.to_vdevice(x, "webgpu:0")` rather than `R.to_vdevice(x, vdevice="webgpu:0")`.
    positional_attrs: tuple[str, ...] = ()

    @property
    def attr_defaults(self) -> dict[str, Any]:
        return dict(self.attrs)

    def __repr__(self) -> str:
        return f"Op({self.name})"


@dataclass(frozen=True)
class Call(Expr):
    op: Expr
    args: tuple[Expr, ...]
    attrs: tuple[tuple[str, Any], ...] = ()
    sinfo_args: tuple[StructInfo, ...] = ()
    struct_info: StructInfo | None = field(default=None, compare=False)

    def __post_init__(self):
        object.__setattr__(self, "args", tuple(self.args))
        object.__setattr__(self, "attrs", tuple(self.attrs))
        object.__setattr__(self, "sinfo_args", tuple(self.sinfo_args))

    def attr(self, name: str) -> Any:
        for key, value in self.attrs:
            if key == name:
                return value
        raise KeyError(f"call has no attribute {name!r}")

    @property
    def attr_dict(self) -> dict[str, Any]:
        return dict(self.attrs)


@dataclass(frozen=True)
class If(Expr):
    cond: Expr
    true_branch: SeqExpr
    false_branch: SeqExpr
    struct_info: StructInfo | None = field(default=None, compare=False)


# -- bindings and blocks ----------------------------------------------------


@dataclass(frozen=True)
class VarBinding:
    var: Var
    value: Expr


@dataclass(frozen=True)
class MatchCast:
    """Bind ``var`` to ``value`` after checking it against ``struct_info`` at run time.

    Plain variables in the pattern that are not yet defined become defined here.
    """

    var: Var
    value: Expr
    struct_info: StructInfo


Binding = VarBinding | MatchCast


@dataclass(frozen=True)
class BindingBlock:
    bindings: tuple[Binding, ...]

    def __post_init__(self):
        object.__setattr__(self, "bindings", tuple(self.bindings))


@dataclass(frozen=True)
class DataflowBlock(BindingBlock):
    """A pure block without control flow; only its outputs are visible after it."""


@dataclass(frozen=True)
class SeqExpr(Expr):
    blocks: tuple[BindingBlock, ...]
    body: Expr
    struct_info: StructInfo | None = field(default=None, compare=False)

    def __post_init__(self):
        object.__setattr__(self, "blocks", tuple(self.blocks))
        if self.struct_info is None and self.body.sinfo is not None:
            object.__setattr__(self, "struct_info", self.body.sinfo)


@dataclass(frozen=True)
class Function(Expr):
    params: tuple[Var, ...]
    body: SeqExpr
    ret_struct_info: StructInfo
    attrs: tuple[tuple[str, Any], ...] = ()
    pure: bool = True
    struct_info: StructInfo | None = field(default=None, compare=False)

    def __post_init__(self):
        object.__setattr__(self, "params", tuple(self.params))
        object.__setattr__(self, "attrs", tuple(self.attrs))
        object.__setattr__(self, "struct_info", FuncStructInfo(
            tuple(p.struct_info for p in self.params), self.ret_struct_info, self.pure))

    def attr(self, name: str, default: Any = None) -> Any:
        return dict(self.attrs).get(name, default)

    def with_attr(self, name: str, value: Any) -> Function:
        attrs = dict(self.attrs)
        attrs[name] = value
        return replace(self, attrs=tuple(attrs.items()))


LEAF_TYPES = (Var, Constant, ShapeExpr, PrimValue, StringImm, GlobalVar, ExternFunc, Op)


def with_struct_info(expr: Expr, sinfo: StructInfo) -> Expr:
    """A copy of a non-variable node carrying ``sinfo``."""
    return replace(expr, struct_info=sinfo)


def attr_prims(value) -> Any:
    """The symbolic expressions inside an attribute value (attributes may hold dims)."""
    if isinstance(value, PrimExpr):
        yield value
    elif isinstance(value, (tuple, list)):
        for item in value:
            yield from attr_prims(item)
