"""kv_cache_write: put a block of new keys or values into a preallocated cache, in place.

``R.kv_cache_write(cache, value, R.prim_value(offset))`` with a cache of (capacity, heads, dim) and
value (n, heads, dim) returns the cache with rows [offset, offset + n) replaced. The kernel
writes only those rows, into the cache's own buffer (its output is its first input: the kernel
records ``attrs["inplace"] = {0: 0}``), so the rest of the cache is never copied. The
reference writes into the numpy array it is given and returns it.
"""

from __future__ import annotations

from .. import arith
from ..ir.errors import DeductionError
from ..tir.ir import Builtin, Const, Declare, IfThen, Load, Local, PrimFunc, Store, binary, from_prim
from ..tir.schedule.common import grid_for, scalars_of, workgroup_linear_id
from .common import tensor_input
from .registry import register_op


def _deduce(call, ctx):
    cache, value = tensor_input(call, 0, ctx), tensor_input(call, 1, ctx)
    if cache.dtype and value.dtype and cache.dtype != value.dtype:
        raise DeductionError("dtype mismatch", f"the cache is {cache.dtype}, the new rows are {value.dtype}")
    if cache.shape is not None and value.shape is not None:
        for axis in (1, 2):
            diff = ctx.analyzer.as_int(cache.shape[axis] - value.shape[axis])
            if diff not in (None, 0):
                raise DeductionError("shape mismatch", f"cache rows are {_dims(cache.shape[1:])}, new rows "
                                     f"{_dims(value.shape[1:])}")
    return cache


def _dims(dims) -> str:
    return "(" + ", ".join(str(d) for d in dims) + ")"


def _reference(cache, value, offset):
    if offset + value.shape[0] > cache.shape[0]:
        raise IndexError(f"rows {offset}..{offset + value.shape[0]} do not fit a cache of {cache.shape[0]}")
    cache[offset:offset + value.shape[0]] = value
    return cache


def _legalize(call, ctx):
    cache, value = ctx.inputs
    offset = call.args[2].value  # a PrimValue: the first row written
    out = ctx.output
    threads = min(256, ctx.target.limit("maxComputeInvocationsPerWorkgroup"))
    count = arith.simplify(value.size)
    row = arith.simplify(value.shape[1] * value.shape[2])
    tid, dst = Local("tid"), Local("dst")
    body = (Declare(tid, binary("+", binary("*", workgroup_linear_id(), Const(threads)), Builtin("local_id", 0))),
            Declare(dst, binary("+", tid, binary("*", from_prim(offset), from_prim(row)))),
            # Rows past the cache's end are never written (the VM refuses such sizes before this).
            IfThen(binary("<", tid, from_prim(count)),
                   (IfThen(binary("<", dst, from_prim(out.size)), (Store(out, dst, Load(value, tid)),)),)))
    grid = grid_for(arith.simplify((count + threads - 1) // threads), ctx.target)
    scalars = tuple(dict.fromkeys(scalars_of(cache, value, out) + tuple(v.name for v in arith.free_vars(offset))))
    # The cache is input 0 and output 0: the caller passes the same buffer for both.
    return PrimFunc(ctx.kernel_name, (cache, value), (out,), scalars, body, (threads, 1, 1), grid,
                    attrs={"rule": "kv-cache-write", "inplace": {0: 0}})


register_op("kv_cache_write", inputs=("cache", "value", "offset"), deduce=_deduce, reference=_reference,
            legalize=_legalize)
