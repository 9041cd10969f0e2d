"""bind_results: every sequence ends in a variable or a tuple of leaves.

A function (or an ``If`` arm) may end in an expression such as ``R.add(a, b)`` with no binding of
its own, as ``BlockBuilder.emit_func_output(op.add(...))`` and the text format allow. Passes after
this one (legalization, allocation, the VM's code generator) see calls only as bound values, so
the call gets a binding: ``result = R.add(a, b)``, and the sequence ends in ``result``.
"""

from __future__ import annotations

from ..ir.expr import BindingBlock, Call, Function, If, SeqExpr, Tuple, TupleGetItem, Var, VarBinding
from ..ir.module import IRModule
from .rewrite import map_graph_functions, rewrite_seq


def bind_results(mod: IRModule) -> IRModule:
    def normalize(name: str, func: Function) -> Function:
        if func.attr("Primitive"):
            return func
        names = _Names()
        body = _bind(rewrite_seq(func.body, lambda b, dataflow: [_arms(b, names)]), names)
        return Function(func.params, body, func.ret_struct_info, func.attrs, func.pure)

    return map_graph_functions(mod, normalize)


class _Names:
    """Fresh names for the new bindings, distinct within the function (the text format needs it)."""

    def __init__(self):
        self.count = 0

    def __call__(self) -> str:
        self.count += 1
        return "result" if self.count == 1 else f"result{self.count - 1}"


def _arms(binding, names: _Names):
    value = binding.value
    if isinstance(binding, VarBinding) and isinstance(value, If):
        arms = If(value.cond, _bind(value.true_branch, names), _bind(value.false_branch, names), value.struct_info)
        return VarBinding(binding.var, arms)
    return binding


def _bind(seq: SeqExpr, names: _Names) -> SeqExpr:
    extra = []

    def leaf(expr):
        if isinstance(expr, Tuple):
            return Tuple(tuple(leaf(f) for f in expr.fields), expr.struct_info)
        if isinstance(expr, (Call, If, TupleGetItem)):
            var = Var(names(), expr.struct_info)
            value = expr if not isinstance(expr, If) else _arms(VarBinding(var, expr), names).value
            extra.append(VarBinding(var, value))
            return var
        return expr

    body = leaf(seq.body)
    if not extra:
        return seq
    return SeqExpr(seq.blocks + (BindingBlock(tuple(extra)),), body)
