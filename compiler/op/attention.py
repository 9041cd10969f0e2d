"""Causal attention over a KV cache, in one fused kernel (online softmax, as FlashAttention does).

``R.nn.attention(q, keys, values, R.prim_value(total), scale=None)``: q is (n, heads, d), the n
newest positions of a sequence (positions total - n .. total - 1); keys and values are
(capacity, kv_heads, d), of which rows 0 .. total - 1 hold the sequence (a KV cache read where it
lies: rows past ``total`` are never read). Query row i at position p = total - n + i attends to
keys 0 .. p (causal). Query head h reads KV head h // (heads // kv_heads) (grouped-query attention:
no key is repeated). ``scale`` multiplies q . k; None means 1 / sqrt(d). The result is (n, heads *
d), the heads side by side as the output projection reads them, in q's dtype; scores, maxima and
sums are float32, whatever the inputs.

No (n, total) score matrix is ever stored: the kernel walks the keys in tiles and keeps, per query
row, the running maximum m, the running sum l of exp(s - m) and the unnormalized output
(tessera/tir/schedule/attention.py).

Decode (one query position) over a long cache would be one workgroup's loop over every key, so it
is split: ``R.nn.attention_partial(..., splits=S)`` gives each of S workgroups per KV head a
contiguous share of the keys and writes (S, n, heads, d + 2): the unnormalized output, then m and l
of each share; ``R.nn.attention_merge(partial)`` rescales the shares to their common maximum and
sums them (split-K, as FlashDecoding does). ``nn.attention``'s legalization makes that choice.
"""

from __future__ import annotations

import numpy as np

from .. import arith
from ..ir.errors import DeductionError
from ..ir.expr import Call
from ..ir.struct_info import PrimStructInfo, TensorStructInfo
from ..tir.compute import OpaqueDef
from .common import on_vdevice, operands_vdevice, require_float, tensor_input
from .registry import make_call, register_op

# A float32 far below any score, never -inf: exp(NEG - m) is 0 and NEG - NEG is not NaN (the
# kernels, tessera.tir.schedule.attention, use the same).
NEG = -3.0e38


def _deduce_inputs(call: Call, ctx, total: bool = True):
    """q, keys and values checked; ``total`` (False for nn.paged_attention): the fourth input is the
    sequence length as a prim value."""
    q, keys, values = (tensor_input(call, i, ctx) for i in range(3))
    for index, sinfo in enumerate((q, keys, values)):
        require_float(call, sinfo, ctx, index)
        if sinfo.ndim not in (-1, 3):
            what = ("q (n, heads, d)", "keys (capacity, kv_heads, d)", "values (capacity, kv_heads, d)")[index]
            raise DeductionError("rank mismatch", f"{call.op.name} takes {what}, got {sinfo.ndim} dimensions")
    dtypes = {s.dtype for s in (q, keys, values) if s.dtype}
    if len(dtypes) > 1:
        raise DeductionError("dtype mismatch", f"q, keys and values must share a dtype, got "
                             f"{', '.join(sorted(dtypes))}")
    if total and not isinstance(call.args[3].sinfo, PrimStructInfo):
        raise DeductionError("type mismatch", f"{call.op.name} takes the sequence length 'total' as a prim value")
    if q.shape is not None and keys.shape is not None and values.shape is not None:
        analyzer = ctx.analyzer
        heads, kv_heads = analyzer.as_int(q.shape[1]), analyzer.as_int(keys.shape[1])
        if heads is None or kv_heads is None or analyzer.as_int(q.shape[2]) is None:
            raise DeductionError("shape mismatch", f"{call.op.name} needs static head counts and head size")
        if heads % kv_heads:
            raise DeductionError("shape mismatch", f"{heads} query heads cannot share {kv_heads} KV heads evenly")
        def differs(a, b) -> bool:
            return analyzer.as_int(a - b) not in (None, 0)

        # Keys carry q's head size; values match keys row for row.
        what = "keys" if differs(keys.shape[2], q.shape[2]) else \
            "values" if any(differs(values.shape[axis], keys.shape[axis]) for axis in (1, 2)) else None
        if what:
            other = keys if what == "keys" else values
            raise DeductionError("shape mismatch", f"{what} rows are ({other.shape[1]}, {other.shape[2]}), "
                                 f"q's head size {q.shape[2]}, keys' rows ({keys.shape[1]}, {keys.shape[2]})")
        if differs(values.shape[0], keys.shape[0]):
            raise DeductionError("shape mismatch", f"keys hold {keys.shape[0]} rows, values {values.shape[0]}")
    # The result goes where q is; q, the caches (and paged attention's page table) share a device.
    return on_vdevice(q, operands_vdevice(call, ctx)), keys, values


def _deduce_attention(call, ctx):
    q, _, _ = _deduce_inputs(call, ctx)
    if q.shape is None:
        return TensorStructInfo(None, q.dtype, 2, vdevice=q.vdevice)
    return TensorStructInfo((q.shape[0], q.shape[1] * q.shape[2]), q.dtype, vdevice=q.vdevice)


def _deduce_partial(call, ctx):
    q, _, _ = _deduce_inputs(call, ctx)
    splits = int(call.attr("splits"))
    if splits < 1:
        raise DeductionError("invalid attribute", f"splits must be at least 1, got {splits}")
    if q.shape is None:
        return TensorStructInfo(None, "float32", 4, q.vdevice)
    return TensorStructInfo((splits, q.shape[0], q.shape[1], q.shape[2] + 2), "float32", vdevice=q.vdevice)


