"""A small pattern language over the graph IR: what ``fuse_ops_by_pattern`` looks for.

A pattern describes a piece of a dataflow block by the operators it calls and the
struct info of its values (the Relax paper's Figure 9)::

    x, w = wildcard("x"), wildcard("w")
    dense = is_op("matmul")(x, w).has_dtype("float32")
    dense_bias = dense.optional(lambda mm: is_op("add")(mm, wildcard("bias")))
    act = is_op("nn.relu")(dense_bias) | is_op("nn.gelu")(dense_bias)

- ``wildcard(name)`` matches any value; ``is_const(name)`` a constant;
- ``is_op("matmul")(a, b, **attrs)`` a call of that operator (``is_op("add", "multiply")`` of
  either) whose arguments match ``a`` and ``b`` and whose attributes equal ``attrs``; a Python
  tuple of patterns stands for a tuple argument (``concat``'s);
- ``p | q`` the first of the two that matches; ``p.optional(wrap)`` is ``wrap(p) | p``;
- ``p.has_dtype(...)``, ``p.has_ndim(n)``, ``p.has_shape(dims or predicate)`` and
  ``p.where(predicate, what)`` check the matched value's struct info.

``match(pattern, expr, bound)`` follows a variable to the value ``bound`` gives it (the bindings
of one dataflow block), so a call pattern matches the call bound to an argument's variable. The
``Match`` holds each named sub-pattern's value (for a call, the variable bound to it) and the
bindings the match covers. A pattern object used twice must match the same value both times:
``add(multiply(x, cos), x)`` needs the same ``x``. Alternatives commit to the first that
matches; there is no backtracking into a choice once the rest of the pattern fails.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .. import arith
from ..ir.errors import TesseraError
from ..ir.expr import Call, Constant, Expr, Op, Tuple, Var, VarBinding
from ..ir.struct_info import TensorStructInfo, as_dim
from ..op.registry import get_op, normalize_attr


class PatternError(TesseraError):
    """A pattern that cannot be built or used: an unknown operator, a wrong argument count, a name
    given twice."""


class ExprPattern:
    """Base of every pattern. Patterns compare by identity: one object is one node of the graph."""

    name: str = ""

    def __or__(self, other: ExprPattern) -> ExprPattern:
        return AltPattern(self, _as_pattern(other, "|"))

    def optional(self, wrap: Callable[[ExprPattern], ExprPattern]) -> ExprPattern:
        """``wrap(self)`` where it matches, else ``self``: an optional bias add, an optional cast."""
        return wrap(self) | self

    def where(self, predicate: Callable[[Expr], bool], what: str = "a check") -> ExprPattern:
        return CheckedPattern(self, predicate, what)

    def has_dtype(self, *dtypes: str) -> ExprPattern:
        return self.where(lambda e: _tensor(e) is not None and _tensor(e).dtype in dtypes,
                          f"dtype {' or '.join(dtypes)}")

    def has_ndim(self, ndim: int) -> ExprPattern:
        return self.where(lambda e: _tensor(e) is not None and _tensor(e).ndim == ndim, f"ndim {ndim}")

    def has_shape(self, shape: Sequence | Callable[[tuple], bool]) -> ExprPattern:
        """Dims (ints, names such as "n", or None for any) that must be provably equal, or a
        predicate on the shape's tuple of ``arith`` expressions."""
        if callable(shape):
            return self.where(lambda e: _shape(e) is not None and bool(shape(_shape(e))), "a shape check")
        want = tuple(None if d is None else as_dim(d) for d in shape)
        return self.where(lambda e: _same_dims(_shape(e), want), f"shape {tuple(shape)}")


@dataclass(frozen=True, eq=False)
class WildcardPattern(ExprPattern):
    name: str = ""


@dataclass(frozen=True, eq=False)
class ConstantPattern(ExprPattern):
    name: str = ""


