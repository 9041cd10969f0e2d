"""Quantized GEMV (M = 1, decode; or a few rows, a decode batch) with 8-bit activations
(``activations="q8"``) on targets whose backend has the integer SIMD micro-kernels
(codegen/c/microkernels.c and microkernels_kquant.c; ``TargetKind.externs``).

A float loop over 4-bit weights spends its time unpacking nibbles into floats; llama.cpp's CPU
kernels instead round x to int8 once and multiply bytes by bytes (``pmaddubsw``, ``sdot``), 32
products per instruction. This rule does the same through two micro-kernels (TVM's tensorize
with ``call_extern``): each workgroup (one CPU thread's unit of work) rounds x into private
scratch, then takes ``COLUMNS`` outputs (``WIDE_COLUMNS`` for an LM head), each one dot product
of a weight row with the rounded x. The fused epilogue, if any, is applied to each output in tir.
x is the matmul's own input buffer (fusion gives matmuls epilogues only), so it starts at 0.

Rounding x once per workgroup rather than once per launch costs K / 32 blocks of work against
COLUMNS rows of K / 32 blocks, about a tenth; a launch has no per-thread prologue to put it in.

With several rows of x (a batched decode step, models/llama.py's decode_batch: M at most the
batch), each workgroup takes its columns for four rows at a time: one call of a rows micro-kernel
unpacks each weight block once for the four, and the weights of its COLUMNS columns (12 to 40 KB
for SmolLM2) stay in the core's cache from one group of rows to the next, so a step reads the
weights from memory once, whatever M is, where M GEMVs would read them M times.
"""

from __future__ import annotations

from ... import arith
from ..compute import ComputeDef, unravel
from ..ir import (
    Buffer,
    Const,
    Declare,
    Evaluate,
    Extern,
    For,
    IfThen,
    Load,
    Local,
    PrimFunc,
    Span,
    Store,
    binary,
    cast,
    from_prim,
    minimum,
)
from ..quant import BLOCK_VALUES, FORMATS, QuantizedMatmulInfo
from .common import ceil_div, grid_for, lower_reads, scalars_of, workgroup_linear_id

QUANTIZE = "tsr_quantize_q8"
# One dot-product micro-kernel per block format: microkernels.c's for Q4_0, Q4_1 and Q8_0,
# microkernels_kquant.c's for the K-quants, Q5_0 and Q5_1 (whose 256-value super-blocks each meet 8
# q8 blocks of x).
DOT = {fmt: f"tsr_dot_{fmt}_q8" for fmt in ("q4_0", "q4_1", "q8_0", "q5_0", "q5_1", "q2_k", "q3_k", "q4_k", "q5_k",
                                            "q6_k")}
DOT_ROWS = {fmt: name + "_rows" for fmt, name in DOT.items()}
GROUP = 4  # rows per call of a rows micro-kernel (TSR_MK_ROWS in microkernels.c)
# Outputs per workgroup: enough that rounding x is a small share of the work (measured on a
# 1536 x 576 GEMV: 16 columns spend a quarter of the time rounding x again and again, 32 about a
# tenth), few enough that decode's narrow projections (576 outputs) still give a thread pool 18
# workgroups; from WIDE outputs on (an LM head), 64.
COLUMNS, WIDE_COLUMNS, WIDE = 32, 64, 16384


def applies(info: QuantizedMatmulInfo, m_total, target) -> bool:
    """x in f32 rounded to q8 (quantize_activations marks only decode's rows so), and the target's
    backend has both micro-kernels."""
    return (info.activations == "q8" and info.x.dtype == "f32" and info.format in DOT
            and target.has_extern(QUANTIZE) and target.has_extern(DOT[info.format])
            and info.k % FORMATS[info.format].values == 0
            and (arith.Analyzer().as_int(arith.simplify(m_total)) == 1 or target.has_extern(DOT_ROWS[info.format])))


