"""kv_cache_write: put a block of new keys or values into a preallocated cache, in place.

``R.kv_cache_write(cache, value, R.prim_value(offset))`` with a cache of (capacity, heads, dim) and
value (n, heads, dim) returns the cache with rows [offset, offset + n) replaced. The new rows may
also come flat, (n, heads * dim), as a projection writes them: the row-major order is the same,
so no reshape (a copy) is needed before the write. The kernel (the
schedule rule ``kv-cache-write``, tessera/tir/schedule/kv_cache.py) writes only those rows, into
the cache's own buffer, so the rest of the cache is never copied. The reference writes into the
numpy array it is given and returns it.

``R.rope_append(qkv, cos, sin, keys, values, R.prim_value(offset))`` is a Llama layer's step
from its q, k and v projections to attention, in one kernel: qkv is (n, (heads + 2 * kv_heads) *
dim), the three projections side by side (as ``transform.combine_parallel_matmul`` computes them
in one GEMV); cos and sin are (n, 1, dim) tables. It returns the tuple (q, keys, values): q (n,
heads, dim) rotated by RoPE (rotate-half: ``x * cos + concat(-x[half:], x[:half]) * sin``, as
models/llama.py's ``_rope``), and the caches with rows [offset, offset + n) replaced by the rotated
k and by v. Both caches are written in place (the schedule rule ``rope-append``), as by
``kv_cache_write``.
"""

from __future__ import annotations

import numpy as np

from ..ir.errors import DeductionError
from ..ir.struct_info import TensorStructInfo, TupleStructInfo
from ..tir.compute import OpaqueDef
from .common import FLOAT_DTYPES, on_vdevice, operands_vdevice, tensor_input
from .registry import register_op


def _deduce(call, ctx):
    cache, value = tensor_input(call, 0, ctx), tensor_input(call, 1, ctx)
    if cache.dtype and value.dtype and cache.dtype != value.dtype:
        raise DeductionError("dtype mismatch", f"the cache is {cache.dtype}, the new rows are {value.dtype}")
    if cache.shape is not None and value.shape is not None:
        same = value.ndim == cache.ndim and all(
            ctx.analyzer.as_int(c - v) in (None, 0) for c, v in zip(cache.shape[1:], value.shape[1:]))
        flat = value.ndim == 2 and ctx.analyzer.as_int(value.shape[1] - _product(cache.shape[1:])) in (None, 0)
        if not (same or flat):
            raise DeductionError("shape mismatch", f"cache rows are {_dims(cache.shape[1:])}, new rows "
                                 f"{_dims(value.shape[1:])}")
    return on_vdevice(cache, operands_vdevice(call, ctx))


def _product(dims):
    total = dims[0]
    for dim in dims[1:]:
        total = total * dim
    return total


def _dims(dims) -> str:
    return "(" + ", ".join(str(d) for d in dims) + ")"


def _reference(cache, value, offset):
    if offset + value.shape[0] > cache.shape[0]:
        raise IndexError(f"rows {offset}..{offset + value.shape[0]} do not fit a cache of {cache.shape[0]}")
    cache[offset:offset + value.shape[0]] = value.reshape(value.shape[0], *cache.shape[1:])
    return cache


def _legalize(call, ctx):
    # A write of some rows in place, which no loop nest over the output describes: the
    # kv-cache-write rule (tir.schedule) writes the kernel. The offset is a PrimValue.
    return OpaqueDef(ctx.kernel_name, "kv-cache-write", tuple(ctx.inputs), ctx.output, {"offset": call.args[2].value})


register_op("kv_cache_write", inputs=("cache", "value", "offset"), deduce=_deduce, reference=_reference,
            legalize=_legalize, precision="always")


def _deduce_rope_append(call, ctx):
    qkv, cos, sin, keys, values = (tensor_input(call, i, ctx) for i in range(5))
    # qkv and the caches share a dtype; the angles' tables may be wider (float32 for a float16 model).
    for group in ((qkv, keys, values), (cos, sin)):
        dtypes = {s.dtype for s in group if s.dtype}
        if len(dtypes) > 1:
            raise DeductionError("dtype mismatch", f"rope_append's qkv and caches, and its cos and sin, must each "
                                 f"share a dtype, got {', '.join(sorted(dtypes))}")
    if cos.dtype and cos.dtype not in FLOAT_DTYPES:
        raise DeductionError("dtype mismatch", f"rope_append needs float cos and sin tables, got {cos.dtype}")
    if qkv.shape is None or keys.shape is None or len(qkv.shape) != 2 or len(keys.shape) != 3:
        raise DeductionError("shape mismatch", "rope_append needs qkv (n, width) and caches (capacity, kv_heads, "
                             "dim) of known rank")
    kv_heads, dim, width = (ctx.analyzer.as_int(d) for d in (keys.shape[1], keys.shape[2], qkv.shape[1]))
    if None in (kv_heads, dim, width) or dim % 2 or width % dim or width // dim <= 2 * kv_heads:
        raise DeductionError("shape mismatch", f"qkv rows of {qkv.shape[1]} do not hold q heads and k and v for "
                             f"a cache of rows ({keys.shape[1]}, {keys.shape[2]}) (an even head size)")
    if values.shape is None or any(ctx.analyzer.as_int(a - b) not in (None, 0)
                                   for a, b in zip(values.shape, keys.shape)):
        raise DeductionError("shape mismatch", f"keys are {_dims(keys.shape)}, values {_dims(values.shape or ())}")
    vdevice = operands_vdevice(call, ctx)  # paged_rope_append's page table included
    q = TensorStructInfo((qkv.shape[0], width // dim - 2 * kv_heads, dim), qkv.dtype, vdevice=vdevice)
    return TupleStructInfo((q, on_vdevice(keys, vdevice), on_vdevice(values, vdevice)))


def _rope_append_reference(qkv, cos, sin, keys, values, offset):
    n, dim = qkv.shape[0], keys.shape[2]
    kv = keys.shape[1] * dim
    heads = qkv.shape[1] // dim - 2 * keys.shape[1]
    half = dim // 2

    def rope(x):  # (n, h, dim)
        rotated = np.concatenate((-x[..., half:], x[..., :half]), axis=-1)
        return x * cos + rotated * sin

    q = rope(qkv[:, :heads * dim].reshape(n, heads, dim))
    k = rope(qkv[:, heads * dim:heads * dim + kv].reshape(n, -1, dim))
    _reference(keys, k, offset)
    _reference(values, qkv[:, heads * dim + kv:], offset)
    return q.astype(qkv.dtype), keys, values


def _legalize_rope_append(call, ctx):
    return OpaqueDef(ctx.kernel_name, "rope-append", tuple(ctx.inputs), ctx.outputs[0],
                     {"offset": call.args[5].value}, tuple(ctx.outputs[1:]))


register_op("rope_append", inputs=("qkv", "cos", "sin", "keys", "values", "offset"), deduce=_deduce_rope_append,
            reference=_rope_append_reference, legalize=_legalize_rope_append, precision="keep")