@dataclass(frozen=True, eq=False)
class CallPattern(ExprPattern):
    ops: tuple[str, ...]
    args: tuple[ExprPattern, ...]
    attrs: tuple[tuple[str, Any], ...] = ()
    name: str = ""


@dataclass(frozen=True, eq=False)
class TuplePattern(ExprPattern):
    fields: tuple[ExprPattern, ...]
    name: str = ""


@dataclass(frozen=True, eq=False)
class AltPattern(ExprPattern):
    left: ExprPattern
    right: ExprPattern
    name: str = ""


@dataclass(frozen=True, eq=False)
class CheckedPattern(ExprPattern):
    inner: ExprPattern
    predicate: Callable[[Expr], bool]
    what: str
    name: str = ""


@dataclass(frozen=True)
class OpPattern:
    """``is_op(...)``: not a pattern by itself until called with the arguments' patterns."""

    ops: tuple[str, ...]

    def __call__(self, *args, name: str = "", **attrs) -> CallPattern:
        for op_name in self.ops:
            op = get_op(op_name)
            if not op.variadic and len(args) != len(op.inputs):
                raise PatternError(f"R.{op_name} takes {len(op.inputs)} inputs ({', '.join(op.inputs)}), "
                                   f"the pattern gives {len(args)}")
            unknown = sorted(set(attrs) - set(op.attr_defaults))
            if unknown:
                raise PatternError(f"R.{op_name} has no attribute {', '.join(unknown)} "
                                   f"(attributes: {', '.join(op.attr_defaults) or 'none'})")
        patterns = tuple(_as_pattern(a, f"is_op({', '.join(map(repr, self.ops))})") for a in args)
        attrs = {key: normalize_attr(value) for key, value in attrs.items()}
        return CallPattern(self.ops, patterns, tuple(sorted(attrs.items())), name)


def wildcard(name: str = "") -> WildcardPattern:
    return WildcardPattern(name)


def is_const(name: str = "") -> ConstantPattern:
    return ConstantPattern(name)


def is_op(*names: str) -> OpPattern:
    if not names or not all(isinstance(n, str) for n in names):
        raise PatternError("is_op takes one or more operator names")
    for name in names:
        get_op(name)  # an unknown name fails here, with suggestions
    return OpPattern(tuple(names))


def is_tuple(*fields, name: str = "") -> TuplePattern:
    return TuplePattern(tuple(_as_pattern(f, "is_tuple") for f in fields), name)


def named(pattern: ExprPattern, name: str) -> ExprPattern:
    """``pattern`` under ``name`` in a match's results (a wrapper: the pattern object itself may be
    used elsewhere unnamed)."""
    return CheckedPattern(_as_pattern(pattern, "named"), lambda e: True, "", name)


def _as_pattern(value, where: str) -> ExprPattern:
    if isinstance(value, ExprPattern):
        return value
    if isinstance(value, (tuple, list)):
        return is_tuple(*value)
    if isinstance(value, OpPattern):
        raise PatternError(f"{where}: is_op({', '.join(map(repr, value.ops))}) must be called with its "
                           "arguments' patterns")
    raise PatternError(f"{where}: expected a pattern (wildcard(), is_const(), is_op(...)(...)), got {value!r}")


def check_names(pattern: ExprPattern) -> list[str]:
    """The names ``pattern`` binds; two different sub-patterns under one name are an error."""
    seen: dict[str, ExprPattern] = {}
    for node in _nodes(pattern):
        if node.name:
            if seen.get(node.name, node) is not node:
                raise PatternError(f"the name {node.name!r} is given to two different sub-patterns")
            seen[node.name] = node
    return list(seen)


def _nodes(pattern: ExprPattern):
    done: set[int] = set()
    stack = [pattern]
    while stack:
        node = stack.pop()
        if id(node) in done:
            continue
        done.add(id(node))
        yield node
        if isinstance(node, CallPattern):
            stack.extend(node.args)
        elif isinstance(node, TuplePattern):
            stack.extend(node.fields)
        elif isinstance(node, AltPattern):
            stack.extend((node.left, node.right))
        elif isinstance(node, CheckedPattern):
            stack.append(node.inner)


