"""Walking and rebuilding function bodies: the one traversal every graph pass shares."""

from __future__ import annotations

from collections.abc import Callable

from ..ir.expr import (
    Binding,
    Call,
    DataflowBlock,
    Expr,
    Function,
    If,
    MatchCast,
    SeqExpr,
    Tuple,
    TupleGetItem,
    Var,
    VarBinding,
    with_struct_info,
)
from ..ir.module import IRModule

# binding, inside a dataflow block? -> the bindings that replace it
BindingRewrite = Callable[[Binding, bool], list]


def map_graph_functions(mod: IRModule, fn: Callable[[str, Function], Function]) -> IRModule:
    functions = dict(mod.functions)
    for name, func in mod.functions.items():
        if isinstance(func, Function):
            functions[name] = fn(name, func)
    return IRModule(functions, mod.global_infos)


def rewrite_function(func: Function, rewrite: BindingRewrite, body: Callable[[Expr], Expr] | None = None) -> Function:
    seq = rewrite_seq(func.body, rewrite, body)
    return Function(func.params, seq, func.ret_struct_info, func.attrs, func.pure)


def rewrite_seq(seq: SeqExpr, rewrite: BindingRewrite, body: Callable[[Expr], Expr] | None = None) -> SeqExpr:
    blocks = []
    for block in seq.blocks:
        bindings = []
        dataflow = isinstance(block, DataflowBlock)
        for binding in block.bindings:
            value = binding.value
            if isinstance(value, If):  # rewrite inside both arms first
                arms = (rewrite_seq(value.true_branch, rewrite, body), rewrite_seq(value.false_branch, rewrite, body))
                binding = VarBinding(binding.var, with_struct_info(If(value.cond, *arms), value.struct_info))
            bindings.extend(rewrite(binding, dataflow))
        if bindings:
            blocks.append(type(block)(tuple(bindings)))
    result = body(seq.body) if body else seq.body
    return SeqExpr(tuple(blocks), result)


def substitute_vars(expr: Expr, mapping: dict[Var, Expr]) -> Expr:
    """``expr`` with variables replaced (operands only: calls, tuples, tuple items)."""
    if isinstance(expr, Var):
        return mapping.get(expr, expr)
    if isinstance(expr, Tuple):
        fields = tuple(substitute_vars(f, mapping) for f in expr.fields)
        return Tuple(fields)
    if isinstance(expr, TupleGetItem):
        return with_struct_info(TupleGetItem(substitute_vars(expr.tuple_value, mapping), expr.index),
                                expr.struct_info)
    if isinstance(expr, Call):
        op = mapping.get(expr.op, expr.op) if isinstance(expr.op, Var) else expr.op  # a call through a variable
        args = tuple(substitute_vars(a, mapping) for a in expr.args)
        return with_struct_info(Call(op, args, expr.attrs, expr.sinfo_args), expr.struct_info)
    return expr


def used_vars(expr: Expr) -> dict[Var, None]:
    """The variables ``expr`` reads, each once, in order of first use: an ordered set (a dict), so
    that what is built from it (a fused function's parameters) is the same in every run."""
    found: dict[Var, None] = {}
    _collect_vars(expr, found)
    return found


def _collect_vars(expr: Expr, found: dict[Var, None]) -> None:
    if isinstance(expr, Var):
        found.setdefault(expr, None)
    elif isinstance(expr, Tuple):
        for f in expr.fields:
            _collect_vars(f, found)
    elif isinstance(expr, TupleGetItem):
        _collect_vars(expr.tuple_value, found)
    elif isinstance(expr, Call):
        if isinstance(expr.op, Var):
            _collect_vars(expr.op, found)
        for arg in expr.args:
            _collect_vars(arg, found)
    elif isinstance(expr, If):
        _collect_vars(expr.cond, found)
        for arm in (expr.true_branch, expr.false_branch):
            for block in arm.blocks:
                for b in block.bindings:
                    _collect_vars(b.value, found)
            _collect_vars(arm.body, found)


def is_match_cast(binding: Binding) -> bool:
    return isinstance(binding, MatchCast)
