"""Dead-code elimination and constant folding."""

from __future__ import annotations

import numpy as np

from .. import arith
from ..ir.builder import BlockBuilder
from ..ir.expr import (
    Call,
    Constant,
    DataflowBlock,
    DataflowVar,
    ExternFunc,
    Function,
    If,
    MatchCast,
    Op,
    PrimValue,
    ShapeExpr,
    VarBinding,
)
from ..ir.interpreter import ShapeValue
from ..ir.module import IRModule
from .rewrite import map_graph_functions, rewrite_function, substitute_vars, used_vars


def dead_code_elimination(mod: IRModule) -> IRModule:
    """Drop pure bindings whose values nothing uses (repeated until nothing changes)."""
    return map_graph_functions(mod, lambda name, func: _dce(func))


def _dce(func: Function) -> Function:
    while True:
        used = used_vars(func.body.body)
        for block in func.body.blocks:
            for binding in block.bindings:
                used |= used_vars(binding.value)
        kept = rewrite_function(func, lambda binding, dataflow, used=used: (
            [binding] if binding.var in used or not _is_pure(binding) else []))
        if _count(kept) == _count(func):
            return kept
        func = kept


def _count(func: Function) -> int:
    return sum(len(block.bindings) for block in func.body.blocks)


def _is_pure(binding) -> bool:
    if isinstance(binding, MatchCast):
        return False  # it checks a shape at run time
    value = binding.value
    if isinstance(value, Call):
        if isinstance(value.op, Op):
            return value.op.pure
        if isinstance(value.op, ExternFunc):
            return False
    return not isinstance(value, If)


def fold_constants(mod: IRModule) -> IRModule:
    """Evaluate operator calls whose inputs are all constants, with the operator's reference."""
    return map_graph_functions(mod, lambda name, func: _fold(func))


def _fold(func: Function) -> Function:
    known: dict = {}

    def fold(binding, dataflow):
        value = substitute_vars(binding.value, known)
        if isinstance(binding, VarBinding) and isinstance(value, Call) and isinstance(value.op, Op) \
                and value.op.reference is not None and value.op.name not in _NOT_FOLDED \
                and not _symbolic_attrs(value.attrs):
            args = [_static_value(a) for a in value.args]
            if all(a is not None for a in args):
                result = value.op.reference(*args, **dict(value.attrs))
                if isinstance(result, np.ndarray):
                    constant = Constant(np.ascontiguousarray(result))
                    known[binding.var] = constant
                    return [VarBinding(binding.var, constant)]
        if value is not binding.value:
            binding = VarBinding(binding.var, value) if isinstance(binding, VarBinding) else \
                MatchCast(binding.var, value, binding.struct_info)
        return [binding]

    return rewrite_function(func, fold, lambda body: substitute_vars(body, known))


def _symbolic_attrs(attrs) -> bool:
    """An attribute holding a shape expression (a slice ending at ``seq``): known only at run time."""
    def symbolic(value):
        if isinstance(value, tuple):
            return any(symbolic(v) for v in value)
        return isinstance(value, arith.PrimExpr) and not isinstance(value, arith.IntImm)
    return any(symbolic(value) for _, value in attrs)


# Folding these would turn a small program into a large constant, or is data-dependent.
_NOT_FOLDED = {"full", "zeros", "ones", "arange", "broadcast_to", "unique"}


def _static_value(expr):
    if isinstance(expr, Constant):
        return expr.data
    if isinstance(expr, ShapeExpr) and all(hasattr(v, "value") for v in expr.values):
        return ShapeValue(int(v.value) for v in expr.values)
    if isinstance(expr, PrimValue) and hasattr(expr.value, "value"):
        return int(expr.value.value)
    return None


def normalize(mod: IRModule) -> IRModule:
    """Rebuild every graph function through the BlockBuilder: nested calls become bindings (A-normal
    form) and every node gets its struct info by forward deduction. For hand-built modules."""
    graph = {k: v for k, v in mod.functions.items() if isinstance(v, Function)}
    others = IRModule({k: v for k, v in mod.functions.items() if k not in graph}, mod.global_infos)
    builder = BlockBuilder(others, signatures={k: v.struct_info for k, v in graph.items()})
    for name, func in graph.items():
        mapping: dict = {}
        with builder.function(name, list(func.params), dict(func.attrs), func.pure, func.ret_struct_info):
            for block in func.body.blocks:
                if isinstance(block, DataflowBlock):
                    with builder.dataflow():
                        _emit_block(builder, block, mapping, dataflow=True)
                else:
                    _emit_block(builder, block, mapping, dataflow=False)
            builder.emit_func_output(substitute_vars(func.body.body, mapping))
    return builder.get()


def _emit_block(builder: BlockBuilder, block, mapping: dict, dataflow: bool) -> None:
    for binding in block.bindings:
        value = substitute_vars(binding.value, mapping)
        name = binding.var.name_hint
        if isinstance(binding, MatchCast):
            new = builder.match_cast(value, binding.struct_info, name)
        elif dataflow and not isinstance(binding.var, DataflowVar):
            new = builder.emit_output(value, name)
        else:
            new = builder.emit(value, name)
        mapping[binding.var] = new
