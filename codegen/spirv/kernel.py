"""One lowered tir kernel as a SPIR-V module: its declarations and its statements.

The interface (Vulkan's view of it is in ``codegen/spirv/__init__.py``):

- each parameter (inputs, then outputs) is a StorageBuffer variable at descriptor set 0, binding
  = its index: a Block struct whose one member (Offset 0) is a runtime array of the buffer's
  element type (ArrayStride = its bytes), or of 4-lane vectors where the kernel reads or writes
  the buffer as vectors, as WGSL declares them;
- the kernel's scalars are one push-constant Block of i32 members, scalar i at Offset 4 * i;
- workgroup scratch is a Workgroup-class array, private scratch a Function-class array;
- thread coordinates are the Input built-ins LocalInvocationId, WorkgroupId and NumWorkgroups
  (SubgroupSize and SubgroupLocalInvocationId when used): the entry point's interface.

Locals and loop counters are Function-class variables in the entry block, read and written with
OpLoad and OpStore (drivers promote them to registers). Control flow is structured as Vulkan
requires: an if is a selection with a merge block; a loop is a header (OpLoopMerge), a block that
tests the counter and leaves for the merge block, the body, and a continue block that steps the
counter and branches back. tir has no break or return, so every construct ends in its merge.
"""

from __future__ import annotations

from dataclasses import dataclass

from tessera.tir.ir import (
    SCALAR_PREFIX,
    Assign,
    Barrier,
    Buffer,
    Builtin,
    Declare,
    For,
    IfThen,
    Local,
    PrimFunc,
    Stmt,
    Store,
    lanes_of,
    vector_of,
)

from .. import entry_name, static_size, vector_accesses
from .builder import FunctionBuilder, Module
from .errors import SPIRVError
from .expressions import ExpressionEmitter
from .spec import (
    EXTENSION_16BIT_STORAGE,
    LOOP_CONTROL_NONE,
    SELECTION_CONTROL_NONE,
    BuiltIn,
    Capability,
    Decoration,
    MemorySemantics,
    Op,
    Scope,
    StorageClass,
)
from .types import SCALAR_BYTES, KernelTypes

# tir's thread coordinates: the built-in they come from and its component count.
BUILTINS = {
    "local_id": (BuiltIn.LocalInvocationId, 3),
    "workgroup_id": (BuiltIn.WorkgroupId, 3),
    "num_workgroups": (BuiltIn.NumWorkgroups, 3),
    "subgroup_size": (BuiltIn.SubgroupSize, 1),
    "subgroup_invocation_id": (BuiltIn.SubgroupLocalInvocationId, 1),
}


@dataclass(frozen=True)
class ArrayVariable:
    """Where a buffer's elements live: the variable, its storage class, the element dtype as
    declared (a vector dtype for vector-accessed buffers) and whether the array is member 0 of a
    Block struct (storage buffers) rather than the variable itself (scratch)."""

    variable: int
    storage_class: int
    element: str
    in_block: bool


