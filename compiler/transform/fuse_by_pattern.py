"""fuse_ops_by_pattern: the parts of a graph that match a pattern become one fused call.

Each ``FusionPattern`` (the Relax paper's Figure 9) has a name, a pattern (tessera.transform.pattern),
an optional check on the match, and where the group goes:

- ``"compile"``: the group becomes a function marked ``Primitive`` (and ``Composite``: the
  pattern's name), called where its last binding was; ``fuse_tir`` then composes it into one
  kernel, exactly as it does fuse_ops's groups. A pattern whose group fuse_tir cannot compose (a
  row operator such as rms_norm, two reductions, an injective producer into a matmul) is refused
  with a ``PatternError`` that says why: such a group can still go to a library.
- a library function's name: the group becomes ``R.call_dps_library(name, (inputs...), out_sinfo)``;
  the inputs are what the group reads from outside it (variables and constants), in the order the
  group first reads them.

Patterns are tried in order, each over every dataflow block from the last binding up, so a later
binding claims the largest match it roots (a matmul with its bias add before the matmul alone).
A binding belongs to at most one match, and a match whose intermediate values are used outside
it is rejected: removing them would leave those uses dangling.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from ..ir.expr import Call, Constant, DataflowBlock, Function, Op, Var, VarBinding, with_struct_info
from ..ir.module import IRModule
from ..ir.printer import print_binding
from ..ir.struct_info import TensorStructInfo, TupleStructInfo
from ..op.cross_level import call_dps_library
from ..op.lowering import LegalizeError
from ..target import Target
from ..tir.compute import ComputeDef, OpaqueDef, RowDef
from ..tir.pattern import analyze_pattern
from .fuse_ops import EPILOGUE_KINDS, INJECTIVE_KINDS, same_shape
from .legalize import describe_call
from .outline import FreshNames, group_inputs, outline_group
from .pattern import ExprPattern, Match, PatternError, check_names, match
from .rewrite import used_vars

COMPILE = "compile"


@dataclass(frozen=True)
class FusionPattern:
    """``backend`` is ``"compile"`` or the name of the library function the group calls."""

    name: str
    pattern: ExprPattern
    check: Callable[[Match], bool] | None = None
    backend: str = COMPILE

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name:
            raise PatternError(f"a fusion pattern needs a name, got {self.name!r}")
        if not isinstance(self.pattern, ExprPattern):
            raise PatternError(f"fusion pattern {self.name!r}: expected a pattern, got {self.pattern!r}")
        if self.check is not None and not callable(self.check):
            raise PatternError(f"fusion pattern {self.name!r}: the check must be a function of the match")
        if not isinstance(self.backend, str) or not self.backend:
            raise PatternError(f"fusion pattern {self.name!r}: the backend is \"compile\" or a library "
                               f"function's name, got {self.backend!r}")
        check_names(self.pattern)


def fuse_ops_by_pattern(mod: IRModule, patterns: Iterable, target: Target | None = None) -> IRModule:
    """``patterns``: ``FusionPattern``s or tuples ``(name, pattern[, check[, backend]])``."""
    patterns = [as_fusion_pattern(p) for p in patterns]
    target = target or Target("webgpu", features={"shader-f16"})
    functions = dict(mod.functions)
    fresh = FreshNames(functions)
    for name, func in mod.functions.items():
        if isinstance(func, Function) and not func.attr("Primitive"):
            functions[name] = _fuse_function(func, patterns, target, functions, fresh)
    return IRModule(functions, mod.global_infos)


def as_fusion_pattern(value) -> FusionPattern:
    if isinstance(value, FusionPattern):
        return value
    if isinstance(value, tuple) and 2 <= len(value) <= 4:
        return FusionPattern(*value)
    raise PatternError(f"expected a FusionPattern or (name, pattern[, check[, backend]]), got {value!r}")


def find_matches(func: Function, patterns: Sequence) -> list[tuple[FusionPattern, Match]]:
    """The matches fuse_ops_by_pattern would fuse in ``func``, with the pattern each one matched."""
    patterns = [as_fusion_pattern(p) for p in patterns]
    uses = _use_counts(func)
    found = []
    for block in func.body.blocks:
        if not isinstance(block, DataflowBlock):
            continue
        # Bindings still free to join a match; a variable outside it is a leaf to every pattern.
        free = {b.var: b for b in block.bindings if isinstance(b, VarBinding)}
        for fp in patterns:
            for binding in reversed(block.bindings):
                if binding.var not in free:
                    continue
                m = match(fp.pattern, binding.var, free)
                if m is None or not m.members or m.members[-1] is not binding:
                    continue  # nothing matched past a wildcard: no group to form
                if not _used_only_inside(m, uses) or (fp.check is not None and not fp.check(m)):
                    continue
                for member in m.members:
                    del free[member.var]
                found.append((fp, m))
    return found


def _fuse_function(func: Function, patterns, target: Target, functions: dict, fresh: FreshNames) -> Function:
    replaced: dict[int, VarBinding | None] = {}  # id(binding) -> its replacement, None: dropped
    position = {id(b): i for i, b in enumerate(b for block in func.body.blocks for b in block.bindings)}
    # Outlined in block order, as fuse_ops outlines its groups: the same group gets the same name.
    matches = sorted(find_matches(func, patterns), key=lambda found: position[id(found[1].members[-1])])
    for fp, m in matches:
        members = list(m.members)
        root = members[-1]
        if fp.backend == COMPILE:
            problem = _compile_problem(members, target)
            if problem:
                raise PatternError(f"pattern {fp.name!r} matched {_quote(root)}, which fuse_tir cannot compile "
                                   f"into one kernel: {problem}; offload it to a library or narrow the pattern")
            name = fresh("fused_" + "_".join(b.value.op.name.replace("nn.", "") for b in members))
            fused, call = outline_group(members, name, (("Primitive", 1), ("Composite", fp.name)), func,
                                        lift=_buffer_constant)
            functions[name] = fused
        else:
            call = _library_call(fp.backend, members)
        for member in members[:-1]:
            replaced[id(member)] = None
        replaced[id(root)] = VarBinding(root.var, call)
    if not replaced:
        return func
    blocks = []
    for block in func.body.blocks:
        bindings = [replaced.get(id(b), b) for b in block.bindings]
        blocks.append(type(block)(tuple(b for b in bindings if b is not None)))
    body = type(func.body)(tuple(blocks), func.body.body)
    return Function(func.params, body, func.ret_struct_info, func.attrs, func.pure)


def _library_call(library: str, members: list[VarBinding]) -> Call:
    # The library sees every value the group reads, scalar constants and prim values (an offset)
    # included: it computes the whole group, so nothing of it may stay behind inline.
    inputs = group_inputs(members, lift=lambda c: True)
    sinfo = members[-1].var.struct_info
    outs = list(sinfo.fields) if isinstance(sinfo, TupleStructInfo) else [sinfo]
    return with_struct_info(call_dps_library(library, inputs, outs), sinfo)


def _compile_problem(members: list[VarBinding], target: Target) -> str | None:
    """Why fuse_tir could not compose these bindings into one kernel, or None when it can."""
    inside = {b.var for b in members}
    reduction = None
    after_reduction: set[Var] = set()
    for b in members:
        value = b.value
        if not (isinstance(value, Call) and isinstance(value.op, Op) and value.op.legalize is not None):
            return f"{_quote(b)} is not an operator call with a kernel"
        try:
            described = describe_call(value, target)
        except LegalizeError as error:
            return str(error)
        result = described.result
        if isinstance(result, RowDef):
            return f"R.{value.op.name} is a row operator, whose kernel is written whole"
        if isinstance(result, OpaqueDef):
            return f"R.{value.op.name} has an opaque kernel ({result.kind})"
        if not isinstance(result, ComputeDef):
            return f"R.{value.op.name} is not one loop nest (it is replaced at the graph level or split)"
        if None in described.inputs or None in described.outputs:
            return f"{_quote(b)} has a tensor of unknown shape or dtype"
        kind = analyze_pattern(result)
        reads_reduction = any(v in after_reduction for v in used_vars(value))
        if result.reduction is not None:
            if reduction is not None:
                return "it holds two reductions, and a kernel computes one"
            if ("matmul" in result.attrs or "quantized_matmul" in result.attrs) and \
                    any(a in inside for a in described.args):
                return f"R.{value.op.name} reads its operands from memory, and {_quote(b)} computes one in the group"
            if reads_reduction:
                return "it holds two reductions, and a kernel computes one"
            reduction = b
            after_reduction.add(b.var)
        elif reads_reduction:
            if kind not in EPILOGUE_KINDS or not same_shape(reduction.var.struct_info, b.var.struct_info):
                return (f"{_quote(b)} reads the reduction's result, which only an elementwise epilogue of the "
                        "same shape can")
            after_reduction.add(b.var)
        elif kind not in INJECTIVE_KINDS:  # computed inside its readers' reads, so it must be indexable
            return f"R.{value.op.name}'s kernel is {kind.value}, which its readers cannot inline"
    buffers = 1 + len([v for v in group_inputs(members, lift=_buffer_constant)
                       if isinstance(v.struct_info, TensorStructInfo)])
    limit = target.limit("maxStorageBuffersPerShaderStage")
    if buffers > limit:
        return f"its kernel would bind {buffers} storage buffers, target {target} allows {limit}"
    return None


def _buffer_constant(leaf) -> bool:
    """A constant a kernel takes as a buffer (fuse_tir writes scalars into the kernel's text)."""
    return isinstance(leaf, Constant) and leaf.data.ndim > 0


def _used_only_inside(m: Match, uses: dict[Var, int]) -> bool:
    inside: dict[Var, int] = {}
    for b in m.members:
        for var in used_vars(b.value):
            inside[var] = inside.get(var, 0) + 1
    return all(uses.get(b.var, 0) == inside.get(b.var, 0) for b in m.members[:-1])


def _use_counts(func: Function) -> dict[Var, int]:
    uses: dict[Var, int] = {}
    for block in func.body.blocks:
        for binding in block.bindings:
            for var in used_vars(binding.value):
                uses[var] = uses.get(var, 0) + 1
    for var in used_vars(func.body.body):
        uses[var] = uses.get(var, 0) + 1
    return uses


def _quote(binding: VarBinding) -> str:
    text = print_binding(binding)
    return text if len(text) <= 160 else text[:157] + "..."