# -- matching -----------------------------------------------------------------------------------


@dataclass
class Match:
    """One match: ``bindings`` maps each named sub-pattern to its value, ``members`` are the
    bindings the match covers (the block's, in its order; the root's last)."""

    root: Expr
    bindings: dict[str, Expr]
    members: tuple[VarBinding, ...] = field(default_factory=tuple)

    def __getitem__(self, name: str) -> Expr:
        return self.bindings[name]


def match(pattern: ExprPattern, expr: Expr, bound: Mapping[Var, VarBinding] | None = None) -> Match | None:
    """Match ``pattern`` against ``expr``, following variables through ``bound`` (var -> its binding)."""
    matcher = _Matcher(bound or {})
    if not matcher.visit(pattern, expr):
        return None
    order = {var: index for index, var in enumerate(bound or {})}
    members = sorted(matcher.members.values(), key=lambda b: order.get(b.var, len(order)))
    return Match(expr, dict(matcher.names), tuple(members))


class _Matcher:
    def __init__(self, bound: Mapping[Var, VarBinding]):
        self.bound = bound
        self.memo: dict[int, Expr] = {}  # pattern node -> the value it matched
        self.names: dict[str, Expr] = {}
        self.members: dict[Var, VarBinding] = {}

    def visit(self, p: ExprPattern, e: Expr) -> bool:
        if id(p) in self.memo:
            return _same(self.memo[id(p)], e)
        if not self._visit(p, e):
            return False
        self.memo[id(p)] = e
        if p.name:
            self.names[p.name] = e
        return True

    def _visit(self, p: ExprPattern, e: Expr) -> bool:
        if isinstance(p, WildcardPattern):
            return True
        if isinstance(p, ConstantPattern):
            value, _ = self._follow(e)
            return isinstance(value, Constant)
        if isinstance(p, CheckedPattern):
            return bool(p.predicate(e)) and self.visit(p.inner, e)
        if isinstance(p, AltPattern):
            saved = (dict(self.memo), dict(self.names), dict(self.members))
            if self.visit(p.left, e):
                return True
            self.memo, self.names, self.members = saved
            return self.visit(p.right, e)
        value, binding = self._follow(e)
        if isinstance(p, TuplePattern):
            ok = (isinstance(value, Tuple) and len(value.fields) == len(p.fields)
                  and all(self.visit(fp, fe) for fp, fe in zip(p.fields, value.fields)))
        elif isinstance(p, CallPattern):
            ok = (isinstance(value, Call) and isinstance(value.op, Op) and value.op.name in p.ops
                  and len(value.args) == len(p.args) and all(value.attr_dict.get(k) == v for k, v in p.attrs)
                  and all(self.visit(ap, ae) for ap, ae in zip(p.args, value.args)))
        else:
            raise PatternError(f"not a pattern: {p!r}")
        if ok and binding is not None:
            self.members[binding.var] = binding
        return ok

    def _follow(self, e: Expr):
        binding = self.bound.get(e) if isinstance(e, Var) else None
        return (binding.value, binding) if binding is not None else (e, None)


def _same(a: Expr, b: Expr) -> bool:
    return a is b or (not isinstance(a, Var) and not isinstance(b, Var) and a == b)


def _tensor(e: Expr) -> TensorStructInfo | None:
    sinfo = e.sinfo
    return sinfo if isinstance(sinfo, TensorStructInfo) else None


def _shape(e: Expr) -> tuple | None:
    tensor = _tensor(e)
    return None if tensor is None or tensor.shape is None else tuple(tensor.shape)


def _same_dims(shape: tuple | None, want: tuple) -> bool:
    if shape is None or len(shape) != len(want):
        return False
    analyzer = arith.Analyzer(nonnegative=True)
    return all(w is None or analyzer.prove_equal(d, w) for d, w in zip(shape, want))
