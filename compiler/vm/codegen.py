"""VM code generation: a legalized, memory-planned module becomes an Executable.

Each graph function becomes a list of instructions over numbered registers:

- ``match``: check a value against struct info at run time, binding symbolic
  variables into the shape heap (parameters and match_cast);
- ``launch``: run a kernel on argument registers, writing its output register;
- ``move``, ``tuple``, ``get``, ``shape``: plumbing;
- ``ret``: the result.

Every tensor register has a static location: a parameter, a weight, or a
storage token of the memory plan. Shapes and launch grids are shape
expressions as text (``tessera.arith`` syntax) evaluated on the shape heap.
"""

from __future__ import annotations

from .. import arith
from ..ir.errors import TesseraError
from ..ir.expr import (
    Call,
    Constant,
    Function,
    MatchCast,
    Op,
    ShapeExpr,
    Tuple,
    TupleGetItem,
    Var,
)
from ..ir.module import IRModule
from ..ir.printer import print_binding
from ..ir.struct_info import (
    ObjectStructInfo,
    PrimStructInfo,
    ShapeStructInfo,
    StructInfo,
    TensorStructInfo,
    TupleStructInfo,
    sinfo_vars,
)
from ..target import Target
from ..tir.ir import PrimFunc
from ..transform.plan_memory import device_bytes
from .executable import Executable


class VMCompileError(TesseraError):
    """A program the VM cannot run yet (control flow, runtime calls) or whose memory cannot be planned."""


def sinfo_json(sinfo: StructInfo) -> dict:
    if isinstance(sinfo, TensorStructInfo):
        shape = None if sinfo.shape is None else [arith.to_source(d) for d in sinfo.shape]
        return {"kind": "tensor", "dtype": sinfo.dtype, "ndim": sinfo.ndim, "shape": shape}
    if isinstance(sinfo, ShapeStructInfo):
        values = None if sinfo.values is None else [arith.to_source(d) for d in sinfo.values]
        return {"kind": "shape", "ndim": sinfo.ndim, "values": values}
    if isinstance(sinfo, PrimStructInfo):
        return {"kind": "prim", "dtype": sinfo.dtype,
                "value": None if sinfo.value is None else arith.to_source(sinfo.value)}
    if isinstance(sinfo, TupleStructInfo):
        return {"kind": "tuple", "fields": [sinfo_json(f) for f in sinfo.fields]}
    if isinstance(sinfo, ObjectStructInfo):
        return {"kind": "object"}
    raise VMCompileError(f"the VM cannot pass values of {sinfo!r} yet")


def compile_vm(mod: IRModule, target: Target, compiled, upper_bounds: dict[str, int] | None = None) -> Executable:
    """The executable of a lowered, memory-planned module whose kernels ``compiled`` holds: the
    ``CompiledKernels`` a codegen backend made of the module's PrimFuncs, in module order."""
    kernels: list[dict] = []
    kernel_index: dict[str, int] = {}
    prim_funcs = [(name, f) for name, f in mod.functions.items() if isinstance(f, PrimFunc)]
    if len(prim_funcs) != len(compiled.kernels):
        raise VMCompileError(f"{len(compiled.kernels)} compiled kernels for {len(prim_funcs)} PrimFuncs")
    for (name, func), kernel in zip(prim_funcs, compiled.kernels):
        kernel_index[name] = len(kernels)  # call_tir names the module's entry, whatever the PrimFunc calls itself
        kernels.append(kernel.record(func))
    constants: dict = {}
    functions = {}
    for name, func in mod.functions.items():
        if isinstance(func, Function) and not func.attr("Primitive"):
            functions[name] = _FunctionCompiler(name, func, kernel_index, kernels, constants, target,
                                                upper_bounds).run()
    features = sorted({f for k in kernels for f in k["requirements"]["features"]})
    return Executable({"kind": target.kind, "name": target.name, "backend": target.backend,
                       "features": sorted(target.features)},
                      functions, kernels, features, _required_limits(kernels, functions), constants,
                      dict(compiled.modules))


