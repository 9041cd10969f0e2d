"""split_oversized_weights: a weight larger than one binding may be becomes row chunks, each bound apart.

A kernel reads a weight through one storage binding, and WebGPU guarantees only 128 MiB of it
(``maxStorageBufferBindingSize``; llvmpipe and many phones give no more). A large vocabulary's
token embedding is over that: Qwen2.5-0.5B's is 151,936 x 896, 144 MiB in Q8_0 blocks, and Llama 3,
Gemma and Qwen3 are larger still. Such a weight is cut here, before fusion, into chunks of whole
rows that each fit, and every call that reads it is rewritten to read the chunk a row lives in:

- the embedding's gather (``take`` on axis 0, ``quantized_take``) gathers from each chunk at the
  indices moved into the chunk's range (clipped, so every read stays inside it) and keeps, per
  index, the row of the chunk that holds it (``where`` on ``index >= chunk start``);
- the output head (``quantized_matmul``, ``matmul`` by a transposed weight or by a weight's
  columns) computes each chunk's outputs and concatenates them on the last axis.

Any other reader of an oversized weight cannot be cut this way; the pass names the weight, its
size, the limit and the reader (``BindingLimitError``). Chunks are named after the weight
(``token_embd.weight.rows0-75968``) and shared by every function that reads it, so that prefill
and decode (and a tied head) name the same tensors of the executable's weights.
"""

from __future__ import annotations

import numpy as np

from .. import op
from ..ir.builder import analyzer_for
from ..ir.deduce import DeduceContext, deduce
from ..ir.errors import BindingLimitError
from ..ir.expr import Call, Constant, Op, Var, VarBinding, with_struct_info
from ..ir.module import IRModule
from .rewrite import map_graph_functions, rewrite_function


def split_oversized_weights(mod: IRModule, limit: int) -> IRModule:
    """``mod`` with every constant of more than ``limit`` bytes read in chunks of whole rows."""
    chunks: dict = {}  # (weight's name, axis) -> [(first row, chunk)], shared by the functions
    return map_graph_functions(mod, lambda name, func: _split(name, func, limit, chunks))


