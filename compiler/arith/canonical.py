"""Canonical form: an expression as a polynomial over atoms.

An *atom* is a variable or a node that is not polynomial (``floordiv``,
``floormod``, ``min``, ``max``) whose operands are themselves canonical. A
polynomial maps a monomial (a sorted tuple of atoms, repeated for powers) to
its integer coefficient; the empty monomial holds the constant. Two
expressions with the same canonical polynomial are equal for every value of
their variables, so ``n*4 == 4*n`` and ``(n+1)*4 - 4 == 4*n`` come for free.

Rewrites that depend on variable ranges (``min(n, n+1) -> n``,
``(n % 8) // 8 -> 0``) consult an ``interval_of`` callback supplied by the
analyzer; every rewrite here is exact for all integers otherwise.
"""

from __future__ import annotations

from collections.abc import Callable
from math import gcd

from .expr import (
    Add,
    FloorDiv,
    FloorMod,
    IntImm,
    Max,
    Min,
    Mul,
    PrimExpr,
    Sub,
    Var,
    to_source,
)
from .interval import Interval

Monomial = tuple[PrimExpr, ...]
Poly = dict[Monomial, int]

_ATOM_RANK = {Var: 0, FloorDiv: 1, FloorMod: 2, Min: 3, Max: 4}


def atom_key(atom: PrimExpr) -> tuple:
    return (_ATOM_RANK[type(atom)], to_source(atom))


def monomial_key(mono: Monomial) -> tuple:
    # Higher degree first, then by the atoms' text: a stable, readable order.
    return (-len(mono), tuple(atom_key(a) for a in mono))


def const_poly(value: int) -> Poly:
    return {(): value} if value else {}


def poly_add(p: Poly, q: Poly, sign: int = 1) -> Poly:
    out = dict(p)
    for mono, coeff in q.items():
        value = out.get(mono, 0) + sign * coeff
        if value:
            out[mono] = value
        else:
            out.pop(mono, None)
    return out


def poly_mul(p: Poly, q: Poly) -> Poly:
    out: Poly = {}
    for m1, c1 in p.items():
        for m2, c2 in q.items():
            mono = tuple(sorted(m1 + m2, key=atom_key))
            value = out.get(mono, 0) + c1 * c2
            if value:
                out[mono] = value
            else:
                out.pop(mono, None)
    return out


def poly_constant(p: Poly) -> int | None:
    """The value of ``p`` if it has no variables, else None."""
    if not p:
        return 0
    if len(p) == 1 and () in p:
        return p[()]
    return None


def poly_to_expr(p: Poly) -> PrimExpr:
    """Readable expression for a polynomial: positive terms first, constant last."""
    terms = sorted((m for m in p if m), key=monomial_key)
    positive = [m for m in terms if p[m] > 0]
    negative = [m for m in terms if p[m] < 0]
    constant = p.get((), 0)
    expr: PrimExpr | None = None
    for mono in positive:
        term = _monomial_expr(mono, p[mono])
        expr = term if expr is None else Add(expr, term)
    for mono in negative:
        if expr is None:
            expr = _monomial_expr(mono, p[mono])
        else:
            expr = Sub(expr, _monomial_expr(mono, -p[mono]))
    if expr is None:
        return IntImm(constant)
    if constant > 0:
        expr = Add(expr, IntImm(constant))
    elif constant < 0:
        expr = Sub(expr, IntImm(-constant))
    return expr


def _monomial_expr(mono: Monomial, coeff: int) -> PrimExpr:
    expr = mono[0]
    for atom in mono[1:]:
        expr = Mul(expr, atom)
    return expr if coeff == 1 else Mul(expr, IntImm(coeff))


IntervalOf = Callable[[Poly], Interval]


