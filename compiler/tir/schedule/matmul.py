"""Matmul rules: GEMV for the decode case (M = 1) and tiled GEMM otherwise.

The legalization views every matmul as batched (batch..., M, K) x (batch..., K, N)
and passes ``MatmulInfo`` (tir.compute) with how a batch index finds its A and B
matrices (broadcast batch dimensions repeat a matrix).
"""

from __future__ import annotations

from ... import arith
from ..compute import ComputeDef, MatmulInfo, accumulate_type, const, unravel
from ..ir import (
    Assign,
    Barrier,
    Buffer,
    Builtin,
    Const,
    Declare,
    For,
    IfThen,
    Load,
    Local,
    PrimFunc,
    Store,
    TExpr,
    binary,
    cast,
    from_prim,
    logical_and,
    minimum,
    select,
)
from .common import lower_reads, scalars_of

LID = Builtin("local_id", 0)


def epilogue(defn: ComputeDef, info: MatmulInfo, acc: TExpr, batch_id: TExpr, row: TExpr, col: TExpr) -> TExpr:
    """The stored value: the accumulator, through the fused epilogue if there is one."""
    if defn.finalize is None:
        return acc
    indices = unravel(batch_id, info.batch_shape) if info.batch_shape else []
    indices += ([] if info.a_vector else [row]) + ([] if info.b_vector else [col])
    return lower_reads(defn.finalize(acc, indices))


def is_gemv(info: MatmulInfo) -> bool:
    return arith.Analyzer().as_int(info.m) == 1


def _batch(info: MatmulInfo, batch_id: TExpr) -> tuple[list, TExpr, TExpr]:
    indices = unravel(batch_id, info.batch_shape) if info.batch_shape else []
    return indices, info.a_matrix(indices), info.b_matrix(indices)


