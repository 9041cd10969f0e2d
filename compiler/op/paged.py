"""A KV cache in pages shared by several sequences (continuous batching, as vLLM and MLC-LLM keep it).

The keys and the values of every sequence live in one pool per layer, (pages x page_size, kv_heads,
d). A sequence's logical position p is the pool's row ``page_table[seq, p // page_size] *
page_size + p % page_size``: its pages need not be contiguous, and a page freed by a finished
sequence serves the next one. ``positions`` (n,) int32 gives each query row its position; the
page table (s, pages) int32 has either one row (s = 1: the n rows are consecutive positions of
one sequence, a prefill chunk) or one per query row (s = n: row i is the next token of sequence
i, a batched decode step). Row i reads the page-table row min(i, s - 1).

``R.paged_rope_append(qkv, cos, sin, keys, values, positions, page_table, page_size=S)`` is
``rope_append`` (op/kv_cache.py) writing each row's rotated key and its value at the row's
position in its sequence's pages; ``R.nn.paged_attention(q, keys, values, positions, page_table,
page_size=S, scale=None)`` is ``nn.attention`` (op/attention.py) in which row i attends its own
sequence's keys 0 .. positions[i]. Both kernels are the unpaged rules with a page-table lookup in
their index math (tir/schedule/kv_cache.py, tir/schedule/attention.py); an entry or position out
of range is clamped there, so a bad table reads or writes the wrong row of the pool, never memory
outside it.
"""

from __future__ import annotations

import numpy as np

from .. import arith
from ..ir.errors import DeductionError
from ..ir.struct_info import TensorStructInfo
from ..tir.compute import OpaqueDef
from .attention import NEG, _deduce_inputs, _scale
from .common import tensor_input
from .kv_cache import _deduce_rope_append
from .registry import register_op


def _check_pages(call, ctx, rows, first: int) -> int:
    """Check positions (n,) and page_table (s, pages), both int32, s in (1, n); the page size."""
    positions, table = tensor_input(call, first, ctx), tensor_input(call, first + 1, ctx)
    for name, sinfo, ndim in (("positions", positions, 1), ("page_table", table, 2)):
        if sinfo.dtype and sinfo.dtype != "int32":
            raise DeductionError("dtype mismatch", f"{call.op.name} takes int32 {name}, got {sinfo.dtype}")
        if sinfo.ndim not in (-1, ndim):
            raise DeductionError("rank mismatch", f"{call.op.name} takes {name} of rank {ndim}, got {sinfo.ndim}")
    analyzer = ctx.analyzer
    if positions.shape is not None and rows is not None and analyzer.as_int(positions.shape[0] - rows) not in (None, 0):
        raise DeductionError("shape mismatch", f"{call.op.name}: {positions.shape[0]} positions for {rows} rows")
    if table.shape is not None and rows is not None:
        seqs = table.shape[0]
        if analyzer.as_int(seqs) != 1 and analyzer.as_int(seqs - rows) not in (None, 0):
            raise DeductionError("shape mismatch", f"{call.op.name}: a page table of {seqs} rows for {rows} query "
                                 "rows; it has one row (one sequence) or one per query row")
    page_size = int(call.attr("page_size"))
    if page_size < 1:
        raise DeductionError("invalid attribute", f"page_size must be at least 1, got {page_size}")
    return page_size


def physical_rows(positions: np.ndarray, page_table: np.ndarray, page_size: int) -> np.ndarray:
    """The pool row of each query row's position (the operators' definition)."""
    seq = np.minimum(np.arange(len(positions)), page_table.shape[0] - 1)
    positions = positions.astype(np.int64)
    return page_table[seq, positions // page_size].astype(np.int64) * page_size + positions % page_size


def _deduce_paged_rope_append(call, ctx):
    fields = _deduce_rope_append(call, ctx)
    qkv = tensor_input(call, 0, ctx)
    _check_pages(call, ctx, qkv.shape[0] if qkv.shape is not None else None, 5)
    return fields


def _paged_rope_append_reference(qkv, cos, sin, keys, values, positions, page_table, page_size=16):
    n, dim = qkv.shape[0], keys.shape[2]
    kv_heads = keys.shape[1]
    heads = qkv.shape[1] // dim - 2 * kv_heads
    half = dim // 2

    def rope(x):  # (n, h, dim)
        return x * cos + np.concatenate((-x[..., half:], x[..., :half]), axis=-1) * sin

    rows = physical_rows(positions, page_table, int(page_size))
    if rows.size and (rows.min() < 0 or rows.max() >= keys.shape[0]):
        raise IndexError(f"a page table entry points past the pool of {keys.shape[0]} rows")
    q = rope(qkv[:, :heads * dim].reshape(n, heads, dim))
    keys[rows] = rope(qkv[:, heads * dim:(heads + kv_heads) * dim].reshape(n, kv_heads, dim))
    values[rows] = qkv[:, (heads + kv_heads) * dim:].reshape(n, kv_heads, dim)
    return q.astype(qkv.dtype), keys, values


def _legalize_paged_rope_append(call, ctx):
    return OpaqueDef(ctx.kernel_name, "rope-append", tuple(ctx.inputs), ctx.outputs[0],
                     {"page_size": int(call.attr("page_size"))}, tuple(ctx.outputs[1:]))


register_op("paged_rope_append", inputs=("qkv", "cos", "sin", "keys", "values", "positions", "page_table"),
            attrs={"page_size": 16}, deduce=_deduce_paged_rope_append, reference=_paged_rope_append_reference,
            legalize=_legalize_paged_rope_append, precision="keep")


def _deduce_paged_attention(call, ctx):
    q, keys, _ = _deduce_inputs(call, ctx, total=False)
    _check_pages(call, ctx, q.shape[0] if q.shape is not None else None, 3)
    if q.shape is None:
        return TensorStructInfo(None, q.dtype, 2, vdevice=q.vdevice)
    return TensorStructInfo((q.shape[0], q.shape[1] * q.shape[2]), q.dtype, vdevice=q.vdevice)


def _paged_attention_reference(q, keys, values, positions, page_table, page_size=16, scale=None):
    n, heads, d = q.shape
    group = heads // keys.shape[1]
    qf = q.astype(np.float64) * float(_scale(scale, d))
    out = np.zeros((n, heads, d), np.float64)
    for i in range(n):
        keys_of_row = np.arange(int(positions[i]) + 1)
        rows = physical_rows(keys_of_row, page_table[min(i, page_table.shape[0] - 1)][None], page_size)
        if rows.min() < 0 or rows.max() >= keys.shape[0]:
            raise IndexError(f"a page table entry points past the pool of {keys.shape[0]} rows")
        for h in range(heads):
            k = keys[rows, h // group].astype(np.float64)
            scores = k @ qf[i, h]
            p = np.exp(scores - max(scores.max(), NEG))
            out[i, h] = p @ values[rows, h // group].astype(np.float64) / p.sum()
    return out.reshape(n, heads * d).astype(q.dtype)


def _legalize_paged_attention(call, ctx):
    d = arith.Analyzer().as_int(ctx.inputs[0].shape[2])
    return OpaqueDef(ctx.kernel_name, "attention", tuple(ctx.inputs), ctx.output,
                     {"total": None, "scale": float(_scale(call.attr("scale"), d)), "splits": 1,
                      "page_size": int(call.attr("page_size"))})


register_op("nn.paged_attention", inputs=("q", "keys", "values", "positions", "page_table"),
            attrs={"page_size": 16, "scale": None}, deduce=_deduce_paged_attention,
            reference=_paged_attention_reference, legalize=_legalize_paged_attention, precision="always")
