"""Passes that turn a legalized module into the explicit program the VM runs.

- ``to_non_dataflow``: dataflow blocks become plain blocks (allocation is impure);
- ``explicit_allocation``: ``v = R.call_tir(k, args, out_sinfo)`` becomes
  ``v = R.builtin.alloc_tensor(shape, dtype)`` then ``R.call_tir_dps(k, (args..., v))``;
- ``vm_shape_lowering``: every parameter annotation becomes an explicit
  ``R.vm.check`` at the top of the function (match_cast stays a MatchCast,
  which the VM also checks): the shape heap is filled by these checks.
"""

from __future__ import annotations

from ..ir.errors import TesseraError
from ..ir.expr import (
    BindingBlock,
    Call,
    DataflowBlock,
    DataflowVar,
    Function,
    MatchCast,
    Op,
    SeqExpr,
    ShapeExpr,
    StringImm,
    Tuple,
    Var,
    VarBinding,
    with_struct_info,
)
from ..ir.module import IRModule
from ..ir.printer import print_sinfo
from ..ir.struct_info import ObjectStructInfo, TensorStructInfo, TupleStructInfo
from ..op.registry import make_call
from ..target import Target
from .device_targets import DeviceTargets
from .rewrite import map_graph_functions, rewrite_function, substitute_vars


def to_non_dataflow(mod: IRModule) -> IRModule:
    def convert(name: str, func: Function) -> Function:
        mapping: dict = {}
        blocks = []
        for block in func.body.blocks:
            bindings = []
            for binding in block.bindings:
                var = binding.var
                if isinstance(var, DataflowVar):
                    var = Var(var.name_hint, var.struct_info)
                    mapping[binding.var] = var
                value = substitute_vars(binding.value, mapping)
                bindings.append(MatchCast(var, value, binding.struct_info) if isinstance(binding, MatchCast)
                                else VarBinding(var, value))
            blocks.append(BindingBlock(tuple(bindings)) if isinstance(block, DataflowBlock) else
                          type(block)(tuple(bindings)))
        body = SeqExpr(tuple(blocks), substitute_vars(func.body.body, mapping))
        return Function(func.params, body, func.ret_struct_info, func.attrs, func.pure)

    return map_graph_functions(mod, convert)


def explicit_allocation(mod: IRModule, target: Target | DeviceTargets | None = None) -> IRModule:
    """``target`` (the build's, or its DeviceTargets) tells which virtual devices share a physical one:
    ``R.to_vdevice`` between those is no copy. Without it every ``R.to_vdevice`` copies."""
    targets = DeviceTargets.of(mod, target) if target is not None else None

    def rewrite(binding, dataflow):
        value = binding.value
        if isinstance(binding, VarBinding) and isinstance(value, Call) and isinstance(value.op, Op) \
                and value.op.name == "call_dps_library":
            return _allocate_library_outputs(binding)
        if isinstance(binding, VarBinding) and isinstance(value, Call) and isinstance(value.op, Op) \
                and value.op.name == "to_vdevice":
            return _allocate_copy(binding, targets)
        if not (isinstance(binding, VarBinding) and isinstance(value, Call) and isinstance(value.op, Op)
                and value.op.name == "call_tir"):
            return [binding]
        sinfo = binding.var.struct_info
        out = binding.var
        kernel_attrs = getattr(mod.functions.get(value.args[0].name), "attrs", {})
        if "result_is_input" in kernel_attrs:
            # unalias_kernel_args merged the in-place output into its input: the kernel has no output.
            target = value.args[1].fields[kernel_attrs["result_is_input"]]
            dps = with_struct_info(make_call("call_tir_dps", value.args[0], value.args[1], *value.args[2:]),
                                   ObjectStructInfo())
            return [VarBinding(Var(f"{out.name_hint}_done", ObjectStructInfo()), dps), VarBinding(out, target)]
        if "results_in_inputs" in kernel_attrs:
            # A tuple of results of which some are inputs updated in place: only the others are allocated.
            in_inputs = {int(o): i for o, i in kernel_attrs["results_in_inputs"].items()}
            fields = list(sinfo.fields)
            outs = [value.args[1].fields[in_inputs[i]] if i in in_inputs else Var(f"{out.name_hint}_{i}", f)
                    for i, f in enumerate(fields)]
            result = [VarBinding(var, with_struct_info(make_call("builtin.alloc_tensor", ShapeExpr(f.shape),
                                                                 dtype=f.dtype), f))
                      for i, (var, f) in enumerate(zip(outs, fields)) if i not in in_inputs]
            written = tuple(var for i, var in enumerate(outs) if i not in in_inputs)
            args = Tuple(tuple(value.args[1].fields) + written)
            dps = with_struct_info(make_call("call_tir_dps", value.args[0], args, *value.args[2:]), ObjectStructInfo())
            return result + [VarBinding(Var(f"{out.name_hint}_done", ObjectStructInfo()), dps),
                             VarBinding(out, Tuple(tuple(outs)))]
        inplace = kernel_attrs.get("inplace")
        if inplace:
            # The kernel writes into one of its inputs: no allocation, the result is that input.
            target = value.args[1].fields[inplace[0]]
            args = Tuple(tuple(value.args[1].fields) + (target,))
            dps = with_struct_info(make_call("call_tir_dps", value.args[0], args, *value.args[2:]), ObjectStructInfo())
            return [VarBinding(Var(f"{out.name_hint}_done", ObjectStructInfo()), dps), VarBinding(out, target)]
        # A kernel with scratch has several outputs: each is allocated, and the tuple rebuilt.
        fields = list(sinfo.fields) if isinstance(sinfo, TupleStructInfo) else [sinfo]
        outs = [out] if len(fields) == 1 else [Var(f"{out.name_hint}_{i}", f) for i, f in enumerate(fields)]
        result = []
        for var, field in zip(outs, fields):
            alloc = make_call("builtin.alloc_tensor", ShapeExpr(field.shape), dtype=field.dtype)
            result.append(VarBinding(var, with_struct_info(alloc, field)))
        args = Tuple(tuple(value.args[1].fields) + tuple(outs))
        dps = with_struct_info(make_call("call_tir_dps", value.args[0], args, *value.args[2:]), ObjectStructInfo())
        result.append(VarBinding(Var(f"{out.name_hint}_done", ObjectStructInfo()), dps))
        if len(fields) > 1:
            result.append(VarBinding(out, Tuple(tuple(outs))))
        return result

    return map_graph_functions(mod, lambda name, func: rewrite_function(func, rewrite)
                               if not func.attr("Primitive") else func)


