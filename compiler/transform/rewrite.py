"""Walking and rebuilding function bodies: the one traversal every graph pass shares."""

from __future__ import annotations

from collections.abc import Callable

from ..ir.expr import (
    Binding,
    Call,
    DataflowBlock,
    Expr,
    Function,
    GlobalVar,
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


def walk_bindings(seq: SeqExpr):
    """Every binding of ``seq``, those in the arms of its ifs included, in program order."""
    for block in seq.blocks:
        for binding in block.bindings:
            yield binding
            if isinstance(binding.value, If):
                yield from walk_bindings(binding.value.true_branch)
                yield from walk_bindings(binding.value.false_branch)


def referenced_globals(func: Function) -> set[str]:
    """Names of the module functions ``func`` refers to, called or passed as values (a call_tir's
    kernel among them: callers that want graph functions intersect with the module's)."""
    found: set[str] = set()

    def visit(expr: Expr) -> None:
        if isinstance(expr, GlobalVar):
            found.add(expr.name)
        elif isinstance(expr, Call):
            visit(expr.op)
            for arg in expr.args:
                visit(arg)
        elif isinstance(expr, Tuple):
            for item in expr.fields:
                visit(item)
        elif isinstance(expr, TupleGetItem):
            visit(expr.tuple_value)
        elif isinstance(expr, If):
            visit(expr.cond)
            visit(expr.true_branch.body)
            visit(expr.false_branch.body)
        elif isinstance(expr, Function):
            found.update(referenced_globals(expr))

    for binding in walk_bindings(func.body):
        visit(binding.value)
    visit(func.body.body)
    return found


def function_references(mod: IRModule) -> dict[str, set[str]]:
    """For each graph function that is not a fused kernel, the graph functions it refers to."""
    graph = {name: f for name, f in mod.graph_functions().items() if not f.attr("Primitive")}
    return {name: referenced_globals(func) & set(graph) for name, func in graph.items()}


def recursive_functions(refs: dict[str, set[str]]) -> set[str]:
    """The functions that can reach themselves through ``refs``."""
    recursive = set()
    for start in refs:
        seen: set[str] = set()
        stack = list(refs[start])
        while stack:
            name = stack.pop()
            if name == start:
                recursive.add(start)
                break
            if name not in seen:
                seen.add(name)
                stack.extend(refs.get(name, ()))
    return recursive