def schedule_quantized_gemv_q8(defn: ComputeDef, info: QuantizedMatmulInfo, target, name: str) -> PrimFunc:
    out = defn.output
    n_dim, m_dims = out.shape[-1], out.shape[:-1]
    n, k, blocks = from_prim(n_dim), info.k, info.k // BLOCK_VALUES
    m_total = arith.simplify(_product(m_dims))
    if arith.Analyzer().as_int(m_total) != 1:
        return _rows(defn, info, target, name, m_total)
    static_n = arith.Analyzer().as_int(n_dim)
    columns = WIDE_COLUMNS if static_n is not None and static_n >= WIDE else COLUMNS
    row_words = from_prim(info.w.shape[1])
    x_bytes = Buffer("x_q", "u32", (arith.IntImm(k // 4),), "private")  # int8 values, four to a word
    x_scale = Buffer("x_d", "f32", (arith.IntImm(blocks),), "private")
    x_sum = Buffer("x_s", "f32", (arith.IntImm(blocks),), "private")  # d * sum(q) of each block
    rounded = (Span(x_bytes, Const(0), Const(k // 4)), Span(x_scale, Const(0), Const(blocks)),
               Span(x_sum, Const(0), Const(blocks)))
    body = [Evaluate(Extern(QUANTIZE, (Span(info.x, Const(0), Const(k)), Const(k)) + rounded, "void"))]

    column, col, dot = Local("column"), Local("col"), Local("dot", "f32")
    row = Span(info.w, binary("*", col, row_words), row_words)
    value = dot if defn.finalize is None else lower_reads(defn.finalize(dot, [Const(0)] * len(m_dims) + [col]))
    store = (Declare(dot, Extern(DOT[info.format], (row,) + rounded + (Const(blocks),), "f32")),
             Store(out, col, cast(value, out.dtype)))
    body.append(For(column, Const(0), Const(columns), (
        Declare(col, binary("+", binary("*", workgroup_linear_id(), Const(columns)), column)),
        IfThen(binary("<", col, n), store))))
    grid = grid_for(ceil_div(n_dim, columns), target)
    return PrimFunc(name, defn.inputs, (out,), scalars_of(*defn.inputs, out), tuple(body), (1, 1, 1), grid,
                    scratch=(x_bytes, x_scale, x_sum), attrs={"rule": "quantized-gemv-q8"})


def _rows(defn: ComputeDef, info: QuantizedMatmulInfo, target, name: str, m_total) -> PrimFunc:
    """Several rows of x (a decode batch), ``GROUP`` at a time: the workgroup rounds a group's rows into
    its scratch, then each of its columns is one call of the format's rows micro-kernel, which unpacks
    each weight block once for the group (codegen/c/microkernels.c); the group's outputs come back in
    private scratch and are stored, with the epilogue, one by one."""
    out = defn.output
    n_dim, m_dims = out.shape[-1], out.shape[:-1]
    n, k, blocks = from_prim(n_dim), info.k, info.k // BLOCK_VALUES
    static_n = arith.Analyzer().as_int(n_dim)
    columns = WIDE_COLUMNS if static_n is not None and static_n >= WIDE else COLUMNS
    row_words = from_prim(info.w.shape[1])
    x_bytes = Buffer("x_q", "u32", (arith.IntImm(GROUP * k // 4),), "private")
    x_scale = Buffer("x_d", "f32", (arith.IntImm(GROUP * blocks),), "private")
    x_sum = Buffer("x_s", "f32", (arith.IntImm(GROUP * blocks),), "private")
    results = Buffer("dots", "f32", (arith.IntImm(GROUP),), "private")
    first, count, i, r = Local("first"), Local("count"), Local("i"), Local("r")
    column, col = Local("column"), Local("col")
    rows = from_prim(m_total)

    def rounded(at, extent) -> tuple:  # row ``at``'s (or the group's, from 0) bytes, scales and sums
        return (Span(x_bytes, binary("*", at, Const(k // 4)), Const(extent * k // 4)),
                Span(x_scale, binary("*", at, Const(blocks)), Const(extent * blocks)),
                Span(x_sum, binary("*", at, Const(blocks)), Const(extent * blocks)))

    value = Load(results, i)
    if defn.finalize is not None:
        value = lower_reads(defn.finalize(value, unravel(r, m_dims) + [col]))
    group = (
        Declare(count, minimum(Const(GROUP), binary("-", rows, first))),
        For(i, Const(0), count, (
            Evaluate(Extern(QUANTIZE, (Span(info.x, binary("*", binary("+", first, i), Const(k)), Const(k)), Const(k))
                            + rounded(i, 1), "void")),)),
        For(column, Const(0), Const(columns), (
            Declare(col, binary("+", binary("*", workgroup_linear_id(), Const(columns)), column)),
            IfThen(binary("<", col, n), (
                Evaluate(Extern(DOT_ROWS[info.format], (Span(info.w, binary("*", col, row_words), row_words),)
                                + rounded(Const(0), GROUP) + (Const(blocks), count, Span(results, Const(0),
                                                                                          Const(GROUP))),
                                "void")),
                For(i, Const(0), count, (
                    Declare(r, binary("+", first, i)),
                    Store(out, binary("+", binary("*", r, n), col), cast(value, out.dtype)))))))),
    )
    body = (For(first, Const(0), rows, group, step=GROUP),)
    grid = grid_for(ceil_div(n_dim, columns), target)
    return PrimFunc(name, defn.inputs, (out,), scalars_of(*defn.inputs, out), body, (1, 1, 1), grid,
                    scratch=(x_bytes, x_scale, x_sum, results), attrs={"rule": "quantized-gemv-q8"})


def _product(dims):
    total = arith.IntImm(1)
    for dim in dims:
        total = total * dim
    return total
