"""fuse_ops: group operator calls into fused functions by their pattern kinds.

Within a dataflow block, a producer whose value only one consumer uses joins
the consumer's group when

- the producer is elementwise, broadcast or injective and the consumer is any
  of those or a reduction (the producer is computed inside the consumer's
  reads), or
- the producer is a reduction or output-elementwise-fusable (matmul, conv)
  and the consumer is elementwise or broadcast and reads it element for
  element (an epilogue applied before the store).

A group holds at most one reduction, and a matmul takes epilogues only (its
rules read its operands from memory). Each group of two or more calls becomes
a function marked ``Primitive`` whose call replaces the group; ``fuse_tir``
then turns it into one kernel. When the group's shapes use a symbolic
expression such as ``n * 2`` whose variable no parameter binds, the fused
function takes the variables as an extra ``R.Shape`` parameter, as in the
Relax paper's Figure 5.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .. import arith
from ..ir.expr import (
    Call,
    Constant,
    DataflowBlock,
    DataflowVar,
    Function,
    Op,
    SeqExpr,
    Var,
    VarBinding,
)
from ..ir.module import IRModule
from ..ir.struct_info import TensorStructInfo
from ..op.lowering import LegalizeError
from ..target import Target
from ..tir.compute import ComputeDef
from ..tir.pattern import Pattern, analyze_pattern
from ..tir.schedule import cpu_gemm
from .device_targets import DeviceTargets
from .legalize import call_signature, describe_call
from .outline import FreshNames, group_inputs, outline_group
from .rewrite import used_vars

INJECTIVE_KINDS = (Pattern.ELEMWISE, Pattern.BROADCAST, Pattern.INJECTIVE)
EPILOGUE_KINDS = (Pattern.ELEMWISE, Pattern.BROADCAST)
REDUCING_KINDS = (Pattern.REDUCTION, Pattern.OUT_EWISE_FUSABLE)


def fuse_ops(mod: IRModule, target: Target | DeviceTargets | None = None) -> IRModule:
    target = DeviceTargets.of(mod, target or Target("webgpu", features={"shader-f16"}))
    functions = dict(mod.functions)
    fresh = FreshNames(functions)
    kinds: dict = {}  # call signature -> (pattern kind, is a matmul): alike calls are analyzed once
    for name, func in mod.functions.items():
        if isinstance(func, Function) and not func.attr("Primitive"):
            functions[name] = _FunctionFuser(func, target, functions, fresh, kinds).run()
    return IRModule(functions, mod.global_infos)


@dataclass(eq=False)
class _Group:
    members: list[VarBinding] = field(default_factory=list)
    reduction: VarBinding | None = None
    matmul: bool = False


def quantized_gemm_epilogues_slow(target) -> bool:
    """Whether ``target``'s quantized GEMMs of more than one row run slower with an epilogue fused: C
    targets (serial threads on a CPU) whose backend lacks the GEMM micro-kernels (cpu_gemm.py), where
    the old tile rule's main loop ran 2.5x slower with one. llama_fusion's patterns ask the same."""
    return bool(target.cpu_adapter and target.serial_threads) and not target.has_extern(cpu_gemm.GEMM)


class _FunctionFuser:
    def __init__(self, func: Function, targets: DeviceTargets, functions: dict, fresh: FreshNames, kinds: dict):
        self.func, self.targets, self.functions, self.fresh, self.kinds = func, targets, functions, fresh, kinds
        # A fused kernel binds no more buffers than the strictest of the module's devices allows.
        self.max_bindings = min(t.limit("maxStorageBuffersPerShaderStage")
                                for t in [targets.target(name) for name in targets.names])
        self.positions: dict[int, int] = {}  # id(binding) -> its index in its block
        for block in func.body.blocks:
            for index, binding in enumerate(block.bindings):
                self.positions.setdefault(id(binding), index)
        self.uses: dict[Var, int] = {}
        for block in func.body.blocks:
            for binding in block.bindings:
                for var in used_vars(binding.value):
                    self.uses[var] = self.uses.get(var, 0) + 1
        for var in used_vars(func.body.body):
            self.uses[var] = self.uses.get(var, 0) + 1

    def run(self) -> Function:
        blocks = [self._block(b) if isinstance(b, DataflowBlock) else b for b in self.func.body.blocks]
        return Function(self.func.params, SeqExpr(tuple(blocks), self.func.body.body), self.func.ret_struct_info,
                        self.func.attrs, self.func.pure)

    # -- grouping ------------------------------------------------------------------------

    def _kind(self, binding) -> Pattern | None:
        value = binding.value
        if not (isinstance(binding, VarBinding) and isinstance(value, Call) and isinstance(value.op, Op)
                and value.op.legalize is not None):
            return None
        signature = call_signature(value, lambda var: ("var", var.struct_info))
        if signature is None:
            kind, matmul = self._analyze(value)
        else:
            if signature not in self.kinds:
                self.kinds[signature] = self._analyze(value)
            kind, matmul = self.kinds[signature]
        if matmul:
            self._matmuls.add(binding.var)
        return kind

    def _analyze(self, value: Call) -> tuple[Pattern | None, bool]:
        """The pattern kind of an operator call, or None when it is not fused, and whether it is a matmul."""
        try:
            described = describe_call(value, self.targets.target_of(value.struct_info))
        except LegalizeError:
            return None, False
        result = described.result
        if not isinstance(result, ComputeDef) or None in described.inputs or None in described.outputs:
            return None, False  # row operators, tuples and graph-level replacements stay on their own
        kind = analyze_pattern(result)
        return kind, kind in REDUCING_KINDS and ("matmul" in result.attrs or "quantized_matmul" in result.attrs)

    def _block(self, block: DataflowBlock) -> DataflowBlock:
        self._matmuls: set[Var] = set()
        kinds = {b.var: self._kind(b) for b in block.bindings}
        bound_here = {b.var: b for b in block.bindings}
        group_of: dict[Var, _Group] = {}
        for binding in block.bindings:
            kind = kinds[binding.var]
            if kind is None:
                continue
            group = _Group([binding], binding if kind in REDUCING_KINDS else None, binding.var in self._matmuls)
            group_of[binding.var] = group
            for var in used_vars(binding.value):
                producer = bound_here.get(var)
                if producer is None or var not in group_of or self.uses.get(var, 0) != 1:
                    continue
                if not isinstance(var, DataflowVar):
                    continue  # the block's outputs are needed after it
                if self._can_fuse(group_of[var], kinds[var], group, kind, binding, producer):
                    group = self._merge(group_of[var], group, group_of)
        self._join_shared_producers(block, kinds, group_of)
        blocks: list = []
        placed: set[int] = set()
        for binding in block.bindings:
            group = group_of.get(binding.var)
            if group is None or len(group.members) == 1:
                blocks.append(binding)
            elif binding is group.members[-1] and id(group) not in placed:
                placed.add(id(group))
                blocks.append(self._outline(group))
        return DataflowBlock(tuple(blocks))

    def _join_shared_producers(self, block: DataflowBlock, kinds: dict, group_of: dict) -> None:
        """An injective producer read by several calls that all ended up in one group joins it (TVM's
        post-dominator rule, for the case that matters: RoPE reads the reshaped q three times). Its
        value then never leaves the group, so the group stays one kernel with no path out and back."""
        users: dict[Var, list] = {}
        for binding in block.bindings:
            for var in used_vars(binding.value):
                users.setdefault(var, []).append(binding)
        changed = True
        while changed:
            changed = False
            for binding in reversed(block.bindings):
                var = binding.var
                readers = users.get(var, [])
                if (var not in group_of or len(readers) < 2 or len(readers) != self.uses.get(var, 0)
                        or not isinstance(var, DataflowVar) or any(r.var not in group_of for r in readers)):
                    continue
                producer, consumer = group_of[var], group_of[readers[0].var]
                if producer is consumer or any(group_of[r.var] is not consumer for r in readers):
                    continue
                if not self._same_device(var, readers[0].var):
                    continue
                if kinds[var] not in INJECTIVE_KINDS or producer.reduction is not None or consumer.matmul:
                    continue
                if any(kinds[r.var] not in INJECTIVE_KINDS + (Pattern.REDUCTION,) for r in readers):
                    continue
                bindings = self._bindings_after_merge(producer, consumer)
                if bindings > self.max_bindings:
                    continue
                self._merge(producer, consumer, group_of)
                changed = True

    def _can_fuse(self, producer: _Group, producer_kind, consumer: _Group, consumer_kind, binding, p_binding) -> bool:
        if producer is consumer or not self._same_device(p_binding.var, binding.var):
            return False
        if self._bindings_after_merge(producer, consumer) > self.max_bindings:
            return False  # the fused kernel would need more storage buffers than a dispatch may bind
        if producer.reduction is not None and consumer.reduction is not None:
            return False
        if producer_kind in INJECTIVE_KINDS and producer.reduction is None:
            # Computed inside the consumer's reads: not into a matmul, whose rules read memory.
            return consumer_kind in INJECTIVE_KINDS + (Pattern.REDUCTION,) and not consumer.matmul
        if producer.reduction is not None and consumer_kind in EPILOGUE_KINDS and consumer.reduction is None:
            if producer.matmul and self._epilogue_slows(producer.reduction):
                return False
            return same_shape(p_binding.var.struct_info, binding.var.struct_info)
        return False

    def _same_device(self, a: Var, b: Var) -> bool:
        """One kernel runs on one device: values on two (a split build) are never fused."""
        return not self.targets.split or self.targets.device_of(a.struct_info) == self.targets.device_of(b.struct_info)

    def _epilogue_slows(self, matmul: VarBinding) -> bool:
        """C targets' quantized GEMM tile rule (more than one row) runs its main loop 2.5x slower
        once an epilogue follows it (gcc -O3, measured on SmolLM2's prefill: 2.4 s against 1.18 s
        unfused), so there it takes none; GEMVs (decode) are unaffected, and so are q8-activation
        GEMVs over a decode batch's rows (quantized_gemv_q8.py), whatever their rows. Targets with the
        GEMM micro-kernels (tir/schedule/cpu_gemm.py) apply an epilogue to each output of a tile already
        computed, so there it costs nothing."""
        if not quantized_gemm_epilogues_slow(self.targets.target_of(matmul.var.struct_info)):
            return False
        if matmul.value.op.name != "quantized_matmul" or matmul.value.attr("activations") == "q8":
            return False
        shape = matmul.var.struct_info.shape if isinstance(matmul.var.struct_info, TensorStructInfo) else None
        if shape is None:
            return True
        rows = arith.IntImm(1)
        for dim in shape[:-1]:
            rows = rows * dim
        return arith.Analyzer().as_int(arith.simplify(rows)) != 1

    def _bindings_after_merge(self, producer: _Group, consumer: _Group) -> int:
        """Storage buffers the merged group's kernel binds: its external tensor inputs and its output."""
        members = producer.members + consumer.members
        inputs = [v for v in group_inputs(members, _lifted) if isinstance(v.struct_info, TensorStructInfo)]
        return len(inputs) + 1

    def _merge(self, producer: _Group, consumer: _Group, group_of) -> _Group:
        merged = _Group(producer.members + consumer.members, producer.reduction or consumer.reduction,
                        producer.matmul or consumer.matmul)
        for member in merged.members:
            group_of[member.var] = merged
        return merged

    # -- outlining -----------------------------------------------------------------------------

    def _outline(self, group: _Group) -> VarBinding:
        members = sorted(group.members, key=lambda b: self._position(b))
        name = self.fresh("fused_" + "_".join(b.value.op.name.replace("nn.", "") for b in members))
        func, call = outline_group(members, name, (("Primitive", 1),), self.func, _lifted)
        self.functions[name] = func
        return VarBinding(members[-1].var, call)

    def _position(self, binding) -> int:
        return self.positions.get(id(binding), 0)


def _lifted(leaf) -> bool:
    """Constants a fused function takes as parameters (weights: a kernel reads them as buffers);
    scalar ones stay inline."""
    return isinstance(leaf, Constant) and leaf.data.ndim > 0


def same_shape(a, b) -> bool:
    if not (isinstance(a, TensorStructInfo) and isinstance(b, TensorStructInfo)):
        return False
    if a.shape is None or b.shape is None or len(a.shape) != len(b.shape):
        return False
    analyzer = arith.Analyzer(nonnegative=True)
    return all(analyzer.prove_equal(x, y) for x, y in zip(a.shape, b.shape))
