"""Outlining a group of bindings into a fused function: what fuse_ops and fuse_ops_by_pattern share.

The function is the contract ``fuse_tir`` reads: one dataflow block whose last binding is the
result, tensor parameters first, and, when the group's shapes use symbolic values its parameters
cannot bind (``n * 2`` with no ``n``), one extra ``R.Shape`` parameter carrying them (the Relax
paper's Figure 5).
"""

from __future__ import annotations

from collections.abc import Callable

from .. import arith
from ..ir.expr import (
    Call,
    Constant,
    DataflowBlock,
    DataflowVar,
    Expr,
    Function,
    GlobalVar,
    PrimValue,
    SeqExpr,
    ShapeExpr,
    Tuple,
    TupleGetItem,
    Var,
    VarBinding,
    attr_prims,
    with_struct_info,
)
from ..ir.struct_info import ShapeStructInfo, defining_vars, sinfo_vars
from .rewrite import substitute_vars


def group_inputs(members: list[VarBinding], lift: Callable[[Expr], bool] = lambda c: False) -> list[Expr]:
    """What the group reads from outside it, in order of first use: variables, and the constants and
    prim values ``lift`` picks (a kernel takes scalar constants inline, larger ones as buffers)."""
    inside = {b.var for b in members}
    found: dict = {}
    for b in members:
        for leaf in _leaves(b.value):
            if isinstance(leaf, Var) and leaf not in inside:
                found.setdefault(leaf, leaf)
            elif not isinstance(leaf, Var) and lift(leaf):
                found.setdefault(id(leaf), leaf)
    return list(found.values())


def outline_group(members: list[VarBinding], name: str, attrs: tuple, caller: Function,
                  lift: Callable[[Expr], bool] = lambda c: False) -> tuple[Function, Call]:
    """``members`` (in block order, the result last) as function ``name`` and the call replacing them."""
    inputs = group_inputs(members, lift)
    params = [Var(v.name_hint if isinstance(v, Var) else f"const{i}", v.struct_info) for i, v in enumerate(inputs)]
    var_map = {v: p for v, p in zip(inputs, params) if isinstance(v, Var)}
    const_map = {id(v): p for v, p in zip(inputs, params) if not isinstance(v, Var)}
    bindings = []
    root = members[-1]
    for b in members:
        value = substitute_vars(_replace_constants(b.value, const_map), var_map) if const_map else \
            substitute_vars(b.value, var_map)
        var = Var(b.var.name_hint, b.var.struct_info) if b is root else DataflowVar(b.var.name_hint, b.var.struct_info)
        var_map[b.var] = var
        bindings.append(VarBinding(var, value))
    # Symbolic variables the parameters cannot bind come in as one extra shape parameter.
    bound = {v.name for p in params for v in defining_vars(p.struct_info)}
    needed = []
    for b in bindings:
        for v in sinfo_vars(b.var.struct_info) + [v for p in params for v in sinfo_vars(p.struct_info)] \
                + _value_vars(b.value):
            if v.name not in bound and v not in needed:
                needed.append(v)
    args: list = list(inputs)
    if needed:
        params.append(Var("sym", ShapeStructInfo(tuple(needed))))
        args.append(ShapeExpr(tuple(needed)))
    body = SeqExpr((DataflowBlock(tuple(bindings)),), var_map[root.var])
    func = Function(tuple(params), body, root.var.struct_info,
                    attrs + _bounds(caller, bound | {v.name for v in needed}), True)
    call = with_struct_info(Call(GlobalVar(name, func.struct_info), tuple(args)), root.var.struct_info)
    return func, call


def _bounds(caller: Function, names: set[str]) -> tuple:
    """The caller's bounds on the symbolic variables the fused function uses: its members' struct
    info was deduced under them, so it reads back (script) only with them."""
    attrs = []
    for key in ("tir_var_upper_bound", "tir_var_lower_bound"):
        bounds = {name: value for name, value in (caller.attr(key) or {}).items() if name in names}
        if bounds:
            attrs.append((key, bounds))
    return tuple(attrs)


def _value_vars(expr: Expr) -> list[arith.Var]:
    """Symbolic variables a member reads that no struct info shows: in operator attributes
    (``arange(start=total - n)``), shape values and prim values."""
    if isinstance(expr, ShapeExpr):
        return [v for value in expr.values for v in arith.free_vars(value)]
    if isinstance(expr, PrimValue):
        return list(arith.free_vars(expr.value))
    if isinstance(expr, Tuple):
        return [v for f in expr.fields for v in _value_vars(f)]
    if isinstance(expr, Call):
        found = [v for a in expr.args for v in _value_vars(a)]
        return found + [v for _, value in expr.attrs for prim in attr_prims(value) for v in arith.free_vars(prim)]
    return []


def _leaves(expr: Expr):
    if isinstance(expr, (Var, Constant, PrimValue)):
        yield expr
    elif isinstance(expr, Tuple):
        for f in expr.fields:
            yield from _leaves(f)
    elif isinstance(expr, TupleGetItem):
        yield from _leaves(expr.tuple_value)
    elif isinstance(expr, Call):
        for arg in expr.args:
            yield from _leaves(arg)


def _replace_constants(expr: Expr, mapping: dict[int, Var]) -> Expr:
    if isinstance(expr, (Constant, PrimValue)):
        return mapping.get(id(expr), expr)
    if isinstance(expr, Tuple):
        return Tuple(tuple(_replace_constants(f, mapping) for f in expr.fields))
    if isinstance(expr, Call):
        args = tuple(_replace_constants(a, mapping) for a in expr.args)
        return with_struct_info(Call(expr.op, args, expr.attrs, expr.sinfo_args), expr.struct_info)
    return expr


class FreshNames:
    """Function names not yet taken in a module."""

    def __init__(self, taken):
        self.taken = set(taken)

    def __call__(self, base: str) -> str:
        base = base[:60]
        name, count = base, 0
        while name in self.taken:
            count += 1
            name = f"{base}{count}"
        self.taken.add(name)
        return name
