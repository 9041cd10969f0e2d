"""legalize_ops: every operator call becomes a call_tir to a generated, scheduled kernel.

For each binding ``v = R.op(args)``, the operator's ``legalize`` describes the
computation over buffers shaped like the arguments (symbolic shapes
included); the default schedule rule for its pattern turns it into a
``PrimFunc`` for the target, which is added to the module; and the binding
becomes ``v = R.call_tir(cls.kernel, (tensor args...), out_sinfo, tir_vars)``
where ``tir_vars`` passes the kernel's symbolic sizes. Operators whose output
shape depends on data become runtime calls instead. Identical kernels are
shared.
"""

from __future__ import annotations

from dataclasses import replace

from .. import arith
from ..ir.builder import analyzer_for
from ..ir.deduce import DeduceContext, deduce
from ..ir.expr import (
    Call,
    Constant,
    DataflowBlock,
    DataflowVar,
    Expr,
    Function,
    GlobalVar,
    If,
    Op,
    SeqExpr,
    Tuple,
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
from ..tir.compute import placeholder
from ..tir.ir import PrimFunc
from ..tir.schedule import schedule


def legalize_ops(mod: IRModule, target: Target) -> IRModule:
    return _Legalizer(mod, target).run()


class _Legalizer:
    def __init__(self, mod: IRModule, target: Target):
        self.mod = mod
        self.target = target
        self.functions = dict(mod.functions)
        self.kernel_by_text: dict[str, str] = {}

    def run(self) -> IRModule:
        for name, func in list(self.mod.functions.items()):
            if isinstance(func, Function):
                self.analyzer = analyzer_for(dict(func.attrs))
                self.functions[name] = Function(func.params, self._seq(func.body), func.ret_struct_info,
                                                func.attrs, func.pure)
        return IRModule(self.functions, self.mod.global_infos)

    def _seq(self, seq: SeqExpr) -> SeqExpr:
        blocks = []
        for block in seq.blocks:
            bindings = []
            for binding in block.bindings:
                bindings.extend(self._binding(binding, isinstance(block, DataflowBlock)))
            blocks.append(type(block)(tuple(bindings)))
        return SeqExpr(tuple(blocks), seq.body)

    def _binding(self, binding, in_dataflow: bool) -> list:
        value = binding.value
        if isinstance(value, If):
            branches = (self._seq(value.true_branch), self._seq(value.false_branch))
            return [VarBinding(binding.var, with_struct_info(If(value.cond, *branches), value.struct_info))]
        if not (isinstance(binding, VarBinding) and isinstance(value, Call) and isinstance(value.op, Op)
                and value.op.legalize is not None):
            return [binding]
        try:
            return self._legalize(binding, in_dataflow)
        except LegalizeError as error:
            raise LegalizeError(f"{error} (in {print_binding(binding)})") from None

    def _legalize(self, binding: VarBinding, in_dataflow: bool) -> list:
        call = binding.value
        args = self._tensor_args(call)
        out_sinfos = self._outputs(call)
        for sinfo in [a.struct_info for a in args] + out_sinfos:
            self._check_dtype(call, sinfo.dtype)
        inputs = [self._buffer(f"in{i}", a.struct_info) for i, a in enumerate(args)]
        outputs = [self._buffer(f"out{i}", s) for i, s in enumerate(out_sinfos)]
        ctx = LegalizeContext(call, inputs, outputs, call.op.name.replace(".", "_"))
        result = call.op.legalize(call, ctx)
        if isinstance(result, Expr):  # replaced at the graph level (shape_of, unique)
            sinfo = deduce(result, DeduceContext(self.analyzer)) if isinstance(result, Call) else result.struct_info
            return [VarBinding(binding.var, with_struct_info(result, sinfo))]
        for arg, buf in zip(args, inputs):
            if buf is None:
                raise self._unknown_shape(call, f"argument {arg.name_hint}", arg.struct_info)
        for sinfo, buf in zip(out_sinfos, outputs):
            if buf is None:
                raise self._unknown_shape(call, "the result", sinfo)
        defs = result if isinstance(result, list) else [result]
        if len(defs) == 1:
            return [VarBinding(binding.var, self._call_kernel(defs[0], args, inputs, out_sinfos[0]))]
        parts, out = [], []
        var_type = DataflowVar if in_dataflow else Var
        for number, (defn, sinfo) in enumerate(zip(defs, out_sinfos)):
            part = var_type(f"{binding.var.name_hint}_{number}", sinfo)
            out.append(VarBinding(part, self._call_kernel(defn, args, inputs, sinfo)))
            parts.append(part)
        out.append(VarBinding(binding.var, Tuple(tuple(parts))))
        return out

    def _call_kernel(self, defn, args, inputs, out_sinfo) -> Call:
        func = schedule(defn, self.target, defn.name)
        limit = self.target.limit("maxStorageBuffersPerShaderStage")
        if len(func.params) > limit:
            raise LegalizeError(f"kernel {func.name} needs {len(func.params)} storage buffers, target "
                                f"{self.target} allows {limit} (maxStorageBuffersPerShaderStage)")
        name = self._add_kernel(func)
        tir_vars = [arith.Var(s) for s in func.scalars] or None
        # The kernel's parameters are the buffers its definition reads, in its order.
        used = [next(a for a, buf in zip(args, inputs) if buf is wanted) for wanted in defn.inputs]
        return with_struct_info(call_tir(GlobalVar(name), used, out_sinfo, tir_vars=tir_vars), out_sinfo)

    def _add_kernel(self, func: PrimFunc) -> str:
        key = replace(func, name="kernel").script()
        if key in self.kernel_by_text:
            return self.kernel_by_text[key]
        name, count = func.name, 0
        while name in self.functions:
            count += 1
            name = f"{func.name}{count}"
        self.functions[name] = replace(func, name=name)
        self.kernel_by_text[key] = name
        return name

    def _tensor_args(self, call: Call) -> list[Expr]:
        args = []
        for arg in call.args:
            if isinstance(arg, Tuple):
                args.extend(f for f in arg.fields if isinstance(f.struct_info, TensorStructInfo))
            elif isinstance(arg, (Var, Constant)) and isinstance(arg.struct_info, TensorStructInfo):
                args.append(arg)
            elif isinstance(arg.struct_info, TupleStructInfo):
                raise LegalizeError(f"cannot legalize R.{call.op.name}: pass the tuple's fields directly")
        return args

    def _outputs(self, call: Call) -> list[TensorStructInfo]:
        sinfo = call.struct_info
        fields = sinfo.fields if isinstance(sinfo, TupleStructInfo) else (sinfo,)
        return [f for f in fields if isinstance(f, TensorStructInfo)]

    def _buffer(self, name: str, sinfo: TensorStructInfo):
        if sinfo.shape is None or not sinfo.dtype:
            return None
        return placeholder(name, sinfo.dtype, sinfo.shape)

    def _unknown_shape(self, call: Call, what: str, sinfo) -> LegalizeError:
        return LegalizeError(f"cannot legalize R.{call.op.name}: {what} has {describe(sinfo)}; a kernel "
                             "needs a known shape and dtype (add R.match_cast)")

    def _check_dtype(self, call: Call, dtype: str) -> None:
        if dtype and not self.target.supports_dtype(dtype):
            need = " (it needs the shader-f16 feature)" if dtype == "float16" else ""
            raise LegalizeError(f"R.{call.op.name}: dtype {dtype} is not supported by target "
                                f"{self.target}{need}")

