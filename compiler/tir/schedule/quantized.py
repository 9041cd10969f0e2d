"""Quantized matmul rule: each invocation computes a tile of outputs, reading every weight block
once per tile: its scale (and minimum) once, each value once for all the tile's activation rows.

The activations are viewed as M x K rows (M is the product of their leading dims). With M = 1 (decode)
a tile is 1 x 4 outputs; otherwise 4 x 4. No workgroup memory and no barrier: the same rule serves
GPUs and CPU adapters."""

from __future__ import annotations

import math

from ... import arith
from ..compute import ComputeDef, const, unravel
from ..ir import (
    Assign,
    Builtin,
    Const,
    Declare,
    For,
    IfThen,
    Load,
    Local,
    PrimFunc,
    Store,
    binary,
    cast,
    from_prim,
    logical_and,
    minimum,
)
from ..quant import (
    BLOCK_VALUES,
    GROUP_BLOCKS,
    QuantizedMatmulInfo,
    block_scale,
    block_value,
    group_block_scale,
    group_block_value,
    group_words,
)
from .common import grid_for, lower_reads, scalars_of, workgroup_linear_id

THREADS = 64
LID = Builtin("local_id", 0)


def schedule_quantized_matmul(defn: ComputeDef, info: QuantizedMatmulInfo, target, name: str) -> PrimFunc:
    out = defn.output
    n_dim = out.shape[-1]
    m_dims = out.shape[:-1]
    m_total = arith.simplify(math.prod(m_dims, start=arith.IntImm(1)))
    tile_m = 1 if arith.Analyzer().as_int(m_total) == 1 else 4
    tile_n = 4
    m, n = from_prim(m_total), from_prim(n_dim)
    row_words = from_prim(info.w.shape[1])
    k = Const(info.k)
    tiles_n = arith.simplify((n_dim + tile_n - 1) // tile_n)
    tile, m0, n0, block, j = Local("tile"), Local("m0"), Local("n0"), Local("block"), Local("j")
    x = Local("x", "f32")
    body = [Declare(tile, binary("+", binary("*", workgroup_linear_id(), Const(THREADS)), LID))]
    body += [Declare(m0, binary("*", binary("/", tile, from_prim(tiles_n)), Const(tile_m))),
             Declare(n0, binary("*", binary("%", tile, from_prim(tiles_n)), Const(tile_n)))]
    rows = [Local(f"row{i}") for i in range(tile_m)]
    cols = [Local(f"col{c}") for c in range(tile_n)]
    body += [Declare(r, binary("+", m0, Const(i))) for i, r in enumerate(rows)]
    body += [Declare(c, binary("+", n0, Const(i))) for i, c in enumerate(cols)]
    accs = [[Local(f"acc{i}_{c}", "f32") for c in range(tile_n)] for i in range(tile_m)]
    body += [Declare(a, const(0, "f32")) for line in accs for a in line]
    m_last, n_last = binary("-", m, Const(1)), binary("-", n, Const(1))

    def word_reader(col):
        base = binary("*", minimum(col, n_last), row_words)
        return lambda i: Load(info.w, binary("+", base, i))

    readers = [word_reader(c) for c in cols]
    groups = info.k // (BLOCK_VALUES * GROUP_BLOCKS[info.format])
    if info.k % (BLOCK_VALUES * GROUP_BLOCKS[info.format]) == 0:
        body.append(_grouped_loop(info, readers, rows, accs, groups, m_last, k))
    else:
        body.append(_block_loop(info, readers, rows, accs, block, j, x, m_last, k))
    for i, r in enumerate(rows):
        for c, col in enumerate(cols):
            value = accs[i][c]
            if defn.finalize is not None:
                indices = (unravel(r, m_dims) if m_dims else []) + [col]
                value = lower_reads(defn.finalize(value, indices))
            index = binary("+", binary("*", r, n), col)
            body.append(IfThen(logical_and(binary("<", r, m), binary("<", col, n)),
                               (Store(out, index, cast(value, out.dtype)),)))
    tiles = arith.simplify(((m_total + tile_m - 1) // tile_m) * tiles_n)
    grid = grid_for(arith.simplify((tiles + THREADS - 1) // THREADS), target)
    return PrimFunc(name, defn.inputs, (out,), scalars_of(*defn.inputs, out), tuple(body), (THREADS, 1, 1), grid,
                    attrs={"rule": "quantized-matmul"})


def _grouped_loop(info: QuantizedMatmulInfo, readers, rows, accs, groups: int, m_last, k) -> For:
    """Over word-aligned groups of blocks: every byte read at a constant word and shift (tir/quant.py),
    the group's 32 or 64 values unrolled. Value by value (an activation, then that value of each
    column's block), which keeps few values live at once: a CPU's registers hold them all.
    (Factoring the scale out of each block's dot product measured slower in WASM.)"""
    group, base = Local("group"), Local("base")
    fmt = info.format
    stmts = [Declare(base, binary("*", group, Const(group_words(fmt))))]
    for index in range(GROUP_BLOCKS[fmt]):
        scales = []
        for c, reader in enumerate(readers):
            d, mn = group_block_scale(fmt, reader, base, index)
            scale, low = Local(f"scale{index}_{c}", "f32"), Local(f"low{index}_{c}", "f32")
            stmts.append(Declare(scale, d))
            if mn is not None:
                stmts.append(Declare(low, mn))
            scales.append((scale, low if mn is not None else None))
        first = binary("+", binary("*", group, Const(BLOCK_VALUES * GROUP_BLOCKS[fmt])), Const(index * BLOCK_VALUES))
        starts = [binary("+", binary("*", minimum(r, m_last), k), first) for r in rows]
        for j in range(BLOCK_VALUES):
            xs = [Local(f"x{i}_{index}_{j}", "f32") for i in range(len(rows))]
            for i, start in enumerate(starts):
                stmts.append(Declare(xs[i], cast(Load(info.x, binary("+", start, Const(j))), "f32")))
            for c, reader in enumerate(readers):
                d, mn = scales[c]
                w = Local(f"w{c}_{index}_{j}", "f32")
                stmts.append(Declare(w, group_block_value(fmt, reader, base, index, j, d, mn)))
                for i in range(len(rows)):
                    stmts.append(Assign(accs[i][c], binary("+", accs[i][c], binary("*", xs[i], w))))
    return For(group, Const(0), Const(groups), tuple(stmts))


def _block_loop(info: QuantizedMatmulInfo, readers, rows, accs, block, j, x, m_last, k) -> For:
    """One block at a time, for K that does not fill whole groups."""
    scales = []
    loop = []
    for c, reader in enumerate(readers):
        d, mn = block_scale(info.format, reader, block)
        scales.append((Local(f"scale{c}", "f32"), Local(f"low{c}", "f32") if mn is not None else None))
        loop.append(Declare(scales[-1][0], d))
        if mn is not None:
            loop.append(Declare(scales[-1][1], mn))
    inner = []
    xs = [Local(f"x{i}", "f32") for i in range(len(rows))]
    kk = binary("+", binary("*", block, Const(BLOCK_VALUES)), j)
    for i, r in enumerate(rows):
        inner.append(Declare(xs[i], cast(Load(info.x, binary("+", binary("*", minimum(r, m_last), k), kk)), "f32")))
    for c, reader in enumerate(readers):
        d, mn = scales[c]
        inner.append(Declare(x, block_value(info.format, reader, block, j, d, mn)) if c == 0 else
                     Assign(x, block_value(info.format, reader, block, j, d, mn)))
        for i in range(len(rows)):
            inner.append(Assign(accs[i][c], binary("+", accs[i][c], binary("*", xs[i], x))))
    loop.append(For(j, Const(0), Const(BLOCK_VALUES), tuple(inner), unroll=True))
    return For(block, Const(0), Const(info.k // BLOCK_VALUES), tuple(loop))
