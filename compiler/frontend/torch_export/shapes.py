"""torch's symbolic sizes (sympy expressions over its shape symbols s0, s1 ...) as the IR's shape
expressions (tessera.arith) over the importer's shape variables."""

from __future__ import annotations

from ... import arith
from .errors import TorchImportError


def sym_to_prim(expr, symbols: dict, where: str) -> arith.PrimExpr:
    """``expr`` (a sympy expression torch built, or an int) in terms of ``symbols`` (sympy symbol
    name -> arith.Var). Integer arithmetic only: + - * //, %, min, max, integer powers."""
    if isinstance(expr, bool):
        raise TorchImportError(f"{where}: a boolean where a size was expected", "invalid")
    if isinstance(expr, int):
        return arith.IntImm(expr)
    if getattr(expr, "is_Integer", False):
        return arith.IntImm(int(expr))
    if getattr(expr, "is_Symbol", False):
        var = symbols.get(str(expr))
        if var is None:
            raise TorchImportError(f"{where}: size symbol {expr} is not a dimension of any input "
                                   "(a data-dependent size, which the IR cannot take)")
        return var
    kind = type(expr).__name__
    args = [sym_to_prim(arg, symbols, where) for arg in getattr(expr, "args", ())]
    if kind == "Add":
        return _fold(args, lambda a, b: a + b)
    if kind == "Mul":
        return _fold(args, lambda a, b: a * b)
    if kind == "FloorDiv" and len(args) == 2:
        return args[0] // args[1]
    if kind in ("Mod", "PythonMod") and len(args) == 2:
        return args[0] % args[1]
    if kind == "Max":
        return _fold(args, arith.max_expr)
    if kind == "Min":
        return _fold(args, arith.min_expr)
    if kind == "Pow" and len(args) == 2 and isinstance(args[1], arith.IntImm) and args[1].value >= 0:
        return _fold([args[0]] * args[1].value or [arith.IntImm(1)], lambda a, b: a * b)
    raise TorchImportError(f"{where}: the size expression {expr} ({kind}) is not supported")


def _fold(values, combine):
    total = values[0]
    for value in values[1:]:
        total = combine(total, value)
    return total


def is_symint(value) -> bool:
    import torch

    return isinstance(value, torch.SymInt)


def symbol_name(value) -> str | None:
    """The sympy symbol a SymInt stands for, when it is one plain symbol."""
    expr = value.node.expr
    return str(expr) if getattr(expr, "is_Symbol", False) else None
