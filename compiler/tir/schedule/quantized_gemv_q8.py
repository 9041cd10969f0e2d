"""Quantized GEMV (M = 1, decode; or a few rows, a decode batch) with 8-bit activations
(``activations="q8"``) on targets whose backend has the integer SIMD micro-kernels
(codegen/c/microkernels.c; ``TargetKind.externs``).

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
batch), each workgroup takes its columns for one row after another: the weights of its COLUMNS
columns (12 to 40 KB for SmolLM2) stay in the core's cache while every row reads them, so a step
reads the weights from memory once, whatever M is, where M GEMVs would read them M times.
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
    Local,
    PrimFunc,
    Span,
    Store,
    binary,
    cast,
    from_prim,
)
from ..quant import BLOCK_VALUES, QuantizedMatmulInfo
from .common import ceil_div, grid_for, lower_reads, scalars_of, workgroup_linear_id

QUANTIZE = "tsr_quantize_q8"
DOT = {"q4_0": "tsr_dot_q4_0_q8", "q4_1": "tsr_dot_q4_1_q8", "q8_0": "tsr_dot_q8_0_q8"}
# Outputs per workgroup: enough that rounding x is a small share of the work (measured on a
# 1536 x 576 GEMV: 16 columns spend a quarter of the time rounding x again and again, 32 about a
# tenth), few enough that decode's narrow projections (576 outputs) still give a thread pool 18
# workgroups; from WIDE outputs on (an LM head), 64.
COLUMNS, WIDE_COLUMNS, WIDE = 32, 64, 16384


def applies(info: QuantizedMatmulInfo, m_total, target) -> bool:
    """x in f32 rounded to q8 (quantize_activations marks only decode's rows so), and the target's
    backend has both micro-kernels."""
    return (info.activations == "q8" and info.x.dtype == "f32" and info.format in DOT
            and target.has_extern(QUANTIZE) and target.has_extern(DOT[info.format]) and info.k % BLOCK_VALUES == 0)


def schedule_quantized_gemv_q8(defn: ComputeDef, info: QuantizedMatmulInfo, target, name: str) -> PrimFunc:
    out = defn.output
    n_dim, m_dims = out.shape[-1], out.shape[:-1]
    n, k, blocks = from_prim(n_dim), info.k, info.k // BLOCK_VALUES
    m_total = arith.simplify(_product(m_dims))
    one_row = arith.Analyzer().as_int(m_total) == 1
    r = Const(0) if one_row else Local("r")  # the row of x, and of the output
    static_n = arith.Analyzer().as_int(n_dim)
    columns = WIDE_COLUMNS if static_n is not None and static_n >= WIDE else COLUMNS
    row_words = from_prim(info.w.shape[1])
    x_bytes = Buffer("x_q", "u32", (arith.IntImm(k // 4),), "private")  # int8 values, four to a word
    x_scale = Buffer("x_d", "f32", (arith.IntImm(blocks),), "private")
    x_sum = Buffer("x_s", "f32", (arith.IntImm(blocks),), "private")  # d * sum(q) of each block
    rounded = (Span(x_bytes, Const(0), Const(k // 4)), Span(x_scale, Const(0), Const(blocks)),
               Span(x_sum, Const(0), Const(blocks)))
    body = [Evaluate(Extern(QUANTIZE, (Span(info.x, binary("*", r, Const(k)), Const(k)), Const(k)) + rounded,
                            "void"))]

    column, col, dot = Local("column"), Local("col"), Local("dot", "f32")
    row = Span(info.w, binary("*", col, row_words), row_words)
    m_index = [Const(0)] * len(m_dims) if one_row else unravel(r, m_dims)
    value = dot if defn.finalize is None else lower_reads(defn.finalize(dot, m_index + [col]))
    store = (Declare(dot, Extern(DOT[info.format], (row,) + rounded + (Const(blocks),), "f32")),
             Store(out, binary("+", binary("*", r, n), col), cast(value, out.dtype)))
    body.append(For(column, Const(0), Const(columns), (
        Declare(col, binary("+", binary("*", workgroup_linear_id(), Const(columns)), column)),
        IfThen(binary("<", col, n), store))))
    if not one_row:
        body = [For(r, Const(0), from_prim(m_total), tuple(body))]
    grid = grid_for(ceil_div(n_dim, columns), target)
    return PrimFunc(name, defn.inputs, (out,), scalars_of(*defn.inputs, out), tuple(body), (1, 1, 1), grid,
                    scratch=(x_bytes, x_scale, x_sum), attrs={"rule": "quantized-gemv-q8"})


def _product(dims):
    total = arith.IntImm(1)
    for dim in dims:
        total = total * dim
    return total
