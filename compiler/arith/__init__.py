"""Symbolic integer arithmetic for shapes: expressions, canonical form, bounds, proofs."""

from .analyzer import (
    Analyzer,
    lower_bound,
    prove_equal,
    prove_less,
    prove_less_equal,
    simplify,
    upper_bound,
)
from .expr import (
    Add,
    FloorDiv,
    FloorMod,
    IntImm,
    IntLike,
    Max,
    Min,
    Mul,
    PrimExpr,
    Sub,
    Var,
    as_expr,
    evaluate,
    free_vars,
    max_expr,
    min_expr,
    substitute,
    to_source,
)
from .interval import Interval
from .parse import parse_expr

__all__ = [
    "Add", "Analyzer", "FloorDiv", "FloorMod", "IntImm", "IntLike", "Interval", "Max", "Min",
    "Mul", "PrimExpr", "Sub", "Var", "as_expr", "evaluate", "free_vars", "lower_bound",
    "max_expr", "min_expr", "parse_expr", "prove_equal", "prove_less", "prove_less_equal", "simplify",
    "substitute", "to_source", "upper_bound",
]
