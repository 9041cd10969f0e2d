"""plan_memory: give every tensor a kernel writes a place in storage tokens, reused by lifetime.

Works on a legalized function (its kernels are ``call_tir``). Each call's
output is a tensor that lives from its binding to its last use (uses through
aliases, tuples and tuple items count). Sizes are symbolic byte counts. A
tensor whose size has an upper bound (every symbolic variable in it has one)
goes into the function's arena at an offset of its own, chosen over all the
lifetimes at once (``arena_layout``: greedy best fit in several orders, the
smallest kept); tensors at one offset share a storage token, as large as the
largest of them, and tokens whose tensors never live at once may overlap. The
others are allocated per call at run time, in storage tokens assigned in
program order: a token is free again after the last use of the tensors in it
and is reused only by a tensor of provably equal size (``tessera.arith``).
The function's results are never freed, so nothing later overwrites them.
The plan records the liveness lower bound: the most bytes live at any one
step, which no layout can beat.

Across control flow and calls (as TVM's StaticPlanBlockMemory): the arms of an
``If`` are planned one after the other, so each reuses what the other frees
(a storage that serves tensors in more than one arm, or after the ``If``, is
allocated before the ``If``, where every use of it is in scope);
a function that another calls hands its results to the caller, so they are
allocated at run time rather than in its arena; a recursive function may be
active twice at once, so all its storage is allocated per call.

The arena is laid out for the target's device: offsets aligned to its storage
alignment (WebGPU: 256 bytes), split into buffers no larger than its
``maxBufferSize`` with no tensor straddling two. A build split across devices
(``DeviceTargets``) plans each device apart: one arena per device, laid out
with that device's alignment and limit, run-time storages reused only on their
own device; ``buffer_devices`` and each storage's ``device`` say where.
The plan is stored on the function as the attribute ``memory_plan``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .. import arith
from ..ir.errors import MemoryPlanError
from ..ir.expr import (
    Call,
    Function,
    If,
    Op,
    SeqExpr,
    ShapeExpr,
    Tuple,
    TupleGetItem,
    Var,
    VarBinding,
    with_struct_info,
)
from ..ir.module import IRModule
from ..ir.struct_info import ObjectStructInfo, TensorStructInfo
from ..op.registry import make_call
from ..target import LIMIT_DEFAULTS
from ..tir.lower.storage import element_bytes
from .arena_layout import Lifetime, layout, peak_bytes
from .device_targets import DeviceTargets
from .rewrite import function_references, map_graph_functions, recursive_functions, rewrite_function, used_vars

# Without a target: WebGPU's defaults, which every adapter grants (targets pass their own).
ALIGNMENT = LIMIT_DEFAULTS["minStorageBufferOffsetAlignment"]
MAX_BUFFER_SIZE = LIMIT_DEFAULTS["maxBufferSize"]


def device_bytes(sinfo: TensorStructInfo) -> arith.PrimExpr:
    """Bytes a tensor takes on the device (``element_bytes``: bool is a word per element); whole words in all."""
    count: arith.PrimExpr = arith.IntImm(1)
    for dim in sinfo.shape:
        count = count * dim
    return arith.simplify((count * element_bytes(sinfo.dtype) + 3) // 4 * 4)


@dataclass
class StorageToken:
    index: int
    size: arith.PrimExpr  # bytes, symbolic
    static_size: int | None  # bytes at the upper bounds, when every variable has one
    tensors: list[str] = field(default_factory=list)
    offset: int | None = None  # in the arena
    buffer: int | None = None  # which arena buffer holds it
    device: int = 0  # the physical device (DeviceTargets.placement) it lives on
    scope: tuple = ()  # the branch arms it was made in: a storage allocated at run time serves only there
    largest: str = ""  # the largest tensor it holds at the upper bounds, for error messages
    largest_size: int = -1


@dataclass
class MemoryPlan:
    tokens: list[StorageToken]
    tensor_token: dict[str, int]  # tensor (binding name) -> token index, for people and tests
    buffers: list[int]  # byte size of each arena buffer (the storages with an upper bound)
    liveness_lower_bound: int | None  # most bytes live at once, at the upper bounds
    recursive: bool = False  # every storage is allocated per call
    var_token: dict[Var, int] = field(default_factory=dict)  # by variable (names may repeat across arms)
    buffer_devices: list[int] = field(default_factory=list)  # each arena buffer's device (a split build)
    device_stats: list[dict] = field(default_factory=list)  # per device: arena and lower bound bytes

    @property
    def static(self) -> bool:
        return all(t.static_size is not None for t in self.tokens)

    @property
    def arena_bytes(self) -> int | None:
        return sum(self.buffers)

    def to_json(self) -> dict:
        plan = {
            "static": self.static,
            "recursive": self.recursive,
            "arena_bytes": self.arena_bytes,
            "buffers": self.buffers,
            "liveness_lower_bound_bytes": self.liveness_lower_bound,
            "storages": [{"index": t.index, "size": arith.to_source(t.size), "static_size": t.static_size,
                          "buffer": t.buffer, "offset": t.offset, "tensors": t.tensors} for t in self.tokens],
        }
        if self.device_stats:  # a split build (docs/format.md, version 4)
            plan["buffer_devices"] = self.buffer_devices
            plan["devices"] = self.device_stats
            for storage, token in zip(plan["storages"], self.tokens):
                storage["device"] = token.device
        return plan


def plan_memory(mod: IRModule, upper_bounds: dict[str, int] | None = None,
                max_buffer_size: int = MAX_BUFFER_SIZE, alignment: int = ALIGNMENT,
                targets: DeviceTargets | None = None) -> IRModule:
    """Plan every function; after explicit allocation, also place each allocation in its storage:
    ``R.builtin.alloc_tensor`` becomes ``R.memory.alloc_tensor`` in a ``R.memory.alloc_storage``
    emitted just before the storage's first tensor. ``targets``: a build split across devices, each
    planned with its own target's limit and alignment (``max_buffer_size`` and ``alignment`` are the
    single device's)."""
    devices = _DeviceLayout.of(targets, max_buffer_size, alignment)

    callees, recursive = call_graph(mod)

    def plan(name: str, func: Function) -> Function:
        if func.attr("Primitive"):
            return func
        try:
            result = plan_function(func, upper_bounds, max_buffer_size, alignment,
                                   results_outlive_call=name in callees, recursive=name in recursive,
                                   devices=devices)
        except MemoryPlanError as error:
            raise MemoryPlanError(f"function {name}: {error}", error.size, error.limit, error.tensors, name) from None
        return _place(func, result, devices).with_attr("memory_plan", result.to_json())

    return map_graph_functions(mod, plan)


