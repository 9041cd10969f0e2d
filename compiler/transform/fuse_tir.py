"""fuse_tir: each fused function becomes one kernel, and its call one call_tir.

The members' compute definitions are composed before scheduling: a read of
another member's output is replaced by that member's value at the read's
indices (injective producers are computed where they are needed), and
elementwise members after a reduction become the reduction's epilogue,
applied to the accumulated value before the store. The composite definition
is scheduled like any other, so a fused group costs one launch.
"""

from __future__ import annotations

from dataclasses import replace

from ..ir.expr import Call, Constant, Function, GlobalVar, Var, VarBinding
from ..ir.module import IRModule
from ..target import Target
from ..tir.compute import ComputeDef, TensorRead, accumulate_type, placeholder
from ..tir.ir import Cast, Const, TExpr, cast, map_children
from .device_targets import DeviceTargets
from .legalize import KernelTable, call_signature, describe_call
from .rewrite import rewrite_function


def fuse_tir(mod: IRModule, target: Target | DeviceTargets) -> IRModule:
    targets = DeviceTargets.of(mod, target)
    kernels = KernelTable(mod.functions, targets)
    fused = {name for name, f in mod.functions.items() if isinstance(f, Function) and f.attr("Primitive")}
    # Groups alike but for their names (one per decoder layer) are composed and scheduled once.
    signatures = {name: _signature(mod.functions[name]) for name in fused}
    composites: dict = {}
    for name in sorted(fused):
        key = signatures[name] if signatures[name] is not None else name
        if key not in composites:
            fused_function = mod.functions[name]
            composites[key] = _compose(name, fused_function, targets.target_of(fused_function.ret_struct_info))

    def rewrite(binding, dataflow):
        value = binding.value
        if isinstance(binding, VarBinding) and isinstance(value, Call) and isinstance(value.op, GlobalVar) \
                and value.op.name in fused:
            name, signature = value.op.name, signatures[value.op.name]
            defn, params = composites[signature if signature is not None else name]
            args = [a for a, p in zip(value.args, params) if p is not None]
            inputs = [p for p in params if p is not None]
            table = kernels.for_value(binding.var.struct_info)
            return [VarBinding(binding.var, table.call(defn, args, inputs, binding.var.struct_info, signature, name))]
        return [binding]

    for name, func in mod.functions.items():
        if isinstance(func, Function) and name not in fused:
            kernels.functions[name] = rewrite_function(func, rewrite)
    for name in fused:
        del kernels.functions[name]
    return IRModule(kernels.functions, mod.global_infos)


def _signature(func: Function):
    """The fused function up to its name and its variables' names: its parameters' struct info and
    each member call, whose arguments are named by position (parameter i, member j); None when a
    part cannot be compared (then the function is composed and scheduled on its own)."""
    blocks = func.body.blocks
    if len(blocks) != 1 or func.body.body is not blocks[0].bindings[-1].var:
        return None
    position = {param: ("param", index) for index, param in enumerate(func.params)}
    members = []
    for index, binding in enumerate(blocks[0].bindings):
        if not isinstance(binding, VarBinding) or not isinstance(binding.value, Call):
            return None
        member = call_signature(binding.value, lambda var: position.get(var))
        if member is None:
            return None
        members.append((member, binding.var.struct_info))
        position[binding.var] = ("member", index)
    return (tuple(p.struct_info for p in func.params), tuple(members))