def _allocate_copy(binding, targets: DeviceTargets | None) -> list:
    """``v = R.to_vdevice(x, d)``: allocate ``v`` on device ``d`` (its struct info names it), then copy;
    ``v`` is ``x`` itself when both devices are one."""
    out, sinfo = binding.var, binding.var.struct_info
    source = binding.value.args[0]
    if targets is not None and targets.placement_of(source.struct_info) == targets.placement_of(sinfo):
        return [VarBinding(out, source)]
    if not isinstance(sinfo, TensorStructInfo) or sinfo.shape is None or not sinfo.dtype:
        raise LowerError(f"R.to_vdevice of {out.name_hint} needs a tensor of known shape and dtype to allocate its "
                         f"copy; got {print_sinfo(sinfo)}")
    alloc = with_struct_info(make_call("builtin.alloc_tensor", ShapeExpr(sinfo.shape), dtype=sinfo.dtype), sinfo)
    copy = with_struct_info(make_call("vm.to_device", source, out), ObjectStructInfo())
    return [VarBinding(out, alloc), VarBinding(Var(f"{out.name_hint}_copied", ObjectStructInfo()), copy)]


def _allocate_library_outputs(binding) -> list:
    """``v = R.call_dps_library(f, args, out_sinfo)``: allocate the outputs, then call the host function
    ``f`` on (args..., outputs...) through the runtime's library registry."""
    value, out = binding.value, binding.var
    sinfo = out.struct_info
    fields = list(sinfo.fields) if isinstance(sinfo, TupleStructInfo) else [sinfo]
    for field in fields:
        if not isinstance(field, TensorStructInfo) or field.shape is None or not field.dtype:
            raise LowerError(f"R.call_dps_library of {library_name(value.args[0])!r} needs each output's shape "
                             f"and dtype in out_sinfo to allocate it; got {print_sinfo(field)}")
    outs = [out] if len(fields) == 1 else [Var(f"{out.name_hint}_{i}", f) for i, f in enumerate(fields)]
    result = [VarBinding(var, with_struct_info(make_call("builtin.alloc_tensor", ShapeExpr(field.shape),
                                                         dtype=field.dtype), field))
              for var, field in zip(outs, fields)]
    args = Tuple(tuple(value.args[1].fields) + tuple(outs))
    call = make_call("vm.call_builtin_dps", value.args[0], args, *value.args[2:], outputs=len(outs))
    done = Var(f"{out.name_hint}_done", ObjectStructInfo())
    result.append(VarBinding(done, with_struct_info(call, ObjectStructInfo())))
    if len(fields) > 1:
        result.append(VarBinding(out, Tuple(tuple(outs))))
    return result


def library_name(expr) -> str:
    """The name a library call names its function by (a string, or an ExternFunc)."""
    return expr.value if isinstance(expr, StringImm) else expr.global_symbol


class LowerError(TesseraError):
    """A program the VM cannot be given: its memory or its calls cannot be made explicit."""


def vm_shape_lowering(mod: IRModule) -> IRModule:
    def lower(name: str, func: Function) -> Function:
        if func.attr("Primitive"):
            return func
        checks = []
        for param in func.params:
            call = make_call("vm.check", param, sinfo_args=(param.struct_info,))
            checks.append(VarBinding(Var(f"{param.name_hint}_checked", param.struct_info),
                                     with_struct_info(call, param.struct_info)))
        blocks = (BindingBlock(tuple(checks)),) + func.body.blocks
        return Function(func.params, SeqExpr(blocks, func.body.body), func.ret_struct_info, func.attrs, func.pure)

    return map_graph_functions(mod, lower)