def call_graph(mod: IRModule) -> tuple[set[str], set[str]]:
    """(functions another function calls or takes as a value, functions on a cycle of such uses)."""
    refs = function_references(mod)
    return set().union(*refs.values()) if refs else set(), recursive_functions(refs)


def _place(func: Function, plan: MemoryPlan, devices: _DeviceLayout) -> Function:
    homes = _storage_homes(func, plan)
    storages = {index: Var(f"storage{index}", ObjectStructInfo()) for index in homes}
    anchored: dict[Var, list[int]] = {}  # binding var -> the tokens allocated just before it
    for index, anchor in homes.items():
        anchored.setdefault(anchor, []).append(index)

    def rewrite(binding, dataflow):
        out = []
        for index in anchored.get(binding.var, ()):
            token = plan.tokens[index]
            alignment = devices.alignments[token.device]
            size = arith.IntImm(_align(token.static_size, alignment)) if token.static_size is not None else token.size
            alloc = make_call("memory.alloc_storage", ShapeExpr((size,)), token=token.index)
            out.append(VarBinding(storages[index], with_struct_info(alloc, ObjectStructInfo())))
        value = binding.value
        if not (isinstance(value, Call) and isinstance(value.op, Op) and value.op.name == "builtin.alloc_tensor"):
            return out + [binding]
        if binding.var not in plan.var_token:
            return out + [binding]  # allocated at run time from the pool (a result that outlives its call)
        token = plan.tokens[plan.var_token[binding.var]]
        sinfo = binding.var.struct_info
        place = make_call("memory.alloc_tensor", storages[token.index], ShapeExpr(sinfo.shape), offset=0,
                          dtype=sinfo.dtype)
        out.append(VarBinding(binding.var, with_struct_info(place, sinfo)))
        return out

    return rewrite_function(func, rewrite)


