"""Simplification and proofs under variable bounds.

An ``Analyzer`` knows a range for some variables (``1 <= n <= 2048``) and
answers: the canonical form of an expression, whether ``a == b`` or
``a <= b`` holds for *every* assignment within the ranges, and the smallest
and largest value an expression can take. A prover returning False means
"could not prove", never "proved false".
"""

from __future__ import annotations

from collections.abc import Mapping

from .canonical import Canonicalizer, Poly, poly_add, poly_constant, poly_to_expr
from .expr import FloorDiv, FloorMod, IntLike, Max, Min, PrimExpr, Var, as_expr
from .interval import Interval

BoundsLike = Mapping[str, "tuple[int | None, int | None] | Interval"]


class Analyzer:
    def __init__(self, bounds: BoundsLike | None = None, *, nonnegative: bool = False):
        """``nonnegative``: variables without explicit bounds are at least 0 (shape sizes)."""
        self._default = Interval(0, None) if nonnegative else Interval()
        self._bounds: dict[str, Interval] = {}
        for name, bound in (bounds or {}).items():
            lo, hi = (bound.lo, bound.hi) if isinstance(bound, Interval) else bound
            self.bind(name, lo, hi)
        self._canonicalizer = Canonicalizer(self.interval_of_poly)

    def bind(self, var: Var | str, lo: int | None = None, hi: int | None = None) -> None:
        """Narrow the range of ``var`` to ``[lo, hi]`` (None: unbounded on that side)."""
        name = var.name if isinstance(var, Var) else var
        old = self.bounds_of(name)
        lo = old.lo if lo is None else (lo if old.lo is None else max(lo, old.lo))
        hi = old.hi if hi is None else (hi if old.hi is None else min(hi, old.hi))
        if lo is not None and hi is not None and lo > hi:
            raise ValueError(f"empty range for '{name}': [{lo}, {hi}]")
        self._bounds[name] = Interval(lo, hi)

    def bounds_of(self, var: Var | str) -> Interval:
        return self._bounds.get(var.name if isinstance(var, Var) else var, self._default)

    # -- canonical form ----------------------------------------------------

    def to_poly(self, expr: IntLike) -> Poly:
        return self._canonicalizer.to_poly(as_expr(expr))

    def simplify(self, expr: IntLike) -> PrimExpr:
        return poly_to_expr(self.to_poly(expr))

    # -- ranges ------------------------------------------------------------

    def interval(self, expr: IntLike) -> Interval:
        return self.interval_of_poly(self.to_poly(expr))

    def lower_bound(self, expr: IntLike) -> int | None:
        return self.interval(expr).lo

    def upper_bound(self, expr: IntLike) -> int | None:
        """Largest value of ``expr`` under the bounds, or None if unbounded."""
        return self.interval(expr).hi

    def interval_of_poly(self, poly: Poly) -> Interval:
        total = Interval.point(0)
        for mono, coeff in poly.items():
            term = Interval.point(1)
            # A repeated atom (x*x) is a square: never negative.
            for atom in sorted(set(mono), key=mono.index):
                power = mono.count(atom)
                factor = self._interval_of_atom(atom)
                for _ in range(power - 1):
                    factor = factor * self._interval_of_atom(atom)
                if power % 2 == 0:
                    factor = factor.maximum(Interval.point(0))
                term = term * factor
            total = total + term.scale(coeff)
        return total

    def _interval_of_atom(self, atom: PrimExpr) -> Interval:
        if isinstance(atom, Var):
            return self.bounds_of(atom)
        num = self.interval(atom.a)
        den = self.interval(atom.b)
        if isinstance(atom, FloorDiv):
            if den.is_point and den.lo > 0:
                return num.floordiv(den.lo)
            if den.lo is not None and den.lo > 0 and num.lo is not None and num.lo >= 0:
                hi = None if num.hi is None or den.lo is None else num.hi // den.lo
                low = 0 if den.hi is None else num.lo // den.hi
                return Interval(low, hi)
            return Interval()
        if isinstance(atom, FloorMod):
            if den.lo is not None and den.lo > 0:
                hi = None if den.hi is None else den.hi - 1
                if num.lo is not None and num.lo >= 0:  # x % c <= x for x >= 0
                    hi = num.hi if hi is None else (hi if num.hi is None else min(hi, num.hi))
                return Interval(0, hi)
            return Interval()
        if isinstance(atom, Min):
            return num.minimum(den)
        if isinstance(atom, Max):
            return num.maximum(den)
        raise TypeError(f"not an atom: {atom!r}")

    # -- provers -----------------------------------------------------------

    def prove_equal(self, a: IntLike, b: IntLike) -> bool:
        diff = poly_add(self.to_poly(a), self.to_poly(b), -1)
        if poly_constant(diff) == 0:
            return True
        return self.interval_of_poly(diff) == Interval.point(0)

    def prove_less_equal(self, a: IntLike, b: IntLike) -> bool:
        diff = self.interval_of_poly(poly_add(self.to_poly(b), self.to_poly(a), -1))
        return diff.lo is not None and diff.lo >= 0

    def prove_less(self, a: IntLike, b: IntLike) -> bool:
        return self.prove_less_equal(as_expr(a) + 1, b)

    def prove_greater_equal(self, a: IntLike, b: IntLike) -> bool:
        return self.prove_less_equal(b, a)

    def as_int(self, expr: IntLike) -> int | None:
        """The value of ``expr`` if it does not depend on its variables, else None."""
        interval = self.interval(expr)
        return interval.lo if interval.is_point else None


# Module-level conveniences: one-off questions with explicit bounds.


def simplify(expr: IntLike, bounds: BoundsLike | None = None) -> PrimExpr:
    return Analyzer(bounds).simplify(expr)


def prove_equal(a: IntLike, b: IntLike, bounds: BoundsLike | None = None) -> bool:
    return Analyzer(bounds).prove_equal(a, b)


def prove_less_equal(a: IntLike, b: IntLike, bounds: BoundsLike | None = None) -> bool:
    return Analyzer(bounds).prove_less_equal(a, b)


def prove_less(a: IntLike, b: IntLike, bounds: BoundsLike | None = None) -> bool:
    return Analyzer(bounds).prove_less(a, b)


def upper_bound(expr: IntLike, bounds: BoundsLike | None = None) -> int | None:
    return Analyzer(bounds).upper_bound(expr)


def lower_bound(expr: IntLike, bounds: BoundsLike | None = None) -> int | None:
    return Analyzer(bounds).lower_bound(expr)
