"""Quantized matmul rule: each invocation computes a tile of outputs, reading every weight block
once per tile: its scales (and minimums) once, each value once for all the tile's activation rows.

The activations are viewed as M x K rows (M is the product of their leading dims). With M = 1 (decode)
a tile is 1 x 4 outputs (1 x 8 on a CPU adapter); otherwise 4 x 4. No workgroup memory and no
barrier: the same rule serves GPUs and CPU adapters."""

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
from ..quant import FORMATS, Block, QuantizedMatmulInfo, dequantized
from .common import grid_for, lower_reads, scalars_of, workgroup_linear_id

THREADS = 64
# Where a workgroup's threads run one after another on one CPU thread (C kernels), a workgroup is a
# thread pool's unit of work: 4 threads (16 columns at M = 1) leave decode's 576-column GEMVs 36
# of them to share, where 64 threads would leave 3 (the formats the quantized-gemv rule does not read).
SERIAL_THREADS = 4
# GPU languages on a CPU (llvmpipe, lavapipe: a workgroup's invocations are the lanes of one SIMD
# register), decode: 8 invocations of 8 columns each. Each activation value is loaded once for 8
# columns, and every load costs llvmpipe about 15 ns whether its address is the same in all lanes
# or not. Against 64 threads of 4 columns: SmolLM2's Q4_1 layer GEMVs 1.2x to 1.5x as fast alone;
# the whole decode step gains less than this machine's noise (bench/RESULTS.md).
CPU_ADAPTER_GEMV = (8, 8)
LID = Builtin("local_id", 0)


def schedule_quantized_matmul(defn: ComputeDef, info: QuantizedMatmulInfo, target, name: str) -> PrimFunc:
    out = defn.output
    n_dim = out.shape[-1]
    m_dims = out.shape[:-1]
    m_total = arith.simplify(math.prod(m_dims, start=arith.IntImm(1)))
    decode = arith.Analyzer().as_int(m_total) == 1
    tile_m = 1 if decode else 4
    tile_n = 4
    threads = SERIAL_THREADS if target.cpu_adapter and target.serial_threads else THREADS
    if decode and target.cpu_adapter and not target.serial_threads:
        threads, tile_n = CPU_ADAPTER_GEMV
    m, n = from_prim(m_total), from_prim(n_dim)
    row_words = from_prim(info.w.shape[1])
    k = Const(info.k)
    tiles_n = arith.simplify((n_dim + tile_n - 1) // tile_n)
    tile, m0, n0 = Local("tile"), Local("m0"), Local("n0")
    body = [Declare(tile, binary("+", binary("*", workgroup_linear_id(), Const(threads)), LID))]
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
    fmt = FORMATS[info.format]
    groups, tail = divmod(info.k // fmt.values, fmt.group_blocks)
    group = Local("group")
    if groups:
        body.append(For(group, Const(0), Const(groups), tuple(_group(
            info, readers, rows, accs, binary("*", group, Const(fmt.group_words)),
            binary("*", group, Const(fmt.group_blocks * fmt.values)), fmt.group_blocks, m_last, k, ""))))
    if tail:  # the blocks of a last, partial group (Q3_K and Q6_K rows of an odd number of blocks)
        body += _group(info, readers, rows, accs, Const(groups * fmt.group_words),
                       Const(groups * fmt.group_blocks * fmt.values), tail, m_last, k, "tail_")
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
    grid = grid_for(arith.simplify((tiles + threads - 1) // threads), target)
    return PrimFunc(name, defn.inputs, (out,), scalars_of(*defn.inputs, out), tuple(body), (threads, 1, 1), grid,
                    attrs={"rule": "quantized-matmul"})


def _group(info: QuantizedMatmulInfo, readers, rows, accs, base, first, blocks: int, m_last, k,
           prefix: str) -> list:
    """``blocks`` blocks from word ``base`` on (word-aligned, so that every byte of a block is read
    at a constant word and shift: tir/quant.py), their values from column ``first`` of x on. Each
    sub-block's scales once, then its values unrolled, value by value (an activation, then that
    value of each column's block), which keeps few values live at once: a CPU's registers hold
    them all. A K-quant's 8 or 16 sub-blocks are a loop, not unrolled: their bits sit at offsets
    that step in whole words (``Block.byte``). (Factoring the scale out of each block's dot
    product measured slower in WASM.)"""
    fmt = FORMATS[info.format]
    stmts = []
    for index in range(blocks):
        sub = Local(f"{prefix}sub{index}") if fmt.sub_blocks > 1 else 0
        inner = []
        columns = [Block(reader, index * fmt.bytes, base) for reader in readers]
        scales = []
        for c, block in enumerate(columns):
            d, m = fmt.scale(block, sub)
            scale, low = Local(f"{prefix}scale{index}_{c}", "f32"), Local(f"{prefix}low{index}_{c}", "f32")
            inner.append(Declare(scale, d))
            if m is not None:
                inner.append(Declare(low, m))
            scales.append((scale, low if m is not None else None))
        start = binary("+", first, Const(index * fmt.values))
        if fmt.sub_blocks > 1:
            start = binary("+", start, binary("*", sub, Const(fmt.sub_values)))
        starts = [binary("+", binary("*", minimum(r, m_last), k), start) for r in rows]
        for j in range(fmt.sub_values):
            xs = [Local(f"{prefix}x{i}_{index}_{j}", "f32") for i in range(len(rows))]
            for i, at in enumerate(starts):
                inner.append(Declare(xs[i], cast(Load(info.x, binary("+", at, Const(j))), "f32")))
            for c, block in enumerate(columns):
                w = Local(f"{prefix}w{c}_{index}_{j}", "f32")
                inner.append(Declare(w, dequantized(info.format, block, sub, j, scales[c])))
                for i in range(len(rows)):
                    inner.append(Assign(accs[i][c], binary("+", accs[i][c], binary("*", xs[i], w))))
        stmts += [For(sub, Const(0), Const(fmt.sub_blocks), tuple(inner))] if fmt.sub_blocks > 1 else inner
    return stmts
