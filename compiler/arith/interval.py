"""Integer intervals with open ends, the abstract domain behind bounds proofs.

``None`` stands for an unbounded end (minus or plus infinity). Every operation
returns an interval that contains all results of the operation on members of
its operands, which is what makes the provers sound.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Interval:
    lo: int | None = None
    hi: int | None = None

    @staticmethod
    def point(value: int) -> Interval:
        return Interval(value, value)

    @property
    def is_point(self) -> bool:
        return self.lo is not None and self.lo == self.hi

    def __add__(self, other: Interval) -> Interval:
        lo = None if self.lo is None or other.lo is None else self.lo + other.lo
        hi = None if self.hi is None or other.hi is None else self.hi + other.hi
        return Interval(lo, hi)

    def scale(self, k: int) -> Interval:
        if k == 0:
            return Interval.point(0)
        lo = None if self.lo is None else self.lo * k
        hi = None if self.hi is None else self.hi * k
        return Interval(lo, hi) if k > 0 else Interval(hi, lo)

    def __mul__(self, other: Interval) -> Interval:
        if self.is_point:
            return other.scale(self.lo)
        if other.is_point:
            return self.scale(other.lo)
        # Products of the four corners; an unbounded corner makes that side
        # unbounded unless the other factor is known to be zero there.
        corners = []
        for a in (self.lo, self.hi):
            for b in (other.lo, other.hi):
                if a is None or b is None:
                    return _product_with_infinite(self, other)
                corners.append(a * b)
        return Interval(min(corners), max(corners))

    def floordiv(self, c: int) -> Interval:
        """Interval of ``x // c`` for a positive constant ``c``."""
        assert c > 0
        lo = None if self.lo is None else self.lo // c
        hi = None if self.hi is None else self.hi // c
        return Interval(lo, hi)

    def union(self, other: Interval) -> Interval:
        lo = None if self.lo is None or other.lo is None else min(self.lo, other.lo)
        hi = None if self.hi is None or other.hi is None else max(self.hi, other.hi)
        return Interval(lo, hi)

    def minimum(self, other: Interval) -> Interval:
        lo = None if self.lo is None or other.lo is None else min(self.lo, other.lo)
        hi = _min_end(self.hi, other.hi)
        return Interval(lo, hi)

    def maximum(self, other: Interval) -> Interval:
        lo = _max_end(self.lo, other.lo)
        hi = None if self.hi is None or other.hi is None else max(self.hi, other.hi)
        return Interval(lo, hi)


def _min_end(a: int | None, b: int | None) -> int | None:
    # An upper end of None is +infinity, so the other end wins.
    if a is None:
        return b
    if b is None:
        return a
    return min(a, b)


def _max_end(a: int | None, b: int | None) -> int | None:
    # A lower end of None is -infinity, so the other end wins.
    if a is None:
        return b
    if b is None:
        return a
    return max(a, b)


def _product_with_infinite(x: Interval, y: Interval) -> Interval:
    """Product when some end is unbounded: keep only the sign information."""

    def nonneg(i: Interval) -> bool:
        return i.lo is not None and i.lo >= 0

    def nonpos(i: Interval) -> bool:
        return i.hi is not None and i.hi <= 0

    if nonneg(x) and nonneg(y):
        return Interval(x.lo * y.lo, None)
    if nonpos(x) and nonpos(y):
        return Interval(x.hi * y.hi, None)
    if (nonneg(x) and nonpos(y)) or (nonpos(x) and nonneg(y)):
        lo_side = x if nonpos(x) else y
        hi_side = y if lo_side is x else x
        return Interval(None, lo_side.hi * hi_side.lo)
    return Interval(None, None)