def row_chunks(rows: int, row_bytes: int, limit: int) -> list[tuple[int, int]]:
    """[begin, end) row ranges of near-equal size, as few as let each hold at most ``limit`` bytes."""
    if row_bytes > limit:
        return []
    count = -(-rows * row_bytes // limit)
    while -(-rows // count) * row_bytes > limit:
        count += 1
    size = -(-rows // count)
    return [(begin, min(begin + size, rows)) for begin in range(0, rows, size)]


def _split(name: str, func, limit: int, chunks: dict):
    ctx = DeduceContext(analyzer_for(dict(func.attrs or ())))
    transposed: dict[Var, tuple[Constant, list[tuple[int, Var]]]] = {}  # permute_dims(W) -> W, its chunks' transposes

    def rewrite(binding, dataflow):
        value = binding.value
        if not (isinstance(binding, VarBinding) and isinstance(value, Call) and isinstance(value.op, Op)):
            return [binding]
        if value.op.name == "permute_dims" and _is_oversized_matrix(value.args[0], limit):
            # W^T of a tied head, bound apart from its matmul: each chunk transposed instead; the matmul
            # that reads it takes them below (fold_constants has usually folded this into a constant).
            emit = _Emitter(binding, ctx)
            parts = [(begin, emit(Call(value.op, (part,), value.attrs, value.sinfo_args), f"rows{begin}"))
                     for begin, part in _chunks(value.args[0], 0, limit, chunks, value, name)]
            transposed[binding.var] = (value.args[0], parts)
            return emit.bindings
        via = [a for a in value.args if isinstance(a, Var) and a in transposed]
        if via:
            weight, parts = transposed[via[0]]
            if value.op.name != "matmul" or value.args[1] is not via[0]:
                raise BindingLimitError(_whole_reader(weight, limit, value.op.name, name), _name(weight),
                                        weight.data.nbytes, limit)
            emit = _Emitter(binding, ctx)
            outs = [emit(Call(value.op, (value.args[0], part), value.attrs, value.sinfo_args), f"rows{begin}")
                    for begin, part in parts]
            return emit.finish(emit(op.concat(tuple(outs), axis=-1), "joined"))
        oversized = [a for a in value.args if isinstance(a, Constant) and a.data.nbytes > limit]
        inline_transpose = _transposed_weight(value)
        if inline_transpose is not None and inline_transpose.data.nbytes > limit:
            oversized.append(inline_transpose)
        if not oversized:
            return [binding]
        emit = _Emitter(binding, ctx)
        result = _rewrite_reader(value, oversized[0], limit, chunks, emit, name)
        return emit.finish(result)

    return rewrite_function(func, rewrite)


def _transposed_weight(call: Call) -> Constant | None:
    """W of ``matmul(x, permute_dims(W))``, when the transpose was not folded into a constant."""
    if call.op.name != "matmul" or len(call.args) != 2:
        return None
    b = call.args[1]
    if isinstance(b, Call) and isinstance(b.op, Op) and b.op.name == "permute_dims" and \
            isinstance(b.args[0], Constant) and b.args[0].data.ndim == 2:
        return b.args[0]
    return None


class _Emitter:
    """New bindings before the rewritten one, each with its deduced struct info."""

    def __init__(self, binding: VarBinding, ctx: DeduceContext):
        self.binding, self.ctx, self.bindings = binding, ctx, []

    def __call__(self, call: Call, hint: str) -> Var:
        sinfo = deduce(call, self.ctx)
        var = type(self.binding.var)(f"{self.binding.var.name_hint}_{hint}", sinfo)
        self.bindings.append(VarBinding(var, with_struct_info(call, sinfo)))
        return var

    def finish(self, result: Var) -> list:
        last = self.bindings.pop()
        assert last.var is result
        return self.bindings + [VarBinding(self.binding.var, last.value)]


def _rewrite_reader(call: Call, weight: Constant, limit: int, chunks: dict, emit: _Emitter, function: str) -> Var:
    kind = call.op.name
    if kind in ("take", "quantized_take") and call.args[0] is weight and \
            (kind == "quantized_take" or call.attr("axis") in (0, -weight.data.ndim)):
        return _gather(call, _chunks(weight, 0, limit, chunks, call, function), emit)
    if kind == "quantized_matmul" and call.args[1] is weight:
        parts = _chunks(weight, 0, limit, chunks, call, function)
        outs = [emit(Call(call.op, (call.args[0], part), call.attrs, call.sinfo_args), f"rows{begin}")
                for begin, part in parts]
        return emit(op.concat(tuple(outs), axis=-1), "joined")
    if kind == "matmul" and call.args[1] is weight and weight.data.ndim == 2:  # x @ W, W of (in, out): columns
        parts = _chunks(weight, 1, limit, chunks, call, function)
        outs = [emit(Call(call.op, (call.args[0], part), call.attrs, call.sinfo_args), f"cols{begin}")
                for begin, part in parts]
        return emit(op.concat(tuple(outs), axis=-1), "joined")
    if kind == "matmul" and _transposed_weight(call) is weight:  # x @ W^T, W of (out, in): rows
        parts = _chunks(weight, 0, limit, chunks, call, function)
        transpose = call.args[1]
        outs = []
        for begin, part in parts:
            part_t = emit(Call(transpose.op, (part,), transpose.attrs, transpose.sinfo_args), f"rows{begin}_t")
            outs.append(emit(Call(call.op, (call.args[0], part_t), call.attrs, call.sinfo_args), f"rows{begin}"))
        return emit(op.concat(tuple(outs), axis=-1), "joined")
    raise BindingLimitError(_whole_reader(weight, limit, kind, function), _name(weight), weight.data.nbytes, limit)


def _whole_reader(weight: Constant, limit: int, kind: str, function: str) -> str:
    return (f"weight {_name(weight)} is {weight.data.nbytes} bytes, more than the target's maxStorageBufferBindingSize "
            f"{limit}, and {kind} in function {function} reads it whole (only an embedding's gather and a linear "
            "layer read a weight in row chunks)")


def _is_oversized_matrix(expr, limit: int) -> bool:
    return isinstance(expr, Constant) and expr.data.ndim == 2 and expr.data.nbytes > limit


def _gather(call: Call, parts: list[tuple[int, Constant]], emit: _Emitter) -> Var:
    """Each index's row from the chunk that holds it: every chunk gathers at the indices clipped into
    its own range, and ``where`` keeps, index by index, the last chunk that starts at or before it."""
    indices = call.args[1]
    dtype = indices.struct_info.dtype
    ndim = indices.struct_info.ndim
    result = None
    for begin, part in parts:
        rows = part.data.shape[0]
        moved = indices if begin == 0 else emit(op.subtract(indices, Constant(np.array(begin, dtype))),
                                                f"index{begin}")
        clipped = emit(op.clip(moved, min=0, max=rows - 1), f"clipped{begin}")
        picked = emit(Call(call.op, (part, clipped), call.attrs, call.sinfo_args), f"rows{begin}")
        if result is None:
            result = picked
            continue
        inside = emit(op.greater_equal(indices, Constant(np.array(begin, dtype))), f"from{begin}")
        inside = emit(op.expand_dims(inside, axis=ndim), f"from{begin}_rows")
        result = emit(op.where(inside, picked, result), f"upto{begin}")
    return result


def _chunks(weight: Constant, axis: int, limit: int, cache: dict, call: Call, function: str) -> list:
    key = (weight.name or id(weight.data), axis)
    if key not in cache:
        data = weight.data
        rows = data.shape[axis]
        row_bytes = data.nbytes // max(rows, 1)
        ranges = row_chunks(rows, row_bytes, limit)
        if not ranges:
            raise BindingLimitError(f"weight {_name(weight)}: one {'row' if axis == 0 else 'column'} of it is "
                                    f"{row_bytes} bytes, more than the target's maxStorageBufferBindingSize "
                                    f"{limit} ({call.op.name} in function {function})",
                                    _name(weight), data.nbytes, limit)
        label = "rows" if axis == 0 else "cols"
        cache[key] = [(begin, Constant(np.ascontiguousarray(data[begin:end] if axis == 0 else data[:, begin:end]),
                                       name=f"{_name(weight)}.{label}{begin}-{end}"))
                      for begin, end in ranges]
    return cache[key]


def _name(weight: Constant) -> str:
    return weight.name or f"a constant of shape {tuple(weight.data.shape)}"
