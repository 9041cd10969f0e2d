"""split_data_dependent: a call whose output size depends on values runs in two steps.

``v = R.call_pure_packed("tessera.builtin.unique", x)`` (what legalizing ``R.unique`` gives)
becomes, as the Dynamic Dimensions RFC describes:

    v_count = R.call_pure_packed("tessera.builtin.unique_size", x)          # an int64 prim
    v_count_bound = R.match_cast(v_count, R.Prim("int64", value=v_len))    # binds the new variable v_len
    v_exact: R.Tensor((v_len,)) = R.call_dps_library("tessera.builtin.unique", (x,), ...)
    v = v_exact                                                             # v keeps its coarse info

so the output is allocated at its exact size (at run time: ``v_len`` has no upper bound) and the
computation writes it in destination-passing style, like any other library call.
"""

from __future__ import annotations

from collections.abc import Callable

from .. import arith
from ..ir.expr import (
    Call,
    DataflowVar,
    ExternFunc,
    Function,
    MatchCast,
    Op,
    StringImm,
    Var,
    VarBinding,
    with_struct_info,
)
from ..ir.module import IRModule
from ..ir.struct_info import PrimStructInfo, TensorStructInfo
from ..op.cross_level import call_dps_library, call_pure_packed
from .rewrite import map_graph_functions, rewrite_function

# function -> (its size function, the exact output info from (the call's coarse info, the new length))
TwoStep = tuple[str, Callable[[TensorStructInfo, list, arith.Var], TensorStructInfo]]
TWO_STEP: dict[str, TwoStep] = {
    "tessera.builtin.unique": ("tessera.builtin.unique_size", lambda c, a, n: TensorStructInfo((n,), c.dtype)),
    "tessera.builtin.unique_unsorted": ("tessera.builtin.unique_unsorted_size",
                                        lambda c, a, n: TensorStructInfo((n,), c.dtype)),
    "tessera.builtin.nonzero": ("tessera.builtin.nonzero_size",
                                lambda c, a, n: TensorStructInfo((arith.IntImm(a[0].ndim), n), "int64")),
    "tessera.builtin.mask_select": ("tessera.builtin.mask_select_size",
                                    lambda c, a, n: TensorStructInfo((n,), c.dtype)),
    "tessera.builtin.arange": ("tessera.builtin.arange_size", lambda c, a, n: TensorStructInfo((n,), c.dtype)),
}


def split_data_dependent(mod: IRModule) -> IRModule:
    def split(name: str, func: Function) -> Function:
        if func.attr("Primitive"):
            return func
        taken: set[str] = set()

        def fresh(base: str) -> arith.Var:
            name, number = base, 0
            while name in taken:
                number += 1
                name = f"{base}{number}"
            taken.add(name)
            return arith.Var(name)

        def rewrite(binding, dataflow):
            value = binding.value
            if not (isinstance(binding, VarBinding) and isinstance(value, Call) and isinstance(value.op, Op)
                    and value.op.name == "call_pure_packed" and _name(value.args[0]) in TWO_STEP):
                return [binding]
            function = _name(value.args[0])
            size_function, exact_of = TWO_STEP[function]
            args = list(value.args[1:])
            var_type = DataflowVar if dataflow else Var
            base = binding.var.name_hint
            length = fresh(f"{base}_len")
            count = var_type(f"{base}_count", PrimStructInfo("int64"))
            bound = var_type(f"{base}_count_bound", PrimStructInfo("int64", length))
            exact_sinfo = exact_of(value.struct_info, [a.struct_info for a in args], length)
            exact = var_type(f"{base}_exact", exact_sinfo)
            size_call = with_struct_info(call_pure_packed(size_function, *args, sinfo_args=PrimStructInfo("int64")),
                                         PrimStructInfo("int64"))
            compute = with_struct_info(call_dps_library(function, args, exact_sinfo), exact_sinfo)
            return [VarBinding(count, size_call), MatchCast(bound, count, PrimStructInfo("int64", length)),
                    VarBinding(exact, compute), VarBinding(binding.var, exact)]

        return rewrite_function(func, rewrite)

    return map_graph_functions(mod, split)


def _name(expr) -> str | None:
    if isinstance(expr, ExternFunc):
        return expr.global_symbol
    if isinstance(expr, StringImm):
        return expr.value
    return None