def _deduce_merge(call, ctx):
    partial = tensor_input(call, 0, ctx)
    if partial.dtype and partial.dtype != "float32":
        raise DeductionError("dtype mismatch", f"attention_merge reads float32 partial results, got {partial.dtype}")
    if partial.ndim not in (-1, 4):
        raise DeductionError("rank mismatch", f"attention_merge takes (splits, n, heads, d + 2), got {partial.ndim} "
                             "dimensions")
    dtype = call.attr("dtype")
    if partial.shape is None:
        return TensorStructInfo(None, dtype, 2, partial.vdevice)
    return TensorStructInfo((partial.shape[1], partial.shape[2] * (partial.shape[3] - 2)), dtype,
                            vdevice=partial.vdevice)


def _scale(scale, d: int) -> np.float32:
    return np.float32(d ** -0.5 if scale is None else scale)


def _shares(q, keys, values, total: int, splits: int, scale):
    """Each share's (unnormalized output, m, l) per query row, in float64, as the kernel defines them."""
    n, heads, d = q.shape
    capacity, kv_heads, _ = keys.shape
    if not n <= total <= capacity:
        raise IndexError(f"attention of {n} new positions at total {total} over a cache of {capacity} rows")
    group = heads // kv_heads
    chunk = -(-total // splits)
    qf = q.astype(np.float64) * float(_scale(scale, d))
    out = np.zeros((splits, n, heads, d + 2), np.float64)
    out[:, :, :, d] = NEG
    for h in range(heads):
        k = keys[:total, h // group].astype(np.float64)
        v = values[:total, h // group].astype(np.float64)
        scores = qf[:, h] @ k.T  # (n, total)
        for s in range(splits):
            for i in range(n):
                lo, hi = s * chunk, min((s + 1) * chunk, total - n + i + 1)
                if lo >= hi:
                    continue
                m = scores[i, lo:hi].max()
                p = np.exp(scores[i, lo:hi] - m)
                out[s, i, h, :d] = p @ v[lo:hi]
                out[s, i, h, d], out[s, i, h, d + 1] = m, p.sum()
    return out


def _merged(shares):
    d = shares.shape[-1] - 2
    m = shares[..., d]
    top = m.max(axis=0)
    weight = np.exp(m - top)  # empty shares have m = NEG: weight 0
    total = (shares[..., d + 1] * weight).sum(axis=0)
    out = (shares[..., :d] * weight[..., None]).sum(axis=0) / total[..., None]  # (n, heads, d)
    return out.reshape(out.shape[0], -1)


def _reference_attention(q, keys, values, total, scale=None):
    return _merged(_shares(q, keys, values, int(total), 1, scale)).astype(q.dtype)


def _reference_partial(q, keys, values, total, splits=1, scale=None):
    return _shares(q, keys, values, int(total), int(splits), scale).astype(np.float32)


def _reference_merge(partial, dtype="float32"):
    return _merged(partial.astype(np.float64)).astype(dtype)


def _params(call, ctx, splits: int) -> dict:
    d = arith.Analyzer().as_int(ctx.inputs[0].shape[2])
    return {"total": call.args[3].value, "scale": float(_scale(call.attr("scale"), d)), "splits": splits}


def decode_splits(capacity, rows, target) -> int:
    """How many workgroups per KV head share the keys of an attention with ``rows`` query positions:
    several only for decode (one position), so that a long cache is not one workgroup's loop, and
    only as many as give each a hundred or more keys of a full cache (more on GPUs, which have more
    cores to fill than a CPU has threads; on a CPU, enough that a few KV heads still keep every
    thread busy)."""
    capacity = arith.Analyzer().as_int(capacity)
    if arith.Analyzer().as_int(rows) != 1 or capacity is None:
        return 1
    most, keys_each = (8, 128) if target is not None and target.cpu_adapter else (32, 256)
    return max(1, min(most, capacity // keys_each))


def _legalize_attention(call, ctx):
    q, keys = ctx.inputs[0], ctx.inputs[1]
    splits = decode_splits(keys.shape[0], q.shape[0], ctx.target)
    if splits > 1:
        args = call.args
        partial = make_call("nn.attention_partial", *args, splits=splits, scale=call.attr("scale"))
        return make_call("nn.attention_merge", partial, dtype=call.struct_info.dtype)
    return OpaqueDef(ctx.kernel_name, "attention", tuple(ctx.inputs), ctx.output, _params(call, ctx, 1))


def _legalize_partial(call, ctx):
    return OpaqueDef(ctx.kernel_name, "attention", tuple(ctx.inputs), ctx.output,
                     _params(call, ctx, int(call.attr("splits"))))


def _legalize_merge(call, ctx):
    return OpaqueDef(ctx.kernel_name, "attention-merge", tuple(ctx.inputs), ctx.output, {})


INPUTS = ("q", "keys", "values", "total")
register_op("nn.attention", inputs=INPUTS, attrs={"scale": None}, deduce=_deduce_attention,
            reference=_reference_attention, legalize=_legalize_attention, precision="always")
register_op("nn.attention_partial", inputs=INPUTS, attrs={"splits": 1, "scale": None}, deduce=_deduce_partial,
            reference=_reference_partial, legalize=_legalize_partial)
register_op("nn.attention_merge", inputs=("partial",), attrs={"dtype": "float32"}, deduce=_deduce_merge,
            reference=_reference_merge, legalize=_legalize_merge)