def schedule_gemv(defn: ComputeDef, info: MatmulInfo, target, name: str) -> PrimFunc:
    """out[b, n] = sum_k a[b, k] * B[b, k, n]: 64 columns x 4 slices of K per workgroup."""
    cols, slices = 64, 4
    threads = cols * slices
    acc_dtype = _accumulator(defn)
    red = Buffer("partial", acc_dtype, (arith.IntImm(threads),), "workgroup")
    n, k = from_prim(info.n), from_prim(info.k)
    col, part, column, acc, kk = Local("col"), Local("part"), Local("column"), Local("acc", acc_dtype), Local("kk")
    batch_id, a_base, b_base = Local("batch"), Local("a_base"), Local("b_base")
    body = [Declare(col, binary("%", LID, Const(cols))), Declare(part, binary("/", LID, Const(cols))),
            Declare(batch_id, Builtin("workgroup_id", 1))]
    _, a_off, b_off = _batch(info, batch_id)
    body += [Declare(a_base, a_off), Declare(b_base, b_off),
             Declare(column, minimum(binary("+", binary("*", Builtin("workgroup_id", 0), Const(cols)), col),
                                     binary("-", n, Const(1)))),
             Declare(acc, const(0, acc_dtype))]
    a_val = cast(Load(info.a, binary("+", a_base, kk)), acc_dtype)
    b_val = cast(Load(info.b, binary("+", b_base, binary("+", binary("*", kk, n), column))), acc_dtype)
    body.append(For(kk, part, k, (Assign(acc, binary("+", acc, binary("*", a_val, b_val))),),
                    step=slices))
    body += [Store(red, LID, acc), Barrier()]
    total = Local("total", acc_dtype)
    summed = [Declare(total, Load(red, col))]
    for s in range(1, slices):
        summed.append(Assign(total, binary("+", total, Load(red, binary("+", col, Const(s * cols))))))
    out_index = binary("+", binary("*", batch_id, n), column)
    real = binary("<", binary("+", binary("*", Builtin("workgroup_id", 0), Const(cols)), col), n)
    value = epilogue(defn, info, total, batch_id, Const(0), column)
    summed.append(IfThen(real, (Store(defn.output, out_index, cast(value, defn.output.dtype)),)))
    body.append(IfThen(binary("==", part, Const(0)), tuple(summed)))
    batches = arith.simplify(_prod(info.batch_shape))
    grid = (arith.simplify((info.n + cols - 1) // cols), batches, arith.IntImm(1))
    _check_grid(grid, target, name)
    return PrimFunc(name, defn.inputs, (defn.output,), scalars_of(*defn.inputs, defn.output), tuple(body),
                    (threads, 1, 1), grid, scratch=(red,), attrs={"rule": "gemv"})


def schedule_gemm(defn: ComputeDef, info: MatmulInfo, target, name: str) -> PrimFunc:
    """64x64 output tiles per workgroup of 16x16 threads, 4x4 per thread, K in steps of 16
    staged through workgroup memory."""
    tile, step, per = 64, 16, 4
    threads = (tile // per) ** 2
    acc_dtype = _accumulator(defn)
    a_tile = Buffer("a_tile", acc_dtype, (arith.IntImm(tile * step),), "workgroup")
    b_tile = Buffer("b_tile", acc_dtype, (arith.IntImm(step * tile),), "workgroup")
    acc = Buffer("acc", acc_dtype, (arith.IntImm(per * per),), "private")
    m, n, k = from_prim(info.m), from_prim(info.n), from_prim(info.k)
    tx, ty, m0, n0 = Local("tx"), Local("ty"), Local("m0"), Local("n0")
    batch_id, a_base, b_base, k0 = Local("batch"), Local("a_base"), Local("b_base"), Local("k0")
    body = [Declare(tx, binary("%", LID, Const(tile // per))), Declare(ty, binary("/", LID, Const(tile // per))),
            Declare(n0, binary("*", Builtin("workgroup_id", 0), Const(tile))),
            Declare(m0, binary("*", Builtin("workgroup_id", 1), Const(tile))),
            Declare(batch_id, Builtin("workgroup_id", 2))]
    _, a_off, b_off = _batch(info, batch_id)
    body += [Declare(a_base, a_off), Declare(b_base, b_off)]
    init = Local("i")
    body.append(For(init, Const(0), Const(per * per), (Store(acc, init, const(0, acc_dtype)),), unroll=True))

    loads = []
    for part in range(tile * step // threads):
        flat = binary("+", Const(part * threads), LID)
        # A tile: 64 rows x 16 columns of K.
        a_row, a_col = binary("/", flat, Const(step)), binary("%", flat, Const(step))
        gm, gk = binary("+", m0, a_row), binary("+", k0, a_col)
        inside = logical_and(binary("<", gm, m), binary("<", gk, k))
        a_index = binary("+", a_base, binary("+", binary("*", minimum(gm, binary("-", m, Const(1))), k),
                                             minimum(gk, binary("-", k, Const(1)))))
        loads.append(Store(a_tile, flat, select(inside, cast(Load(info.a, a_index), acc_dtype),
                                                const(0, acc_dtype))))
        # B tile: 16 rows of K x 64 columns.
        b_row, b_col = binary("/", flat, Const(tile)), binary("%", flat, Const(tile))
        gk2, gn = binary("+", k0, b_row), binary("+", n0, b_col)
        inside_b = logical_and(binary("<", gk2, k), binary("<", gn, n))
        b_index = binary("+", b_base, binary("+", binary("*", minimum(gk2, binary("-", k, Const(1))), n),
                                             minimum(gn, binary("-", n, Const(1)))))
        loads.append(Store(b_tile, flat, select(inside_b, cast(Load(info.b, b_index), acc_dtype),
                                                const(0, acc_dtype))))
    kk = Local("kk")
    a_regs = [Local(f"a{i}", acc_dtype) for i in range(per)]
    b_regs = [Local(f"b{j}", acc_dtype) for j in range(per)]
    inner = []
    for i, reg in enumerate(a_regs):
        inner.append(Declare(reg, Load(a_tile, binary("+", binary("*", binary("+", binary("*", ty, Const(per)),
                                                                             Const(i)), Const(step)), kk))))
    for j, reg in enumerate(b_regs):
        inner.append(Declare(reg, Load(b_tile, binary("+", binary("*", kk, Const(tile)),
                                                      binary("+", binary("*", tx, Const(per)), Const(j))))))
    for i in range(per):
        for j in range(per):
            slot = Const(i * per + j)
            inner.append(Store(acc, slot, binary("+", Load(acc, slot), binary("*", a_regs[i], b_regs[j]))))
    compute = For(kk, Const(0), Const(step), tuple(inner), unroll=True)
    body.append(For(k0, Const(0), k, tuple(loads) + (Barrier(), compute, Barrier()), step=step))

    rows = [Local(f"row{i}") for i in range(per)]
    cols = [Local(f"col{j}") for j in range(per)]
    body += [Declare(rows[i], binary("+", m0, binary("+", binary("*", ty, Const(per)), Const(i))))
             for i in range(per)]
    body += [Declare(cols[j], binary("+", n0, binary("+", binary("*", tx, Const(per)), Const(j))))
             for j in range(per)]
    for i, row in enumerate(rows):
        for j, col in enumerate(cols):
            index = binary("+", binary("*", binary("+", binary("*", batch_id, m), row), n), col)
            value = cast(epilogue(defn, info, Load(acc, Const(i * per + j)), batch_id, row, col), defn.output.dtype)
            body.append(IfThen(logical_and(binary("<", row, m), binary("<", col, n)),
                               (Store(defn.output, index, value),)))
    batches = arith.simplify(_prod(info.batch_shape))
    grid = (arith.simplify((info.n + tile - 1) // tile), arith.simplify((info.m + tile - 1) // tile), batches)
    _check_grid(grid, target, name)
    return PrimFunc(name, defn.inputs, (defn.output,), scalars_of(*defn.inputs, defn.output), tuple(body),
                    (threads, 1, 1), grid, scratch=(a_tile, b_tile, acc), attrs={"rule": "gemm"})


def _prod(dims) -> arith.PrimExpr:
    total: arith.PrimExpr = arith.IntImm(1)
    for d in dims:
        total = total * d
    return total


def _check_grid(grid, target, name) -> None:
    limit = target.limit("maxComputeWorkgroupsPerDimension")
    for axis, extent in enumerate(grid):
        value = arith.Analyzer().as_int(extent)
        if value is not None and value > limit:
            raise ValueError(f"kernel {name}: {value} workgroups along {'xyz'[axis]} exceed the limit {limit}")



# -- CPU adapters (llvmpipe, SwiftShader) -------------------------------------------------
# They run a workgroup's invocations as SIMD lanes of one CPU thread: barriers and workgroup
# memory cost more than they save, and wide per-invocation register tiles win (bench/kernels.py).


def schedule_gemv_columns(defn: ComputeDef, info: MatmulInfo, target, name: str, columns: int = 16,
                          threads: int = 16) -> PrimFunc:
    """Each invocation sums all of K for ``columns`` consecutive outputs; no barrier."""
    acc_dtype = _accumulator(defn)
    n, k = from_prim(info.n), from_prim(info.k)
    n_last = binary("-", n, Const(1))
    batch_id, a_base, b_base, first, kk, x = (Local("batch"), Local("a_base"), Local("b_base"), Local("first"),
                                              Local("kk"), Local("x", acc_dtype))
    cols = [Local(f"col{j}") for j in range(columns)]
    accs = [Local(f"acc{j}", acc_dtype) for j in range(columns)]
    body = [Declare(batch_id, Builtin("workgroup_id", 1))]
    _, a_off, b_off = _batch(info, batch_id)
    group = binary("*", Builtin("workgroup_id", 0), Const(threads * columns))
    body += [Declare(a_base, a_off), Declare(b_base, b_off),
             Declare(first, binary("+", group, binary("*", LID, Const(columns))))]
    body += [Declare(c, binary("+", first, Const(j))) for j, c in enumerate(cols)]
    body += [Declare(a, const(0, acc_dtype)) for a in accs]
    row = binary("+", b_base, binary("*", kk, n))
    step = [Declare(x, cast(Load(info.a, binary("+", a_base, kk)), acc_dtype))]
    for col, acc in zip(cols, accs):
        value = cast(Load(info.b, binary("+", row, minimum(col, n_last))), acc_dtype)
        step.append(Assign(acc, binary("+", acc, binary("*", x, value))))
    body.append(For(kk, Const(0), k, tuple(step)))
    for col, acc in zip(cols, accs):
        index = binary("+", binary("*", batch_id, n), col)
        value = cast(epilogue(defn, info, acc, batch_id, Const(0), col), defn.output.dtype)
        body.append(IfThen(binary("<", col, n), (Store(defn.output, index, value),)))
    batches = arith.simplify(_prod(info.batch_shape))
    grid = (arith.simplify((info.n + threads * columns - 1) // (threads * columns)), batches, arith.IntImm(1))
    _check_grid(grid, target, name)
    return PrimFunc(name, defn.inputs, (defn.output,), scalars_of(*defn.inputs, defn.output), tuple(body),
                    (threads, 1, 1), grid, attrs={"rule": "gemv"})


def schedule_gemm_registers(defn: ComputeDef, info: MatmulInfo, target, name: str, tile_m: int = 8,
                            tile_n: int = 8, threads: int = 16) -> PrimFunc:
    """Each invocation keeps a tile_m x tile_n block of the output in registers; no barrier."""
    acc_dtype = _accumulator(defn)
    m, n, k = from_prim(info.m), from_prim(info.n), from_prim(info.k)
    batch_id, a_base, b_base, kk = Local("batch"), Local("a_base"), Local("b_base"), Local("kk")
    rows = [Local(f"row{i}") for i in range(tile_m)]
    cols = [Local(f"col{j}") for j in range(tile_n)]
    a_regs = [Local(f"a{i}", acc_dtype) for i in range(tile_m)]
    b_regs = [Local(f"b{j}", acc_dtype) for j in range(tile_n)]
    accs = [[Local(f"c{i}_{j}", acc_dtype) for j in range(tile_n)] for i in range(tile_m)]
    body = [Declare(batch_id, Builtin("workgroup_id", 2))]
    _, a_off, b_off = _batch(info, batch_id)
    body += [Declare(a_base, a_off), Declare(b_base, b_off)]
    first_col = binary("*", binary("+", binary("*", Builtin("workgroup_id", 0), Const(threads)), LID), Const(tile_n))
    first_row = binary("*", Builtin("workgroup_id", 1), Const(tile_m))
    body += [Declare(r, binary("+", first_row, Const(i))) for i, r in enumerate(rows)]
    body += [Declare(c, binary("+", first_col, Const(j))) for j, c in enumerate(cols)]
    body += [Declare(acc, const(0, acc_dtype)) for line in accs for acc in line]
    m_last, n_last = binary("-", m, Const(1)), binary("-", n, Const(1))
    step = []
    for r, a in zip(rows, a_regs):
        index = binary("+", a_base, binary("+", binary("*", minimum(r, m_last), k), kk))
        step.append(Declare(a, cast(Load(info.a, index), acc_dtype)))
    for c, b in zip(cols, b_regs):
        index = binary("+", b_base, binary("+", binary("*", kk, n), minimum(c, n_last)))
        step.append(Declare(b, cast(Load(info.b, index), acc_dtype)))
    for i in range(tile_m):
        for j in range(tile_n):
            step.append(Assign(accs[i][j], binary("+", accs[i][j], binary("*", a_regs[i], b_regs[j]))))
    body.append(For(kk, Const(0), k, tuple(step)))
    for i, r in enumerate(rows):
        for j, c in enumerate(cols):
            index = binary("+", binary("*", binary("+", binary("*", batch_id, m), r), n), c)
            value = cast(epilogue(defn, info, accs[i][j], batch_id, r, c), defn.output.dtype)
            body.append(IfThen(logical_and(binary("<", r, m), binary("<", c, n)), (Store(defn.output, index, value),)))
    batches = arith.simplify(_prod(info.batch_shape))
    grid = (arith.simplify((info.n + threads * tile_n - 1) // (threads * tile_n)),
            arith.simplify((info.m + tile_m - 1) // tile_m), batches)
    _check_grid(grid, target, name)
    return PrimFunc(name, defn.inputs, (defn.output,), scalars_of(*defn.inputs, defn.output), tuple(body),
                    (threads, 1, 1), grid, attrs={"rule": "gemm"})


# -- Serial threads (C kernels: a workgroup's threads are a loop on one CPU thread) ----------------


# Up to this many rows (M known statically) a thread keeps every row's accumulators: decode's
# attention multiplies the 3 query heads of a KV head at once, where an 8x8 register tile wastes 5/8.
LANE_ROWS = 8


def is_lane_rows(info: MatmulInfo) -> bool:
    m = arith.Analyzer().as_int(info.m)
    return m is not None and m <= LANE_ROWS


def schedule_matmul_lanes(defn: ComputeDef, info: MatmulInfo, target, name: str, lanes: int | None = None,
                          threads: int = 4) -> PrimFunc:
    """Each thread sums all of K for M rows x ``lanes`` consecutive columns (M <= LANE_ROWS, known
    statically; M = 1 is decode's GEMV), kept in a lane loop over one contiguous stretch of a row
    of B, which the C compiler vectorizes without reassociating (lane ``l`` of row ``i`` only adds
    to ``acc[i * lanes + l]``), so results do not depend on the vector width. Each element of B is
    loaded once for all M rows. A thread whose columns run past N takes the clamped copy of the
    loop, so the hot loop of every other thread has no min() in its addresses. ``lanes`` defaults
    to 16, or 8 past 4 rows, so the accumulators stay in a CPU's vector registers."""
    rows = arith.Analyzer().as_int(info.m)
    lanes = lanes or (16 if rows <= 4 else 8)
    acc_dtype = _accumulator(defn)
    m, n, k = from_prim(info.m), from_prim(info.n), from_prim(info.k)
    batch_id, a_base, b_base, first, kk, lane, b_val = (Local("batch"), Local("a_base"), Local("b_base"),
                                                        Local("first"), Local("kk"), Local("lane"),
                                                        Local("b", acc_dtype))
    xs = [Local("x" if rows == 1 else f"x{i}", acc_dtype) for i in range(rows)]
    acc = Buffer("acc", acc_dtype, (arith.IntImm(rows * lanes),), "private")
    body = [Declare(batch_id, Builtin("workgroup_id", 1))]
    _, a_off, b_off = _batch(info, batch_id)
    body += [Declare(a_base, a_off), Declare(b_base, b_off),
             Declare(first, binary("*", binary("+", binary("*", Builtin("workgroup_id", 0), Const(threads)), LID),
                                   Const(lanes))),
             For(lane, Const(0), Const(rows * lanes), (Store(acc, lane, const(0, acc_dtype)),))]

    def slot(i: int) -> TExpr:
        return lane if i == 0 else binary("+", Const(i * lanes), lane)

    def a_at(i: int) -> TExpr:
        row = kk if i == 0 else binary("+", binary("*", Const(i), k), kk)
        return cast(Load(info.a, binary("+", a_base, row)), acc_dtype)

    def k_loop(column: TExpr) -> For:
        b_load = cast(Load(info.b, binary("+", binary("+", b_base, binary("*", kk, n)), column)), acc_dtype)
        if rows == 1:  # the GEMV's lane loop as it always was: x * B[kk, column]
            updates = (Store(acc, lane, binary("+", Load(acc, lane), binary("*", xs[0], b_load))),)
        else:
            updates = (Declare(b_val, b_load),) + tuple(
                Store(acc, slot(i), binary("+", Load(acc, slot(i)), binary("*", x, b_val))) for i, x in enumerate(xs))
        step = For(lane, Const(0), Const(lanes), updates)
        return For(kk, Const(0), k, tuple(Declare(x, a_at(i)) for i, x in enumerate(xs)) + (step,))

    column = binary("+", first, lane)
    # first <= n - lanes (not first + lanes <= n): the verifier narrows a local by a condition on it.
    body.append(IfThen(binary("<=", first, binary("-", n, Const(lanes))), (k_loop(column),),
                       (k_loop(minimum(column, binary("-", n, Const(1)))),)))
    col = Local("col")
    stores = []
    for i in range(rows):
        out_row = batch_id if rows == 1 else binary("+", binary("*", batch_id, m), Const(i))
        value = cast(epilogue(defn, info, Load(acc, slot(i)), batch_id, Const(i), col), defn.output.dtype)
        stores.append(Store(defn.output, binary("+", binary("*", out_row, n), col), value))
    body.append(For(lane, Const(0), Const(lanes), (Declare(col, column),
                                                   IfThen(binary("<", col, n), tuple(stores)))))
    batches = arith.simplify(_prod(info.batch_shape))
    grid = (arith.simplify((info.n + threads * lanes - 1) // (threads * lanes)), batches, arith.IntImm(1))
    _check_grid(grid, target, name)
    return PrimFunc(name, defn.inputs, (defn.output,), scalars_of(*defn.inputs, defn.output), tuple(body),
                    (threads, 1, 1), grid, scratch=(acc,), attrs={"rule": "gemv" if rows == 1 else "matmul-lanes"})


def _accumulator(defn: ComputeDef) -> str:
    """The accumulator's type: the matmul's own (a fused group's output may be of another dtype, an
    integer that a float product is rounded to only after the sum)."""
    return defn.accumulate_dtype or accumulate_type(defn.output.dtype)
