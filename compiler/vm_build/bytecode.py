"""The bytecode emitter: a legalized, memory-planned module becomes an Executable.

Each graph function becomes a list of instructions over numbered registers:

- ``match``: check a value against struct info at run time, binding symbolic
  variables into the shape heap (parameters and match_cast);
- ``launch``: run a kernel on argument registers, writing its output register;
- ``call``, ``func``: call a function of the executable (by name or as a value);
- ``if``, ``goto``: Relax ``If``, each arm ``move``-ing its result to the merge register;
- ``call_builtin``: a host function of the runtime's library registry;
- ``alloc_storage``, ``alloc_tensor``: what the plan left to run time;
- ``prim``, ``move``, ``tuple``, ``get``, ``shape``: plumbing;
- ``ret``: the result (after a ``match`` against the declared return).

A tensor register whose place is decided when compiling has a location: a
parameter, a weight, a storage token of the arena, or a storage allocated at
run time; other registers hold run-time values. Shapes and launch grids are shape
expressions as text (``tessera.arith`` syntax) evaluated on the shape heap.
"""

from __future__ import annotations

from .. import arith
from ..ir.check import match_cast_origin
from ..ir.errors import TesseraError
from ..ir.expr import (
    Call,
    Constant,
    ExternFunc,
    Function,
    GlobalVar,
    If,
    MatchCast,
    Op,
    PrimValue,
    SeqExpr,
    ShapeExpr,
    Tuple,
    TupleGetItem,
    Var,
)
from ..ir.module import IRModule
from ..ir.printer import print_binding, print_sinfo
from ..ir.result_names import OUTPUT_NAMES
from ..ir.struct_info import (
    FuncStructInfo,
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
from ..transform.device_targets import DeviceTargets
from ..transform.lower_vm import library_name
from ..transform.plan_memory import device_bytes
from ..vm.executable import Executable


class VMCompileError(TesseraError):
    """A program the VM cannot run, or whose memory cannot be planned."""


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
    if isinstance(sinfo, (ObjectStructInfo, FuncStructInfo)):  # a function value is checked by the call
        return {"kind": "object"}
    raise VMCompileError(f"the VM cannot pass values of {sinfo!r} yet")


def compile_vm(mod: IRModule, target: Target, compiled, upper_bounds: dict[str, int] | None = None,
               targets: DeviceTargets | None = None) -> Executable:
    """The executable of a lowered, memory-planned module whose kernels ``compiled`` holds: the
    ``CompiledKernels`` the codegen backends made of the module's PrimFuncs, in module order.
    ``targets``: a build split across devices (format version 4: ``devices``, and a ``device`` on
    each kernel, tensor, allocation and arena buffer)."""
    split = targets is not None and len(targets.physical_devices) > 1
    placements = _Placements(targets if split else None)
    kernels: list[dict] = []
    kernel_index: dict[str, int] = {}
    prim_funcs = [(name, f) for name, f in mod.functions.items() if isinstance(f, PrimFunc)]
    if len(prim_funcs) != len(compiled.kernels):
        raise VMCompileError(f"{len(compiled.kernels)} compiled kernels for {len(prim_funcs)} PrimFuncs")
    for (name, func), kernel in zip(prim_funcs, compiled.kernels):
        kernel_index[name] = len(kernels)  # call_tir names the module's entry, whatever the PrimFunc calls itself
        record = kernel.record(func)
        if split:
            record["device"] = placements.of_name(func.attrs.get("device"))
        kernels.append(record)
    constants: dict = {}
    functions: dict = {}
    graph = {name: f for name, f in mod.functions.items() if isinstance(f, Function) and not f.attr("Primitive")}
    libraries: list[str] = []
    for name, func in graph.items():
        functions[name] = _FunctionCompiler(name, func, kernel_index, kernels, constants, placements,
                                            upper_bounds, graph, libraries).run()
    features = sorted({f for k in kernels for f in k["requirements"]["features"]})
    exe = Executable(describe_target(target), functions, kernels, features, _required_limits(kernels, functions),
                     constants, dict(compiled.modules), sorted(libraries))
    if split:
        exe.devices = _devices(targets, kernels, functions)
        exe.constant_devices = {name: sorted(devices) for name, devices in placements.constants.items()}
    return exe


def describe_target(target: Target) -> dict:
    """The executable's ``target`` (and each device's, in a split build): for people."""
    described = {"kind": target.kind, "name": target.name, "backend": target.backend,
                 "features": sorted(target.features)}
    if target.cpu:  # machine code: the instruction set it was built for
        described["cpu"] = target.cpu
    if target.activation_dtype != "float32":  # activations and the KV cache (transform/mixed_precision.py)
        described["activations"] = target.activation_dtype
    return described


def _devices(targets: DeviceTargets, kernels: list[dict], functions: dict) -> list[dict]:
    """Each physical device of a split build: its target and the vdevices on it, and what its own
    kernels and arena need of it (a runtime checks each device against its own part)."""
    devices = []
    for index, (kind, device_id) in enumerate(targets.physical_devices):
        names = [n for n in targets.names if targets.placement(n) == index]
        mine = [k for k in kernels if k["device"] == index]
        local = {name: {**f, "memory": {**f["memory"], "buffers": [
            size for size, d in zip(f["memory"]["buffers"], f["memory"].get("buffer_devices", [])) if d == index],
            "storages": [s for s in f["memory"]["storages"] if s.get("device", 0) == index]}}
            for name, f in functions.items()}
        devices.append({"kind": kind, "id": device_id, "vdevices": names,
                        "target": describe_target(targets.target(names[0])),
                        "required_features": sorted({f for k in mine for f in k["requirements"]["features"]}),
                        "required_limits": _required_limits(mine, local)})
    return devices


class _Placements:
    """Which device (an index into the build's physical devices) each value lives on; all 0 unless split."""

    def __init__(self, targets: DeviceTargets | None):
        self.targets = targets
        self.constants: dict[str, set[int]] = {}  # weight -> the devices it is read on

    @property
    def split(self) -> bool:
        return self.targets is not None

    def of(self, sinfo) -> int:
        return self.targets.placement_of(sinfo) if self.targets is not None else 0

    def of_name(self, vdevice: str | None) -> int:
        return self.targets.placement(vdevice) if self.targets is not None else 0


class _FunctionCompiler:
    """Compile one function of the lowered program (after vm_shape_lowering, explicit_allocation
    and plan_memory) into instructions; every tensor register whose place is decided when compiling
    gets a location, the others (call results, merges, builtin results) hold run-time values."""

    def __init__(self, name, func: Function, kernel_index, kernels, constants, placements: _Placements, upper_bounds,
                 functions: dict, libraries: list):
        self.name, self.func, self.kernel_index, self.constants = name, func, kernel_index, constants
        self.placements = placements
        self.kernels, self.functions, self.libraries = kernels, functions, libraries
        self.registers: dict[Var, int] = {}
        self.locations: dict[int, dict] = {}  # tensor register -> where it lives
        self.tensors: dict[int, dict] = {}  # tensor register -> {"shape", "dtype", "bytes"}
        self.storages: dict[int, int] = {}  # storage register -> token
        self.constant_registers: dict[tuple[int, int], int] = {}  # (id of the constant, device) -> register
        self.constant_names: dict[int, str] = {}  # id of the constant -> its name in the tensor cache
        self.runtime_allocations: list[dict] = []
        self.symbols: list[str] = []
        self.code: list[dict] = []
        bounds = dict(func.attr("tir_var_upper_bound", {}) or {})
        bounds.update(upper_bounds or {})
        self.bounds = bounds
        self.plan = func.attr("memory_plan")
        if self.plan is None:
            raise VMCompileError(f"function {name} has no memory plan: run plan_memory before VM code generation")
        self.dynamic_tokens = {s["index"] for s in self.plan["storages"] if s["static_size"] is None}
        self.next_register = 0

    def register(self, var=None) -> int:
        index = self.next_register
        self.next_register += 1
        if var is not None:
            self.registers[var] = index
        return index

    def run(self) -> dict:
        func = self.func
        params = []
        state = set(func.attr("state_params", ()) or ())
        for index, p in enumerate(func.params):
            reg = self.register(p)
            if isinstance(p.struct_info, TensorStructInfo) and _known(p.struct_info):
                self._tensor(reg, p.struct_info, {"kind": "param", "index": index})
            elif p.name_hint in state:
                raise VMCompileError(f"state parameter {p.name_hint} of {self.name} needs a known shape and dtype")
            params.append({"name": p.name_hint, "register": reg, "sinfo": sinfo_json(p.struct_info),
                           "state": p.name_hint in state})
            if self.placements.split:
                params[-1]["device"] = self.placements.of(p.struct_info)
        result = self._seq(func.body)
        self._match(result, func.ret_struct_info, f"result of {self.name}")
        self.code.append({"op": "ret", "src": result})
        symbols = self.symbols
        record = {
            "params": params, "code": self.code, "registers": self.next_register,
            "symbols": {s: {"upper_bound": self.bounds.get(s)} for s in symbols},
            "unbounded_symbols": [s for s in symbols if s not in self.bounds],
            "tensors": {str(r): t for r, t in self.tensors.items()},
            "locations": {str(r): loc for r, loc in self.locations.items()},
            "memory": self.plan, "runtime_allocations": self.runtime_allocations,
            "result": sinfo_json(func.ret_struct_info),
        }
        names = func.attr(OUTPUT_NAMES)
        if names:
            record["result_names"] = self._result_names(list(names), record["result"])
        return record

    def _result_names(self, names: list, result: dict) -> list[str]:
        """The ``output_names`` attribute (ir/result_names.py) checked against the result it names."""
        leaves = _sinfo_leaves(result)
        if len(names) != leaves or len(set(names)) != len(names) or not all(isinstance(n, str) and n for n in names):
            raise VMCompileError(f"{self.name}'s attribute {OUTPUT_NAMES} {names!r} does not name its {leaves} "
                                 "result(s) once each, by distinct non-empty strings")
        return names

    def _seq(self, seq: SeqExpr) -> int:
        """Emit a sequence's bindings; the register of its result."""
        for block in seq.blocks:
            for binding in block.bindings:
                try:
                    self._binding(binding)
                except VMCompileError as error:
                    if "(in " in str(error):
                        raise
                    raise VMCompileError(f"{error} (in {print_binding(binding)})") from None
        return self._operand(seq.body)

    def _match(self, reg: int, sinfo: StructInfo, what: str) -> None:
        for var in sinfo_vars(sinfo):  # the function's symbols: what its matches bind or compare
            if var.name not in self.symbols:
                self.symbols.append(var.name)
        self.code.append({"op": "match", "reg": reg, "sinfo": sinfo_json(sinfo), "text": print_sinfo(sinfo),
                          "what": what})

    def _tensor(self, reg: int, sinfo: TensorStructInfo, location: dict, device: int | None = None) -> None:
        if not _known(sinfo):
            raise VMCompileError("a tensor the VM places when compiling needs a known shape and dtype")
        self.tensors[reg] = {"shape": [arith.to_source(d) for d in sinfo.shape], "dtype": sinfo.dtype,
                             "bytes": arith.to_source(device_bytes(sinfo))}
        if self.placements.split:
            self.tensors[reg]["device"] = self.placements.of(sinfo) if device is None else device
        self.locations[reg] = location

    def _operand(self, expr, device: int = 0) -> int:
        """The register of ``expr``; ``device``: where a weight is read (a split build keeps a copy of a
        weight on each device that reads it: a tied embedding may be read on two)."""
        if isinstance(expr, Var):
            return self.registers[expr]
        if isinstance(expr, Constant):
            # One register per constant and device, however often it is used (a tied embedding is read twice).
            key = (id(expr), device)
            if key in self.constant_registers:
                return self.constant_registers[key]
            name = self._constant_name(expr)
            reg = self.register()
            self._tensor(reg, expr.struct_info, {"kind": "constant", "name": name}, device)
            self.placements.constants.setdefault(name, set()).add(device)
            self.constant_registers[key] = reg
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
        if isinstance(expr, PrimValue):
            reg = self.register()
            self.code.append({"op": "prim", "dst": reg, "value": arith.to_source(expr.value)})
            return reg
        if isinstance(expr, GlobalVar):
            if expr.name not in self.functions:
                raise VMCompileError(f"the module has no graph function '{expr.name}' to use as a value")
            reg = self.register()
            self.code.append({"op": "func", "dst": reg, "name": expr.name})
            return reg
        raise VMCompileError(f"the VM cannot evaluate {type(expr).__name__} as a value")

    def _constant_name(self, expr: Constant) -> str:
        name = self.constant_names.get(id(expr))
        if name is None:
            name = self.constant_names[id(expr)] = expr.name or f"const_{len(self.constants)}"
            self.constants[name] = expr.data
        return name

    def _binding(self, binding) -> None:
        value = binding.value
        if isinstance(binding, MatchCast):
            src = self._operand(value)
            self.registers[binding.var] = src
            name = binding.var.name_hint
            self._match(src, binding.struct_info, match_cast_origin(self.func, self.name, name)
                        or f"match_cast of {name} in {self.name}")
            return
        if isinstance(value, Call) and isinstance(value.op, Op):
            handler = {"vm.check": self._check, "memory.alloc_storage": self._alloc_storage,
                       "memory.alloc_tensor": self._alloc_tensor, "builtin.alloc_tensor": self._alloc_runtime_tensor,
                       "call_tir_dps": self._launch, "vm.call_builtin_dps": self._builtin_dps,
                       "call_pure_packed": self._builtin_returning, "vm.to_device": self._to_device}.get(value.op.name)
            if handler is None:
                raise VMCompileError(f"R.{value.op.name} cannot run in the VM: lower the module first "
                                     "(legalize_ops, explicit_allocation, plan_memory)")
            handler(binding, value)
            return
        if isinstance(value, Call):
            self._call(binding, value)
            return
        if isinstance(value, If):
            self._if(binding, value)
            return
        if isinstance(value, (Var, Constant, Tuple, ShapeExpr, PrimValue, GlobalVar)):
            self.registers[binding.var] = self._operand(value)
            return
        if isinstance(value, TupleGetItem):
            src = self._operand(value.tuple_value)
            built = next((op for op in self.code if op.get("op") == "tuple" and op["dst"] == src), None)
            field = built["fields"][value.index] if built is not None else None
            if self.locations.get(field, {}).get("kind") == "param":
                # A parameter updated in place (rope_append's caches): runtimes find a parameter's
                # buffer by its own register, so the field is that register, not a copy of it.
                self.registers[binding.var] = field
                return
            reg = self.register(binding.var)
            self.code.append({"op": "get", "dst": reg, "src": src, "index": value.index})
            if field in self.locations:
                self.locations[reg], self.tensors[reg] = self.locations[field], self.tensors[field]
            return
        raise VMCompileError(f"the VM does not support {type(value).__name__} bindings")

    def _if(self, binding, value: If) -> None:
        """then-arm; move its result; goto the end; else-arm; move its result. The merge register has
        no location: it holds whichever arm's value ran."""
        cond = self._operand(value.cond)
        branch = {"op": "if", "cond": cond, "else": None}
        self.code.append(branch)
        merged = self.register(binding.var)
        self.code.append({"op": "move", "dst": merged, "src": self._seq(value.true_branch)})
        skip = {"op": "goto", "target": None}
        self.code.append(skip)
        branch["else"] = len(self.code)
        self.code.append({"op": "move", "dst": merged, "src": self._seq(value.false_branch)})
        skip["target"] = len(self.code)

    def _call(self, binding, call: Call) -> None:
        args = [self._operand(a) for a in call.args]
        reg = self.register(binding.var)
        if isinstance(call.op, GlobalVar):
            if call.op.name not in self.functions:
                raise VMCompileError(f"the module has no graph function '{call.op.name}' to call")
            self.code.append({"op": "call", "dst": reg, "func": call.op.name, "args": args})
        elif isinstance(call.op, ExternFunc):  # R.call_packed: a host function that returns its result
            self._library(call.op.global_symbol)
            self.code.append({"op": "call_builtin", "name": call.op.global_symbol, "args": args, "outs": [],
                              "scalars": [], "dst": reg})
        elif isinstance(call.op, Var):
            self.code.append({"op": "call", "dst": reg, "callee": self._operand(call.op), "args": args})
        else:
            raise VMCompileError(f"the VM cannot call a {type(call.op).__name__}")

    def _library(self, name: str) -> None:
        if name not in self.libraries:
            self.libraries.append(name)

    def _builtin_dps(self, binding, call) -> None:
        name = library_name(call.args[0])
        self._library(name)
        operands = [self._operand(a) for a in call.args[1].fields]
        split = len(operands) - call.attr("outputs")
        scalars = [arith.to_source(v) for v in call.args[2].values] if len(call.args) > 2 else []
        self.registers[binding.var] = operands[-1]
        self.code.append({"op": "call_builtin", "name": name, "args": operands[:split], "outs": operands[split:],
                          "scalars": scalars, "dst": None})

    def _builtin_returning(self, binding, call) -> None:
        name = library_name(call.args[0])
        self._library(name)
        args = [self._operand(a) for a in call.args[1:]]
        reg = self.register(binding.var)
        self.code.append({"op": "call_builtin", "name": name, "args": args, "outs": [], "scalars": [], "dst": reg})
        # What a host function hands back is checked like an argument: a wrong shape is named here.
        self._match(reg, binding.var.struct_info, f"result of library function '{name}' in {self.name}")

    def _check(self, binding, call) -> None:
        src = self._operand(call.args[0])
        self.registers[binding.var] = src
        what = f"argument '{call.args[0].name_hint}' of {self.name}" if isinstance(call.args[0], Var) else "value"
        self._match(src, call.sinfo_args[0], what)

    def _alloc_storage(self, binding, call) -> None:
        reg = self.register(binding.var)
        token = call.attr("token")
        self.storages[reg] = token
        if token in self.dynamic_tokens:
            size = arith.to_source(call.args[0].values[0])
            self.code.append({"op": "alloc_storage", "dst": reg, "token": token, "size": size})
            if self.placements.split:
                storage = next(s for s in self.plan["storages"] if s["index"] == token)
                self.code[-1]["device"] = storage.get("device", 0)
            self.runtime_allocations.append({"register": reg, "size": size, "reason": self._why_dynamic(size)})

    def _why_dynamic(self, size: str) -> str:
        if self.plan.get("recursive"):
            return f"{self.name} is recursive: each call needs storage of its own"
        unbounded = [v.name for v in arith.free_vars(arith.parse_expr(size)) if v.name not in self.bounds]
        return f"its size depends on {', '.join(unbounded)}, which has no upper bound" if unbounded else \
            "its size has no upper bound"

    def _alloc_tensor(self, binding, call) -> None:
        reg = self.register(binding.var)
        storage = self.registers[call.args[0]]
        token = self.storages[storage]
        if token in self.dynamic_tokens:
            location = {"kind": "storage", "register": storage}
        else:
            location = {"kind": "arena", "token": token}
        self._tensor(reg, binding.var.struct_info, location)

    def _alloc_runtime_tensor(self, binding, call) -> None:
        """A tensor the plan left to run time: a result the caller receives, which must outlive this call."""
        reg = self.register(binding.var)
        sinfo = binding.var.struct_info
        shape = [arith.to_source(d) for d in sinfo.shape]
        self.code.append({"op": "alloc_tensor", "dst": reg, "shape": shape, "dtype": sinfo.dtype})
        if self.placements.split:
            self.code[-1]["device"] = self.placements.of(sinfo)
        self.runtime_allocations.append({
            "register": reg, "size": arith.to_source(device_bytes(sinfo)),
            "reason": f"a result of {self.name}, which another function calls: it outlives the call"})

    def _to_device(self, binding, call) -> None:
        """``R.vm.to_device(src, dst)``: copy into ``dst``, allocated on the other device."""
        src, dst = self._operand(call.args[0]), self._operand(call.args[1])
        self.registers[binding.var] = dst
        self.code.append({"op": "to_device", "src": src, "dst": dst, "device": self.placements.of(
            call.args[1].struct_info)})

    def _launch(self, binding, call) -> None:
        kernel = self.kernel_index[call.args[0].name]
        device = self.kernels[kernel].get("device", 0)
        operands = [self._operand(a, device) for a in call.args[1].fields]
        outputs = sum(b["role"] == "output" for b in self.kernels[kernel]["abi"]["bindings"])
        scalars = [arith.to_source(v) for v in call.args[2].values] if len(call.args) > 2 else []
        self.registers[binding.var] = operands[-1]
        split = len(operands) - outputs  # a kernel that updates an input in place has no outputs
        self.code.append({"op": "launch", "kernel": kernel, "args": operands[:split], "outs": operands[split:],
                          "scalars": scalars})


def _sinfo_leaves(sinfo: dict) -> int:
    """How many values a result of this struct info is, nested tuples flattened."""
    if sinfo["kind"] == "tuple":
        return sum(_sinfo_leaves(field) for field in sinfo["fields"])
    return 1


def _known(sinfo: TensorStructInfo) -> bool:
    return sinfo.shape is not None and bool(sinfo.dtype)


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
