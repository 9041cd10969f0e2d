"""GEMMs on C targets (more than one row: LLM prefill, BERT, ViT, Whisper) through the f32 micro-kernels
over packed panels (codegen/c/microkernels_gemm.c), as BLIS and GotoBLAS arrange them.

A workgroup (one CPU thread's unit of work) owns ``COLUMNS`` outputs of up to ``ROWS`` rows. For each
``DEPTH`` values of k it packs that slice of B into a private panel (strips of 16 columns, each
``DEPTH`` x 16 floats: 16 KB, an L1's share; quantized weights are dequantized into it, so each weight
is decoded once per panel and reused by every row), then one micro-kernel call multiplies all its rows
with the panel into a private tile of outputs, adding onto the sums of the slices before it. The fused
epilogue (bias, activation, residual add) is applied to each output in tir as the tile is stored.

The panel and tile live in private scratch (the stack of the calling thread on c-native: 48 KB in all,
bounded whatever K, M and N are). Ragged sizes are the micro-kernels' tails: a last tile of fewer
rows, a last panel of fewer columns (zeros) or fewer values of k. GEMVs (M = 1, decode) and the few
rows of decode's attention stay with the rules built for them (quantized_gemv*.py, matmul.py).
"""

from __future__ import annotations

from ... import arith
from ..compute import ComputeDef, MatmulInfo, unravel
from ..ir import (
    Buffer,
    Builtin,
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
from ..quant import FORMATS, Block, QuantizedMatmulInfo, dequantized
from .common import ceil_div, lower_reads, scalars_of
from .matmul import epilogue

GEMM = "tsr_gemm_f32"
PACK_F32 = "tsr_gemm_pack_f32"
# Formats a C packer dequantizes (vectorized); the others are packed by the tir loop of ``_pack_tir``.
PACK_QUANTIZED = {"q4_0": "tsr_gemm_pack_q4_0", "q4_1": "tsr_gemm_pack_q4_1", "q8_0": "tsr_gemm_pack_q8_0"}
STRIP = 16  # columns per strip of a panel (TSR_GEMM_STRIP)
COLUMNS = 32  # outputs per workgroup along N: SmolLM2's 576-wide projections give 18 workgroups
ROWS = 128  # rows per workgroup: a prefill chunk of 128 tokens dequantizes each weight once
DEPTH = 256  # values of k per panel: a strip of 16 KB stays in L1 while every row passes over it
# Up to this many rows known statically, matmul.py's lanes rule (decode's attention) is the better fit.
FEW_ROWS = 8


def applies(defn, target) -> bool:
    """The target's backend has the micro-kernels; a quantized matmul of f32 x (not rounded to q8: decode's
    and decode batches' rows) with more than one row; an f32 matmul of two matrices with more than
    FEW_ROWS rows and at least half a strip of columns (fewer would leave most of a tile's lanes idle)."""
    if not isinstance(defn, ComputeDef) or not target.has_extern(GEMM):
        return False
    if "quantized_matmul" in defn.attrs:
        info = defn.attrs["quantized_matmul"]
        rows = _static(_product(defn.output.shape[:-1]))
        return (info.activations == "" and info.x.dtype == "f32" and info.format in FORMATS
                and info.k % FORMATS[info.format].values == 0 and (rows is None or rows > 1))
    if "matmul" in defn.attrs:
        info: MatmulInfo = defn.attrs["matmul"]
        rows, columns = _static(info.m), _static(info.n)
        return (info.a.dtype == info.b.dtype == "f32" and (defn.accumulate_dtype or "f32") == "f32"
                and defn.output.dtype in ("f32", "f16") and not info.a_vector and not info.b_vector
                and (rows is None or rows > FEW_ROWS) and (columns is None or columns >= STRIP // 2)
                and target.has_extern(PACK_F32))
    return False


def schedule_cpu_gemm(defn: ComputeDef, target, name: str) -> PrimFunc:
    if "quantized_matmul" in defn.attrs:
        return _quantized(defn, defn.attrs["quantized_matmul"], target, name)
    return _matmul(defn, defn.attrs["matmul"], target, name)


class _Tiles:
    """The scratch and the workgroup's place in the output, shared by both kinds of B."""

    def __init__(self, m, n, k):
        self.m, self.n, self.k = from_prim(m), from_prim(n), from_prim(k)
        self.k_may_be_zero = _static(arith.as_expr(k)) is None
        self.panel = Buffer("panel", "f32", (arith.IntImm(DEPTH * COLUMNS),), "private")
        self.tile = Buffer("tile", "f32", (arith.IntImm(ROWS * COLUMNS),), "private")
        self.n0, self.m0, self.k0 = Local("n0"), Local("m0"), Local("k0")
        self.columns, self.rows, self.depth = Local("columns"), Local("rows"), Local("depth")

    def start(self) -> list:
        return [Declare(self.n0, binary("*", Builtin("workgroup_id", 0), Const(COLUMNS))),
                Declare(self.m0, binary("*", Builtin("workgroup_id", 1), Const(ROWS))),
                Declare(self.columns, minimum(Const(COLUMNS), binary("-", self.n, self.n0))),
                Declare(self.rows, minimum(Const(ROWS), binary("-", self.m, self.m0)))]

    def k_loop(self, pack: list, a: Span, lda) -> list:
        """Each slice of k: pack it, then multiply every row with it (the first slice stores its sums,
        the others add to them). With no k at all (K = 0 at run time) the tile is zeros."""
        gemm = Extern(GEMM, (a, lda, self.m0, self.rows, self.k0, self.depth, Span(self.panel, Const(0),
                                                                                   Const(DEPTH * COLUMNS)),
                             Const(COLUMNS), Span(self.tile, Const(0), Const(ROWS * COLUMNS)),
                             cast(binary(">", self.k0, Const(0)), "i32")), "void")
        body = [Declare(self.depth, minimum(Const(DEPTH), binary("-", self.k, self.k0))), *pack, Evaluate(gemm)]
        stmts = [For(self.k0, Const(0), self.k, tuple(body), step=DEPTH)]
        if self.k_may_be_zero:
            i = Local("zero")
            stmts.insert(0, IfThen(binary("<", self.k, Const(1)), (
                For(i, Const(0), Const(ROWS * COLUMNS), (Store(self.tile, i, Const(0.0, "f32")),)),)))
        return stmts

    def store(self, out: Buffer, index, value) -> list:
        """Each output of the tile through ``value(accumulator, row, col)`` into ``index(row, col)``."""
        r, c, row, col = Local("r"), Local("c"), Local("row"), Local("col")
        acc = Load(self.tile, binary("+", binary("*", r, Const(COLUMNS)), c))
        inner = For(c, Const(0), Const(COLUMNS), (
            Declare(col, binary("+", self.n0, c)),
            IfThen(binary("<", col, self.n), (Store(out, index(row, col), cast(value(acc, row, col), out.dtype)),))))
        return [For(r, Const(0), Const(ROWS), (Declare(row, binary("+", self.m0, r)),
                                               IfThen(binary("<", row, self.m), (inner,))))]


def _matmul(defn: ComputeDef, info: MatmulInfo, target, name: str) -> PrimFunc:
    t = _Tiles(info.m, info.n, info.k)
    batch_id = Local("batch")
    indices = unravel(batch_id, info.batch_shape) if info.batch_shape else []
    a_base, b_base = Local("a_base"), Local("b_base")
    body = [Declare(batch_id, Builtin("workgroup_id", 2)), Declare(a_base, info.a_matrix(indices)),
            Declare(b_base, info.b_matrix(indices)), *t.start()]
    pack = [Evaluate(Extern(PACK_F32, (Span(info.b, b_base, binary("*", t.k, t.n)), t.n, t.k0, t.depth, t.n0,
                                       t.columns, Const(COLUMNS), Span(t.panel, Const(0), Const(DEPTH * COLUMNS))),
                            "void"))]
    body += t.k_loop(pack, Span(info.a, a_base, binary("*", t.m, t.k)), t.k)
    body += t.store(defn.output, lambda row, col: binary("+", binary("*", binary("+", binary("*", batch_id, t.m), row),
                                                                        t.n), col),
                    lambda acc, row, col: epilogue(defn, info, acc, batch_id, row, col))
    batches = arith.simplify(_product(info.batch_shape))
    grid = (ceil_div(info.n, COLUMNS), ceil_div(info.m, ROWS), batches)
    _check_grid(grid, target, name)
    return PrimFunc(name, defn.inputs, (defn.output,), scalars_of(*defn.inputs, defn.output), tuple(body), (1, 1, 1),
                    grid, scratch=(t.panel, t.tile), attrs={"rule": "cpu-gemm"})


def _quantized(defn: ComputeDef, info: QuantizedMatmulInfo, target, name: str) -> PrimFunc:
    out = defn.output
    m_dims = out.shape[:-1]
    m_total = arith.simplify(_product(m_dims))
    t = _Tiles(m_total, out.shape[-1], arith.IntImm(info.k))
    row_words = from_prim(info.w.shape[1])
    if target.has_extern(PACK_QUANTIZED.get(info.format, "")):
        pack = [Evaluate(Extern(PACK_QUANTIZED[info.format], (
            Span(info.w, Const(0), binary("*", t.n, row_words)), row_words, t.k0, t.depth, t.n0, t.columns,
            Const(COLUMNS), Span(t.panel, Const(0), Const(DEPTH * COLUMNS))), "void"))]
    else:
        pack = _pack_tir(info, t, row_words)
    body = t.start() + t.k_loop(pack, Span(info.x, Const(0), binary("*", t.m, t.k)), t.k)

    def value(acc, row, col):
        if defn.finalize is None:
            return acc
        return lower_reads(defn.finalize(acc, unravel(row, m_dims) + [col]))

    body += t.store(out, lambda row, col: binary("+", binary("*", row, t.n), col), value)
    grid = (ceil_div(out.shape[-1], COLUMNS), ceil_div(m_total, ROWS), arith.IntImm(1))
    _check_grid(grid, target, name)
    return PrimFunc(name, defn.inputs, (out,), scalars_of(*defn.inputs, out), tuple(body), (1, 1, 1), grid,
                    scratch=(t.panel, t.tile), attrs={"rule": "cpu-gemm"})


def _pack_tir(info: QuantizedMatmulInfo, t: _Tiles, row_words) -> list:
    """The panel of a format without a C packer (Q5_0, Q5_1, the K-quants), in tir: each column's
    blocks of this slice of k, decoded as tir/quant.py reads them (the same values as ggml's floats),
    each value stored at its place in the column's strip; columns past N are zeros."""
    fmt = FORMATS[info.format]
    strip, lane, col, block, kk = Local("strip"), Local("lane"), Local("qcol"), Local("block"), Local("kk")
    row_block = Local("row_block")  # the block's place in the weight row

    def at(value_index):  # the panel index of value ``value_index`` of the slice, this column
        return binary("+", binary("+", binary("*", binary("*", strip, t.depth), Const(STRIP)),
                                  binary("*", value_index, Const(STRIP))), lane)

    def word_at(i):
        return Load(info.w, binary("+", binary("*", col, row_words), i))

    b = Block(word_at, binary("*", row_block, Const(fmt.bytes)))
    sub = Local("sub") if fmt.sub_blocks > 1 else 0
    d_value, m_value = fmt.scale(b, sub)
    d, m = Local("d", "f32"), Local("m", "f32")
    decode = [Declare(d, d_value)] + ([Declare(m, m_value)] if m_value is not None else [])
    begin = binary("*", block, Const(fmt.values))
    if fmt.sub_blocks > 1:
        begin = binary("+", begin, binary("*", sub, Const(fmt.sub_values)))
    for j in range(fmt.sub_values):
        value = dequantized(info.format, b, sub, j, (d, m if m_value is not None else None))
        decode.append(Store(t.panel, at(binary("+", begin, Const(j))), value))
    per_block = [For(sub, Const(0), Const(fmt.sub_blocks), tuple(decode))] if fmt.sub_blocks > 1 else decode
    # Blocks counted within the slice; the row's last block bounds them (the slice may be short).
    blocks = For(block, Const(0), Const(DEPTH // fmt.values), (
        Declare(row_block, binary("+", binary("/", t.k0, Const(fmt.values)), block)),
        IfThen(binary("<", row_block, Const(info.k // fmt.values)), tuple(per_block))))
    zeros = For(kk, Const(0), t.depth, (Store(t.panel, at(kk), Const(0.0, "f32")),))
    column = (Declare(col, binary("+", binary("+", t.n0, binary("*", strip, Const(STRIP))), lane)),
              IfThen(binary("<", col, t.n), (blocks,), (zeros,)))
    return [For(strip, Const(0), Const(COLUMNS // STRIP), (For(lane, Const(0), Const(STRIP), column),))]


def _static(expr) -> int | None:
    return arith.Analyzer().as_int(arith.simplify(expr))


def _product(dims):
    total = arith.IntImm(1)
    for dim in dims:
        total = total * dim
    return total


def _check_grid(grid, target, name) -> None:
    limit = target.limit("maxComputeWorkgroupsPerDimension")
    for axis, extent in enumerate(grid):
        value = _static(extent)
        if value is not None and value > limit:
            raise ValueError(f"kernel {name}: {value} workgroups along {'xyz'[axis]} exceed the limit {limit}")