class _FunctionCompiler:
    """Compile one function of the lowered program (after vm_shape_lowering, explicit_allocation
    and plan_memory) into instructions; every tensor register gets a location."""

    def __init__(self, name, func: Function, kernel_index, kernels, constants, target: Target, upper_bounds):
        self.name, self.func, self.kernel_index, self.constants = name, func, kernel_index, constants
        self.kernels = kernels
        self.registers: dict[Var, int] = {}
        self.locations: dict[int, dict] = {}  # tensor register -> where it lives
        self.tensors: dict[int, dict] = {}  # tensor register -> {"shape", "dtype", "bytes"}
        self.storages: dict[int, int] = {}  # storage register -> token
        self.constant_registers: dict[int, int] = {}
        self.code: list[dict] = []
        bounds = dict(func.attr("tir_var_upper_bound", {}) or {})
        bounds.update(upper_bounds or {})
        self.bounds = bounds
        self.plan = func.attr("memory_plan")
        if self.plan is None:
            raise VMCompileError(f"function {name} has no memory plan: run plan_memory before VM code generation")
        self.next_register = 0

    def register(self, var=None) -> int:
        index = self.next_register
        self.next_register += 1
        if var is not None:
            self.registers[var] = index
        return index

    def run(self) -> dict:
        func = self.func
        symbols = []
        for p in func.params:
            for v in sinfo_vars(p.struct_info):
                if v.name not in symbols:
                    symbols.append(v.name)
        params = []
        state = set(func.attr("state_params", ()) or ())
        for index, p in enumerate(func.params):
            reg = self.register(p)
            if isinstance(p.struct_info, TensorStructInfo):
                self._tensor(reg, p.struct_info, {"kind": "param", "index": index})
            params.append({"name": p.name_hint, "register": reg, "sinfo": sinfo_json(p.struct_info),
                           "state": p.name_hint in state})
        for block in func.body.blocks:
            for binding in block.bindings:
                try:
                    self._binding(binding)
                except VMCompileError as error:
                    raise VMCompileError(f"{error} (in {print_binding(binding)})") from None
        result = self._operand(func.body.body)
        self.code.append({"op": "ret", "src": result})
        return {
            "params": params, "code": self.code, "registers": self.next_register,
            "symbols": {s: {"upper_bound": self.bounds.get(s)} for s in symbols},
            "unbounded_symbols": [s for s in symbols if s not in self.bounds],
            "tensors": {str(r): t for r, t in self.tensors.items()},
            "locations": {str(r): loc for r, loc in self.locations.items()},
            "memory": self.plan, "result": sinfo_json(func.ret_struct_info),
        }

    def _tensor(self, reg: int, sinfo: TensorStructInfo, location: dict) -> None:
        if sinfo.shape is None or not sinfo.dtype:
            raise VMCompileError("the VM needs tensors of known shape and dtype")
        self.tensors[reg] = {"shape": [arith.to_source(d) for d in sinfo.shape], "dtype": sinfo.dtype,
                             "bytes": arith.to_source(device_bytes(sinfo))}
        self.locations[reg] = location

    def _operand(self, expr) -> int:
        if isinstance(expr, Var):
            return self.registers[expr]
        if isinstance(expr, Constant):
            # One register per constant, however often it is used (a tied embedding is read twice).
            if id(expr) in self.constant_registers:
                return self.constant_registers[id(expr)]
            name = expr.name or f"const_{len(self.constants)}"
            self.constants[name] = expr.data
            reg = self.register()
            self._tensor(reg, expr.struct_info, {"kind": "constant", "name": name})
            self.constant_registers[id(expr)] = reg
            return reg
        if isinstance(expr, Tuple):
            fields = [self._operand(f) for f in expr.fields]
            reg = self.register()
            self.code.append({"op": "tuple", "dst": reg, "fields": fields})
            return reg
        if isinstance(expr, ShapeExpr):
            reg = self.register()
            self.code.append({"op": "shape", "dst": reg, "values": [arith.to_source(v) for v in expr.values]})
            return reg
        raise VMCompileError(f"the VM cannot evaluate {type(expr).__name__} yet")

    def _binding(self, binding) -> None:
        value = binding.value
        if isinstance(binding, MatchCast):
            src = self._operand(value)
            self.registers[binding.var] = src
            self.code.append({"op": "match", "reg": src, "sinfo": sinfo_json(binding.struct_info),
                              "what": f"match_cast of {binding.var.name_hint}"})
            return
        if isinstance(value, Call) and isinstance(value.op, Op):
            handler = {"vm.check": self._check, "memory.alloc_storage": self._alloc_storage,
                       "memory.alloc_tensor": self._alloc_tensor, "call_tir_dps": self._launch}.get(value.op.name)
            if handler is None:
                raise VMCompileError(f"R.{value.op.name} cannot run in the VM: lower the module first "
                                     "(legalize_ops, explicit_allocation, plan_memory)")
            handler(binding, value)
            return
        if isinstance(value, (Var, Constant, Tuple, ShapeExpr)):
            self.registers[binding.var] = self._operand(value)
            return
        if isinstance(value, TupleGetItem):
            src = self._operand(value.tuple_value)
            reg = self.register(binding.var)
            self.code.append({"op": "get", "dst": reg, "src": src, "index": value.index})
            for op in self.code:
                if op.get("op") == "tuple" and op["dst"] == src and op["fields"][value.index] in self.locations:
                    field = op["fields"][value.index]
                    self.locations[reg], self.tensors[reg] = self.locations[field], self.tensors[field]
            return
        if isinstance(value, Call):
            raise VMCompileError("runtime function calls are not supported by the VM yet")
        raise VMCompileError(f"the VM does not support {type(value).__name__} bindings yet (control flow)")

    def _check(self, binding, call) -> None:
        src = self._operand(call.args[0])
        self.registers[binding.var] = src
        what = f"argument '{call.args[0].name_hint}' of {self.name}" if isinstance(call.args[0], Var) else "value"
        self.code.append({"op": "match", "reg": src, "sinfo": sinfo_json(call.sinfo_args[0]), "what": what})

    def _alloc_storage(self, binding, call) -> None:
        reg = self.register(binding.var)
        token = call.attr("token")
        self.storages[reg] = token
        if not self.plan["static"]:
            self.code.append({"op": "alloc_storage", "dst": reg, "token": token,
                              "size": arith.to_source(call.args[0].values[0])})

    def _alloc_tensor(self, binding, call) -> None:
        reg = self.register(binding.var)
        storage = self.registers[call.args[0]]
        token = self.storages[storage]
        if self.plan["static"]:
            location = {"kind": "arena", "token": token}
        else:
            location = {"kind": "storage", "register": storage}
        self._tensor(reg, binding.var.struct_info, location)

    def _launch(self, binding, call) -> None:
        kernel = self.kernel_index[call.args[0].name]
        operands = [self._operand(a) for a in call.args[1].fields]
        outputs = sum(b["role"] == "output" for b in self.kernels[kernel]["abi"]["bindings"])
        scalars = [arith.to_source(v) for v in call.args[2].values] if len(call.args) > 2 else []
        self.registers[binding.var] = operands[-1]
        split = len(operands) - outputs  # a kernel that updates an input in place has no outputs
        self.code.append({"op": "launch", "kernel": kernel, "args": operands[:split], "outs": operands[split:],
                          "scalars": scalars})


def _required_limits(kernels: list[dict], functions: dict) -> dict:
    """The largest need of any kernel, and the arena's buffers and tokens (docs/format.md)."""
    needs: dict[str, int] = {}
    for kernel in kernels:
        for name, value in kernel["requirements"]["limits"].items():
            needs[name] = max(needs.get(name, 0), value)
    arena = [size for f in functions.values() for size in f["memory"]["buffers"]]
    tokens = [s["static_size"] or 0 for f in functions.values() for s in f["memory"]["storages"]]
    return {"maxComputeInvocationsPerWorkgroup": needs.get("maxComputeInvocationsPerWorkgroup", 1),
            "maxStorageBuffersPerShaderStage": needs.get("maxStorageBuffersPerShaderStage", 1),
            "maxComputeWorkgroupStorageSize": needs.get("maxComputeWorkgroupStorageSize", 0),
            "maxBufferSize": max(arena, default=0), "maxStorageBufferBindingSize": max(tokens, default=0)}
