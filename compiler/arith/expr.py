"""Symbolic integer expressions: the vocabulary of shapes.

A dimension such as ``n * 4`` or ``(n + 63) // 64`` is a small tree of frozen
nodes. Nodes compare structurally, so two trees are ``==`` exactly when they
have the same form; whether they have the same *value* is a question for
``simplify`` and the provers (``tessera.arith.analyzer``).

Variables are identified by name: a function's symbolic variables have
distinct names, and naming them makes the text format round-trip trivially.
All arithmetic is on (unbounded) integers with floor semantics, as Python's
``//`` and ``%`` and TVM's ``floordiv``/``floormod``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Union

IntLike = Union["PrimExpr", int]


class PrimExpr:
    """Base of every integer expression node; supplies the Python operators."""

    __slots__ = ()

    def __add__(self, other: IntLike) -> PrimExpr:
        return Add(self, as_expr(other))

    def __radd__(self, other: IntLike) -> PrimExpr:
        return Add(as_expr(other), self)

    def __sub__(self, other: IntLike) -> PrimExpr:
        return Sub(self, as_expr(other))

    def __rsub__(self, other: IntLike) -> PrimExpr:
        return Sub(as_expr(other), self)

    def __mul__(self, other: IntLike) -> PrimExpr:
        return Mul(self, as_expr(other))

    def __rmul__(self, other: IntLike) -> PrimExpr:
        return Mul(as_expr(other), self)

    def __floordiv__(self, other: IntLike) -> PrimExpr:
        return FloorDiv(self, as_expr(other))

    def __rfloordiv__(self, other: IntLike) -> PrimExpr:
        return FloorDiv(as_expr(other), self)

    def __mod__(self, other: IntLike) -> PrimExpr:
        return FloorMod(self, as_expr(other))

    def __rmod__(self, other: IntLike) -> PrimExpr:
        return FloorMod(as_expr(other), self)

    def __neg__(self) -> PrimExpr:
        return Mul(IntImm(-1), self)

    def __str__(self) -> str:
        return to_source(self)


@dataclass(frozen=True, slots=True)
class IntImm(PrimExpr):
    value: int

    def __post_init__(self):
        if isinstance(self.value, bool) or not isinstance(self.value, int):
            raise TypeError(f"IntImm needs an int, got {self.value!r}")


@dataclass(frozen=True, slots=True)
class Var(PrimExpr):
    """A named integer variable such as a sequence length ``n``."""

    name: str

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name.isidentifier():
            raise ValueError(f"a symbolic variable needs an identifier name, got {self.name!r}")


@dataclass(frozen=True, slots=True)
class Add(PrimExpr):
    a: PrimExpr
    b: PrimExpr


@dataclass(frozen=True, slots=True)
class Sub(PrimExpr):
    a: PrimExpr
    b: PrimExpr


@dataclass(frozen=True, slots=True)
class Mul(PrimExpr):
    a: PrimExpr
    b: PrimExpr


@dataclass(frozen=True, slots=True)
class FloorDiv(PrimExpr):
    a: PrimExpr
    b: PrimExpr


@dataclass(frozen=True, slots=True)
class FloorMod(PrimExpr):
    a: PrimExpr
    b: PrimExpr


@dataclass(frozen=True, slots=True)
class Min(PrimExpr):
    a: PrimExpr
    b: PrimExpr


@dataclass(frozen=True, slots=True)
class Max(PrimExpr):
    a: PrimExpr
    b: PrimExpr


BINARY_NODES = (Add, Sub, Mul, FloorDiv, FloorMod, Min, Max)


def as_expr(value: IntLike) -> PrimExpr:
    """Lift an int (or an existing expression) to a PrimExpr."""
    if isinstance(value, PrimExpr):
        return value
    if isinstance(value, bool):
        raise TypeError("a bool is not a shape dimension")
    if isinstance(value, int):
        return IntImm(value)
    try:  # numpy integers
        import numbers

        if isinstance(value, numbers.Integral):
            return IntImm(int(value))
    except ImportError:  # pragma: no cover
        pass
    raise TypeError(f"cannot use {value!r} ({type(value).__name__}) as an integer expression")


def min_expr(a: IntLike, b: IntLike) -> PrimExpr:
    return Min(as_expr(a), as_expr(b))


def max_expr(a: IntLike, b: IntLike) -> PrimExpr:
    return Max(as_expr(a), as_expr(b))


def free_vars(expr: PrimExpr) -> list[Var]:
    """Variables of ``expr`` in order of first appearance, each once."""
    seen: dict[Var, None] = {}

    def visit(e: PrimExpr) -> None:
        if isinstance(e, Var):
            seen.setdefault(e)
        elif isinstance(e, BINARY_NODES):
            visit(e.a)
            visit(e.b)

    visit(expr)
    return list(seen)


def evaluate(expr: IntLike, env: dict[str, int] | None = None) -> int:
    """The integer value of ``expr`` with variables taken from ``env`` (by name)."""
    env = env or {}
    expr = as_expr(expr)
    if isinstance(expr, IntImm):
        return expr.value
    if isinstance(expr, Var):
        if expr.name not in env:
            raise KeyError(f"symbolic variable '{expr.name}' has no value")
        return int(env[expr.name])
    a = evaluate(expr.a, env)
    b = evaluate(expr.b, env)
    if isinstance(expr, Add):
        return a + b
    if isinstance(expr, Sub):
        return a - b
    if isinstance(expr, Mul):
        return a * b
    if isinstance(expr, (FloorDiv, FloorMod)):
        if b == 0:
            raise ZeroDivisionError(f"division by zero in {to_source(expr)}")
        return a // b if isinstance(expr, FloorDiv) else a % b
    if isinstance(expr, Min):
        return min(a, b)
    if isinstance(expr, Max):
        return max(a, b)
    raise TypeError(f"unknown expression node {expr!r}")


def substitute(expr: IntLike, mapping: dict) -> PrimExpr:
    """Replace variables (keys: Var or name) by expressions or ints. No simplification."""
    by_name = {(k.name if isinstance(k, Var) else k): as_expr(v) for k, v in mapping.items()}
    return _substitute(as_expr(expr), by_name)


def _substitute(expr: PrimExpr, by_name: dict[str, PrimExpr]) -> PrimExpr:
    if isinstance(expr, Var):
        return by_name.get(expr.name, expr)
    if isinstance(expr, BINARY_NODES):
        a, b = _substitute(expr.a, by_name), _substitute(expr.b, by_name)
        if a is expr.a and b is expr.b:
            return expr
        return type(expr)(a, b)
    return expr


# ---------------------------------------------------------------------------
# Source form. Precedence follows Python so the text parses back with `ast`.

_INFIX = {Add: ("+", 1), Sub: ("-", 1), Mul: ("*", 2), FloorDiv: ("//", 2), FloorMod: ("%", 2)}


def to_source(expr: IntLike, call_prefix: str = "") -> str:
    """Python-syntax text of ``expr``; ``call_prefix`` is put before min/max (e.g. "T.")."""
    return _source(as_expr(expr), call_prefix, 0)


def _source(expr: PrimExpr, prefix: str, outer: int) -> str:
    if isinstance(expr, IntImm):
        text = str(expr.value)
        return f"({text})" if expr.value < 0 and outer > 0 else text
    if isinstance(expr, Var):
        return expr.name
    if isinstance(expr, (Min, Max)):
        name = "min" if isinstance(expr, Min) else "max"
        return f"{prefix}{name}({_source(expr.a, prefix, 0)}, {_source(expr.b, prefix, 0)})"
    symbol, level = _INFIX[type(expr)]
    # Left-associative: the right operand needs parentheses at equal precedence.
    text = f"{_source(expr.a, prefix, level)} {symbol} {_source(expr.b, prefix, level + 1)}"
    return f"({text})" if level < outer else text
