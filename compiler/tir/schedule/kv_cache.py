"""kv-cache-write rule: the new rows of a KV cache written in place, one thread per element;
rope-append: RoPE on q and k and both caches' new rows, from the QKV projection, in one kernel.

The kernel writes only rows [offset, offset + n) of the cache, into the cache's own buffer: its
output is its first input (``attrs["inplace"] = {0: 0}``), so the rest of the cache is never
copied (tessera.op.kv_cache states the operator).
"""

from __future__ import annotations

from ... import arith
from ..compute import OpaqueDef
from ..ir import (
    Buffer,
    Builtin,
    Const,
    Declare,
    IfThen,
    Load,
    Local,
    PrimFunc,
    Store,
    TExpr,
    Unary,
    binary,
    cast,
    from_prim,
    maximum,
    minimum,
    select,
)
from .common import global_thread_id, grid_for, scalars_of, workgroup_linear_id


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


def schedule_rope_append(defn: OpaqueDef, target, name: str) -> PrimFunc:
    """One thread per element of qkv (n, (heads + 2 * kv_heads) * dim): a q element is rotated into
    q, a k element rotated into the key cache, a v element copied into the value cache. Rotating
    reads the element half a head away, in the same row of qkv: no thread waits for another."""
    qkv, cos, sin, keys, values = defn.inputs[:5]
    q_out, keys_out, values_out = (defn.output,) + defn.more_outputs
    page_size = defn.params.get("page_size")  # paged_rope_append (op/paged.py): rows through a page table
    analyzer = arith.Analyzer()
    dim, kv_heads = analyzer.as_int(keys.shape[2]), analyzer.as_int(keys.shape[1])
    width = analyzer.as_int(qkv.shape[1])
    q_width, kv_width, half = width - 2 * kv_heads * dim, kv_heads * dim, dim // 2
    threads = min(256, target.limit("maxComputeInvocationsPerWorkgroup"))
    count = arith.simplify(qkv.size)
    # In float32 whatever the tensors hold: a float16 build keeps qkv and the caches in float16 and
    # the angles' tables in float32 (transform/mixed_precision.py); each value is rounded once, stored.
    dtype = "f32"
    tid, row, col, d, angle_at, cache_at = (Local(n) for n in ("tid", "row", "col", "d", "angle_at", "cache_at"))
    x, other, rotated = (Local(n, dtype) for n in ("x", "other", "rotated"))
    first_half = binary("<", d, Const(half))
    # x * cos + rotate_half(x) * sin: the partner is half a head away, in the same row of qkv.
    head_start = binary("+", binary("*", row, Const(width)), binary("*", binary("/", col, Const(dim)), Const(dim)))
    partner = binary("+", head_start, binary("%", binary("+", d, Const(half)), Const(dim)))
    rotate = (Declare(other, cast(Load(qkv, partner), dtype)),
              Declare(rotated, select(first_half, Unary("neg", other, dtype), other)),
              Declare(angle_at, binary("+", binary("*", row, Const(dim)), d)))

    def rope_value():
        return binary("+", binary("*", x, cast(Load(cos, angle_at), dtype)),
                      binary("*", rotated, cast(Load(sin, angle_at), dtype)))

    if page_size is None:
        cache_row = binary("*", binary("+", row, from_prim(defn.params["offset"])), Const(kv_width))
        extra_scalars = tuple(v.name for v in arith.free_vars(defn.params["offset"]))
    else:
        cache_row = binary("*", paged_row(defn.inputs[5], defn.inputs[6], page_size, row, keys), Const(kv_width))
        extra_scalars = scalars_of(*defn.inputs[5:])
    k_col, v_col = binary("-", col, Const(q_width)), binary("-", col, Const(q_width + kv_width))
    body = (Declare(tid, global_thread_id(threads)),
            IfThen(binary("<", tid, from_prim(count)), (
                Declare(row, binary("/", tid, Const(width))),
                Declare(col, binary("%", tid, Const(width))),
                Declare(d, binary("%", col, Const(dim))),
                Declare(x, cast(Load(qkv, tid), dtype)),
                IfThen(binary("<", col, Const(q_width + kv_width)), rotate + (
                    IfThen(binary("<", col, Const(q_width)),
                           (Store(q_out, binary("+", binary("*", row, Const(q_width)), col),
                                  cast(rope_value(), q_out.dtype)),),
                           (Declare(cache_at, binary("+", cache_row, k_col)),
                            # Rows past the cache's end are never written (the VM refuses such sizes first).
                            IfThen(binary("<", cache_at, from_prim(keys_out.size)),
                                   (Store(keys_out, cache_at, cast(rope_value(), keys_out.dtype)),)))),),
                       (Declare(cache_at, binary("+", cache_row, v_col)),
                        IfThen(binary("<", cache_at, from_prim(values_out.size)),
                               (Store(values_out, cache_at, cast(x, values_out.dtype)),)))),
            )),)
    grid = grid_for(arith.simplify((count + threads - 1) // threads), target)
    scalars = tuple(dict.fromkeys(scalars_of(qkv, cos, keys, q_out) + extra_scalars))
    # The caches are inputs 3 and 4 and outputs 1 and 2: the caller passes the same buffers for both.
    return PrimFunc(name, tuple(defn.inputs), (q_out, keys_out, values_out), scalars, body,
                    (threads, 1, 1), grid, attrs={"rule": "rope-append", "inplace": {1: 3, 2: 4}})


def paged_row(positions: Buffer, page_table: Buffer, page_size: int, row: TExpr, pool: Buffer) -> TExpr:
    """The pool row that query row ``row``'s position lives in (op/paged.py): its sequence's page
    table row min(row, s - 1), the page of the position, the row within the page. A position or
    an entry out of range is clamped into the table and the pool: never a read or a write outside."""
    seq = minimum(row, binary("-", from_prim(page_table.shape[0]), Const(1)))
    return pool_row(page_table, seq, maximum(Load(positions, row), Const(0)), page_size, pool)


def pool_row(page_table: Buffer, seq: TExpr, position: TExpr, page_size: int, pool: Buffer) -> TExpr:
    """The row of ``pool`` (capacity, ...) that holds non-negative ``position`` of the sequence whose
    page-table row is ``seq``: an entry out of range is clamped into the pool (op/paged.py)."""
    pages = from_prim(page_table.shape[1])
    slot = minimum(binary("/", position, Const(page_size)), binary("-", pages, Const(1)))
    page = Load(page_table, binary("+", binary("*", seq, pages), slot))
    physical = binary("+", binary("*", page, Const(page_size)), binary("%", position, Const(page_size)))
    return minimum(maximum(physical, Const(0)), binary("-", from_prim(pool.shape[0]), Const(1)))
