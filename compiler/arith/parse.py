"""Read an integer expression from text such as "n * 4 + 1" or "T.min(n, 2048)"."""

from __future__ import annotations

import ast

from .expr import Add, FloorDiv, FloorMod, IntImm, Max, Min, Mul, PrimExpr, Sub, Var

_BINOPS = {ast.Add: Add, ast.Sub: Sub, ast.Mult: Mul, ast.FloorDiv: FloorDiv, ast.Mod: FloorMod}
_CALLS = {"min": Min, "max": Max, "T.min": Min, "T.max": Max}


def parse_expr(text: str) -> PrimExpr:
    """Parse ``text``; every name becomes a variable. Raises ValueError on anything else."""
    try:
        tree = ast.parse(text.strip(), mode="eval").body
    except SyntaxError:
        raise ValueError(f"not an integer expression: {text!r}") from None
    return from_ast(tree, lambda name: Var(name), text)


def from_ast(node: ast.AST, resolve, text: str = "") -> PrimExpr:
    """Build an expression from a Python AST node; ``resolve(name)`` gives each variable."""
    if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
        return IntImm(node.value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        operand = from_ast(node.operand, resolve, text)
        return IntImm(-operand.value) if isinstance(operand, IntImm) else Mul(IntImm(-1), operand)
    if isinstance(node, ast.Name):
        return resolve(node.id)
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        return _BINOPS[type(node.op)](from_ast(node.left, resolve, text), from_ast(node.right, resolve, text))
    if isinstance(node, ast.Call) and _call_name(node.func) in _CALLS and len(node.args) == 2:
        a, b = (from_ast(arg, resolve, text) for arg in node.args)
        return _CALLS[_call_name(node.func)](a, b)
    raise ValueError(f"not an integer expression: {text or ast.dump(node)!r}")


def _call_name(func: ast.AST) -> str | None:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
        return f"{func.value.id}.{func.attr}"
    return None