def _compose(name: str, func: Function, target: Target):
    """The fused function's members as one compute definition over its tensor parameters."""
    params: list = []
    buffer_of: dict[Var, object] = {}
    for index, param in enumerate(func.params):
        sinfo = param.struct_info
        if hasattr(sinfo, "dtype") and getattr(sinfo, "shape", None) is not None:
            buf = placeholder(f"p{index}", sinfo.dtype, sinfo.shape)
            buffer_of[param] = buf
            params.append(buf)
        else:
            params.append(None)  # the symbolic-values parameter: sizes reach kernels as scalars
    member_defs: dict[Var, ComputeDef] = {}
    read_map: dict[Var, dict] = {}
    bindings = func.body.blocks[0].bindings
    for binding in bindings:
        described = describe_call(binding.value, target)
        defn = described.result
        # The member's placeholder for each argument -> the fused function's buffer or member.
        read_map[binding.var] = {id(buf): arg for buf, arg in zip(described.inputs, described.args)}
        member_defs[binding.var] = defn

    def value_of(var: Var, indices, acc=None) -> TExpr:
        defn = member_defs[var]
        if defn.reduction is not None:
            if acc is None:
                raise ValueError("a reduction's value is only available as its epilogue's input")
            # The member's result in its own dtype (a float16 matmul's float32 accumulator is
            # rounded before an epilogue reads it, as the graph says).
            return cast(defn.finalize(acc, indices) if defn.finalize else acc, defn.output.dtype)
        return _replace_reads(defn.value(indices), lambda read: resolve(var, read, acc))

    composed = {id(buf) for buf in buffer_of.values()}

    def resolve(owner: Var, read: TensorRead, acc) -> TExpr:
        if id(read.buffer) in composed:  # already the group's own (an index resolved by an earlier read)
            return read
        source = read_map[owner][id(read.buffer)]
        if isinstance(source, Constant):  # fuse_ops only groups calls whose constants are scalars
            return Const(source.data.item(), read.buffer.dtype)
        # The read's indices may read the owner's inputs too (a gather's index tensor): they are
        # resolved in the owner's terms before they reach the source member's definition.
        indices = tuple(_replace_reads(i, lambda r: resolve(owner, r, acc)) for i in read.indices)
        if source in buffer_of:
            return TensorRead(buffer_of[source], indices)
        return value_of(source, list(indices), acc)

    root = bindings[-1].var
    out = placeholder("out0", root.struct_info.dtype, root.struct_info.shape)
    reduction = next((b.var for b in bindings if member_defs[b.var].reduction is not None), None)
    inputs = tuple(p for p in params if p is not None)
    if reduction is None:
        defn = ComputeDef(name, inputs, out, lambda idx: _keep_wide(value_of(root, idx)))
        return defn, params
    base = member_defs[reduction]

    def body(idx, ridx):
        return _keep_wide(_replace_reads(base.value(idx, ridx), lambda read: resolve(reduction, read, None)))

    def finalize(acc, idx):
        return _keep_wide(value_of(root, idx, acc) if root is not reduction else value_of(reduction, idx, acc))

    attrs = dict(base.attrs)
    if "quantized_matmul" in attrs:
        info = attrs["quantized_matmul"]
        x_var, w_var = (read_map[reduction][id(buf)] for buf in (info.x, info.w))
        attrs["quantized_matmul"] = replace(info, x=buffer_of[x_var], w=buffer_of[w_var])
    if "matmul" in attrs:
        info = attrs["matmul"]
        # Matmul rules read their operands from memory: those are parameters of the group.
        a_var, b_var = (read_map[reduction][id(buf)] for buf in (info.a, info.b))
        attrs["matmul"] = replace(info, a=buffer_of[a_var], b=buffer_of[b_var])
    for key in ("conv2d", "pool2d"):  # tir/window.py: the window's operands, if the group reads them from memory
        if key in attrs:
            sources = {field: read_map[reduction][id(getattr(attrs[key], field))] for field in attrs[key].operands}
            if all(isinstance(s, Var) and s in buffer_of for s in sources.values()):
                attrs[key] = replace(attrs[key], **{field: buffer_of[s] for field, s in sources.items()})
            else:
                del attrs[key]
    # The reduction accumulates in its member's type, not the group's output's (a sum cast to int).
    accumulator = base.accumulate_dtype or accumulate_type(base.output.dtype)
    defn = ComputeDef(name, inputs, out, body, base.reduction, finalize, accumulator, attrs)
    return defn, params


def _keep_wide(e: TExpr) -> TExpr:
    """``e`` without float32 -> float16 -> float32 round trips: inside one kernel a member's
    float16 result (computed in float32, op/lowering.py) reaches the next member unrounded; only
    what the kernel stores is rounded to its dtype."""
    e = map_children(e, _keep_wide)
    if isinstance(e, Cast) and e.dtype == "f32" and isinstance(e.x, Cast) and e.x.dtype == "f16" \
            and e.x.x.dtype == "f32":
        return e.x.x
    return e


def _replace_reads(e: TExpr, fn) -> TExpr:
    if isinstance(e, TensorRead):
        return fn(e)
    return map_children(e, lambda child: _replace_reads(child, fn))
