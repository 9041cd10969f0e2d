"""legalize_ops: every operator call becomes a call_tir to a generated, scheduled kernel.

For each binding ``v = R.op(args)``, the operator's ``legalize`` describes the
computation over buffers shaped like the arguments (symbolic shapes
included); ``tir.schedule`` picks the default schedule rule for it, which
turns it into a ``PrimFunc`` for the target, added to the module; and the binding
becomes ``v = R.call_tir(cls.kernel, (tensor args...), out_sinfo, tir_vars)``
where ``tir_vars`` passes the kernel's symbolic sizes. Operators whose output
shape depends on data become runtime calls instead. Identical kernels are
shared, and calls that are alike (the same operator and attributes on tensors
of the same struct info: the same call in each of 30 decoder layers) are
scheduled once.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, replace

from .. import arith
from ..ir.builder import analyzer_for
from ..ir.deduce import DeduceContext, deduce
from ..ir.expr import (
    Call,
    Constant,
    DataflowVar,
    Expr,
    ExternFunc,
    Function,
    GlobalVar,
    Op,
    PrimValue,
    ShapeExpr,
    StringImm,
    Tuple,
    TupleGetItem,
    Var,
    VarBinding,
    with_struct_info,
)
from ..ir.module import IRModule
from ..ir.printer import print_binding
from ..ir.struct_info import TensorStructInfo, TupleStructInfo, describe
from ..op.cross_level import call_tir
from ..op.lowering import LegalizeContext, LegalizeError
from ..target import Target
from ..tir.compute import OpaqueDef, placeholder
from ..tir.ir import Buffer, PrimFunc
from ..tir.schedule import schedule
from .device_targets import DeviceTargets
from .rewrite import rewrite_function


def legalize_ops(mod: IRModule, target: Target | DeviceTargets) -> IRModule:
    """``target``: the build's target, or a DeviceTargets for a module split across virtual devices
    (each call is legalized and scheduled for the target of the device its result lives on)."""
    kernels = KernelTable(mod.functions, DeviceTargets.of(mod, target))
    for name, func in list(mod.functions.items()):
        if isinstance(func, Function) and not func.attr("Primitive"):
            kernels.functions[name] = rewrite_function(func, _Legalize(kernels, analyzer_for(dict(func.attrs))))
    return IRModule(kernels.functions, mod.global_infos)


@dataclass
class _Legalize:
    """The binding rewrite of legalize_ops for one function."""

    kernels: KernelTable
    analyzer: arith.Analyzer

    def __call__(self, binding, in_dataflow: bool) -> list:
        return _legalize_binding(binding, in_dataflow, self.kernels, self.analyzer)


def _legalize_binding(binding, in_dataflow: bool, kernels: KernelTable, analyzer) -> list:
    value = binding.value
    if not (isinstance(binding, VarBinding) and isinstance(value, Call) and isinstance(value.op, Op)
            and value.op.legalize is not None):
        return [binding]
    try:
        return _legalize(binding, in_dataflow, kernels, analyzer)
    except LegalizeError as error:
        raise LegalizeError(f"{error} (in {print_binding(binding)})") from None


def _legalize(binding: VarBinding, in_dataflow: bool, kernels: KernelTable, analyzer) -> list:
    call = binding.value
    kernels = kernels.for_value(binding.var.struct_info)
    described = describe_call(call, kernels.target)
    if isinstance(described.result, Expr):  # replaced at the graph level (shape_of, unique, split concat)
        return _rebind(binding.var, described.result, in_dataflow, kernels, analyzer)
    described.require_shapes()
    key = call_signature(call, _var_signature)
    if isinstance(described.result, OpaqueDef):  # its rule may add scratch outputs to the kernel
        if described.result.more_outputs:  # an operator whose value is a tuple: one kernel writes each field
            return [VarBinding(binding.var, kernels.call(described.result, described.args, described.inputs,
                                                         described.out_sinfos, _part(key, 0)))]
        kernel_call = kernels.call(described.result, described.args, described.inputs, described.out_sinfos[0],
                                   _part(key, 0))
        if not isinstance(kernel_call.struct_info, TupleStructInfo):
            return [VarBinding(binding.var, kernel_call)]
        # Scratch outputs come back as trailing tuple fields: the op's value is the first.
        whole = (DataflowVar if in_dataflow else Var)(f"{binding.var.name_hint}_with_scratch", kernel_call.struct_info)
        return [VarBinding(whole, kernel_call),
                VarBinding(binding.var, with_struct_info(TupleGetItem(whole, 0), described.out_sinfos[0]))]
    defs = described.result if isinstance(described.result, list) else [described.result]
    if len(defs) == 1:
        return [VarBinding(binding.var, kernels.call(defs[0], described.args, described.inputs,
                                                     described.out_sinfos[0], _part(key, 0)))]
    parts, out = [], []
    var_type = DataflowVar if in_dataflow else Var
    for number, (defn, sinfo) in enumerate(zip(defs, described.out_sinfos)):
        part = var_type(f"{binding.var.name_hint}_{number}", sinfo)
        out.append(VarBinding(part, kernels.call(defn, described.args, described.inputs, sinfo,
                                                 _part(key, number))))
        parts.append(part)
    out.append(VarBinding(binding.var, Tuple(tuple(parts))))
    return out


def _rebind(var: Var, expr: Expr, in_dataflow: bool, kernels: KernelTable, analyzer) -> list:
    """Bind a replacement expression to ``var``: nested operator calls get bindings of their own, and
    every operator call is legalized in turn (a rewrite may produce calls that need kernels)."""
    if not isinstance(expr, Call):
        return [VarBinding(var, expr)]
    bindings: list = []
    var_type = DataflowVar if in_dataflow else Var
    ctx = DeduceContext(analyzer)

    def operand(arg):
        if isinstance(arg, Call):
            sinfo = deduce(_with_operands(arg, operand), ctx)
            temp = var_type(f"{var.name_hint}_part{len(bindings)}", sinfo)
            bindings.extend(_rebind(temp, arg, in_dataflow, kernels, analyzer))
            return temp
        if isinstance(arg, Tuple):
            return Tuple(tuple(operand(f) for f in arg.fields))
        return arg

    call = _with_operands(expr, operand)
    call = with_struct_info(call, deduce(call, ctx))
    if isinstance(call.op, Op) and call.op.legalize is not None and call.op.name not in ("call_pure_packed",):
        bindings.extend(_legalize_binding(VarBinding(var, call), in_dataflow, kernels, analyzer))
    else:
        bindings.append(VarBinding(var, call))
    return bindings


def _with_operands(call: Call, operand) -> Call:
    return Call(call.op, tuple(operand(a) for a in call.args), call.attrs, call.sinfo_args)


@dataclass
class DescribedCall:
    """An operator call as its computation: tensor arguments, their buffers, the definition(s)."""

    call: Call
    args: list[Expr]
    inputs: list[Buffer | None]
    outputs: list[Buffer | None]
    out_sinfos: list[TensorStructInfo]
    result: object  # ComputeDef, RowDef, OpaqueDef, a list of them, or a replacing graph expression

    def require_shapes(self) -> None:
        for arg, buf in zip(self.args, self.inputs):
            if buf is None:
                raise _unknown_shape(self.call, f"argument {arg.name_hint}", arg.struct_info)
        for sinfo, buf in zip(self.out_sinfos, self.outputs):
            if buf is None:
                raise _unknown_shape(self.call, "the result", sinfo)


def describe_call(call: Call, target: Target) -> DescribedCall:
    """Run the operator's legalize on buffers shaped like the call's tensors."""
    args = _tensor_args(call)
    sinfo = call.struct_info
    out_sinfos = [f for f in (sinfo.fields if isinstance(sinfo, TupleStructInfo) else (sinfo,))
                  if isinstance(f, TensorStructInfo)]
    for tensor in [a.struct_info for a in args] + out_sinfos:
        _check_dtype(call, tensor.dtype, target)
    inputs = [_buffer(f"in{i}", a.struct_info) for i, a in enumerate(args)]
    outputs = [_buffer(f"out{i}", s) for i, s in enumerate(out_sinfos)]
    ctx = LegalizeContext(call, inputs, outputs, call.op.name.replace(".", "_"), target)
    return DescribedCall(call, args, inputs, outputs, out_sinfos, call.op.legalize(call, ctx))


class KernelTable:
    """The module's functions plus the kernels added to them; identical kernels are shared.

    In a module split across virtual devices, ``for_value`` gives the table's view for one device:
    the same functions, kernels scheduled for that device's target and marked with its name (the
    PrimFunc attribute ``device``), so the driver compiles each with its own backend."""

    def __init__(self, functions, target: Target | DeviceTargets):
        self.functions = dict(functions)
        self.targets = target if isinstance(target, DeviceTargets) else DeviceTargets((), "", target)
        self.device = self.targets.default if self.targets.split else ""
        self.target = self.targets.target(None)
        self._by_text: dict[str, str] = {}
        self._by_signature: dict[object, PrimFunc] = {}
        self._views: dict[str, KernelTable] = {self.device: self}

    def for_value(self, sinfo) -> KernelTable:
        """The table that adds kernels for the device a value of struct info ``sinfo`` lives on."""
        if not self.targets.split:
            return self
        device = self.targets.device_of(sinfo)
        view = self._views.get(device)
        if view is None:
            view = copy.copy(self)  # shares the functions and the caches: one module, one name space
            view.device, view.target = device, self.targets.target(device)
            self._views[device] = view
        return view

    def call(self, defn, args, inputs, out_sinfo, signature=None, name: str | None = None) -> Call:
        """Schedule ``defn`` (as kernel ``name``, by default ``defn.name``), add its kernel and return
        the call_tir that runs it on ``args``.

        ``signature`` (from ``call_signature``), when given, stands for everything the kernel
        depends on but its name: a later call with an equal signature reuses the kernel scheduled
        for the first, which is the kernel ``add`` would have found for it."""
        used = [next(a for a, buf in zip(args, inputs) if buf is wanted) for wanted in defn.inputs]
        key = None if signature is None else (self.device, signature)
        func = self._by_signature.get(key) if key is not None else None
        if func is None:
            func = self.functions[self.add(schedule(defn, self.target, name or defn.name))]
            if key is not None:
                self._by_signature[key] = func
        return self.call_kernel(func, used, out_sinfo)

    def call_kernel(self, func: PrimFunc, args, out_sinfo) -> Call:
        """Add ``func`` and return the call_tir running it on ``args`` (its inputs, in order).

        A kernel with scratch outputs returns a tuple whose first field is the result; so does a
        kernel of a tuple of ``out_sinfo`` (a list), with a field for each."""
        limit = self.target.limit("maxStorageBuffersPerShaderStage")
        if len(func.params) > limit:
            raise LegalizeError(f"kernel {func.name} needs {len(func.params)} storage buffers, target "
                                f"{self.target} allows {limit} (maxStorageBuffersPerShaderStage)")
        name = self.add(func)
        tir_vars = [arith.Var(s) for s in func.scalars] or None
        if isinstance(out_sinfo, list):
            return with_struct_info(call_tir(GlobalVar(name), args, out_sinfo, tir_vars=tir_vars),
                                    TupleStructInfo(tuple(out_sinfo)))
        scratch = func.outputs[len(func.outputs) - func.attrs.get("scratch_outputs", 0):]
        if not scratch:
            return with_struct_info(call_tir(GlobalVar(name), args, out_sinfo, tir_vars=tir_vars), out_sinfo)
        # Scratch lives on the kernel's device (in a split build, the device this table schedules for).
        outs = [out_sinfo] + [TensorStructInfo(b.shape, b.storage_dtype, vdevice=self.device or None) for b in scratch]
        return with_struct_info(call_tir(GlobalVar(name), args, outs, tir_vars=tir_vars), TupleStructInfo(tuple(outs)))

    def add(self, func: PrimFunc) -> str:
        if self.functions.get(func.name) is func:  # a kernel this table added (a signature's reuse)
            return func.name
        if self.device and func.attrs.get("device") != self.device:
            func = replace(func, attrs={**func.attrs, "device": self.device})
        # The key is every field (repr), not the readable text: kernels that differ only in a buffer's
        # storage dtype or an attribute print alike but are not the same kernel.
        key = repr(replace(func, name="kernel"))
        if key in self._by_text:
            return self._by_text[key]
        name, count = func.name, 0
        while name in self.functions:
            count += 1
            name = f"{func.name}{count}"
        self.functions[name] = replace(func, name=name)
        self._by_text[key] = name
        return name


def call_signature(call: Call, var_signature):
    """What the kernel of an operator call depends on, as a hashable value, or None when a part
    cannot be compared: the operator, its attributes (by repr, so 1 and 1.0 or 0.0 and -0.0 differ),
    the arguments (a variable as ``var_signature(var)`` says, e.g. by its struct info; a small
    constant by its value too) and the struct info of the result."""
    def arg(a):
        if isinstance(a, Var):
            return var_signature(a)
        if isinstance(a, Constant):
            if a.data.size > SIGNATURE_CONSTANT_LIMIT:
                return ("constant", a.struct_info)
            return ("constant", a.struct_info, a.data.dtype.str, a.data.tobytes())
        if isinstance(a, Tuple):
            fields = tuple(arg(f) for f in a.fields)
            return None if None in fields else ("tuple", fields)
        if isinstance(a, (ShapeExpr, PrimValue, StringImm, GlobalVar, ExternFunc)):
            return (type(a).__name__, a)
        return None

    args = tuple(arg(a) for a in call.args)
    if None in args or not isinstance(call.op, Op):
        return None
    signature = (call.op, repr(call.attrs), args, call.sinfo_args, call.struct_info)
    try:
        hash(signature)
    except TypeError:
        return None
    return signature


# A constant up to this many elements is part of a call's signature by value (fuse_tir writes a
# scalar constant into the kernel); a larger one, a weight, is read from memory, so its struct info says all.
SIGNATURE_CONSTANT_LIMIT = 64


def _var_signature(var: Var):
    return ("var", var.struct_info)


def _part(signature, index: int):
    return None if signature is None else (signature, index)


def _tensor_args(call: Call) -> list[Expr]:
    args = []
    for arg in call.args:
        if isinstance(arg, Tuple):
            args.extend(f for f in arg.fields if isinstance(f.struct_info, TensorStructInfo))
        elif isinstance(arg, (Var, Constant)) and isinstance(arg.struct_info, TensorStructInfo):
            args.append(arg)
        elif isinstance(arg.struct_info, TupleStructInfo):
            raise LegalizeError(f"cannot legalize R.{call.op.name}: pass the tuple's fields directly")
    return args


def _buffer(name: str, sinfo: TensorStructInfo):
    if sinfo.shape is None or not sinfo.dtype:
        return None
    return placeholder(name, sinfo.dtype, sinfo.shape)


def _unknown_shape(call: Call, what: str, sinfo) -> LegalizeError:
    return LegalizeError(f"cannot legalize R.{call.op.name}: {what} has {describe(sinfo)}; a kernel "
                         "needs a known shape and dtype (add R.match_cast)")


def _check_dtype(call: Call, dtype: str, target: Target) -> None:
    if dtype and not target.supports_dtype(dtype):
        need = " (it needs the shader-f16 feature)" if dtype == "float16" else ""
        raise LegalizeError(f"R.{call.op.name}: dtype {dtype} is not supported by target {target}{need}")