class KernelEmitter(ExpressionEmitter):
    def __init__(self, func: PrimFunc):
        self.func = func
        self.module = Module()
        self.types = KernelTypes(self.module)
        void = self.module.type_void()
        self.fn = FunctionBuilder(self.module, void, self.module.type_function(void))
        self.arrays: dict[str, ArrayVariable] = {}
        self.scopes: list[dict[str, tuple[int, str]]] = [{}]  # locals: name -> (variable, dtype)
        self.interface: dict[str, int] = {}  # built-in Input variables, by tir kind
        self.preamble_values: dict[tuple, int] = {}
        self.push_constants: int | None = None
        self.declare_storage_buffers()
        self.declare_scalars()
        self.declare_scratch()

    def emit(self) -> bytes:
        self.stmts(self.func.body)
        self.fn.finish()
        entry = entry_name(self.func)
        self.module.name(self.fn.id, entry)
        self.module.compute_entry_point(self.fn.id, entry, list(self.interface.values()), self.func.workgroup_size)
        return self.module.assemble()

    # -- declarations ---------------------------------------------------------------------

    def declare_storage_buffers(self) -> None:
        m = self.module
        lanes = vector_accesses(self.func)
        for binding, buf in enumerate(self.func.params):
            element = vector_of(buf.dtype, lanes.get(buf.name, 1))
            array = m.type_runtime_array(self.types.of(element))
            m.decorate(array, Decoration.ArrayStride, SCALAR_BYTES[buf.dtype] * lanes.get(buf.name, 1))
            block = m.type_struct(array)
            m.decorate(block, Decoration.Block)
            m.member_decorate(block, 0, Decoration.Offset, 0)
            pointer = self.types.pointer(StorageClass.StorageBuffer, block)
            variable = m.global_variable(pointer, StorageClass.StorageBuffer, buf.name)
            m.decorate(variable, Decoration.DescriptorSet, 0)
            m.decorate(variable, Decoration.Binding, binding)
            if buf.dtype == "f16":
                m.capability(Capability.StorageBuffer16BitAccess)
                m.extension(EXTENSION_16BIT_STORAGE)
            self.arrays[buf.name] = ArrayVariable(variable, StorageClass.StorageBuffer, element, True)

    def declare_scalars(self) -> None:
        if not self.func.scalars:
            return
        m = self.module
        block = m.type_struct(*[self.types.of("i32")] * len(self.func.scalars))
        m.decorate(block, Decoration.Block)
        for i, name in enumerate(self.func.scalars):
            m.member_decorate(block, i, Decoration.Offset, 4 * i)
            m.member_name(block, i, name)
        m.name(block, "Scalars")
        self.push_constants = m.global_variable(self.types.pointer(StorageClass.PushConstant, block),
                                                StorageClass.PushConstant, "scalars")

    def declare_scratch(self) -> None:
        for buf in self.func.scratch:
            array = self.module.type_array(self.types.of(buf.dtype), static_size(buf))
            if buf.scope == "workgroup":
                pointer = self.types.pointer(StorageClass.Workgroup, array)
                variable = self.module.global_variable(pointer, StorageClass.Workgroup, buf.name)
                self.arrays[buf.name] = ArrayVariable(variable, StorageClass.Workgroup, buf.dtype, False)
            else:
                pointer = self.types.pointer(StorageClass.Function, array)
                variable = self.fn.variable(pointer, StorageClass.Function, buf.name)
                self.arrays[buf.name] = ArrayVariable(variable, StorageClass.Function, buf.dtype, False)

    # -- values the expressions ask for -------------------------------------------------------

    def local_value(self, e: Local) -> int:
        for scope in reversed(self.scopes):
            if e.name in scope:
                variable, dtype = scope[e.name]
                return self.op(Op.Load, dtype, variable)
        scalar = e.name[len(SCALAR_PREFIX):]
        if e.name.startswith(SCALAR_PREFIX) and scalar in self.func.scalars:
            return self.scalar_value(self.func.scalars.index(scalar))
        raise SPIRVError(f"{e.name} is read before it is declared")

    def scalar_value(self, member: int) -> int:
        key = ("scalar", member)
        if key not in self.preamble_values:
            i32 = self.types.of("i32")
            pointer = self.fn.emit_in_preamble(Op.AccessChain, self.types.pointer(StorageClass.PushConstant, i32),
                                               self.push_constants, self.types.constant(member, "i32"))
            self.preamble_values[key] = self.fn.emit_in_preamble(Op.Load, i32, pointer)
        return self.preamble_values[key]

    def builtin_value(self, e: Builtin) -> int:
        """A thread coordinate as i32, read once at the top of the kernel."""
        key = ("builtin", e.kind, e.axis)
        if key not in self.preamble_values:
            if e.kind not in BUILTINS:
                raise SPIRVError(f"no SPIR-V built-in for the thread coordinate {e.kind}")
            builtin, components = BUILTINS[e.kind]
            u32 = self.types.of("u32")
            value_type = u32 if components == 1 else self.module.type_vector(u32, components)
            if e.kind not in self.interface:
                if components == 1:  # the subgroup built-ins
                    self.module.capability(Capability.GroupNonUniform)
                pointer = self.types.pointer(StorageClass.Input, value_type)
                variable = self.module.global_variable(pointer, StorageClass.Input, e.kind)
                self.module.decorate(variable, Decoration.BuiltIn, builtin)
                self.interface[e.kind] = variable
            value = self.fn.emit_in_preamble(Op.Load, value_type, self.interface[e.kind])
            if components > 1:
                value = self.fn.emit_in_preamble(Op.CompositeExtract, u32, value, e.axis)
            self.preamble_values[key] = self.fn.emit_in_preamble(Op.Bitcast, self.types.of(e.dtype), value)
        return self.preamble_values[key]

    def element_pointer(self, buffer: Buffer, index: int, lanes: int) -> int:
        if buffer.name not in self.arrays:
            raise SPIRVError(f"{buffer.name} is neither a parameter nor a scratch buffer of the kernel")
        array = self.arrays[buffer.name]
        declared_lanes = lanes_of(array.element)[1]
        indices, element = [index], array.element
        if lanes != declared_lanes:
            # One lane of a buffer declared as vectors: the vector, then the lane within it.
            if lanes != 1:
                raise SPIRVError(f"{buffer.name} is accessed with {lanes} and with {declared_lanes} lanes; "
                                 "SPIR-V reads a vector buffer a vector or one lane at a time")
            count = self.types.constant(declared_lanes, "i32")
            indices = [self.op(Op.SDiv, "i32", index, count), self.op(Op.SRem, "i32", index, count)]
            element = lanes_of(array.element)[0]
        if array.in_block:
            indices.insert(0, self.types.constant(0, "i32"))
        pointer = self.types.pointer(array.storage_class, self.types.of(element))
        return self.fn.emit(Op.AccessChain, pointer, array.variable, *indices)

    # -- statements ---------------------------------------------------------------------------

    def stmts(self, body: tuple[Stmt, ...]) -> None:
        self.scopes.append({})
        for s in body:
            self.stmt(s)
        self.scopes.pop()

    def stmt(self, s: Stmt) -> None:
        fn = self.fn
        if isinstance(s, Declare):
            value = self.value(s.value)  # before the name exists: `x = x + 1` may read an outer x
            variable = fn.variable(self.types.pointer(StorageClass.Function, self.types.of(s.var.dtype)),
                                   StorageClass.Function, s.var.name)
            self.scopes[-1][s.var.name] = (variable, s.var.dtype)
            fn.emit(Op.Store, None, variable, value)
        elif isinstance(s, Assign):
            fn.emit(Op.Store, None, self.local_variable(s.var), self.value(s.value))
        elif isinstance(s, Store):
            pointer = self.element_pointer(s.buffer, self.value(s.index), s.lanes)
            fn.emit(Op.Store, None, pointer, self.value(s.value))
        elif isinstance(s, IfThen):
            self.if_then(s)
        elif isinstance(s, For):
            self.loop(s)
        elif isinstance(s, Barrier):
            semantics = MemorySemantics.AcquireRelease | MemorySemantics.WorkgroupMemory
            if s.scope == "storage":
                semantics |= MemorySemantics.UniformMemory
            workgroup = self.module.constant_u32(Scope.Workgroup)
            fn.emit(Op.ControlBarrier, None, workgroup, workgroup, self.module.constant_u32(semantics))
        else:
            raise SPIRVError(f"no SPIR-V for the statement {type(s).__name__} (was the kernel lowered for "
                             "SPIR-V?)")

    def local_variable(self, var: Local) -> int:
        for scope in reversed(self.scopes):
            if var.name in scope:
                return scope[var.name][0]
        raise SPIRVError(f"{var.name} is assigned before it is declared")

    def if_then(self, s: IfThen) -> None:
        fn, fresh = self.fn, self.module.fresh
        cond = self.value(s.cond)
        then_label, merge = fresh(), fresh()
        else_label = fresh() if s.otherwise else merge
        fn.emit(Op.SelectionMerge, None, merge, SELECTION_CONTROL_NONE)
        fn.emit(Op.BranchConditional, None, cond, then_label, else_label)
        for label, body in ((then_label, s.then), (else_label, s.otherwise)):
            if label != merge:
                fn.label(label)
                self.stmts(body)
                fn.emit(Op.Branch, None, merge)
        fn.label(merge)

    def loop(self, s: For) -> None:
        fn, fresh = self.fn, self.module.fresh
        dtype = s.var.dtype
        counter = fn.variable(self.types.pointer(StorageClass.Function, self.types.of(dtype)), StorageClass.Function,
                              s.var.name)
        fn.emit(Op.Store, None, counter, self.value(s.start))
        header, check, body, step, merge = (fresh() for _ in range(5))
        fn.emit(Op.Branch, None, header)
        fn.label(header)
        fn.emit(Op.LoopMerge, None, merge, step, LOOP_CONTROL_NONE)
        fn.emit(Op.Branch, None, check)
        fn.label(check)
        # The bound is read on every trip, as a C for loop reads it; it may branch (a guarded load).
        more = self.op(Op.SLessThan, "bool", self.op(Op.Load, dtype, counter), self.value(s.stop))
        fn.emit(Op.BranchConditional, None, more, body, merge)
        fn.label(body)
        self.scopes.append({s.var.name: (counter, dtype)})
        self.stmts(s.body)
        self.scopes.pop()
        fn.emit(Op.Branch, None, step)
        fn.label(step)
        following = self.op(Op.IAdd, dtype, self.op(Op.Load, dtype, counter), self.types.constant(s.step, dtype))
        fn.emit(Op.Store, None, counter, following)
        fn.emit(Op.Branch, None, header)
        fn.label(merge)