def _storage_homes(func: Function, plan: MemoryPlan) -> dict[int, Var]:
    """Where each storage token is allocated: just before the binding (its variable here) that holds the
    token's first tensor in the innermost scope enclosing all of its tensors. In straight-line code
    that is the first tensor's own binding. An arena token shared by both arms of an ``If`` (each arm
    reuses what the other frees) is allocated before the ``If``, so that the arm that does not
    allocate it still has the storage in scope; a run-time token is reused only inside the scope it
    was made in, so its home is its first tensor's binding too."""
    steps = _linearize(func.body, ())
    if_vars = {id(step.binding): step.var for step in steps if isinstance(step.value, If)}
    scopes: dict[int, list[tuple]] = {}  # token -> the scope of each of its tensors, in program order
    for step in steps:
        if step.binding is not None and step.var in plan.var_token:
            scopes.setdefault(plan.var_token[step.var], []).append((step.scope, step.var))
    homes: dict[int, Var] = {}
    for index, found in scopes.items():
        common = found[0][0]
        for scope, _ in found[1:]:
            depth = 0
            while depth < min(len(common), len(scope)) and common[depth] == scope[depth]:
                depth += 1
            common = common[:depth]
        first_scope, first_var = found[0]
        homes[index] = first_var if len(first_scope) == len(common) else if_vars[first_scope[len(common)][0]]
    return dict(sorted(homes.items(), key=lambda item: item[0]))