class Canonicalizer:
    """Turns expressions into canonical polynomials.

    ``interval_of`` gives the range of a polynomial under the caller's
    variable bounds; without it, only rewrites valid for all integers apply.
    """

    def __init__(self, interval_of: IntervalOf | None = None):
        self.interval_of = interval_of or (lambda poly: _constant_interval(poly))

    def to_poly(self, expr: PrimExpr) -> Poly:
        if isinstance(expr, IntImm):
            return const_poly(expr.value)
        if isinstance(expr, Var):
            return {(expr,): 1}
        if isinstance(expr, Add):
            return poly_add(self.to_poly(expr.a), self.to_poly(expr.b))
        if isinstance(expr, Sub):
            return poly_add(self.to_poly(expr.a), self.to_poly(expr.b), -1)
        if isinstance(expr, Mul):
            return poly_mul(self.to_poly(expr.a), self.to_poly(expr.b))
        if isinstance(expr, FloorDiv):
            return self._floordiv(self.to_poly(expr.a), self.to_poly(expr.b))
        if isinstance(expr, FloorMod):
            return self._floormod(self.to_poly(expr.a), self.to_poly(expr.b))
        if isinstance(expr, (Min, Max)):
            return self._min_max(type(expr), self.to_poly(expr.a), self.to_poly(expr.b))
        raise TypeError(f"unknown expression node {expr!r}")

    # -- division ----------------------------------------------------------

    def _floordiv(self, num: Poly, den: Poly) -> Poly:
        c = poly_constant(den)
        if c is None:
            quotient = _exact_quotient(num, den)
            if quotient is not None:
                return quotient
            return _atom(FloorDiv(poly_to_expr(num), poly_to_expr(den)))
        if c == 0:
            return _atom(FloorDiv(poly_to_expr(num), IntImm(0)))
        if c < 0:  # floor(x / c) == floor(-x / -c)
            num, c = poly_add({}, num, -1), -c
        # (c*q + r) // c == q + r // c for any integers.
        whole, rest = _split_multiples(num, c)
        return poly_add(whole, self._div_remainder(rest, c))

    def _div_remainder(self, rest: Poly, c: int) -> Poly:
        value = poly_constant(rest)
        if value is not None:
            return const_poly(value // c)
        g = gcd(c, *rest.values())
        rest, c = {m: v // g for m, v in rest.items()}, c // g
        if c == 1:
            return rest
        k = self._known_quotient(rest, c)
        if k is not None:
            return const_poly(k)
        return _atom(FloorDiv(poly_to_expr(rest), IntImm(c)))

    def _floormod(self, num: Poly, den: Poly) -> Poly:
        c = poly_constant(den)
        if c is None:
            if _exact_quotient(num, den) is not None:
                return {}
            return _atom(FloorMod(poly_to_expr(num), poly_to_expr(den)))
        if c == 0:
            return _atom(FloorMod(poly_to_expr(num), IntImm(0)))
        if c < 0:  # x % c == -((-x) % -c)
            return poly_add({}, self._floormod(poly_add({}, num, -1), const_poly(-c)), -1)
        _, rest = _split_multiples(num, c)
        value = poly_constant(rest)
        if value is not None:
            return const_poly(value % c)
        # (g*r) % (g*c) == g * (r % c)
        g = gcd(c, *rest.values())
        rest, c = {m: v // g for m, v in rest.items()}, c // g
        if c == 1:
            return {}
        k = self._known_quotient(rest, c)
        if k is not None:
            inner = poly_add(rest, const_poly(-k * c))
        else:
            inner = _atom(FloorMod(poly_to_expr(rest), IntImm(c)))
        return {m: v * g for m, v in inner.items()}

    def _known_quotient(self, rest: Poly, c: int) -> int | None:
        """``rest // c`` when the bounds put ``rest`` in one multiple of ``c``."""
        interval = self.interval_of(rest)
        if interval.lo is None or interval.hi is None:
            return None
        if interval.lo // c == interval.hi // c:
            return interval.lo // c
        return None

    # -- min / max ---------------------------------------------------------

    def _min_max(self, node: type, a: Poly, b: Poly) -> Poly:
        diff = self.interval_of(poly_add(a, b, -1))
        a_le_b = diff.hi is not None and diff.hi <= 0
        b_le_a = diff.lo is not None and diff.lo >= 0
        if node is Min and a_le_b or node is Max and b_le_a:
            return a
        if node is Min and b_le_a or node is Max and a_le_b:
            return b
        # min(a + t, b + t) == min(a, b) + t: pull out the shared terms.
        shared = {m: v for m, v in a.items() if b.get(m) == v}
        a = poly_add(a, shared, -1)
        b = poly_add(b, shared, -1)
        first, second = sorted((poly_to_expr(a), poly_to_expr(b)), key=_expr_key)
        return poly_add(shared, _atom(node(first, second)))


def _expr_key(expr: PrimExpr) -> tuple:
    return (type(expr).__name__, to_source(expr))


def _atom(atom: PrimExpr) -> Poly:
    return {(atom,): 1}


def _split_multiples(p: Poly, c: int) -> tuple[Poly, Poly]:
    """Split ``p`` into ``(q, r)`` with ``p == c*q + r``; ``r`` keeps the other terms."""
    whole: Poly = {}
    rest: Poly = {}
    for mono, coeff in p.items():
        if coeff % c == 0:
            whole[mono] = coeff // c
        else:
            rest[mono] = coeff
    return whole, rest


def _exact_quotient(num: Poly, den: Poly) -> Poly | None:
    """``num / den`` when a single-term ``den`` divides every term of ``num``."""
    if len(den) != 1:
        return None
    ((dmono, dcoeff),) = den.items()
    if not dmono:
        return None
    out: Poly = {}
    for mono, coeff in num.items():
        remaining = list(mono)
        for atom in dmono:
            if atom not in remaining:
                return None
            remaining.remove(atom)
        if coeff % dcoeff:
            return None
        out[tuple(remaining)] = coeff // dcoeff
    return out


def _constant_interval(poly: Poly) -> Interval:
    value = poly_constant(poly)
    return Interval() if value is None else Interval.point(value)
