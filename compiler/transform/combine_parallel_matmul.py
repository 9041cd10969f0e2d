"""combine_parallel_matmul: projections of one activation by constant weights become one.

A Llama layer reads its normed activation three times, by the q, k and v projections, and its
post-attention one twice, by the gate and up projections (TVM Relax's CombineParallelMatmul finds
the same). Each is a GEMV in decode: a launch, and a pass of x through the workgroups. Here calls
``quantized_matmul(x, W_i)`` with one ``x``, constant weights and equal attributes become one
``quantized_matmul(x, W)`` by the weights' rows stacked (a quantized row is whole blocks, so
stacking rows keeps every block); float ``matmul(x, W_i)`` with constant (in, out_i) weights
stack their columns alike. Each original result becomes a slice of the last axis of the combined
one, which fuses into whatever reads it. Projections whose results meet in an elementwise call
(SwiGLU's ``silu(gate) * up``) stay apart: there the gate's GEMV takes the rest as its epilogue,
one launch for the two as it is, and a combined GEMV would need a kernel of its own for it.

The combined weight is a constant named after its parts (``model.layers.0.self_attn.
q_proj+k_proj+v_proj.weight``), so that the functions of one module (prefill and decode) name
one tensor of the executable's weights, stored once; each part is no longer read and goes.

A concat on the last axis of slices that lie side by side, in order, over one tensor's whole
last axis is that tensor (llama.py concatenates q, k and v for the RoPE-append kernel, which reads
them from one buffer): the pass replaces such a concat with the tensor, so the combined result is
read where it lies.
"""

from __future__ import annotations

import numpy as np

from .. import arith, op
from ..ir.builder import analyzer_for
from ..ir.deduce import DeduceContext, deduce
from ..ir.expr import Call, Constant, DataflowBlock, Function, Op, Tuple, Var, VarBinding, with_struct_info
from ..ir.module import IRModule
from ..ir.struct_info import TensorStructInfo
from ..op.elementwise import BINARY, UNARY
from .rewrite import map_graph_functions, rewrite_function

ELEMENTWISE = frozenset(BINARY) | frozenset(UNARY)


def combine_parallel_matmul(mod: IRModule) -> IRModule:
    stacked: dict[tuple, np.ndarray] = {}  # the parts' arrays (by identity) -> their stack, shared by functions
    return map_graph_functions(mod, lambda name, func: _combine(func, stacked))


def _combine(func: Function, stacked: dict) -> Function:
    ctx = DeduceContext(analyzer_for(dict(func.attrs or ())))
    first: dict[int, list[VarBinding]] = {}  # id(first member) -> the group
    for block in func.body.blocks:
        if not isinstance(block, DataflowBlock):
            continue
        groups: dict[tuple, list[VarBinding]] = {}
        for binding in block.bindings:
            key = _key(binding)
            if key is not None:
                groups.setdefault(key, []).append(binding)
        for members in groups.values():
            if len(members) > 1 and not _meet_elementwise(block, members):
                first[id(members[0])] = members
    member_of = {id(b): members for members in first.values() for b in members}
    combined_var: dict[int, Var] = {}  # id(group's first member) -> the combined result
    slices: dict[Var, tuple] = {}  # a slice's var -> (source, begin, end) on the last axis

    def rewrite(binding, dataflow):
        members = member_of.get(id(binding))
        if members is None:
            return _fold_concat(binding, slices, ctx)
        out = []
        if id(binding) in first:
            call = _stacked_call(members, stacked)
            var = type(binding.var)(f"{binding.var.name_hint}_combined", deduce(call, ctx))
            combined_var[id(members[0])] = var
            out.append(VarBinding(var, with_struct_info(call, var.struct_info)))
        source = combined_var[id(members[0])]
        begin = sum(_width(m) for m in members[:members.index(binding)])
        end = begin + _width(binding)
        axis = len(binding.var.struct_info.shape) - 1
        piece = op.strided_slice(source, axes=[axis], begin=[begin], end=[end])
        out.append(VarBinding(binding.var, with_struct_info(piece, deduce(piece, ctx))))
        slices[binding.var] = (source, begin, end)
        return out

    return rewrite_function(func, rewrite)