def plan_function(func: Function, upper_bounds: dict[str, int] | None = None,
                  max_buffer_size: int = MAX_BUFFER_SIZE, alignment: int = ALIGNMENT,
                  results_outlive_call: bool = False, recursive: bool = False,
                  devices: _DeviceLayout | None = None) -> MemoryPlan:
    """Plan one function. ``results_outlive_call``: another function calls it, so its results are not
    planned (they are allocated at run time and handed to the caller). ``recursive``: it may be
    active twice at once, so nothing goes into an arena of its own: every storage is allocated per call."""
    devices = devices or _DeviceLayout.of(None, max_buffer_size, alignment)
    bounds = dict(func.attr("tir_var_upper_bound", {}) or {})
    bounds.update(upper_bounds or {})
    analyzer = arith.Analyzer({k: (0, v) for k, v in bounds.items()}, nonnegative=True)
    # Branches are planned as one sequence, each arm after the other and the If after both: what an
    # arm allocates and drops is free again for the other arm; what it hands to the merge is live
    # until the merged value's last use.
    steps = _linearize(func.body, ())
    produced: dict[Var, int] = {}  # tensor var -> step index
    refers: dict[Var, set[Var]] = {}  # any var -> the planned tensors it may hold
    fields: dict[Var, list[set[Var]]] = {}  # tuple var -> what each field holds

    def held(expr) -> set[Var]:
        """The planned tensors ``expr`` can reach; a tuple item reaches only its field's."""
        if isinstance(expr, TupleGetItem) and isinstance(expr.tuple_value, Var) and expr.tuple_value in fields:
            return fields[expr.tuple_value][expr.index]
        found: set[Var] = set()
        for var in used_vars(expr):
            found |= refers.get(var, set())
        return found

    for index, step in enumerate(steps):
        var, value = step.var, step.value
        if step.binding is not None and _is_kernel_call(value) and isinstance(var.struct_info, TensorStructInfo):
            produced[var] = index
            refers[var] = {var}
        elif var is not None and isinstance(value, (Var, Tuple, TupleGetItem)):
            refers[var] = held(value)
            if isinstance(value, Tuple):
                fields[var] = [held(f) for f in value.fields]
        elif var is not None and isinstance(value, If):
            refers[var] = held(value.true_branch.body) | held(value.false_branch.body)
        elif var is not None and isinstance(value, Call) and not isinstance(value.op, Op):
            refers[var] = held(Tuple(value.args))  # a callee may hand back one of its arguments
    last_use: dict[Var, int] = {v: i for v, i in produced.items()}
    for index, step in enumerate(steps):
        if step.binding is None:
            reads = held(step.reads)
        elif isinstance(step.value, Tuple):
            continue  # building a tuple reads nothing; its items are used where they are taken out
        elif isinstance(step.value, If):  # the arms' bindings were steps of their own
            reads = held(step.value.cond)
        else:
            reads = held(step.value)
        for tensor in reads:
            last_use[tensor] = max(last_use[tensor], index)
    results = held(func.body.body)

    planned = {v for v in produced if not (results_outlive_call and v in results)}
    sizes = {v: device_bytes(v.struct_info) for v in planned}
    static = {v: None if recursive else analyzer.upper_bound(s) for v, s in sizes.items()}
    # A tensor lives from the step that writes it to the last step that reads it; the results to the end.
    # In program order, not the set's: the layout breaks ties by position, and builds must be reproducible.
    lifetimes = {v: Lifetime(produced[v], len(steps) if v in results else last_use[v], static[v])
                 for v in sorted(planned, key=produced.__getitem__) if static[v] is not None}
    device_of = {v: devices.placement(v.struct_info) for v in planned}
    arena, buffer_devices, stats = _Arena({}, []), [], []
    for device in range(devices.count):  # one arena per device, each in its own buffers
        mine = {v: t for v, t in lifetimes.items() if device_of[v] == device}
        part = _arena_layout(mine, devices.max_buffer_sizes[device], devices.alignments[device])
        first = len(arena.buffers)
        arena.placements.update({v: (first + b, offset) for v, (b, offset) in part.placements.items()})
        arena.buffers += part.buffers
        buffer_devices += [device] * len(part.buffers)
        everything_bounded = all(static[v] is not None for v in planned if device_of[v] == device)
        stats.append({"arena_bytes": sum(part.buffers), "liveness_lower_bound_bytes":
                      peak_bytes(list(mine.values())) if everything_bounded else None})

    tokens: list[StorageToken] = []
    at_offset: dict[tuple[int, int], StorageToken] = {}  # (buffer, offset) -> the arena's token there
    free: list[StorageToken] = []  # tokens allocated at run time, free again
    var_token: dict[Var, int] = {}
    live: dict[Var, StorageToken] = {}
    for index, step in enumerate(steps):
        # Run-time tokens whose tensors were last used before this step are free again.
        for tensor, token in list(live.items()):
            if last_use[tensor] < index and tensor not in results:
                del live[tensor]
                if not any(t is token for t in live.values()):
                    free.append(token)
        if step.var not in planned or step.binding is None:
            continue
        tensor = step.var
        if tensor in arena.placements:  # tensors placed at one offset share a token, as large as the largest
            place = arena.placements[tensor]
            token = at_offset.get(place)
            if token is None:
                token = at_offset[place] = StorageToken(len(tokens), sizes[tensor], static[tensor], buffer=place[0],
                                                        offset=place[1], scope=step.scope, device=device_of[tensor])
                tokens.append(token)
            elif not analyzer.prove_equal(token.size, sizes[tensor]):
                token.static_size = max(token.static_size, static[tensor])
                token.size = arith.IntImm(token.static_size)
        else:  # without an upper bound: a run-time token of provably equal size, or a new one
            token = _reuse([t for t in free if step.scope[:len(t.scope)] == t.scope and t.device == device_of[tensor]],
                           sizes[tensor], analyzer)
            if token is None:
                token = StorageToken(len(tokens), sizes[tensor], None, scope=step.scope, device=device_of[tensor])
                tokens.append(token)
            else:
                free.remove(token)
            live[tensor] = token
        token.tensors.append(tensor.name_hint)
        if static[tensor] is not None and static[tensor] > token.largest_size:
            token.largest, token.largest_size = _describe(tensor), static[tensor]
        var_token[tensor] = token.index
    lower_bound = peak_bytes(list(lifetimes.values())) if len(lifetimes) == len(planned) else None
    names = {v.name_hint: t for v, t in var_token.items()}
    split = devices.count > 1
    return MemoryPlan(tokens, names, arena.buffers, lower_bound, recursive, var_token,
                      buffer_devices if split else [], stats if split else [])


