"""kv-cache-write rule: the new rows of a KV cache written in place, one thread per element.

The kernel writes only rows [offset, offset + n) of the cache, into the cache's own buffer: its
output is its first input (``attrs["inplace"] = {0: 0}``), so the rest of the cache is never
copied (tessera.op.kv_cache states the operator).
"""

from __future__ import annotations

from ... import arith
from ..compute import OpaqueDef
from ..ir import Builtin, Const, Declare, IfThen, Load, Local, PrimFunc, Store, binary, from_prim
from .common import grid_for, scalars_of, workgroup_linear_id


def schedule_kv_cache_write(defn: OpaqueDef, target, name: str) -> PrimFunc:
    cache, value = defn.inputs
    offset = defn.params["offset"]  # the first row written
    out = defn.output
    threads = min(256, target.limit("maxComputeInvocationsPerWorkgroup"))
    count = arith.simplify(value.size)
    row = arith.simplify(out.shape[1] * out.shape[2])  # elements per cache row (the value may come flat)
    tid, dst = Local("tid"), Local("dst")
    body = (Declare(tid, binary("+", binary("*", workgroup_linear_id(), Const(threads)), Builtin("local_id", 0))),
            Declare(dst, binary("+", tid, binary("*", from_prim(offset), from_prim(row)))),
            # Rows past the cache's end are never written (the VM refuses such sizes before this).
            IfThen(binary("<", tid, from_prim(count)),
                   (IfThen(binary("<", dst, from_prim(out.size)), (Store(out, dst, Load(value, tid)),)),)))
    grid = grid_for(arith.simplify((count + threads - 1) // threads), target)
    scalars = tuple(dict.fromkeys(scalars_of(cache, value, out) + tuple(v.name for v in arith.free_vars(offset))))
    # The cache is input 0 and output 0: the caller passes the same buffer for both.
    return PrimFunc(name, (cache, value), (out,), scalars, body, (threads, 1, 1), grid,
                    attrs={"rule": "kv-cache-write", "inplace": {0: 0}})