def _meet_elementwise(block, members: list[VarBinding]) -> bool:
    """Whether an elementwise call reads, through elementwise calls only, two members' results."""
    reach = {m.var: frozenset((index,)) for index, m in enumerate(members)}
    for binding in block.bindings:
        value = binding.value
        if isinstance(value, Call) and isinstance(value.op, Op) and value.op.name in ELEMENTWISE:
            reached = frozenset().union(*(reach.get(a, frozenset()) for a in value.args if isinstance(a, Var)))
            if len(reached) > 1:
                return True
            if reached:
                reach[binding.var] = reached
    return False


def _key(binding) -> tuple | None:
    """What calls must share to combine: the operator, x, the weight's kind, the attributes."""
    value = binding.value
    if not (isinstance(binding, VarBinding) and isinstance(value, Call) and isinstance(value.op, Op)
            and value.op.name in ("quantized_matmul", "matmul") and len(value.args) == 2):
        return None
    x, weight = value.args
    if not (isinstance(x, Var) and isinstance(weight, Constant) and weight.data.ndim == 2):
        return None
    sinfo = binding.var.struct_info
    if not (isinstance(sinfo, TensorStructInfo) and sinfo.shape is not None):
        return None
    # Rows of quantized blocks stack along axis 0; a float (in, out) weight's columns along axis 1.
    other_axis = weight.data.shape[1] if value.op.name == "quantized_matmul" else weight.data.shape[0]
    return (value.op.name, x, value.attrs, str(weight.data.dtype), other_axis)


def _width(binding) -> int:
    weight = binding.value.args[1].data
    return weight.shape[0] if binding.value.op.name == "quantized_matmul" else weight.shape[1]


def _stacked_call(members: list[VarBinding], stacked: dict) -> Call:
    weights = [m.value.args[1] for m in members]
    quantized = members[0].value.op.name == "quantized_matmul"
    key = tuple(id(w.data) for w in weights) + (quantized,)
    if key not in stacked:
        stacked[key] = np.ascontiguousarray(np.concatenate([w.data for w in weights], axis=0 if quantized else 1))
    weight = Constant(stacked[key], name=_stacked_name([w.name for w in weights]))
    value = members[0].value
    return Call(value.op, (value.args[0], weight), value.attrs, value.sinfo_args)


def _stacked_name(names: list[str | None]) -> str | None:
    """``a.q_proj.weight`` and ``a.k_proj.weight`` -> ``a.q_proj+k_proj.weight``: the common prefix
    and suffix (at dots) kept once, the parts between joined by "+"."""
    if any(not name for name in names):
        return None
    parts = [name.split(".") for name in names]
    prefix = 0
    while all(len(p) > prefix + 1 and p[prefix] == parts[0][prefix] for p in parts):
        prefix += 1
    suffix = 0
    while all(len(p) > prefix + suffix + 1 and p[-1 - suffix] == parts[0][-1 - suffix] for p in parts):
        suffix += 1
    middles = ["+".join(".".join(p[prefix:len(p) - suffix]) for p in parts)]
    return ".".join(parts[0][:prefix] + middles + (parts[0][len(parts[0]) - suffix:] if suffix else []))


def _fold_concat(binding, slices: dict, ctx) -> list:
    """``concat((x[..., a:b], x[..., b:c], ...), axis=-1)`` covering all of x's last axis, in
    order, is x."""
    value = binding.value
    if not (isinstance(binding, VarBinding) and isinstance(value, Call) and isinstance(value.op, Op)
            and value.op.name == "concat" and isinstance(value.args[0], Tuple)):
        return [binding]
    pieces = [slices.get(f) if isinstance(f, Var) else None for f in value.args[0].fields]
    if any(p is None for p in pieces) or len({id(p[0]) for p in pieces}) != 1:
        return [binding]
    source = pieces[0][0]
    shape = source.struct_info.shape
    axis = value.attr("axis")
    if axis not in (-1, len(shape) - 1) or pieces[0][1] != 0:
        return [binding]
    if any(a[2] != b[1] for a, b in zip(pieces, pieces[1:])):
        return [binding]
    if arith.Analyzer().as_int(shape[-1]) != pieces[-1][2]:
        return [binding]
    return [VarBinding(binding.var, source)]