@dataclass
class _Step:
    """One binding of the function, or the read of an arm's result, in planning order."""

    binding: object  # the Binding, None for an arm's result
    var: Var | None
    value: object
    scope: tuple  # the arms it is inside, outermost first: ((id of the If binding, arm number), ...)
    reads: object = None  # what an arm's result step reads


def _linearize(seq: SeqExpr, scope: tuple) -> list[_Step]:
    steps: list[_Step] = []
    for block in seq.blocks:
        for b in block.bindings:
            if isinstance(b.value, If):
                for arm_number, arm in enumerate((b.value.true_branch, b.value.false_branch)):
                    arm_scope = scope + ((id(b), arm_number),)
                    steps.extend(_linearize(arm, arm_scope))
                    steps.append(_Step(None, None, None, arm_scope, reads=arm.body))
            steps.append(_Step(b, b.var, b.value, scope))
    return steps


def _is_kernel_call(value) -> bool:
    """A new tensor: a kernel's output before explicit allocation, an allocation after it."""
    return isinstance(value, Call) and isinstance(value.op, Op) and value.op.name in ("call_tir",
                                                                                       "builtin.alloc_tensor")


def _reuse(free: list[StorageToken], size, analyzer) -> StorageToken | None:
    """A free run-time token of provably the same size: without upper bounds, nothing else is known to fit."""
    return next((t for t in free if analyzer.prove_equal(t.size, size)), None)


def _describe(var) -> str:
    """``lv44: float32[3, 9, n, total]``: a tensor as an error message names it."""
    info = var.struct_info
    if not isinstance(info, TensorStructInfo) or info.shape is None:
        return var.name_hint
    return f"{var.name_hint}: {info.dtype}[{', '.join(arith.to_source(d) for d in info.shape)}]"


def _mib(size: int) -> str:
    return f"{size / 2 ** 20:.0f} MiB"


@dataclass
class _Arena:
    placements: dict[Var, tuple[int, int]]  # tensor -> (buffer, offset)
    buffers: list[int]


def _arena_layout(lifetimes: dict[Var, Lifetime], max_buffer_size: int, alignment: int) -> _Arena:
    """Offsets for the tensors with an upper bound (arena_layout); a tensor larger than any buffer
    can be is an error that names it."""
    too_large = sorted((v for v, t in lifetimes.items() if _align(max(t.size, 4), alignment) > max_buffer_size),
                       key=lambda v: (-lifetimes[v].size, lifetimes[v].start))
    if too_large:
        size = _align(lifetimes[too_large[0]].size, alignment)
        raise MemoryPlanError(f"tensor {_describe(too_large[0])} needs {size} bytes ({_mib(size)}) "
                              f"at its sizes' upper bounds, more than the target's maxBufferSize "
                              f"{max_buffer_size} ({_mib(max_buffer_size)})", size, max_buffer_size,
                              tuple(v.name_hint for v in too_large))
    tensors = list(lifetimes)
    result = layout([lifetimes[v] for v in tensors], alignment, max_buffer_size)
    return _Arena(dict(zip(tensors, result.placements)), result.buffers)


@dataclass
class _DeviceLayout:
    """What planning needs of each physical device of a build: its alignment and largest buffer, and
    which device a value's struct info places it on."""

    alignments: list[int]
    max_buffer_sizes: list[int]
    targets: DeviceTargets | None = None

    @staticmethod
    def of(targets: DeviceTargets | None, max_buffer_size: int, alignment: int) -> _DeviceLayout:
        if targets is None or len(targets.physical_devices) < 2:
            return _DeviceLayout([alignment], [max_buffer_size])
        first = {}
        for name in targets.names:  # each device's target: the first vdevice placed on it
            first.setdefault(targets.placement(name), targets.target(name))
        ordered = [first[i] for i in range(len(first))]
        return _DeviceLayout([t.storage_alignment for t in ordered], [t.limit("maxBufferSize") for t in ordered],
                             targets)

    @property
    def count(self) -> int:
        return len(self.alignments)

    def placement(self, sinfo) -> int:
        return 0 if self.targets is None else self.targets.placement_of(sinfo)


def _align(value: int, alignment: int) -> int:
    return (value + alignment - 1) // alignment * alignment
