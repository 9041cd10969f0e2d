"""Cross-level calls in destination-passing style, and calls into the runtime.

``call_tir(kernel, (args...), out_sinfo, tir_vars)`` calls a loop-level kernel
of the module; ``call_dps_library("name", (args...), out_sinfo, tir_vars)``
calls a library function by name. Both allocate their outputs from the
explicit ``out_sinfo`` and pass ``tir_vars`` (a shape of symbolic values) as
extra scalar arguments. ``call_pure_packed("name", args..., sinfo_args)``
calls a runtime function that returns its result.
"""

from __future__ import annotations

from ..ir.errors import DeductionError
from ..ir.expr import ExternFunc, GlobalVar, StringImm
from ..ir.struct_info import ObjectStructInfo, ShapeStructInfo, TupleStructInfo, describe
from .registry import register_op


def _out_sinfo(call):
    if not call.sinfo_args:
        raise DeductionError("missing annotation", f"{call.op.name} needs out_sinfo")
    if len(call.sinfo_args) == 1:
        return call.sinfo_args[0]
    return TupleStructInfo(call.sinfo_args)


def _check_dps_inputs(call, ctx, callee_types, callee_text):
    callee = call.args[0]
    if not isinstance(callee, callee_types):
        raise DeductionError("type mismatch", f"{call.op.name} calls {callee_text}, got {ctx.show(callee)}")
    if len(call.args) not in (2, 3):
        raise DeductionError("arity mismatch", f"{call.op.name} takes a callee, a tuple of arguments "
                             "and optionally tir_vars")
    if not isinstance(call.args[1].sinfo, TupleStructInfo):
        raise DeductionError("type mismatch", f"{call.op.name} needs its arguments as a tuple, "
                             f"got {describe(call.args[1].sinfo)}")
    if len(call.args) == 3 and not isinstance(call.args[2].sinfo, ShapeStructInfo):
        raise DeductionError("type mismatch", f"{call.op.name} needs tir_vars as a shape, "
                             f"got {describe(call.args[2].sinfo)}")


def _deduce_call_tir(call, ctx):
    _check_dps_inputs(call, ctx, (GlobalVar,), "a kernel of the module")
    return _out_sinfo(call)


def _deduce_call_dps_library(call, ctx):
    _check_dps_inputs(call, ctx, (StringImm, ExternFunc), "a library function by name")
    return _out_sinfo(call)


def _deduce_call_pure_packed(call, ctx):
    if not call.args or not isinstance(call.args[0], (StringImm, ExternFunc)):
        raise DeductionError("type mismatch", "call_pure_packed needs a function name first")
    return call.sinfo_args[0] if call.sinfo_args else ObjectStructInfo()


register_op("call_tir", inputs=("func", "args", "tir_vars"), deduce=_deduce_call_tir, variadic=True,
            precision="never")
register_op("call_dps_library", inputs=("func", "args", "tir_vars"), deduce=_deduce_call_dps_library,
            variadic=True, precision="never")
register_op("call_pure_packed", inputs=("func", "args"), deduce=_deduce_call_pure_packed, variadic=True,
            precision="never")


def _dps_call(op_name, func, args, out_sinfo, tir_vars):
    from ..ir.expr import ShapeExpr, Tuple
    from .registry import make_call

    sinfos = tuple(out_sinfo) if isinstance(out_sinfo, (list, tuple)) else (out_sinfo,)
    inputs = [func, args if isinstance(args, Tuple) else Tuple(tuple(args))]
    if tir_vars is not None:
        inputs.append(tir_vars if isinstance(tir_vars, ShapeExpr) else ShapeExpr(tuple(tir_vars)))
    return make_call(op_name, *inputs, sinfo_args=sinfos)


def call_tir(kernel, args, out_sinfo, tir_vars=None):
    """Call kernel ``kernel`` (a GlobalVar or its name) writing into outputs of ``out_sinfo``."""
    func = GlobalVar(kernel) if isinstance(kernel, str) else kernel
    return _dps_call("call_tir", func, args, out_sinfo, tir_vars)


def call_dps_library(name, args, out_sinfo, tir_vars=None):
    """Call library function ``name`` writing into outputs of ``out_sinfo``."""
    func = StringImm(name) if isinstance(name, str) else name
    return _dps_call("call_dps_library", func, args, out_sinfo, tir_vars)


def call_pure_packed(name, *args, sinfo_args=()):
    """Call runtime function ``name`` that returns its result (a pure function)."""
    from .registry import make_call

    func = ExternFunc(name) if isinstance(name, str) else name
    sinfos = tuple(sinfo_args) if isinstance(sinfo_args, (list, tuple)) else (sinfo_args,)
    return make_call("call_pure_packed", func, *args, sinfo_args=sinfos)
