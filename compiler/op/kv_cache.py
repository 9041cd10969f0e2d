"""kv_cache_write: put a block of new keys or values into a preallocated cache, in place.

``R.kv_cache_write(cache, value, R.prim_value(offset))`` with a cache of (capacity, heads, dim) and
value (n, heads, dim) returns the cache with rows [offset, offset + n) replaced. The new rows may
also come flat, (n, heads * dim), as a projection writes them: the row-major order is the same,
so no reshape (a copy) is needed before the write. The kernel (the
schedule rule ``kv-cache-write``, tessera/tir/schedule/kv_cache.py) writes only those rows, into
the cache's own buffer, so the rest of the cache is never copied. The reference writes into the
numpy array it is given and returns it.
"""

from __future__ import annotations

from ..ir.errors import DeductionError
from ..tir.compute import OpaqueDef
from .common import tensor_input
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
    return cache


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
